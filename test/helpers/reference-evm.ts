/*
 * A reference evaluator of EVM archive queries, written from the protocol documents only
 * (docs/protocol.md §3 and §5), in plain TypeScript
 * and independent of the engine and of the family declaration.
 *
 * It works on "everything" about a block range — the answer to `fullQuery()` (every item of every
 * kind, every field selected, every block) — and computes what the worker must answer for any
 * other query over the same blocks: which items each request and relation selects, which blocks
 * are returned, which arrays each block carries, item order, field projection (identifier fields
 * always present, trace `action`/`result` nesting with nulls omitted).
 *
 * Reusable outside tests (the benchmark can check its answers with it). The projection and the
 * evaluation skeleton every family shares are in answers.ts; the EVM rules are here.
 */

import { InvalidQuery, allFields, cmpStr, compareAddress, evaluation, fieldNames, listPerKind, pick, type EvaluateOptions } from './answers.js'

export { InvalidQuery, NoBlocksInRange, byFrequency, compareAddress, type EvaluateOptions } from './answers.js'

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json }
export type Obj = Record<string, any>

/** One block of the full answer. */
export interface FullBlock {
  header: Obj
  transactions: Obj[]
  logs: Obj[]
  traces: Obj[]
  stateDiffs: Obj[]
}

// ------------------------------------------------------------------------------------ fields

/** Selectable fields (docs/protocol.md §5 and the rs-only ones, docs/protocol.md §2). */
export const BLOCK_FIELDS = [
  'number', 'hash', 'parentHash', 'timestamp', 'transactionsRoot', 'receiptsRoot', 'stateRoot', 'logsBloom',
  'sha3Uncles', 'extraData', 'miner', 'nonce', 'mixHash', 'size', 'gasLimit', 'gasUsed', 'difficulty',
  'totalDifficulty', 'baseFeePerGas', 'l1BlockNumber', 'blobGasUsed', 'excessBlobGas',
  // rs only
  'uncles', 'withdrawals', 'withdrawalsRoot', 'parentBeaconBlockRoot', 'requestsHash',
  'mainBlockGeneralGasLimit', 'sharedGasLimit', 'timestampMillisPart',
] as const

export const TRANSACTION_FIELDS = [
  'transactionIndex', 'hash', 'nonce', 'from', 'to', 'input', 'value', 'gas', 'gasPrice', 'maxFeePerGas',
  'maxPriorityFeePerGas', 'v', 'r', 's', 'yParity', 'chainId', 'sighash', 'contractAddress', 'gasUsed',
  'cumulativeGasUsed', 'effectiveGasPrice', 'type', 'status', 'maxFeePerBlobGas', 'blobVersionedHashes', 'l1Fee',
  'l1FeeScalar', 'l1GasPrice', 'l1GasUsed', 'l1BlobBaseFee', 'l1BlobBaseFeeScalar', 'l1BaseFeeScalar',
  // rs only
  'accessList', 'logsBloom', 'blobGasUsed', 'blobGasPrice', 'authorizationList',
  'calls', 'nonceKey', 'signature', 'feeToken', 'feePayerV', 'feePayerR', 'feePayerS', 'validBefore', 'validAfter',
  'aaAuthorizationList', 'keyAuthorization',
] as const

export const LOG_FIELDS = ['logIndex', 'transactionIndex', 'transactionHash', 'address', 'data', 'topics'] as const

export const TRACE_FLAT_FIELDS = ['transactionIndex', 'traceAddress', 'type', 'subtraces', 'error', 'revertReason'] as const

/** Type-specific trace selectors: trace type, output object, key inside it (docs/protocol.md §5). */
export const TRACE_NESTED_FIELDS: Record<string, [type: string, object: 'action' | 'result', key: string]> = {
  createFrom: ['create', 'action', 'from'],
  createValue: ['create', 'action', 'value'],
  createGas: ['create', 'action', 'gas'],
  createInit: ['create', 'action', 'init'],
  createResultGasUsed: ['create', 'result', 'gasUsed'],
  createResultCode: ['create', 'result', 'code'],
  createResultAddress: ['create', 'result', 'address'],
  callFrom: ['call', 'action', 'from'],
  callTo: ['call', 'action', 'to'],
  callValue: ['call', 'action', 'value'],
  callGas: ['call', 'action', 'gas'],
  callInput: ['call', 'action', 'input'],
  callSighash: ['call', 'action', 'sighash'],
  callType: ['call', 'action', 'type'],
  callCallType: ['call', 'action', 'callType'],
  callResultGasUsed: ['call', 'result', 'gasUsed'],
  callResultOutput: ['call', 'result', 'output'],
  suicideAddress: ['suicide', 'action', 'address'],
  suicideRefundAddress: ['suicide', 'action', 'refundAddress'],
  suicideBalance: ['suicide', 'action', 'balance'],
  rewardAuthor: ['reward', 'action', 'author'],
  rewardValue: ['reward', 'action', 'value'],
  rewardType: ['reward', 'action', 'type'],
}

