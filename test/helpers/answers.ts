import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'

/*
 * What the reference evaluators of every family share: the errors, address order, field projection,
 * the evaluation skeleton (items each request and relation selects, blocks returned with the first
 * and last block of the range, one array per involved kind), comparing answers, loading real queries.
 * Each family's own rules (filters, relations, identifier fields, item order) stay in its
 * reference-<family>.ts and come in as `EvaluationRules`.
 */

export type Obj = Record<string, any>

/** A query the worker must refuse (400 `invalid-query`). */
export class InvalidQuery extends Error {}
/** A range without blocks (400 `no-blocks-in-range`, docs/protocol.md §3.5). */
export class NoBlocksInRange extends Error {}

/** `[] < [0] < [0,0] < [0,1] < [1]` (docs/protocol.md §3.6). */
export function compareAddress(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i]
  return a.length - b.length
}

export const cmpStr = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

/** Values, most frequent first (nulls left out). */
export function byFrequency<T>(values: T[]): T[] {
  const counts = new Map<T, number>()
  for (const v of values) if (v !== null && v !== undefined) counts.set(v, (counts.get(v) ?? 0) + 1)
  return [...counts.entries()].sort((a, b) => b[1] - a[1]).map(([v]) => v)
}

// ------------------------------------------------------------------------------------ projection

/** Every field of a selector selected. */
export const allFields = (names: readonly string[]) => Object.fromEntries(names.map((n) => [n, true]))

function selected(fields: Obj | undefined, selector: string): string[] {
  const f = fields?.[selector]
  if (!f) return []
  return Object.entries(f)
    .filter(([, v]) => v === true)
    .map(([k]) => k)
}

/** The fields of `selector` an answer carries: the identifier fields, then the selected ones. */
export const fieldNames = (ids: readonly string[], fields: Obj | undefined, selector: string) => [...new Set([...ids, ...selected(fields, selector)])]

export function pick(full: Obj, names: string[], what: string): Obj {
  const out: Obj = {}
  for (const n of names) {
    if (!(n in full)) throw new Error(`the full answer lacks ${what}.${n}: select every field in it`)
    out[n] = full[n]
  }
  return out
}

// ------------------------------------------------------------------------------------ evaluation skeleton

/** A relation flag: the target kind and whether `target` is related to `source`. */
export interface RelationRule<K extends string> {
  target: K
  related: (source: Obj, target: Obj) => boolean
}

/** A request list of a query (`transactions`, `evmLogs`, …): the kind it selects, its matching and relation rules. */
export interface RequestListRule<K extends string, B> {
  list: string
  kind: K
  /** The items of its kind one request matches in a block (throws InvalidQuery for an invalid request). */
  matched: (block: B, request: Obj) => Obj[]
  relations: Record<string, RelationRule<K>>
}

/** What a family's reference evaluator tells the shared skeleton. */
export interface EvaluationRules<K extends string, B> {
  /** Item kinds, in output order. */
  kinds: readonly K[]
  /** Output array of each kind (in the full answer's blocks too). */
  outputKey: Record<K, string>
  lists: readonly RequestListRule<K, B>[]
  /** Primary key of an item as a string. */
  itemKey: (kind: K, item: Obj) => string
  /** Primary-key order of the items of each kind. */
  compare: Record<K, (a: Obj, b: Obj) => number>
  /** Identifier fields, always present. */
  idFields: Record<K | 'block', readonly string[]>
  /** Field projection of an item when not just the identifier and selected fields. */
  project?: (kind: K, item: Obj, fields: Obj | undefined) => Obj
}

/**
 * One request list per kind (EVM, Starknet): `requestKey[kind]` selects items of `kind` by
 * `matches`; each relation flag names a target kind and a rule `related` decides.
 */
export function listPerKind<K extends string, B, R>(
  kinds: readonly K[],
  requestKey: Record<K, string>,
  items: (block: B, kind: K) => Obj[],
  matches: (kind: K, request: Obj, item: Obj) => boolean,
  relations: Record<K, Record<string, { target: K; rel: R }>>,
  related: (rel: R, source: Obj, target: Obj) => boolean,
): RequestListRule<K, B>[] {
  return kinds.map((kind) => ({
    list: requestKey[kind],
    kind,
    matched: (block, request) => items(block, kind).filter((i) => matches(kind, request, i)),
    relations: Object.fromEntries(Object.entries(relations[kind]).map(([flag, r]) => [flag, { target: r.target, related: (s: Obj, t: Obj) => related(r.rel, s, t) }])),
  }))
}

