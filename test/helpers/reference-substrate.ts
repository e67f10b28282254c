/*
 * A reference evaluator of Substrate archive queries, written from the protocol documents only
 * (docs/protocol.md §3 and §7), in plain TypeScript and independent of the engine and of the family
 * declaration (only the field, filter and flag NAMES are the project's).
 *
 * Like reference-starknet.ts it works on "everything" about a block range — the answer to
 * `fullQuery()` (every event, every call with its extrinsic, every field, every block) — and
 * computes what the worker must answer for any other query over the same blocks: which items each
 * request and relation selects, which blocks are returned, which arrays each block carries, item
 * order and field projection (identifier fields always present).
 *
 * The special request lists filter on values inside the items' `args` (an EVM.Log's address and
 * topics, an Ethereum.transact's target and selector, …): they are taken from the args of the full
 * answer here, in the form squid typegen decodes (docs/protocol.md §7.1), not from the engine's
 * helper columns.
 *
 * The projection and the evaluation skeleton every family shares are in answers.ts; the Substrate
 * rules are here. Also here: re-basing the real queries of fixtures/queries/moonbeam onto the data
 * we have.
 */

import { InvalidQuery, allFields, byFrequency, compareAddress, evaluation, type EvaluateOptions, type RelationRule } from './answers.js'

export { InvalidQuery, NoBlocksInRange, byFrequency, compareAddress, type EvaluateOptions } from './answers.js'

export type Obj = Record<string, any>

/** One block of the full answer. */
export interface FullBlock {
  header: Obj
  events: Obj[]
  calls: Obj[]
  extrinsics: Obj[]
}

// ------------------------------------------------------------------------------------ kinds

export type Kind = 'event' | 'call' | 'extrinsic'
/** In output order (docs/protocol.md §7). */
export const KINDS: Kind[] = ['event', 'call', 'extrinsic']

export const OUTPUT_KEY: Record<Kind, 'events' | 'calls' | 'extrinsics'> = {
  event: 'events',
  call: 'calls',
  extrinsic: 'extrinsics',
}

// ------------------------------------------------------------------------------------ fields

export const BLOCK_FIELDS = [
  'number', 'hash', 'parentHash', 'stateRoot', 'extrinsicsRoot', 'digest', 'specName', 'specVersion', 'implName',
  'implVersion', 'timestamp', 'validator',
] as const

/** Selectable fields of each item kind (docs/protocol.md §7.1). */
export const FIELDS: Record<Kind, readonly string[]> = {
  event: ['index', 'extrinsicIndex', 'callAddress', 'name', 'args', 'phase', 'topics'],
  call: ['extrinsicIndex', 'address', 'name', 'args', 'origin', 'error', 'success'],
  extrinsic: ['index', 'version', 'signature', 'fee', 'tip', 'error', 'success', 'hash'],
}

export const ALL_FIELDS: Obj = {
  block: allFields(BLOCK_FIELDS),
  ...Object.fromEntries(KINDS.map((k) => [k, allFields(FIELDS[k])])),
}

/** Identifier fields, always present (docs/protocol.md §7). */
export const ID_FIELDS: Record<Kind | 'block', readonly string[]> = {
  block: ['number', 'hash', 'parentHash'],
  event: ['index', 'extrinsicIndex', 'callAddress'],
  call: ['extrinsicIndex', 'address'],
  extrinsic: ['index'],
}

/**
 * The query whose answer is the input of `evaluate`: every block, every event, every call and (by
 * the calls' `extrinsic` flag: every extrinsic has its root call) every extrinsic, every field.
 */
export function fullQuery(fromBlock: number, toBlock?: number): Obj {
  return {
    type: 'substrate',
    fromBlock,
    ...(toBlock === undefined ? {} : { toBlock }),
    includeAllBlocks: true,
    events: [{ extrinsic: true }],
    calls: [{ extrinsic: true }],
    fields: ALL_FIELDS,
  }
}

// ------------------------------------------------------------------------------------ values inside args

const arg = (args: any, i: number, key: string) => (Array.isArray(args) ? args[i] : args?.[key])

/** `{address, topics}` of an EVM.Log: args `[{address, topics, data}]` or `{log: {…}}`. */
export function evmLogOf(args: any): { address: unknown; topics: unknown[] } | null {
  let log = Array.isArray(args) ? args[0] : args
  if (log && typeof log === 'object' && 'log' in log) log = log.log
  if (!log || typeof log !== 'object') return null
  return { address: log.address, topics: Array.isArray(log.topics) ? log.topics : [] }
}