export const TRACE_FIELDS = [...TRACE_FLAT_FIELDS, ...Object.keys(TRACE_NESTED_FIELDS)]

export const STATE_DIFF_FIELDS = ['transactionIndex', 'address', 'key', 'kind', 'prev', 'next'] as const

export const ALL_FIELDS = {
  block: allFields(BLOCK_FIELDS),
  transaction: allFields(TRANSACTION_FIELDS),
  log: allFields(LOG_FIELDS),
  trace: allFields(TRACE_FIELDS),
  stateDiff: allFields(STATE_DIFF_FIELDS),
}

/** Identifier fields, always present (docs/protocol.md §3.6). */
export const ID_FIELDS = {
  block: ['number', 'hash', 'parentHash'],
  transaction: ['transactionIndex'],
  log: ['logIndex', 'transactionIndex'],
  trace: ['transactionIndex', 'traceAddress', 'type'],
  stateDiff: ['transactionIndex', 'address', 'key', 'kind'],
} as const

/** The query whose answer is the input of `evaluate`: every block, item and field. */
export function fullQuery(fromBlock: number, toBlock?: number, kinds: readonly Kind[] = KINDS): Obj {
  return {
    fromBlock,
    ...(toBlock === undefined ? {} : { toBlock }),
    includeAllBlocks: true,
    ...Object.fromEntries(kinds.map((k) => [REQUEST_KEY[k], [{}]])),
    fields: ALL_FIELDS,
  }
}

// ------------------------------------------------------------------------------------ kinds

export type Kind = 'transaction' | 'log' | 'trace' | 'stateDiff'
export const KINDS: Kind[] = ['transaction', 'log', 'trace', 'stateDiff']
export const REQUEST_KEY: Record<Kind, 'transactions' | 'logs' | 'traces' | 'stateDiffs'> = {
  transaction: 'transactions',
  log: 'logs',
  trace: 'traces',
  stateDiff: 'stateDiffs',
}
const OUTPUT_KEY = REQUEST_KEY

/** The value a trace's type-specific selector has (null when the trace is of another type). */
export function traceValue(t: Obj, selector: string): any {
  const [type, object, key] = TRACE_NESTED_FIELDS[selector]
  if (t.type !== type) return null
  return t[object]?.[key] ?? null
}

type Getter = (item: Obj) => any

/** How a filter value is normalised before matching (docs/protocol.md §3.2). */
type ValueKind = 'hex' | 'lower' | 'exact' | 'int'

interface ListFilter {
  kind: 'in'
  values: ValueKind
  get: Getter
}
interface BoundFilter {
  kind: 'min' | 'max'
  get: Getter
}
interface NonZeroFilter {
  kind: 'nonZero'
  get: Getter
}
type Filter = ListFilter | BoundFilter | NonZeroFilter

const hexF = (get: Getter): ListFilter => ({ kind: 'in', values: 'hex', get })
const tv = (selector: string): Getter => (t) => traceValue(t, selector)