export interface EvaluateOptions {
  /** Last block of the range the worker served (without `toBlock` the answer runs to here). */
  rangeEnd?: number
}

/** A family's evaluation over its full answer, built from its rules. */
export function evaluation<K extends string, B extends { header: Obj }>(rules: EvaluationRules<K, B>) {
  const { kinds: KINDS, outputKey, itemKey, compare, idFields } = rules
  const itemsOfKind = (b: B, kind: K): Obj[] => (b as Obj)[outputKey[kind]]

  const projectHeader = (h: Obj, fields: Obj | undefined): Obj => pick(h, fieldNames(idFields.block, fields, 'block'), 'header')
  const projectItem = (kind: K, item: Obj, fields: Obj | undefined): Obj => rules.project ? rules.project(kind, item, fields) : pick(item, fieldNames(idFields[kind], fields, kind), kind)

  /** The item kinds a query involves, by a non-empty request list or a relation flag set to true (docs/protocol.md §3.3). */
  function involvedKinds(query: Obj): Set<K> {
    const out = new Set<K>()
    for (const l of rules.lists) {
      const requests: Obj[] | undefined = query[l.list]
      if (!requests?.length) continue
      out.add(l.kind)
      for (const r of requests) for (const [flag, rel] of Object.entries(l.relations)) if (r[flag] === true) out.add(rel.target)
    }
    return out
  }

  /** Items of each kind a query selects in one block, by primary key. */
  function selectItems(block: B, query: Obj): Record<K, Set<string>> {
    const sel = Object.fromEntries(KINDS.map((k) => [k, new Set<string>()])) as Record<K, Set<string>>
    for (const l of rules.lists) {
      for (const request of (query[l.list] ?? []) as Obj[]) {
        const hit = l.matched(block, request)
        for (const i of hit) sel[l.kind].add(itemKey(l.kind, i))
        for (const [flag, rel] of Object.entries(l.relations)) {
          if (request[flag] !== true) continue
          for (const t of itemsOfKind(block, rel.target)) if (hit.some((s) => rel.related(s, t))) sel[rel.target].add(itemKey(rel.target, t))
        }
      }
    }
    return sel
  }

  /**
   * What the worker must answer for `query` given `data` (the full answer over every block it holds,
   * ascending), budgets not cutting it: every block with a selected item plus the first and the last
   * existing block of the range (every block with `includeAllBlocks`), each with its header and one
   * array per involved kind. Throws `NoBlocksInRange` for a range without blocks (docs/protocol.md §3.5) and
   * `InvalidQuery` for invalid filter values.
   */
  function evaluate(data: B[], query: Obj, opts: EvaluateOptions = {}): Obj[] {
    const end = Math.min(query.toBlock ?? Infinity, opts.rangeEnd ?? Infinity)
    const blocks = data.filter((b) => b.header.number >= query.fromBlock && b.header.number <= end)
    if (blocks.length === 0) throw new NoBlocksInRange(`no block in [${query.fromBlock}, ${end}]`)
    const kinds = involvedKinds(query)
    const first = blocks[0].header.number
    const last = blocks[blocks.length - 1].header.number
    const out: Obj[] = []
    for (const b of blocks) {
      const sel = selectItems(b, query)
      const any = KINDS.some((k) => sel[k].size > 0)
      const n = b.header.number
      if (!(query.includeAllBlocks === true || any || n === first || n === last)) continue
      const block: Obj = { header: projectHeader(b.header, query.fields) }
      for (const kind of KINDS) {
        if (!kinds.has(kind)) continue
        block[outputKey[kind]] = itemsOfKind(b, kind)
          .filter((i) => sel[kind].has(itemKey(kind, i)))
          .sort(compare[kind])
          .map((i) => projectItem(kind, i, query.fields))
      }
      out.push(block)
    }
    return out
  }

  return {
    itemsOfKind,
    projectHeader,
    projectItem,
    involvedKinds,
    selectItems,
    evaluate,
    /** Every item of `kind` in `data`, with its block number. */
    itemsOf: (data: B[], kind: K): { block: number; item: Obj }[] => data.flatMap((b) => itemsOfKind(b, kind).map((item) => ({ block: b.header.number as number, item }))),
    /** Number of items in an answer. */
    itemCount: (blocks: Obj[]) => blocks.reduce((n, b) => n + KINDS.reduce((m, k) => m + (b[outputKey[k]]?.length ?? 0), 0), 0),
    /** First difference between two answers as a readable message (naming the block, array and item), or undefined when equal. */
    firstDifference: (got: Obj[], expected: Obj[]): string | undefined =>
      firstDifference(got, expected, (output, item) => itemKey(KINDS.find((x) => outputKey[x] === output)!, item)),
  }
}

