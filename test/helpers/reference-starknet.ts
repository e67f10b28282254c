/*
 * A reference evaluator of Starknet archive queries, written from the protocol documents only
 * (docs/protocol.md §3 and §6), in
 * plain TypeScript and independent of the engine and of the family declaration (only the field,
 * filter and flag NAMES are the project's).
 *
 * Like reference-evm.ts it works on "everything" about a block range — the answer to `fullQuery()`
 * (every item of every kind, every field selected, every block) — and computes what the worker must
 * answer for any other query over the same blocks: which items each request and relation selects,
 * which blocks are returned, which arrays each block carries, item order and field projection
 * (identifier fields always present; a state update with nothing selected is `{}`).
 *
 * Also here: re-basing the real queries of fixtures/queries/starknet onto the data we have (the
 * EVM re-basing in reference-rebase.ts is tied to the EVM filters), and answer comparison.
 */

import { firstDifference as compareAnswers } from './answers.js'

export type Obj = Record<string, any>

/** One block of the full answer (kinds the range has no table for: `[]`). */
export interface FullBlock {
  header: Obj
  transactions: Obj[]
  events: Obj[]
  traces: Obj[]
  messages: Obj[]
  state_updates: Obj[]
  storage_diffs: Obj[]
}

// ------------------------------------------------------------------------------------ kinds

export type Kind = 'transaction' | 'event' | 'trace' | 'message' | 'stateUpdate' | 'storageDiff'
export const KINDS: Kind[] = ['transaction', 'event', 'trace', 'message', 'stateUpdate', 'storageDiff']

/** Request list of each kind. */
export const REQUEST_KEY: Record<Kind, string> = {
  transaction: 'transactions',
  event: 'events',
  trace: 'traces',
  message: 'messages',
  stateUpdate: 'stateUpdates',
  storageDiff: 'storageDiffs',
}

/** Output array of each kind (the last two snake_case). */
export const OUTPUT_KEY: Record<Kind, keyof Omit<FullBlock, 'header'>> = {
  transaction: 'transactions',
  event: 'events',
  trace: 'traces',
  message: 'messages',
  stateUpdate: 'state_updates',
  storageDiff: 'storage_diffs',
}

// ------------------------------------------------------------------------------------ fields

export const BLOCK_FIELDS = [
  'number', 'hash', 'parentHash', 'status', 'newRoot', 'timestamp', 'sequencerAddress', 'starknetVersion',
  'l1GasPriceInFri', 'l1GasPriceInWei', 'l1DataGasPriceInFri', 'l1DataGasPriceInWei', 'l2GasPriceInFri',
  'l2GasPriceInWei', 'l1DaMode',
] as const

/** Selectable fields of each item kind (docs/protocol.md §6.2–6.6). */
export const FIELDS: Record<Kind, readonly string[]> = {
  transaction: [
    'transactionIndex', 'transactionHash', 'contractAddress', 'entryPointSelector', 'calldata', 'maxFee', 'type',
    'senderAddress', 'version', 'signature', 'nonce', 'classHash', 'compiledClassHash', 'contractAddressSalt',
    'constructorCalldata', 'resourceBounds', 'tip', 'paymasterData', 'accountDeploymentData',
    'nonceDataAvailabilityMode', 'feeDataAvailabilityMode', 'messageHash', 'actualFee', 'finalityStatus',
    'executionStatus', 'revertReason',
  ],
  event: ['transactionIndex', 'eventIndex', 'fromAddress', 'keys', 'data', 'traceAddress'],
  trace: [
    'transactionIndex', 'traceAddress', 'traceType', 'invocationType', 'callerAddress', 'contractAddress', 'callType',
    'classHash', 'entryPointSelector', 'entryPointType', 'revertReason', 'calldata', 'result',
  ],
  message: ['transactionIndex', 'traceAddress', 'order', 'fromAddress', 'toAddress', 'payload'],
  stateUpdate: [
    'newRoot', 'oldRoot', 'deprecatedDeclaredClasses', 'declaredClasses', 'deployedContracts', 'replacedClasses',
    'nonces', 'migratedCompiledClasses',
  ],
  storageDiff: ['address', 'key', 'value'],
}

const all = (names: readonly string[]) => Object.fromEntries(names.map((n) => [n, true]))