/** Request filters of each kind (docs/protocol.md §5, §3.3). */
export const FILTERS: Record<Kind, Record<string, Filter>> = {
  transaction: {
    from: hexF((t) => t.from),
    to: hexF((t) => t.to),
    sighash: hexF((t) => t.sighash),
    type: { kind: 'in', values: 'int', get: (t) => t.type },
    firstNonce: { kind: 'min', get: (t) => t.nonce },
    lastNonce: { kind: 'max', get: (t) => t.nonce },
  },
  log: {
    address: hexF((l) => l.address),
    topic0: hexF((l) => l.topics[0] ?? null),
    topic1: hexF((l) => l.topics[1] ?? null),
    topic2: hexF((l) => l.topics[2] ?? null),
    topic3: hexF((l) => l.topics[3] ?? null),
  },
  trace: {
    type: { kind: 'in', values: 'exact', get: (t) => t.type },
    createFrom: hexF(tv('createFrom')),
    callFrom: hexF(tv('callFrom')),
    callTo: hexF(tv('callTo')),
    callSighash: hexF(tv('callSighash')),
    suicideRefundAddress: hexF(tv('suicideRefundAddress')),
    suicideAddress: hexF(tv('suicideAddress')),
    createResultAddress: hexF(tv('createResultAddress')),
    rewardAuthor: hexF(tv('rewardAuthor')),
    callCallType: { kind: 'in', values: 'exact', get: tv('callCallType') },
    createValueNonZero: { kind: 'nonZero', get: tv('createValue') },
    callValueNonZero: { kind: 'nonZero', get: tv('callValue') },
    suicideBalanceNonZero: { kind: 'nonZero', get: tv('suicideBalance') },
    rewardValueNonZero: { kind: 'nonZero', get: tv('rewardValue') },
  },
  stateDiff: {
    address: hexF((d) => d.address),
    key: { kind: 'in', values: 'lower', get: (d) => d.key },
    kind: { kind: 'in', values: 'exact', get: (d) => d.kind },
  },
}

/** Relation flags (docs/protocol.md §5): target kind and how a target item relates to the source item. */
type Relation = { target: Kind; rel: 'sameTx' | 'descendants' | 'ancestors' }
export const RELATIONS: Record<Kind, Record<string, Relation>> = {
  transaction: {
    logs: { target: 'log', rel: 'sameTx' },
    traces: { target: 'trace', rel: 'sameTx' },
    stateDiffs: { target: 'stateDiff', rel: 'sameTx' },
  },
  log: {
    transaction: { target: 'transaction', rel: 'sameTx' },
    transactionLogs: { target: 'log', rel: 'sameTx' },
    transactionTraces: { target: 'trace', rel: 'sameTx' },
    transactionStateDiffs: { target: 'stateDiff', rel: 'sameTx' },
  },
  trace: {
    transaction: { target: 'transaction', rel: 'sameTx' },
    transactionLogs: { target: 'log', rel: 'sameTx' },
    transactionTraces: { target: 'trace', rel: 'sameTx' },
    subtraces: { target: 'trace', rel: 'descendants' },
    parents: { target: 'trace', rel: 'ancestors' },
  },
  stateDiff: {
    transaction: { target: 'transaction', rel: 'sameTx' },
  },
}

export const HEX_RE = /^0[xX][0-9a-fA-F]*$/

/** Normalise a filter value as the protocol says; throws for values the worker must reject (400). */
export function normaliseValue(kind: ValueKind, v: unknown): string | number {
  switch (kind) {
    case 'hex':
      if (typeof v !== 'string' || !HEX_RE.test(v)) throw new InvalidQuery(`not a hex value: ${JSON.stringify(v)}`)
      return v.toLowerCase()
    case 'lower':
      if (typeof v !== 'string') throw new InvalidQuery(`not a string: ${JSON.stringify(v)}`)
      return v.toLowerCase()
    case 'exact':
      if (typeof v !== 'string') throw new InvalidQuery(`not a string: ${JSON.stringify(v)}`)
      return v
    case 'int':
      if (!Number.isSafeInteger(v)) throw new InvalidQuery(`not an integer: ${JSON.stringify(v)}`)
      return v as number
  }
}

const big = (v: unknown): bigint => BigInt(v as any)

/** Does one request object select this item? (AND across keys, OR inside lists, docs/protocol.md §3.1) */
export function matches(kind: Kind, request: Obj, item: Obj): boolean {
  return compileRequest(kind, request)(item)
}

const compiled = new WeakMap<Obj, (item: Obj) => boolean>()

