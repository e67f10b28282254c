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
 * The projection and the evaluation skeleton every family shares are in answers.ts; the Starknet
 * rules are here. Also here: re-basing the real queries of fixtures/queries/starknet onto the data
 * we have (the EVM re-basing in reference-rebase.ts is tied to the EVM filters).
 */

import { InvalidQuery, allFields, byFrequency, cmpStr, compareAddress, evaluation, listPerKind } from './answers.js'

export { InvalidQuery, NoBlocksInRange, byFrequency, compareAddress, type EvaluateOptions } from './answers.js'

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

export const ALL_FIELDS: Obj = {
  block: allFields(BLOCK_FIELDS),
  ...Object.fromEntries(KINDS.map((k) => [k, allFields(FIELDS[k])])),
}

/** Identifier fields, always present (docs/protocol.md §3.6, docs/protocol.md §6). */
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

// ------------------------------------------------------------------------------------ evaluation

const STARKNET = evaluation<Kind, FullBlock>({
  kinds: KINDS,
  outputKey: OUTPUT_KEY,
  lists: listPerKind(KINDS, REQUEST_KEY, (b: FullBlock, kind) => b[OUTPUT_KEY[kind]], matches, RELATIONS, related),
  itemKey,
  compare: COMPARE,
  idFields: ID_FIELDS,
})

/**
 * `evaluate`: what the worker must answer (answers.ts; a state update with nothing selected is `{}`);
 * `involvedKinds`: by a non-empty request list or a relation flag (docs/protocol.md §3.3); `selectItems`: the
 * items of each kind a query selects in one block, by primary key.
 */
export const { projectHeader, projectItem, involvedKinds, selectItems, evaluate, itemsOf, itemCount, firstDifference } = STARKNET

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