/**
 * Target and selector of an Ethereum.transact: args `{transaction: {__kind, value: {action:
 * {__kind: 'Call', value: to}, input}}}` (EIP-7702: `destination`, `data`). The selector is the first
 * 4 bytes of the input (`0x` + 8 digits; an input shorter than that: all of it).
 */
export function ethereumTransactOf(args: any): { to: unknown; sighash: unknown } {
  const tx = args?.transaction
  const v = tx?.value ?? {}
  const action = tx?.__kind === 'EIP7702' ? v.destination : v.action
  const input = tx?.__kind === 'EIP7702' ? v.data : v.input
  return {
    to: action?.__kind === 'Call' ? action.value : null,
    sighash: typeof input === 'string' ? input.slice(0, 10) : null,
  }
}

// ------------------------------------------------------------------------------------ filters

type Getter = (item: Obj) => unknown

/** `hex`: compared lower-cased, the filter value must be `0x`/`0X` + hex digits; `exact`: as is. */
export type ValueKind = 'hex' | 'exact'

export interface ListFilter {
  values: ValueKind
  get: Getter
}

const hexF = (get: Getter): ListFilter => ({ values: 'hex', get })
const exactF = (get: Getter): ListFilter => ({ values: 'exact', get })
const logTopic = (n: number): Getter => (e) => evmLogOf(e.args)?.topics[n]
const reviveTopic = (n: number): Getter => (e) => {
  const t = arg(e.args, 2, 'topics')
  return Array.isArray(t) ? t[n] : null
}

/** Relation flags: the target kind and whether `target` is related to `source`. */
export type Relation = RelationRule<Kind>

export type Address = number[]
const isPrefix = (p: Address, a: Address) => p.length <= a.length && p.every((x, i) => a[i] === x)
const sameAddress = (a: Address, b: Address) => a.length === b.length && isPrefix(a, b)

/** The relations of docs/protocol.md §7.2 (events outside extrinsics have none). */
export const REL = {
  /** the extrinsic of an event or call */
  extrinsic: { target: 'extrinsic', related: (s, x) => s.extrinsicIndex != null && x.index === s.extrinsicIndex } as Relation,
  /** the call that emitted the event */
  eventCall: { target: 'call', related: (e, c) => e.callAddress != null && c.extrinsicIndex === e.extrinsicIndex && sameAddress(c.address, e.callAddress) } as Relation,
  /** the emitting call and all its ancestors */
  eventStack: { target: 'call', related: (e, c) => e.callAddress != null && c.extrinsicIndex === e.extrinsicIndex && isPrefix(c.address, e.callAddress) } as Relation,
  /** all ancestors of the call (strict) */
  callStack: { target: 'call', related: (s, c) => c.extrinsicIndex === s.extrinsicIndex && c.address.length < s.address.length && isPrefix(c.address, s.address) } as Relation,
  /** all descendants of the call (strict) */
  subcalls: { target: 'call', related: (s, c) => c.extrinsicIndex === s.extrinsicIndex && c.address.length > s.address.length && isPrefix(s.address, c.address) } as Relation,
  /** events of the call and of all its descendants */
  callEvents: { target: 'event', related: (s, e) => e.callAddress != null && e.extrinsicIndex === s.extrinsicIndex && isPrefix(s.address, e.callAddress) } as Relation,
  /** calls with the same parent, the call itself included */
  siblings: {
    target: 'call',
    related: (s, c) => c.extrinsicIndex === s.extrinsicIndex && c.address.length === s.address.length && isPrefix(s.address.slice(0, -1), c.address),
  } as Relation,
}

const EVENT_RELATIONS: Record<string, Relation> = { extrinsic: REL.extrinsic, call: REL.eventCall, stack: REL.eventStack }
const CALL_RELATIONS: Record<string, Relation> = { extrinsic: REL.extrinsic, stack: REL.callStack, events: REL.callEvents, siblings: REL.siblings }

export interface RequestList {
  kind: 'event' | 'call'
  /** the item name the list is restricted to */
  name?: string
  filters: Record<string, ListFilter>
  relations: Record<string, Relation>
}

const topics = (get: (n: number) => Getter) => Object.fromEntries([0, 1, 2, 3].map((n) => [`topic${n}`, hexF(get(n))]))

