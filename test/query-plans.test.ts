import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { duckdbApi } from '../src/db.js'
import { chunkTableNames, listLocalChunks, readDatasetMeta } from '../src/chunks/layout.js'
import { blockOrders, type FamilyDecl } from '../src/families/declaration.js'
import { familyByName } from '../src/families/index.js'
import { keyedPlan } from '../src/query/keyed-plan.js'
import { prepareQuery } from '../src/query/engine.js'
import type { DatasetView, QueryBudgets } from '../src/query/types.js'
import { BY_BLOCK_SUFFIX, LocalForms, narrowCopies } from '../src/storage/local-forms.js'
import { tempDir } from './helpers/dataset.js'
import { familyDatasets } from './helpers/family-datasets.js'
import { allFieldsQuery, declaredQueries } from './helpers/declared-queries.js'
import { streamText } from './helpers/http.js'

const { DuckDBConnection } = duckdbApi()

/*
 * The engine's two statement plans for a chunk (src/query/keyed-plan.ts, temp-table-plan.ts) give the same bytes: the
 * keyed plan (selected rows' keys read into JS, related rows by row-number runs or, when scattered,
 * through a temp table, rows ordered in JS) and the temp-table plan (the fallback for big
 * selections), over Parquet and over local forms, in one slice or many, whole or cut by the size
 * budget; and over local forms where values of 100 bytes or more count as wide, so that many
 * columns (calldata, log data, …) have narrow copies (src/storage/local-forms.ts). The queries
 * are generated from each family's declaration: every request list with a value its first filter
 * column holds, alone, with each relation flag and with all of them, every field selected (a query
 * with one flag of several is compared over the two ways related rows are read, the others over
 * every plan and form). The reference-evaluation tests check what the answers hold.
 */

type Obj = Record<string, any>

interface Dataset {
  name: string
  family: FamilyDecl
  root: string
  view: DatasetView
  local: DatasetView
  /** Over local forms where values of 100 bytes or more count as wide (many narrow copies). */
  split: DatasetView
  forms: LocalForms[]
}

async function openDataset(root: string, formsFile: string): Promise<Dataset> {
  const meta = (await readDatasetMeta(root))!
  const family = familyByName(meta.family)
  const refs = await listLocalChunks(root)
  const chunks = refs.map((ref, i) => ({ ...ref, coverFrom: i > 0 ? refs[i - 1].last + 1 : 0, dir: path.join(root, ref.path) }))
  const view: DatasetView = { name: meta.name, family, chunks, height: chunks[chunks.length - 1].last }
  // The local form with block-ordered copies; the split one (narrow copies of many columns) without.
  const open = async (file: string, narrow?: typeof narrowCopies, byBlock?: Record<string, string[]>) => {
    const forms = new LocalForms({ file, label: meta.name })
    const limits = { ...narrowCopies }
    Object.assign(narrowCopies, narrow)
    try {
      for (const c of chunks) assert.ok(await forms.build(c.path, c.dir, await chunkTableNames(c.dir), byBlock), `local form of ${c.path}`)
    } finally {
      Object.assign(narrowCopies, limits)
    }
    return { forms, view: { ...view, chunks: chunks.map((c) => ({ ...c, local: forms.acquire(c.path) })) } }
  }
  const local = await open(formsFile, undefined, blockOrders(family))
  const split = await open(formsFile.replace(/\.duckdb$/, '-split.duckdb'), { bytes: 100, vectorBytes: 1 })
  return { name: meta.name, family, root, view, local: local.view, split: split.view, forms: [local.forms, split.forms] }
}

/** Queries generated from the dataset's declaration (test/helpers/declared-queries.ts). */
const queriesOf = (ds: Dataset) => declaredQueries(ds.family, ds.view)
const baseQuery = (ds: Dataset) => allFieldsQuery(ds.family, ds.view)

/** Whether `query`'s request has one relation flag of the several its request list declares. */
function oneFlagOfMany(ds: Dataset, query: Obj): boolean {
  for (const req of ds.family.items.flatMap((i) => i.requests)) {
    const list = query[req.name] as Obj[] | undefined
    if (!list) continue
    const flags = Object.keys(req.relations)
    const on = flags.filter((f) => list.some((r) => r[f] === true))
    return flags.length > 1 && on.length === 1
  }
  return false
}

/** The answer's text and the SQL of the statements it ran. */
async function answer(view: DatasetView, query: Obj, budgets: QueryBudgets): Promise<{ text: string; sql: string[] }> {
  const proto = DuckDBConnection.prototype as unknown as Record<string, (...a: unknown[]) => unknown>
  const names = ['run', 'stream', 'runAndReadAll']
  const originals = names.map((n) => proto[n])
  const sql: string[] = []
  names.forEach((n, i) => {
    proto[n] = function (this: unknown, ...a: unknown[]) {
      sql.push(String(a[0]))
      return originals[i].apply(this, a)
    }
  })
  try {
    return { text: await streamText((await prepareQuery(view, query, budgets)).body), sql }
  } finally {
    names.forEach((n, i) => (proto[n] = originals[i]))
  }
}

