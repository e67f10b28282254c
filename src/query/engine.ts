import { existsSync } from 'node:fs'
import path from 'node:path'
import { duckdbApi, ident, lit } from '../db.js'
import { LazyConnection, type Sql } from './lazy-connection.js'
import { ApiError, badRequest } from '../errors.js'
import { tableOf } from '../families/declaration.js'
import { lowerBoundLast } from '../chunks/search.js'
import { ChunkRun } from './chunk-run.js'
import type { SelectedBlock, SliceRows } from './chunk-plan.js'
import type { ChunkSource } from './chunk-sql.js'
import { planQuery, planTables, type QueryPlan } from './plan.js'
import type { DatasetView, HeldChunk, QueryBudgets, QueryStream } from './types.js'
import { INLINE_LIST_MAX } from './sql.js'
import { validateQuery } from './validate.js'
import { chunkCannotMatch, metaReader, type ChunkMetaReader } from './summary.js'
import { BlockWriter } from './block-writer.js'
import { Mutex } from '../semaphore.js'
import type { RowTexts } from './row-texts.js'
import { answerOf, answerTexts } from '../fast-path.js'

/*
 * The generic query engine: validate a query against the dataset's family declaration, find the
 * contiguous run of held chunks that contains `fromBlock`, and stream the JSON answer chunk by
 * chunk, slice by slice, stopping at a block boundary when a budget is spent (docs/protocol.md §3.7,
 * §25–27).
 */

export const DEFAULT_BUDGETS: QueryBudgets = { sizeBytes: 20 * 1024 * 1024, timeMs: 2000 }

/**
 * Default of `QueryBudgets.sliceBytes`: largest estimated JSON read in one statement. A slice's rows
 * are held until it is read, so this bounds the memory per query; each slice is a statement that
 * reads the chunk's files again. 24 MiB: a 20 MiB answer is mostly one statement (the serving
 * commands' small young generation keeps the peak where 16 MiB had it;
 * docs/benchmark-history.md, step 38).
 */
export const SLICE_BYTES = 24 * 1024 * 1024
/** A slice reads blocks estimated up to this factor of the remaining size budget (estimates run 0.8–1.3× the JSON). */
const BUDGET_REACH = 1.25
/**
 * Default of `QueryBudgets.heavySliceBytes`: slices estimated above it are read one at a time per
 * process, and a query holds its slice's output until the statement is done (DuckDB keeps the
 * sorted rows of a slice while they stream out). Measured: worker peak RSS 517–610 MB with two
 * such slices at once, 494–525 MB one at a time, 579–625 MB instead of 1.2–2.1 GB with 16 queries
 * admitted (docs/benchmark-history.md, step 15). Smaller slices run side by side.
 */
export const HEAVY_SLICE_BYTES = 4 * 1024 * 1024
const heavySlices = new Mutex()
/** Output is handed to the HTTP layer in pieces of about this size. */
const PIECE_BYTES = 64 * 1024
/** Blocks listed in a fork answer (docs/protocol.md §2). */
const FORK_BLOCKS = 100

/** Which tables a chunk folder has (chunks are immutable, so this is cached). */
const chunkTables = new Map<string, ReadonlySet<string>>()
/** The distinct table sets met, shared by every chunk that has that set (most chunks of a dataset share one). */
const tableSets = new Map<string, ReadonlySet<string>>()

function tableSet(names: Iterable<string>): ReadonlySet<string> {
  const sorted = [...new Set(names)].sort()
  const key = sorted.join('/')
  let set = tableSets.get(key)
  if (!set) tableSets.set(key, (set = new Set(sorted)))
  return set
}

/**
 * Whether the chunk has the table: from the files its meta.json lists when the chunk is first met
 * (`meta`, read once for this and its summaries), else (or when they lack it) by looking for the file.
 */
function hasTable(chunk: HeldChunk, table: string, meta?: ChunkMetaReader): boolean {
  let set = chunkTables.get(chunk.dir)
  if (!set) {
    let files: Record<string, unknown> | undefined
    try {
      files = meta?.()?.files
    } catch {} // unreadable meta.json: the files are looked for
    set = tableSet(Object.keys(files ?? {}).filter((name) => name.endsWith('.parquet')).map((name) => name.slice(0, -'.parquet'.length)))
    chunkTables.set(chunk.dir, set)
  }
  if (!set.has(table) && existsSync(path.join(chunk.dir, `${table}.parquet`))) chunkTables.set(chunk.dir, (set = tableSet([...set, table])))
  return set.has(table)
}