export const ALL_FIELDS: Obj = {
  block: all(BLOCK_FIELDS),
  ...Object.fromEntries(KINDS.map((k) => [k, all(FIELDS[k])])),
}

/** Identifier fields, always present (DECISIONS §12, docs/protocol.md §6). */
export const ID_FIELDS: Record<Kind | 'block', readonly string[]> = {
  block: ['number', 'hash'],
  transaction: ['transactionIndex'],
  event: ['transactionIndex', 'eventIndex'],
  trace: ['transactionIndex', 'traceAddress'],
  message: ['transactionIndex', 'traceAddress', 'order'],
  stateUpdate: [],
  storageDiff: ['address', 'key'],
}

/** The query whose answer is the input of `evaluate`: every block, item (of `kinds`) and field. */
export function fullQuery(fromBlock: number, toBlock?: number, kinds: readonly Kind[] = KINDS): Obj {
  return {
    type: 'starknet',
    fromBlock,
    ...(toBlock === undefined ? {} : { toBlock }),
    includeAllBlocks: true,
    ...Object.fromEntries(kinds.map((k) => [REQUEST_KEY[k], [{}]])),
    fields: ALL_FIELDS,
  }
}

// ------------------------------------------------------------------------------------ filters

type Getter = (item: Obj) => any

/** `felt`: normalised felt; `exact`: string compared as is. */
export type ValueKind = 'felt' | 'exact'

export interface ListFilter {
  kind: 'in'
  values: ValueKind
  get: Getter
}
export interface BoundFilter {
  kind: 'min' | 'max'
  get: Getter
}
export type Filter = ListFilter | BoundFilter

const feltF = (get: Getter): ListFilter => ({ kind: 'in', values: 'felt', get })
const exactF = (get: Getter): ListFilter => ({ kind: 'in', values: 'exact', get })
const field = (name: string): Getter => (i) => i[name]
const keyAt = (n: number): Getter => (e) => (Array.isArray(e.keys) ? e.keys[n] ?? null : null)

/** Request filters of each kind (docs/protocol.md §6.7). */
export const FILTERS: Record<Kind, Record<string, Filter>> = {
  transaction: {
    contractAddress: feltF(field('contractAddress')),
    senderAddress: feltF(field('senderAddress')),
    type: exactF(field('type')),
    firstNonce: { kind: 'min', get: field('nonce') },
    lastNonce: { kind: 'max', get: field('nonce') },
  },
  event: {
    fromAddress: feltF(field('fromAddress')),
    key0: feltF(keyAt(0)),
    key1: feltF(keyAt(1)),
    key2: feltF(keyAt(2)),
    key3: feltF(keyAt(3)),
  },
  trace: {
    traceType: exactF(field('traceType')),
    invocationType: exactF(field('invocationType')),
    callerAddress: feltF(field('callerAddress')),
    contractAddress: feltF(field('contractAddress')),
    classHash: feltF(field('classHash')),
    callType: exactF(field('callType')),
    entryPointSelector: feltF(field('entryPointSelector')),
    entryPointType: exactF(field('entryPointType')),
  },
  message: {
    fromAddress: feltF(field('fromAddress')),
    toAddress: feltF(field('toAddress')),
  },
  stateUpdate: {},
  storageDiff: {
    address: feltF(field('address')),
    key: feltF(field('key')),
  },
}

/** `sameTx`: same transactionIndex; `sameCall`: same transactionIndex and the same traceAddress. */
export type Relation = { target: Kind; rel: 'sameTx' | 'sameCall' }
export const RELATIONS: Record<Kind, Record<string, Relation>> = {
  transaction: {
    events: { target: 'event', rel: 'sameTx' },
    traces: { target: 'trace', rel: 'sameTx' },
    messages: { target: 'message', rel: 'sameTx' },
  },
  event: {
    transaction: { target: 'transaction', rel: 'sameTx' },
  },
  trace: {
    transaction: { target: 'transaction', rel: 'sameTx' },
    events: { target: 'event', rel: 'sameCall' },
    messages: { target: 'message', rel: 'sameCall' },
  },
  message: {},
  stateUpdate: {},
  storageDiff: {},
}

export class InvalidQuery extends Error {}
export class NoBlocksInRange extends Error {}

export const FELT_RE = /^0[xX][0-9a-fA-F]*$/