/** The request lists of docs/protocol.md §7.2. */
export const LISTS: Record<string, RequestList> = {
  events: { kind: 'event', filters: { name: exactF((e) => e.name) }, relations: EVENT_RELATIONS },
  calls: { kind: 'call', filters: { name: exactF((c) => c.name) }, relations: { ...CALL_RELATIONS, subcalls: REL.subcalls } },
  evmLogs: { kind: 'event', name: 'EVM.Log', filters: { address: hexF((e) => evmLogOf(e.args)?.address), ...topics(logTopic) }, relations: EVENT_RELATIONS },
  ethereumTransactions: {
    kind: 'call',
    name: 'Ethereum.transact',
    filters: { to: hexF((c) => ethereumTransactOf(c.args).to), sighash: hexF((c) => ethereumTransactOf(c.args).sighash) },
    relations: CALL_RELATIONS,
  },
  contractsEvents: { kind: 'event', name: 'Contracts.ContractEmitted', filters: { contractAddress: hexF((e) => arg(e.args, 0, 'contract')) }, relations: EVENT_RELATIONS },
  gearMessagesQueued: { kind: 'event', name: 'Gear.MessageQueued', filters: { programId: hexF((e) => arg(e.args, 2, 'destination')) }, relations: EVENT_RELATIONS },
  // The documents do not say which arg `programId` is for this list; the data has no such event.
  gearMessagesEnqueued: { kind: 'event', name: 'Gear.UserMessageEnqueued', filters: { programId: hexF(() => null) }, relations: EVENT_RELATIONS },
  gearUserMessagesSent: { kind: 'event', name: 'Gear.UserMessageSent', filters: { programId: hexF((e) => arg(e.args, 0, 'message')?.source) }, relations: EVENT_RELATIONS },
  reviveContractEmitted: {
    kind: 'event',
    name: 'Revive.ContractEmitted',
    filters: { contract: hexF((e) => arg(e.args, 0, 'contract')), ...topics(reviveTopic) },
    relations: EVENT_RELATIONS,
  },
}
export const LIST_NAMES = Object.keys(LISTS)

export const HEX_RE = /^0[xX][0-9a-fA-F]*$/

function normaliseValue(kind: ValueKind, v: unknown): string {
  if (typeof v !== 'string') throw new InvalidQuery(`not a string: ${JSON.stringify(v)}`)
  if (kind === 'exact') return v
  if (!HEX_RE.test(v)) throw new InvalidQuery(`not hex: ${JSON.stringify(v)}`)
  return '0x' + v.slice(2).toLowerCase()
}

/** A value of the data as a hex filter compares it (lower case), null when it is not hex. */
function dataValue(kind: ValueKind, v: unknown): string | null {
  if (typeof v !== 'string') return null
  if (kind === 'exact') return v
  return HEX_RE.test(v) ? '0x' + v.slice(2).toLowerCase() : null
}

/** Compiled requests, by request object and list (one object may be used in several lists). */
const compiled = new WeakMap<Obj, Map<string, (item: Obj) => boolean>>()

/** A request object of `list` as a predicate over its kind's items (name restriction, AND across keys, OR inside lists). */
export function compileRequest(list: string, request: Obj): (item: Obj) => boolean {
  const cached = compiled.get(request)?.get(list)
  if (cached) return cached
  const decl = LISTS[list]
  if (!decl) throw new InvalidQuery(`unknown request list ${list}`)
  const tests: ((item: Obj) => boolean)[] = []
  if (decl.name !== undefined) tests.push((i) => i.name === decl.name)
  for (const [key, value] of Object.entries(request)) {
    if (decl.relations[key]) {
      if (value !== null && value !== undefined && typeof value !== 'boolean') throw new InvalidQuery(`${list}[].${key} is not a boolean`)
      continue
    }
    const f = decl.filters[key]
    if (!f) throw new InvalidQuery(`unknown key ${list}[].${key}`)
    if (value === null || value === undefined) continue
    if (!Array.isArray(value)) throw new InvalidQuery(`${list}[].${key} is not a list`)
    const set = new Set(value.map((x) => normaliseValue(f.values, x)))
    tests.push((i) => {
      const v = dataValue(f.values, f.get(i))
      return v !== null && set.has(v)
    })
  }
  const fn = (item: Obj) => tests.every((t) => t(item))
  if (!compiled.has(request)) compiled.set(request, new Map())
  compiled.get(request)!.set(list, fn)
  return fn
}

/** Checks every request of a query (throws InvalidQuery). */
export function validate(query: Obj): void {
  for (const list of Object.keys(query)) {
    if (!LISTS[list]) continue
    if (!Array.isArray(query[list])) throw new InvalidQuery(`${list} is not a list`)
    for (const r of query[list]) compileRequest(list, r)
  }
}

// ------------------------------------------------------------------------------------ keys and order

export const COMPARE: Record<Kind, (a: Obj, b: Obj) => number> = {
  event: (a, b) => a.index - b.index,
  call: (a, b) => a.extrinsicIndex - b.extrinsicIndex || compareAddress(a.address, b.address),
  extrinsic: (a, b) => a.index - b.index,
}