function missingTable(plan: QueryPlan, chunk: HeldChunk, meta?: ChunkMetaReader): string | undefined {
  return planTables(plan).find((t) => !hasTable(chunk, t, meta))
}

/**
 * The chunks a query reads: `chunks[start]` and those after it, as long as they follow each other
 * in the dataset and begin by block `to`. `chunk(ci)` is the ci-th, undefined past the last; each is
 * checked when the query first asks for it, so a query never walks chunks it does not reach.
 */
function runFrom(chunks: HeldChunk[], start: number, to: number): (ci: number) => HeldChunk | undefined {
  let known = 0 // chunks[start ..= start + known] are in the run
  return (ci) => {
    while (known < ci) {
      const next = chunks[start + known + 1]
      if (!next || next.coverFrom !== chunks[start + known].last + 1 || next.first > to) return undefined
      known++
    }
    return chunks[start + ci]
  }
}

/** Where a chunk is read: its local form when it has one (acquired for the query now), else its Parquet files. */
function sourceOf(view: DatasetView, chunk: HeldChunk): ChunkSource {
  return chunk.local || !view.localForm ? chunk : { dir: chunk.dir, local: view.localForm(chunk) }
}

/**
 * Whether a chunk's files were removed under the query: compaction deletes the chunks a merged chunk
 * replaces after its grace period, and a worker whose view still holds them (its router has not
 * swapped them yet) must send the client back to the router rather than fail.
 */
const vanished = (chunk: HeldChunk, e: unknown) =>
  !existsSync(chunk.dir) || /No files found that match the pattern|No such file or directory/.test(String(e))

const gone = (from: number, view: DatasetView) =>
  new ApiError(503, 'not-available', `data for block ${from} of dataset ${view.name} was replaced by a merged chunk this worker does not hold yet; ask the router again`, undefined, 1)

const noBlocks = (from: number, to: number | undefined) =>
  new ApiError(400, 'no-blocks-in-range', `the dataset has no block in [${from}, ${to ?? 'end'}]`)

export async function prepareQuery(view: DatasetView, body: unknown, budgets: QueryBudgets): Promise<QueryStream> {
  const query = validateQuery(view.family, body)
  const plan = planQuery(view.family, query)
  const from = query.fromBlock
  if (view.height < 0 || from > view.height) {
    throw badRequest('above-height', `block ${from} is above the height of dataset ${view.name} (${view.height})`)
  }
  const start = lowerBoundLast(view.chunks, from)
  if (start === view.chunks.length || view.chunks[start].coverFrom > from) {
    // Below the height the block exists, so the router sent the client here just as the chunk moved
    // to another worker: a retryable answer makes the client ask the router again (a 400 would end
    // the real SDK's sync).
    throw new ApiError(503, 'not-available', `data for block ${from} of dataset ${view.name} is not on this worker (any more); ask the router again`, undefined, 1)
  }
  const to = query.toBlock ?? Infinity
  const head = view.chunks[start]
  if (head.first > to) throw noBlocks(from, query.toBlock)
  const headMeta = metaReader(head.dir)
  const missing = missingTable(plan, head, headMeta)
  if (missing && !existsSync(head.dir)) throw gone(from, view)
  if (missing) throw badRequest('table-not-available', `"${missing}" data is not available for block ${from} of dataset ${view.name}`)

  if (head.intact && !(await head.intact())) {
    throw new ApiError(503, 'not-available', `data for block ${from} of dataset ${view.name} is being repaired on this worker; ask the router again`, undefined, 1)
  }

  const con = new LazyConnection()
  const texts = answerTexts()
  try {
    const values = await createValueTables(con, plan)
    const first = new ChunkRun(con, plan, sourceOf(view, head), Math.max(from, head.first), Math.min(to, head.last), values, texts)
    const firstBlocks = await first.prepare(query.includeAllBlocks, await chunkCannotMatch(con, plan, head.dir, headMeta), headMeta)
    if (firstBlocks.length === 0) throw noBlocks(from, query.toBlock)
    if (query.parentBlockHash) await checkParent(con, view, from, query.parentBlockHash)
    const stats = { chunksRead: 0, blocks: 0, bytes: 0, lastBlock: -1 }
    const body = answer({ con, plan, chunk: runFrom(view.chunks, start, to), source: (c) => sourceOf(view, c), from, to, budgets, stats, first, firstBlocks, values, texts })
    return answerOf({ body, stats }, texts)
  } catch (e) {
    con.closeSync()
    if (!(e instanceof ApiError) && vanished(head, e)) throw gone(from, view)
    throw e
  }
}