/** A felt as stored and as filters compare it: lower case, no leading zeros, `0x0` for zero. */
export function normaliseFelt(v: unknown): string {
  if (typeof v !== 'string' || !FELT_RE.test(v)) throw new InvalidQuery(`not a felt: ${JSON.stringify(v)}`)
  const digits = v.slice(2).toLowerCase().replace(/^0+/, '')
  return '0x' + (digits || '0')
}

function normaliseValue(kind: ValueKind, v: unknown): string {
  if (kind === 'felt') return normaliseFelt(v)
  if (typeof v !== 'string') throw new InvalidQuery(`not a string: ${JSON.stringify(v)}`)
  return v
}

const big = (v: unknown): bigint => BigInt(v as any)

const compiled = new WeakMap<Obj, (item: Obj) => boolean>()

/** A request object as a predicate over items (AND across keys, OR inside lists, null = no condition). */
export function compileRequest(kind: Kind, request: Obj): (item: Obj) => boolean {
  const cached = compiled.get(request)
  if (cached) return cached
  const tests: ((item: Obj) => boolean)[] = []
  for (const [key, value] of Object.entries(request)) {
    if (RELATIONS[kind][key]) continue
    const f = FILTERS[kind][key]
    if (!f) throw new InvalidQuery(`unknown key ${REQUEST_KEY[kind]}[].${key}`)
    if (value === null || value === undefined) continue
    const get = f.get
    if (f.kind === 'in') {
      if (!Array.isArray(value)) throw new InvalidQuery(`${key} is not a list`)
      const set = new Set(value.map((x) => normaliseValue(f.values, x)))
      tests.push((i) => {
        const v = get(i)
        return v !== null && v !== undefined && set.has(v)
      })
    } else if (!Number.isSafeInteger(value) || (value as number) < 0) {
      throw new InvalidQuery(`${key} is not a non-negative integer`)
    } else if (f.kind === 'min') {
      tests.push((i) => get(i) != null && big(get(i)) >= big(value))
    } else {
      tests.push((i) => get(i) != null && big(get(i)) <= big(value))
    }
  }
  const fn = (item: Obj) => tests.every((t) => t(item))
  compiled.set(request, fn)
  return fn
}

export function matches(kind: Kind, request: Obj, item: Obj): boolean {
  return compileRequest(kind, request)(item)
}

// ------------------------------------------------------------------------------------ keys and order

/** `[] < [0] < [0,0] < [0,1] < [1]`. */
export function compareAddress(a: number[], b: number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i]
  return a.length - b.length
}

const cmpStr = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

/** Primary-key order of the items of each kind. */
export const COMPARE: Record<Kind, (a: Obj, b: Obj) => number> = {
  transaction: (a, b) => a.transactionIndex - b.transactionIndex,
  event: (a, b) => a.transactionIndex - b.transactionIndex || a.eventIndex - b.eventIndex,
  trace: (a, b) => a.transactionIndex - b.transactionIndex || compareAddress(a.traceAddress, b.traceAddress),
  message: (a, b) => a.transactionIndex - b.transactionIndex || a.order - b.order,
  stateUpdate: () => 0,
  storageDiff: (a, b) => cmpStr(a.address, b.address) || cmpStr(a.key, b.key),
}

/** Primary key of an item as a string (a block has one state update, its key is ''). */
export function itemKey(kind: Kind, i: Obj): string {
  switch (kind) {
    case 'transaction':
      return `${i.transactionIndex}`
    case 'event':
      return `${i.transactionIndex}:${i.eventIndex}`
    case 'trace':
      return `${i.transactionIndex}:${(i.traceAddress as number[]).join('.')}`
    case 'message':
      return `${i.transactionIndex}:${i.order}`
    case 'stateUpdate':
      return ''
    case 'storageDiff':
      return `${i.address}:${i.key}`
  }
}

const sameAddress = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => b[i] === x)

function related(rel: Relation['rel'], source: Obj, target: Obj): boolean {
  if (source.transactionIndex !== target.transactionIndex) return false
  return rel === 'sameTx' || sameAddress(source.traceAddress, target.traceAddress)
}

// ------------------------------------------------------------------------------------ projection

function selected(fields: Obj | undefined, selector: string): string[] {
  const f = fields?.[selector]
  if (!f) return []
  return Object.entries(f)
    .filter(([, v]) => v === true)
    .map(([k]) => k)
}