/** A request object as a predicate over items (filter values normalised once). */
export function compileRequest(kind: Kind, request: Obj): (item: Obj) => boolean {
  const cached = compiled.get(request)
  if (cached) return cached
  const filters = FILTERS[kind]
  const tests: ((item: Obj) => boolean)[] = []
  for (const [key, value] of Object.entries(request)) {
    if (RELATIONS[kind][key]) continue
    const f = filters[key]
    if (!f) throw new InvalidQuery(`unknown key ${REQUEST_KEY[kind]}[].${key}`)
    if (value === null || value === undefined) continue
    const get = f.get
    switch (f.kind) {
      case 'in': {
        if (!Array.isArray(value)) throw new InvalidQuery(`${key} is not a list`)
        const set = new Set(value.map((x) => normaliseValue(f.values, x)))
        tests.push((i) => {
          const v = get(i)
          return v !== null && v !== undefined && set.has(v)
        })
        break
      }
      case 'min':
        tests.push((i) => get(i) != null && big(get(i)) >= big(value))
        break
      case 'max':
        tests.push((i) => get(i) != null && big(get(i)) <= big(value))
        break
      case 'nonZero':
        if (value === true) tests.push((i) => get(i) != null && big(get(i)) !== 0n)
        break
    }
  }
  const fn = (item: Obj) => tests.every((t) => t(item))
  compiled.set(request, fn)
  return fn
}

// ------------------------------------------------------------------------------------ keys

/** Primary-key order of items of each kind (docs/protocol.md §5). */
export const COMPARE: Record<Kind, (a: Obj, b: Obj) => number> = {
  transaction: (a, b) => a.transactionIndex - b.transactionIndex,
  log: (a, b) => a.logIndex - b.logIndex,
  trace: (a, b) => a.transactionIndex - b.transactionIndex || compareAddress(a.traceAddress, b.traceAddress),
  stateDiff: (a, b) => a.transactionIndex - b.transactionIndex || cmpStr(a.address, b.address) || cmpStr(a.key, b.key),
}

export function itemKey(kind: Kind, i: Obj): string {
  switch (kind) {
    case 'transaction':
      return `${i.transactionIndex}`
    case 'log':
      return `${i.logIndex}`
    case 'trace':
      return `${i.transactionIndex}:${i.traceAddress.join('.')}`
    case 'stateDiff':
      return `${i.transactionIndex}:${i.address}:${i.key}`
  }
}

const isStrictPrefix = (p: number[], a: number[]) => p.length < a.length && p.every((x, i) => a[i] === x)

function related(rel: Relation['rel'], source: Obj, target: Obj): boolean {
  if (source.transactionIndex !== target.transactionIndex) return false
  switch (rel) {
    case 'sameTx':
      return true
    case 'descendants':
      return isStrictPrefix(source.traceAddress, target.traceAddress)
    case 'ancestors':
      return isStrictPrefix(target.traceAddress, source.traceAddress)
  }
}

// ------------------------------------------------------------------------------------ projection and evaluation

/** Identifier and selected fields; a trace's type-specific ones nested in `action` / `result`. */
function projectEvmItem(kind: Kind, item: Obj, fields: Obj | undefined): Obj {
  const names = fieldNames(ID_FIELDS[kind], fields, kind)
  if (kind !== 'trace') return pick(item, names, kind)
  const out = pick(item, names.filter((n) => !TRACE_NESTED_FIELDS[n]), kind)
  const nested: Record<'action' | 'result', Obj | undefined> = { action: undefined, result: undefined }
  for (const n of names) {
    const spec = TRACE_NESTED_FIELDS[n]
    if (!spec || spec[0] !== item.type) continue
    const [, object, key] = spec
    const obj = (nested[object] ??= {})
    const v = item[object]?.[key] ?? null
    if (v !== null) obj[key] = v
  }
  // Null sub-fields are omitted; an all-null `result` is omitted, `action` stays (docs/protocol.md §3.4, py).
  if (nested.action) out.action = nested.action
  if (nested.result && Object.keys(nested.result).length > 0) out.result = nested.result
  return out
}

const EVM = evaluation<Kind, FullBlock>({
  kinds: KINDS,
  outputKey: OUTPUT_KEY,
  lists: listPerKind(KINDS, REQUEST_KEY, (b: FullBlock, kind) => b[OUTPUT_KEY[kind]] as Obj[], matches, RELATIONS, related),
  itemKey,
  compare: COMPARE,
  idFields: ID_FIELDS,
  project: projectEvmItem,
})

export const { projectHeader, projectItem, involvedKinds, selectItems, itemsOf, firstDifference } = EVM

/**
 * What the worker must answer for `query` given `data` (the full answer over every block the worker
 * holds, ascending), assuming budgets large enough not to cut it (answers.ts). `rangeEnd`: the last
 * block the worker's range covers (its data end); without `toBlock` the answer runs to here.
 */
export const evaluate: (data: FullBlock[], query: Obj, opts?: EvaluateOptions) => Obj[] = EVM.evaluate