interface AnswerArgs {
  con: LazyConnection
  plan: QueryPlan
  /** The query's ci-th chunk (`runFrom`); undefined past the last. */
  chunk: (ci: number) => HeldChunk | undefined
  /** Where a chunk is read (`sourceOf`), asked when the chunk is opened. */
  source: (chunk: HeldChunk) => ChunkSource
  from: number
  /** Last block asked for (Infinity: none). */
  to: number
  budgets: QueryBudgets
  stats: QueryStream['stats']
  first: ChunkRun
  firstBlocks: SelectedBlock[]
  values: (values: unknown[]) => string
  /** The answer's row texts (`row-texts.ts`). */
  texts: RowTexts
}

async function* answer(a: AnswerArgs): AsyncGenerator<Uint8Array> {
  const { con, plan, chunk: chunkAt, budgets, stats } = a
  const sliceBytes = budgets.sliceBytes ?? SLICE_BYTES
  const heavySliceBytes = budgets.heavySliceBytes ?? HEAVY_SLICE_BYTES
  const started = performance.now()
  const writer = new BlockWriter(plan.kinds.map((k) => k.output), stats, PIECE_BYTES, a.texts)
  const sizeSpent = () => stats.bytes >= budgets.sizeBytes
  const spent = () => sizeSpent() || performance.now() - started >= budgets.timeMs
  /** Writes a slice (a heavy one under the process's heavy-slice lock, handing nothing on until its rows are read). */
  async function* writeSlice(rows: AsyncIterable<SliceRows>, want: Set<number>, firstChunk: boolean, heavy: boolean): AsyncGenerator<Uint8Array, boolean> {
    // The time budget counts after the first chunk (docs/protocol.md §3.7).
    const over = firstChunk ? sizeSpent : spent
    const unlock = heavy ? await heavySlices.lock() : undefined
    try {
      return yield* writer.slice(rows, want, over, !heavy)
    } finally {
      unlock?.()
    }
  }
  // While a chunk is written, the next one is prepared on a second connection (its temp tables
  // are per connection): DuckDB runs the two in parallel (docs/benchmark-history.md, step 11).
  let second: Promise<Connection> | undefined
  const connection = (ci: number): Promise<Connection> =>
    ci % 2 === 0 ? Promise.resolve({ con, values: a.values }) : (second ??= secondConnection(plan))
  const openChunk = async (ci: number, ruledOut: boolean, meta?: ChunkMetaReader): Promise<Prepared> => {
    const chunk = chunkAt(ci)!
    const c = await connection(ci)
    const run = new ChunkRun(c.con, plan, a.source(chunk), chunk.first, Math.min(a.to, chunk.last), c.values, a.texts)
    return { ruledOut, run, blocks: await run.prepare(plan.query.includeAllBlocks, ruledOut, meta) }
  }
  const prepareChunk = async (ci: number): Promise<Prepared> => {
    const chunk = chunkAt(ci)!
    // A damaged cache copy ends the answer before it, like a chunk without the table (the client continues elsewhere).
    const meta = metaReader(chunk.dir)
    if (missingTable(plan, chunk, meta) || (chunk.intact && !(await chunk.intact()))) return { missing: true }
    const ruledOut = await chunkCannotMatch((await connection(ci)).con, plan, chunk.dir, meta)
    // A ruled-out chunk is passed over unless the answer ends in it; then only its last block is read.
    if (ruledOut && chunkAt(ci + 1)) return { ruledOut }
    return openChunk(ci, ruledOut, meta)
  }
  let ahead: { ci: number; done: Promise<Prepared> } | undefined
  const settle = async () => {
    await ahead?.done.catch(() => undefined)
    ahead = undefined
  }
  try {
    for (let ci = 0; chunkAt(ci); ci++) {
      let run: ChunkRun
      let blocks: SelectedBlock[]
      if (ci === 0) {
        run = a.first
        blocks = a.firstBlocks
      } else {
        let pre: Prepared
        let passOver = false
        try {
          if (ahead?.ci === ci) {
            pre = await ahead.done
            ahead = undefined
          } else {
            await settle()
            pre = await prepareChunk(ci)
          }
          passOver = !!pre.ruledOut && !!chunkAt(ci + 1) && !spent()
          if (!pre.missing && !passOver && !pre.run) pre = await openChunk(ci, true)
        } catch (e) {
          // A later chunk removed under the query (compaction) ends the answer before it, like a missing table.
          if (vanished(chunkAt(ci)!, e)) break
          throw e
        }
        // A later chunk without a table the query needs ends the answer; the next query starts there and gets the 400.
        if (pre.missing) break
        if (passOver) continue
        run = pre.run!
        blocks = pre.blocks!
      }
      // Prepare the next chunk meanwhile when this one is not expected to fill the size budget.
      const weight = blocks.reduce((sum, b) => sum + b.weight, 0)
      if (chunkAt(ci + 1) && !ahead && stats.bytes + weight < budgets.sizeBytes) {
        const next = ci + 1
        ahead = { ci: next, done: prepareChunk(next) }
        ahead.done.catch(() => undefined)
      }
      stats.chunksRead++
      if (blocks.length === 0) continue
      const wanted = blocks.filter((b, i) => b.items || (ci === 0 && i === 0))
      const tail = blocks[blocks.length - 1]
      const tailWanted = wanted.length > 0 && wanted[wanted.length - 1] === tail
      const lastChunk = !chunkAt(ci + 1)
      let stop = false
      let i = 0
      while (i < wanted.length && !stop) {
        // A slice: consecutive wanted blocks whose estimated JSON fits the slice and reaches past
        // the remaining budget (writing stops at the budget; each slice reads the chunk's files
        // again, so one slice too many costs more than a few blocks read in vain).
        const left = (budgets.sizeBytes - stats.bytes) * BUDGET_REACH
        let j = i
        let weight = wanted[i].weight
        while (j + 1 < wanted.length && weight < left && weight + wanted[j + 1].weight <= sliceBytes) weight += wanted[++j].weight
        const lo = wanted[i].number
        // The last slice of the last chunk also reads the chunk's last block when the answer ends
        // there (one statement less than reading its header apart, below).
        const withTail = lastChunk && !tailWanted && j === wanted.length - 1
        const hi = withTail ? tail.number : wanted[j].number
        if (i === j && weight > sliceBytes) {
          // One giant block: its items are read kind by kind, row by row.
          yield* writer.giantBlock(lo, await run.header(lo), (k) => run.rows(k, lo))
        } else {
          const want = new Set(wanted.slice(i, j + 1).map((b) => b.number))
          if (withTail) want.add(tail.number)
          stop = yield* writeSlice(run.slice(lo, hi, weight), want, ci === 0, weight > heavySliceBytes)
          a.texts.sliceDone()
          if (stop) break
        }
        i = j + 1
        stop = ci === 0 ? sizeSpent() : spent()
        if (writer.full) yield* writer.take()
      }
      const more = !stop && !lastChunk && !spent()
      if (i === wanted.length && !tailWanted && !more && stats.lastBlock < tail.number) {
        // The answer ends after this whole chunk: its last block is where the client continues.
        writer.bareBlock(tail.number, await run.header(tail.number))
      }
      if (writer.full) yield* writer.take()
      if (!more) break
    }
    yield* writer.finish()
  } finally {
    await settle()
    con.closeSync()
    if (second) (await second.catch(() => undefined))?.con.closeSync()
  }
}