const KEYED = /^SELECT k, b, w, r(, x)?(, q)? FROM/
/** Statement 1 of the keyed plan, unordered (JS orders it). */
const KEYED_IN_JS = /^SELECT k, b, w, r(, x)?, q FROM/
const hasItems = (text: string) => JSON.parse(text).some((b: Obj) => Object.entries(b).some(([k, v]) => k !== 'header' && Array.isArray(v) && v.length > 0))

const DEFAULTS = { ...keyedPlan }

async function withPlan<T>(limits: Partial<typeof keyedPlan>, fn: () => Promise<T>): Promise<T> {
  Object.assign(keyedPlan, DEFAULTS, limits)
  try {
    return await fn()
  } finally {
    Object.assign(keyedPlan, DEFAULTS)
  }
}

/**
 * Plans compared with the temp-table plan: name, limits, what they read. Each way of reading related
 * rows and of ordering the selected ones is taken over the form where it has the most to get
 * wrong (temp tables over narrow copies, DuckDB's order over Parquet): those code paths do not
 * depend on the form otherwise.
 */
const VARIANTS: [string, Partial<typeof keyedPlan>, 'view' | 'local' | 'split'][] = [
  ['keyed', {}, 'view'],
  ['keyed', {}, 'local'],
  ['keyed', {}, 'split'],
  ['keyed, related rows through temp tables', { maxRanges: 0 }, 'split'],
  ['keyed, selected rows ordered by DuckDB', { jsOrder: false }, 'view'],
]
/** The variants of a query with one of its request's several relation flags: runs of row numbers, and temp tables. */
const ROW_PATHS = [VARIANTS[0], VARIANTS[3]]
const READ: Record<(typeof VARIANTS)[number][2], string> = { view: 'Parquet', local: 'local forms', split: 'local forms with narrow copies' }

const WHOLE: QueryBudgets = { sizeBytes: 1 << 30, timeMs: 600_000 }
const BUDGETS: [string, QueryBudgets][] = [
  ['whole', WHOLE],
  ['4 KiB slices, cut at 12 KiB', { ...WHOLE, sizeBytes: 12288, sliceBytes: 4096, heavySliceBytes: 2048 }],
]