// ------------------------------------------------------------------------------------ comparing answers

/**
 * The first difference between an answer and the reference's, as a sentence (undefined when equal).
 * `keyOf` names an item of an output array, to list the missing and extra ones.
 */
export function firstDifference(got: Obj[], expected: Obj[], keyOf: (output: string, item: Obj) => string): string | undefined {
  const gn = got.map((b) => b?.header?.number)
  const en = expected.map((b) => b.header.number)
  if (JSON.stringify(gn) !== JSON.stringify(en)) {
    const missing = en.filter((n) => !gn.includes(n))
    const extra = gn.filter((n) => !en.includes(n))
    return `blocks differ: ${got.length} returned, ${expected.length} expected; missing ${JSON.stringify(missing.slice(0, 10))}, extra ${JSON.stringify(extra.slice(0, 10))}`
  }
  for (let i = 0; i < got.length; i++) {
    const g = got[i]
    const e = expected[i]
    const n = e.header.number
    const gk = Object.keys(g)
    if (gk[0] !== 'header') return `block ${n}: first key is ${gk[0]}, not header`
    const ek = Object.keys(e)
    if (JSON.stringify([...gk].sort()) !== JSON.stringify([...ek].sort())) return `block ${n}: keys ${JSON.stringify(gk)}, expected ${JSON.stringify(ek)}`
    const d = diffValue(g.header, e.header)
    if (d) return `block ${n} header: ${d}`
    for (const k of ek.slice(1)) {
      const ga: Obj[] = g[k]
      const ea: Obj[] = e[k]
      if (!Array.isArray(ga)) return `block ${n}: ${k} is not an array`
      if (ga.length !== ea.length) {
        const gks = ga.map((x) => keyOf(k, x))
        const eks = ea.map((x) => keyOf(k, x))
        return `block ${n}: ${ga.length} ${k}, expected ${ea.length}; missing ${JSON.stringify(eks.filter((x) => !gks.includes(x)).slice(0, 10))}, extra ${JSON.stringify(gks.filter((x) => !eks.includes(x)).slice(0, 10))}`
      }
      for (let j = 0; j < ea.length; j++) {
        const d = diffValue(ga[j], ea[j])
        if (d) return `block ${n} ${k}[${j}]: ${d}; got ${JSON.stringify(ga[j]).slice(0, 400)}, expected ${JSON.stringify(ea[j]).slice(0, 400)}`
      }
    }
  }
  return undefined
}

function diffValue(g: any, e: any, path = ''): string | undefined {
  if (e === null || typeof e !== 'object') {
    return Object.is(g, e) ? undefined : `${path || 'value'}: ${JSON.stringify(g)} ≠ expected ${JSON.stringify(e)}`
  }
  if (g === null || typeof g !== 'object' || Array.isArray(g) !== Array.isArray(e)) return `${path}: ${JSON.stringify(g)?.slice(0, 200)} ≠ expected ${JSON.stringify(e).slice(0, 200)}`
  if (Array.isArray(e)) {
    if (g.length !== e.length) return `${path}: length ${g.length} ≠ expected ${e.length}`
    for (let i = 0; i < e.length; i++) {
      const d = diffValue(g[i], e[i], `${path}[${i}]`)
      if (d) return d
    }
    return undefined
  }
  for (const k of new Set([...Object.keys(g), ...Object.keys(e)])) {
    if (!(k in e)) return `${path}.${k}: present (${JSON.stringify(g[k])?.slice(0, 100)}) but not expected`
    if (!(k in g)) return `${path}.${k}: missing (expected ${JSON.stringify(e[k])?.slice(0, 100)})`
    const d = diffValue(g[k], e[k], `${path}.${k}`)
    if (d) return d
  }
  return undefined
}

export interface NamedQuery {
  name: string
  query: Obj
}

/** The real queries of a folder (`fixtures/queries/<family>`), by file name. */
export function loadQueries(dir: string): NamedQuery[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => ({ name: f.replace(/\.json$/, ''), query: JSON.parse(readFileSync(path.join(dir, f), 'utf8')) }))
}