interface Connection {
  con: LazyConnection
  values: (values: unknown[]) => string
}

/** A chunk prepared ahead: `missing` a table, `ruledOut` by its summary, or its candidate blocks. */
interface Prepared {
  missing?: boolean
  ruledOut?: boolean
  run?: ChunkRun
  blocks?: SelectedBlock[]
}

async function secondConnection(plan: QueryPlan): Promise<Connection> {
  const con = new LazyConnection()
  try {
    return { con, values: await createValueTables(con, plan) }
  } catch (e) {
    con.closeSync()
    throw e
  }
}

/**
 * Long filter lists become one-column (`v`) temp tables, created once per query before any SQL
 * names them; the returned function maps a list to its table.
 */
async function createValueTables(con: Sql, plan: QueryPlan): Promise<(values: unknown[]) => string> {
  const names = new Map<unknown[], string>()
  for (const scan of plan.scans) {
    for (const [key, value] of Object.entries(scan.filters)) {
      if (scan.request.filters[key].kind !== 'in') continue
      const values = value as (string | number)[]
      if (values.length <= INLINE_LIST_MAX) continue
      const name = `v${names.size}`
      const numeric = typeof values[0] === 'number'
      const api = duckdbApi()
      await con.run(
        `CREATE TEMP TABLE ${name} AS SELECT DISTINCT unnest($1) AS v`,
        [api.listValue(numeric ? values.map((v) => BigInt(v)) : (values as string[]))],
        [api.LIST(numeric ? api.BIGINT : api.VARCHAR)],
      )
      names.set(values, name)
    }
  }
  return (values) => {
    const name = names.get(values)
    if (!name) throw new Error('value table was not created for a filter list')
    return name
  }
}