export function itemKey(kind: Kind, i: Obj): string {
  switch (kind) {
    case 'event':
      return `${i.index}`
    case 'call':
      return `${i.extrinsicIndex}:${(i.address as Address).join('.')}`
    case 'extrinsic':
      return `${i.index}`
  }
}

// ------------------------------------------------------------------------------------ evaluation

const itemsOfKind = (b: FullBlock, kind: Kind): Obj[] => b[OUTPUT_KEY[kind]]

/** The items one request matches in a block (its own kind). */
export function matchedItems(block: FullBlock, list: string, request: Obj): Obj[] {
  const pred = compileRequest(list, request)
  return itemsOfKind(block, LISTS[list].kind).filter(pred)
}

/** What relation `flag` of `list` adds for the `sources` matched in `block`. */
export function relatedItems(block: FullBlock, list: string, flag: string, sources: Obj[]): Obj[] {
  const rel = LISTS[list].relations[flag]
  return itemsOfKind(block, rel.target).filter((t) => sources.some((s) => rel.related(s, t)))
}

const SUBSTRATE = evaluation<Kind, FullBlock>({
  kinds: KINDS,
  outputKey: OUTPUT_KEY,
  lists: Object.entries(LISTS).map(([list, decl]) => ({ list, kind: decl.kind, matched: (block, request) => matchedItems(block, list, request), relations: decl.relations })),
  itemKey,
  compare: COMPARE,
  idFields: ID_FIELDS,
})

/**
 * `involvedKinds`: by a non-empty request list or a relation flag set to true; `selectItems`: the
 * items of each kind a query selects in one block, by key.
 */
export const { projectHeader, projectItem, involvedKinds, selectItems, itemsOf, itemCount, firstDifference } = SUBSTRATE

/** What the worker must answer (answers.ts), after checking every request (`InvalidQuery`). */
export function evaluate(data: FullBlock[], query: Obj, opts: EvaluateOptions = {}): Obj[] {
  validate(query)
  return SUBSTRATE.evaluate(data, query, opts)
}

/** Values a filter key of a list takes in `blocks` (as the data has them), most frequent first. */
export function valuesOf(blocks: FullBlock[], list: string, key: string): string[] {
  const decl = LISTS[list]
  const f = decl.filters[key]
  const items = itemsOf(blocks, decl.kind).map((x) => x.item).filter((i) => decl.name === undefined || i.name === decl.name)
  return byFrequency(items.map((i) => f.get(i))).filter((v): v is string => typeof v === 'string')
}

// ------------------------------------------------------------------------------------ re-basing

/*
 * Re-basing a real query (recorded against chunks we do not have) onto `data`: its block range
 * becomes `range` (`toBlock` only if it had one). Every filter list that matches nothing in the
 * range gets, besides its original values, the value that makes the request select most (items
 * matched plus items its relation flags add; ties: the most frequent value). The shape (keys,
 * flags, number of requests, selected fields, includeAllBlocks) stays.
 */

export { loadQueries, type NamedQuery } from './answers.js'

export interface RebaseRange {
  fromBlock: number
  toBlock: number
}

export function rebase(fixture: Obj, data: FullBlock[], range: RebaseRange): Obj {
  const blocks = data.filter((b) => b.header.number >= range.fromBlock && b.header.number <= range.toBlock)
  const q = structuredClone(fixture)
  q.fromBlock = range.fromBlock
  if (fixture.toBlock !== undefined) q.toBlock = range.toBlock
  for (const list of LIST_NAMES) {
    if (Array.isArray(q[list])) q[list] = q[list].map((r: Obj) => rebaseRequest(list, r, blocks))
  }
  return q
}

function selectedBy(blocks: FullBlock[], list: string, request: Obj): number {
  return blocks.reduce((n, b) => {
    const sel = selectItems(b, { [list]: [request] })
    return n + KINDS.reduce((m, k) => m + sel[k].size, 0)
  }, 0)
}

function rebaseRequest(list: string, request: Obj, blocks: FullBlock[]): Obj {
  const decl = LISTS[list]
  const out: Obj = { ...request }
  for (const key of Object.keys(decl.filters)) {
    const original = request[key]
    if (!Array.isArray(original) || original.length === 0) continue
    if (blocks.some((b) => matchedItems(b, list, { [key]: original }).length > 0)) continue
    const values = valuesOf(blocks, list, key)
    let best: { v: string; n: number } | undefined
    for (const v of values) {
      const n = selectedBy(blocks, list, { ...out, [key]: [v] })
      if (!best || n > best.n) best = { v, n }
    }
    if (best) out[key] = [...original, best.v]
  }
  return out
}