function pick(full: Obj, names: string[], what: string): Obj {
  const out: Obj = {}
  for (const n of names) {
    if (!(n in full)) throw new Error(`the full answer lacks ${what}.${n}: select every field in it`)
    out[n] = full[n]
  }
  return out
}

export function projectHeader(h: Obj, fields: Obj | undefined): Obj {
  return pick(h, [...new Set([...ID_FIELDS.block, ...selected(fields, 'block')])], 'header')
}

export function projectItem(kind: Kind, item: Obj, fields: Obj | undefined): Obj {
  return pick(item, [...new Set([...ID_FIELDS[kind], ...selected(fields, kind)])], kind)
}

// ------------------------------------------------------------------------------------ evaluation

/** The item kinds a query involves, by a non-empty request list or a relation flag (DECISIONS §11). */
export function involvedKinds(query: Obj): Set<Kind> {
  const out = new Set<Kind>()
  for (const kind of KINDS) {
    const requests: Obj[] | undefined = query[REQUEST_KEY[kind]]
    if (!requests?.length) continue
    out.add(kind)
    for (const r of requests) {
      for (const [flag, rel] of Object.entries(RELATIONS[kind])) if (r[flag] === true) out.add(rel.target)
    }
  }
  return out
}

/** Items of each kind a query selects in one block, by primary key. */
export function selectItems(block: FullBlock, query: Obj): Record<Kind, Set<string>> {
  const sel = Object.fromEntries(KINDS.map((k) => [k, new Set<string>()])) as Record<Kind, Set<string>>
  for (const kind of KINDS) {
    for (const request of (query[REQUEST_KEY[kind]] ?? []) as Obj[]) {
      const hit = block[OUTPUT_KEY[kind]].filter((i) => matches(kind, request, i))
      for (const i of hit) sel[kind].add(itemKey(kind, i))
      for (const [flag, rel] of Object.entries(RELATIONS[kind])) {
        if (request[flag] !== true) continue
        for (const t of block[OUTPUT_KEY[rel.target]]) {
          if (hit.some((s) => related(rel.rel, s, t))) sel[rel.target].add(itemKey(rel.target, t))
        }
      }
    }
  }
  return sel
}

export interface EvaluateOptions {
  /** Last block of the range the worker served (without `toBlock` the answer runs to here). */
  rangeEnd?: number
}

/**
 * What the worker must answer for `query` given `data` (the full answer over every block it holds,
 * ascending), budgets not cutting it: every block with a selected item plus the first and the last
 * existing block of the range (every block with `includeAllBlocks`); each with its header and one
 * array per involved kind. Throws `NoBlocksInRange` for a range without blocks (DECISIONS §26) and
 * `InvalidQuery` for invalid filter values.
 */
export function evaluate(data: FullBlock[], query: Obj, opts: EvaluateOptions = {}): Obj[] {
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
      block[OUTPUT_KEY[kind]] = b[OUTPUT_KEY[kind]]
        .filter((i) => sel[kind].has(itemKey(kind, i)))
        .sort(COMPARE[kind])
        .map((i) => projectItem(kind, i, query.fields))
    }
    out.push(block)
  }
  return out
}

// ------------------------------------------------------------------------------------ helpers

/** Every item of `kind` in `data`, with its block number. */
export function itemsOf(data: FullBlock[], kind: Kind): { block: number; item: Obj }[] {
  return data.flatMap((b) => b[OUTPUT_KEY[kind]].map((item) => ({ block: b.header.number as number, item })))
}

/** Values, most frequent first (nulls left out). */
export function byFrequency<T>(values: T[]): T[] {
  const counts = new Map<T, number>()
  for (const v of values) if (v !== null && v !== undefined) counts.set(v, (counts.get(v) ?? 0) + 1)
  return [...counts.entries()].sort((a, b) => b[1] - a[1]).map(([v]) => v)
}

/** Number of items in an answer. */
export const itemCount = (blocks: Obj[]) => blocks.reduce((n, b) => n + KINDS.reduce((m, k) => m + (b[OUTPUT_KEY[k]]?.length ?? 0), 0), 0)

/** First difference between two answers as a readable message, or undefined when equal. */
export function firstDifference(got: Obj[], expected: Obj[]): string | undefined {
  return compareAnswers(got, expected, (output, item) => itemKey(KINDS.find((x) => OUTPUT_KEY[x] === output)!, item))
}