/**
 * docs/protocol.md §2: when the parent of `fromBlock` exists in the dataset and has another hash than
 * the client expects, answer 409 with the blocks before `fromBlock` so the client can find the fork.
 */
async function checkParent(con: Sql, view: DatasetView, from: number, expected: string): Promise<void> {
  if (from === 0) return
  const parent = from - 1
  const header = view.family.header
  const numberCol = ident(tableOf(view.family, header.table).blockColumn)
  const file = (c: HeldChunk) => `read_parquet(${lit(path.join(c.dir, `${header.table}.parquet`))})`
  let actual: string | undefined
  const atIndex = lowerBoundLast(view.chunks, parent)
  const at = view.chunks[atIndex]
  const holder = at && at.first <= parent ? at : undefined
  if (holder) {
    const r = await con.runAndReadAll(`SELECT hash FROM ${file(holder)} WHERE ${numberCol} = ${parent}`)
    actual = r.getRows()[0]?.[0] as string | undefined
  } else {
    // The parent is the last block of a chunk held elsewhere: the first block of ours names it.
    // (No chunk holds the parent, so the first ending at or after it begins after it.)
    const next = at && at.first === from && at.coverFrom === from ? at : undefined
    if (next) {
      const r = await con.runAndReadAll(`SELECT parent_hash FROM ${file(next)} WHERE ${numberCol} = ${from}`)
      actual = r.getRows()[0]?.[0] as string | undefined
    }
  }
  if (actual === undefined || actual === expected) return
  const previous = holder ? await blocksBefore(con, view.chunks, atIndex, parent, file, numberCol) : []
  if (previous.length === 0) previous.push({ number: parent, hash: actual })
  throw new ApiError(
    409,
    'fork',
    `block ${parent} has hash ${actual}, not ${expected}: the client is on another fork`,
    undefined,
    undefined,
    { previousBlocks: previous },
  )
}

/**
 * Up to FORK_BLOCKS existing blocks ending at `last`, ascending, read back from `chunks[index]` (which
 * holds `last`) across the earlier chunks as long as they follow each other in the dataset: a chunk
 * held by another worker in between would leave a hole the client could not tell from a gap.
 */
async function blocksBefore(
  con: Sql,
  chunks: HeldChunk[],
  index: number,
  last: number,
  file: (c: HeldChunk) => string,
  numberCol: string,
): Promise<{ number: number; hash: string }[]> {
  const found: { number: number; hash: string }[] = []
  for (let i = index; i >= 0 && found.length < FORK_BLOCKS; i--) {
    if (i < index && chunks[i].last + 1 !== chunks[i + 1].coverFrom) break
    const r = await con.runAndReadAll(
      `SELECT ${numberCol}, hash FROM ${file(chunks[i])} WHERE ${numberCol} <= ${last} ORDER BY ${numberCol} DESC LIMIT ${FORK_BLOCKS - found.length}`,
    )
    for (const [n, h] of r.getRows()) found.push({ number: Number(n), hash: h as string })
  }
  return found.reverse()
}