describe('the keyed and the temp-table plan give the same answers', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  const datasets: Dataset[] = []

  before(async () => {
    tmp = await tempDir('ba-plans-')
    for (const root of await familyDatasets(tmp.dir)) datasets.push(await openDataset(root, path.join(tmp.dir, `${path.basename(root)}-forms.duckdb`)))
  })

  after(async () => {
    for (const ds of datasets) for (const forms of ds.forms) await forms.close()
    await tmp?.cleanup()
  })

  for (const name of ['evm', 'starknet', 'moonbeam']) {
    it(`${name}: every request list with each relation flag, over Parquet and local forms`, async () => {
      const ds = datasets.find((d) => d.name === name)!
      const queries = await queriesOf(ds)
      assert.ok(queries.length >= 3, `${queries.length} queries`)
      let compared = 0
      let withItems = 0
      let scattered = 0
      let giant = 0
      let narrow = 0
      let wide = 0
      const notKeyed: string[] = []
      const orderedInJs: string[] = []
      const orderedByDuckDb: string[] = []
      const t0 = performance.now()
      for (const query of queries) {
        for (const [what, budgets] of BUDGETS) {
          const expected = await withPlan({ maxRows: -1 }, () => answer(ds.view, query, budgets))
          assert.ok(!expected.sql.some((s) => KEYED.test(s)), 'the reference runs the temp-table plan')
          const items = hasItems(expected.text)
          if (items) withItems++
          // Every variant whole; the keyed plan over Parquet in slices and cut. A query with one
          // relation flag of several takes the two ways related rows are read (row-number runs over
          // Parquet, temp tables over the narrow copies): the other variants differ in what is read
          // and who orders it, not by relation, and each of them runs every relation in the
          // request's query with all its flags (and its queries without flags).
          const variants = budgets !== WHOLE ? VARIANTS.slice(0, 1) : oneFlagOfMany(ds, query) ? ROW_PATHS : VARIANTS
          for (const [plan, limits, local] of variants) {
            const got = await withPlan(limits, () => answer(ds[local], query, budgets))
            const where = `${plan}, ${READ[local]}, ${what}: ${JSON.stringify(query).slice(0, 400)}`
            assert.equal(got.text, expected.text, where)
            // Chunks the summaries rule out run no statement (an answer without items may have none).
            if (items && !got.sql.some((s) => KEYED.test(s))) notKeyed.push(where)
            if (got.sql.some((s) => KEYED_IN_JS.test(s))) (limits.jsOrder === false ? orderedByDuckDb : orderedInJs).push(where)
            // Rows read from narrow copies; and, in the same statement, others from their columns.
            if (got.sql.some((s) => s.includes(' AND src."__narrow_row"'))) narrow++
            if (got.sql.some((s) => s.includes(' AND src."__narrow_row"') && s.includes(' AND NOT src."__narrow_row"'))) wide++
            assert.ok(!got.sql.some((s) => /TEMP TABLE m\d/.test(s)), `${where}: temp tables of matched rows`)
            if (got.sql.some((s) => s.includes('TEMP TABLE "sel_'))) scattered++
            // A block bigger than a slice: its items read kind by kind (ChunkRun.rows).
            if (got.sql.some((s) => s.startsWith(`SELECT concat(',{`))) giant++
            compared++
          }
        }
      }
      console.log(`# ${name}: ${queries.length} queries, ${compared} answers compared in ${((performance.now() - t0) / 1000).toFixed(1)} s, ${withItems} of ${queries.length * BUDGETS.length} references with items, ${scattered} through temp tables of related rows, ${giant} with blocks read row by row, ${narrow} reading narrow copies, ${wide} of them also columns`)
      assert.ok(narrow > 0 && wide > 0, 'narrow copies read, with columns in the same statement')
      assert.ok(withItems >= queries.length, 'most references hold items')
      assert.ok(scattered > 0, 'related rows through temp tables')
      if (name === 'evm') assert.ok(giant > 0, 'blocks bigger than a slice')
      assert.deepEqual(notKeyed, [], 'the keyed plan was taken')
      assert.ok(orderedInJs.length > 0, 'statement 1 ordered in JS')
      assert.deepEqual(orderedByDuckDb, [], 'jsOrder false: statement 1 ordered by DuckDB')
    })

    it(`${name}: request lists without conditions read the block-ordered copies, with the same answers as Parquet`, async () => {
      const ds = datasets.find((d) => d.name === name)!
      const queries = await wholeQueriesOf(ds)
      let compared = 0
      let ordered = 0
      let mixed = 0
      for (const query of queries) {
        for (const [what, budgets] of BUDGETS) {
          // A list of a table some chunks lack is refused (as `table-not-available`), from either.
          const refused = (e: unknown): string => {
            if ((e as { code?: string }).code !== 'table-not-available') throw e
            return String(e)
          }
          const expected = await answer(ds.view, query, budgets).catch(refused)
          if (typeof expected === 'string') {
            for (const local of ['local', 'split'] as const) assert.equal(await answer(ds[local], query, budgets).catch(refused), expected)
            continue
          }
          assert.ok(!expected.sql.some((s) => s.includes(BY_BLOCK_SUFFIX)), 'Parquet has no copies')
          for (const local of ['local', 'split'] as const) {
            const got = await answer(ds[local], query, budgets)
            assert.equal(got.text, expected.text, `${READ[local]}, ${what}: ${JSON.stringify(query).slice(0, 400)}`)
            const copies = got.sql.filter((s) => s.includes(BY_BLOCK_SUFFIX))
            if (local === 'split') assert.deepEqual(copies, [], 'the split forms have no copies')
            // Every kind from a copy: no ORDER BY; else the copies' rows ordered with the others.
            // (A block bigger than a slice reads a copy too, row by row: `SELECT concat(…`, not counted.)
            if (copies.some((s) => s.startsWith('SELECT src.'))) ordered++
            if (copies.some((s) => s.startsWith('SELECT b, k, j FROM ('))) mixed++
            compared++
          }
        }
      }
      console.log(`# ${name}: ${queries.length} queries without conditions, ${compared} answers compared, ${ordered} read in the copies' order, ${mixed} ordered by DuckDB with other rows`)
      assert.ok(ordered > 0, 'slices read in the copies\' order')
      assert.ok(mixed > 0, 'copies ordered together with rows of other kinds')
    })
  }
})

/**
 * Queries with request lists that have no condition (`[{}]`), every field: each kind alone, with
 * all its relation flags, every kind together, and each kind with the others filtered. (All the
 * flags at once: the related rows of every kind a list relates to are ordered with the copies'
 * rows in one answer; the flags one by one are compared, filtered, in the test above.)
 */
async function wholeQueriesOf(ds: Dataset): Promise<Obj[]> {
  const { family } = ds
  const base = baseQuery(ds)
  const out: Obj[] = []
  const filtered = (await queriesOf(ds)).filter((q) => !q.includeAllBlocks)
  const lists = family.items.flatMap((item) => item.requests.filter((r) => !r.where).map((r) => r.name))
  for (const name of lists) {
    const req = family.items.flatMap((i) => i.requests).find((r) => r.name === name)!
    out.push({ ...base, [name]: [{}] }, { ...base, includeAllBlocks: true, [name]: [{}] })
    const flags = Object.keys(req.relations)
    if (flags.length > 0) out.push({ ...base, [name]: [Object.fromEntries(flags.map((f) => [f, true]))] })
    // With another kind's filtered list.
    const other = filtered.find((q) => !(name in q) && Object.keys(q).some((k) => lists.includes(k)))
    if (other) out.push({ ...other, [name]: [{}] })
  }
  out.push({ ...base, ...Object.fromEntries(lists.map((n) => [n, [{}]])) })
  return out
}