// ------------------------------------------------------------------------------------ re-basing

/*
 * Re-basing a real query (recorded against mainnet chunks we do not have) onto `data`: its block
 * range becomes `range` (a single-block query gets the block of `range` where it selects most), and
 * every felt list filter that matches nothing gets values that occur: the original values (they
 * normally miss), a seed item's value (so the AND of the request's keys matches at least the seed)
 * and the most frequent value of that key. String filters (`type`, `traceType`, …) are kept when
 * something satisfies them. Nonce bounds are moved around the seed's nonce. The shape (keys,
 * flags, number of requests, selected fields) stays.
 */

export { loadQueries, type NamedQuery } from './answers.js'

export interface RebaseRange {
  fromBlock: number
  toBlock: number
}

export function rebase(fixture: Obj, data: FullBlock[], range: RebaseRange): Obj {
  const inRange = data.filter((b) => b.header.number >= range.fromBlock && b.header.number <= range.toBlock)
  if (fixture.fromBlock !== undefined && fixture.fromBlock === fixture.toBlock) {
    let best: { n: number; q: Obj; score: number } | undefined
    for (const b of inRange) {
      const q = rebaseRequests(fixture, [b])
      const score = countSelected(q, b)
      if (!best || score > best.score) best = { n: b.header.number, q, score }
    }
    return { ...best!.q, fromBlock: best!.n, toBlock: best!.n }
  }
  const out = rebaseRequests(fixture, inRange)
  out.fromBlock = range.fromBlock
  if (fixture.toBlock !== undefined) out.toBlock = range.toBlock
  return out
}

function countSelected(query: Obj, b: FullBlock): number {
  const sel = selectItems(b, query)
  return KINDS.reduce((n, k) => n + sel[k].size, 0)
}

function rebaseRequests(query: Obj, blocks: FullBlock[]): Obj {
  const q = structuredClone(query)
  for (const kind of KINDS) {
    const requests: Obj[] | undefined = q[REQUEST_KEY[kind]]
    if (Array.isArray(requests)) q[REQUEST_KEY[kind]] = requests.map((r) => rebaseRequest(kind, r, blocks))
  }
  return q
}

function rebaseRequest(kind: Kind, request: Obj, blocks: FullBlock[]): Obj {
  const filters = FILTERS[kind]
  const items = itemsOf(blocks, kind).map((x) => x.item)
  const present = Object.keys(request).filter((k) => filters[k] && request[k] !== null && request[k] !== undefined)
  const lists = present.filter((k) => filters[k].kind === 'in' && Array.isArray(request[k]) && request[k].length > 0)
  const exact = lists.filter((k) => (filters[k] as ListFilter).values === 'exact')
  const keptRequest = Object.fromEntries(exact.map((k) => [k, request[k]]))
  const kept = items.some((i) => matches(kind, keptRequest, i)) ? exact : []
  const rebased = lists.filter((k) => !kept.includes(k))
  const bounds = present.filter((k) => filters[k].kind !== 'in')
  if (rebased.length === 0 && bounds.length === 0) return request
  const value = (k: string, i: Obj) => filters[k].get(i)
  const candidates = items.filter(
    (i) => matches(kind, Object.fromEntries(kept.map((k) => [k, request[k]])), i) && rebased.every((k) => value(k, i) != null) && (bounds.length === 0 || i.nonce != null),
  )
  if (candidates.length === 0) return request
  const freq = new Map(rebased.map((k) => [k, byFrequency(items.map((i) => value(k, i)))]))
  const score = (i: Obj) => rebased.reduce((s, k) => s - freq.get(k)!.indexOf(value(k, i)), 0)
  const seed = candidates.reduce((best, c) => (score(c) > score(best) ? c : best), candidates[0])
  const out: Obj = { ...request }
  for (const k of rebased) {
    const original: unknown[] = request[k]
    out[k] = [...new Set([...original, value(k, seed), freq.get(k)![0]])]
  }
  if (bounds.length) {
    const n = Number(seed.nonce)
    if ('firstNonce' in request) out.firstNonce = Math.max(0, n - 2)
    if ('lastNonce' in request) out.lastNonce = n + 3
  }
  return out
}
