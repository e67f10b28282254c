import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { after, before, describe, it } from 'node:test'
import { nextTop, type ChunkRef, type DatasetMeta } from '../src/chunks/layout.js'
import { ChunkBuilder } from '../src/chunks/writer.js'
import { starknetFamily } from '../src/families/starknet.js'
import { ingestRecordedStarknet } from '../src/ingest/recorded.js'
import { normalizeStarknetBlock, type StarknetBlockBundle } from '../src/ingest/starknet/normalize.js'
import type { Cluster } from '../src/server/cluster.js'
import { REPO_ROOT, tempDir } from './helpers/dataset.js'
import { derived480000, invocations, ROOT_KEYS, type Derived480000 } from './helpers/starknet-480000.js'
import {
  ALL_FIELDS,
  BLOCK_FIELDS,
  FIELDS,
  FILTERS,
  ID_FIELDS,
  KINDS,
  OUTPUT_KEY,
  RELATIONS,
  REQUEST_KEY,
  byFrequency,
  compareAddress,
  compileRequest,
  evaluate,
  firstDifference,
  fullQuery,
  involvedKinds,
  itemCount,
  itemKey,
  itemsOf,
  loadQueries,
  rebase,
  selectItems,
  type FullBlock,
  type Kind,
  type ListFilter,
  type Obj,
} from './helpers/reference-starknet.js'
import {
  fetchRange,
  inRange,
  newStats,
  randomFields as randomFieldsOf,
  randomValues,
  readLayout,
  rng,
  startServed,
  STATIC_DATA_TIMERS,
  walkAll,
  walkServed,
  type ChunkInfo,
  type GenQuery as NamedQuery,
  type Range,
  type Rng,
  type Served as ServedOf,
  type WalkReference,
} from './helpers/walk.js'

/*
 * Starknet queries against an independent evaluation (helpers/reference-starknet.ts): the recorded
 * mainnet blocks (25 with traces; 6500, 65000, 550000 with state updates; 588763, 623436 plain) go
 * through the real ingest path, a router and two workers (small size budget, so answers stop early)
 * serve them. Everything is fetched once with `{}` requests and every field, checked against the
 * recorded node answers read here directly, then each query is walked through the router like a
 * client (continuing after the last block returned) and every answer is compared with what the
 * reference computes for the range that answer covers.
 */

const SQ = path.join(REPO_ROOT, 'fixtures/queries/starknet')
const SOURCE_BLOCKS = [25, 6500, 65000, 550000, 588763, 623436]

// ------------------------------------------------------------------------------------ recorded source

const fixture = (...p: string[]) => {
  const v = JSON.parse(gunzipSync(readFileSync(path.join(REPO_ROOT, 'fixtures', 'starknet', ...p))).toString('utf8'))
  return v && typeof v === 'object' && !Array.isArray(v) && 'jsonrpc' in v ? v.result : v
}

/** A felt as the archive must output it, computed by number (lower case, no leading zeros). */
const felt = (v: unknown) => (v == null ? null : '0x' + BigInt(v as string).toString(16))
const felts = (v: unknown) => (v == null ? null : (v as string[]).map(felt))
const int = (v: unknown) => (v == null ? null : BigInt(v as any))

/** What the cross-check expects of one block, from the recorded answers. */
interface SourceBlock {
  number: number
  hash: string
  parentHash: string
  timestamp: number
  txs: { hash: string; type: string; sender: string | null; nonce: bigint | null; events: { from: string; keys: string[]; data: string[] }[]; messages: { from: string; to: string; payload: string[] }[] }[]
  stateUpdate?: { newRoot: string; oldRoot: string; storage: [string, string, string][]; deployed: number; nonces: number; declared: number; oldDeclared: number }
}

function rpcBlock(b: any): SourceBlock {
  return {
    number: b.block_number,
    hash: felt(b.block_hash)!,
    parentHash: felt(b.parent_hash)!,
    timestamp: b.timestamp,
    txs: b.transactions.map(({ transaction: t, receipt: r }: any) => ({
      // RPC 0.7+ puts the hash in the receipt only
      hash: felt(t.transaction_hash ?? r.transaction_hash),
      type: t.type,
      sender: felt(t.sender_address),
      nonce: int(t.nonce),
      events: r.events.map((e: any) => ({ from: felt(e.from_address), keys: felts(e.keys), data: felts(e.data) })),
      messages: r.messages_sent.map((m: any) => ({ from: felt(m.from_address), to: felt(m.to_address), payload: felts(m.payload) })),
    })),
  }
}

/** A feeder-gateway block with its state update (`{block, state_update}`), read without the project's converter. */
function feederBlock(f: any): SourceBlock {
  const b = f.block
  const receipts = new Map<number, any>(b.transaction_receipts.map((r: any) => [r.transaction_index, r]))
  const diff = f.state_update.state_diff
  const storage: [string, string, string][] = Object.entries(diff.storage_diffs as Record<string, { key: string; value: string }[]>).flatMap(([a, list]) =>
    list.map((d) => [felt(a)!, felt(d.key)!, felt(d.value)!] as [string, string, string]),
  )
  const count = (v: unknown) => (Array.isArray(v) ? v.length : v && typeof v === 'object' ? Object.keys(v).length : 0)
  return {
    number: b.block_number,
    hash: felt(b.block_hash)!,
    parentHash: felt(b.parent_block_hash)!,
    timestamp: b.timestamp,
    txs: b.transactions.map((t: any, i: number) => {
      const r = receipts.get(i)
      return {
        hash: felt(t.transaction_hash),
        type: t.type === 'INVOKE_FUNCTION' ? 'INVOKE' : t.type,
        sender: felt(t.sender_address),
        nonce: int(t.nonce),
        events: r.events.map((e: any) => ({ from: felt(e.from_address), keys: felts(e.keys), data: felts(e.data) })),
        messages: r.l2_to_l1_messages.map((m: any) => ({ from: felt(m.from_address), to: felt(m.to_address), payload: felts(m.payload) })),
      }
    }),
    stateUpdate: {
      newRoot: felt(f.state_update.new_root)!,
      oldRoot: felt(f.state_update.old_root)!,
      storage,
      deployed: count(diff.deployed_contracts),
      nonces: count(diff.nonces),
      declared: count(diff.declared_classes),
      oldDeclared: count(diff.old_declared_contracts),
    },
  }
}

function sourceBlocks(): SourceBlock[] {
  const nm = (file: string) => fixture('nethermind-idealis', 'starknet', file)
  const feeder = (v: string, n: number) => fixture('katana', 'crates', 'gateway', 'gateway-client', 'tests', 'fixtures', v, 'state_update_with_block', `mainnet_${n}.json.gz`)
  return [
    rpcBlock(nm('get_block_with_txs_25.json.gz')),
    feederBlock(feeder('0.10.0', 6500)),
    feederBlock(feeder('0.11.1', 65000)),
    feederBlock(feeder('0.13.0', 550000)),
    rpcBlock(fixture('starknet-go', 'rpc', 'testData', 'blockWithReceipts', 'mainnetBlockReceipts588763.json.gz')),
    rpcBlock(nm('get_block_with_txs_623_436.json.gz')),
  ]
}

/**
 * The calls of a `starknet_traceBlockTransactions` entry with the addresses docs/protocol.md §6.4
 * gives them: the roots present, in the order validate, execute/constructor/function, fee transfer,
 * are `[0]`, `[1]`, …; a call's k-th sub-call appends k.
 */
function tracedCalls(entry: any): { address: number[]; call: any }[] {
  const rootKeys = ['validate_invocation', 'execute_invocation', 'constructor_invocation', 'function_invocation', 'fee_transfer_invocation']
  const out: { address: number[]; call: any }[] = []
  const visit = (call: any, address: number[]) => {
    out.push({ address, call })
    ;(call.calls ?? []).forEach((c: any, i: number) => visit(c, [...address, i]))
  }
  rootKeys.filter((k) => entry.trace_root[k]).forEach((k, i) => visit(entry.trace_root[k], [i]))
  return out
}

// ------------------------------------------------------------------------------------ served layout

const TABLE_KIND: Record<string, Kind> = {
  transactions: 'transaction',
  events: 'event',
  traces: 'trace',
  messages: 'message',
  state_updates: 'stateUpdate',
  storage_diffs: 'storageDiff',
}

/** The item kinds a chunk has tables for. */
const kindsOf = (c: ChunkInfo) => new Set(c.tables.filter((t) => TABLE_KIND[t]).map((t) => TABLE_KIND[t]))

// ------------------------------------------------------------------------------------ generated queries

/** The same felt written another way: upper case, `0X`, leading zeros, padded to 64 digits. */
function feltVariant(v: string, which: number): string {
  const body = v.slice(2)
  switch (which % 5) {
    case 0:
      return '0x' + body.toUpperCase()
    case 1:
      return '0X' + body
    case 2:
      return '0x000' + body
    case 3:
      return '0X' + body.toUpperCase().padStart(64, '0')
    default:
      return '0x' + [...body].map((c, i) => (i % 2 ? c.toUpperCase() : c)).join('')
  }
}

const MISS_FELT = '0x7777777777777777777777777777777777777777777777777777777777777'

/** Ranges to run queries on, by the tables they need. */
const RANGES = {
  /** transactions, events, messages: every chunk has them */
  any: [
    { fromBlock: 0 },
    { fromBlock: 0, toBlock: 623436 },
    { fromBlock: 25, toBlock: 25 },
    { fromBlock: 20, toBlock: 7000 },
    { fromBlock: 6500, toBlock: 623436 },
    { fromBlock: 65000, toBlock: 588763 },
    { fromBlock: 550000, toBlock: 550000 },
    { fromBlock: 550001, toBlock: 700000 },
    { fromBlock: 600000 },
    { fromBlock: 30, toBlock: 100 },
  ] as Range[],
  trace: [{ fromBlock: 0, toBlock: 25 }, { fromBlock: 25, toBlock: 25 }, { fromBlock: 25 }, { fromBlock: 10, toBlock: 6500 }] as Range[],
  state: [
    { fromBlock: 6500, toBlock: 550000 },
    { fromBlock: 26, toBlock: 550000 },
    { fromBlock: 65000, toBlock: 65000 },
    { fromBlock: 7000, toBlock: 600000 },
    { fromBlock: 6500 },
  ] as Range[],
}

const rangeKind = (k: Kind): keyof typeof RANGES => (k === 'trace' ? 'trace' : k === 'stateUpdate' || k === 'storageDiff' ? 'state' : 'any')

/** Random field selection: some selectors, some fields each, identifier fields sometimes set to false. */
const randomFields = (r: Rng): Obj => randomFieldsOf(r, [['block', BLOCK_FIELDS], ...KINDS.map((k) => [k, FIELDS[k]] as [string, readonly string[]])], ID_FIELDS)

/** Values a filter key takes in `blocks`, most frequent first. */
function valuesOf(blocks: FullBlock[], kind: Kind, key: string): any[] {
  const f = FILTERS[kind][key]
  return byFrequency(itemsOf(blocks, kind).map((x) => f.get(x.item)))
}

/** A random list of values for a list filter: frequent and rare ones, other spellings, misses. */
function randomList(r: Rng, kind: Kind, key: string, blocks: FullBlock[], all: FullBlock[]): unknown[] {
  const f = FILTERS[kind][key] as ListFilter
  let values = valuesOf(blocks, kind, key)
  if (values.length === 0) values = valuesOf(all, kind, key)
  return randomValues(r, values, f.values === 'felt' ? MISS_FELT : 'NO_SUCH_VALUE', (v) =>
    f.values === 'felt' && r.chance(0.5) ? feltVariant(v, r.int(5)) : f.values === 'exact' && r.chance(0.1) ? v.toLowerCase() : v,
  )
}

function randomRequest(r: Rng, kind: Kind, blocks: FullBlock[], all: FullBlock[]): Obj {
  const req: Obj = {}
  const keys = Object.keys(FILTERS[kind])
  const nKeys = keys.length === 0 ? 0 : r.pick([0, 1, 1, 1, 2, 2, 3])
  for (let i = 0; i < nKeys; i++) {
    const key = r.pick(keys)
    const f = FILTERS[kind][key]
    const roll = r.next()
    if (roll < 0.05) req[key] = null
    else if (roll < 0.09 && f.kind === 'in') req[key] = []
    else if (f.kind === 'in') req[key] = randomList(r, kind, key, blocks, all)
    else {
      const nonces = itemsOf(blocks.length ? blocks : all, 'transaction').map((x) => x.item.nonce).filter((v) => v != null).map(Number).sort((a, b) => a - b)
      const v = nonces.length ? nonces[r.int(nonces.length)] : 0
      req[key] = Math.max(0, v + r.pick([-3, 0, 0, 1, 5]))
    }
  }
  for (const flag of Object.keys(RELATIONS[kind])) if (r.chance(0.3)) req[flag] = r.chance(0.85)
  return req
}

function generateQueries(data: FullBlock[]): NamedQuery[] {
  const r = rng(20240611)
  const out: NamedQuery[] = []
  const add = (name: string, range: Range, body: Obj) => out.push({ name, q: { type: 'starknet', ...range, ...body } })

  // 1. Each filter key alone, per kind, over ranges where the kind exists: frequent values, rare
  //    values, other spellings of felts, misses, and string filters in the wrong case. Three value
  //    lists per key, one on each of the three ranges (with the values of its range): every key
  //    still runs on every range, every spelling and the miss on one of them; the same list on
  //    another range only repeats the same filter. Nonce bounds: 0, the median and the highest
  //    nonce, one on each range.
  for (const kind of KINDS) {
    for (const [key, f] of Object.entries(FILTERS[kind])) {
      for (const [ri, range] of RANGES[rangeKind(kind)].slice(0, 3).entries()) {
        const blocks = inRange(data, range)
        if (f.kind !== 'in') {
          const nonces = itemsOf(blocks, 'transaction').map((x) => Number(x.item.nonce)).filter((n) => !Number.isNaN(n)).sort((a, b) => a - b)
          for (const v of [[0, nonces[Math.floor(nonces.length / 2)] ?? 1, nonces[nonces.length - 1] ?? 5][ri]]) {
            add(`${REQUEST_KEY[kind]}.${key}=${v}`, range, { [REQUEST_KEY[kind]]: [{ [key]: v }], fields: { transaction: { nonce: true, senderAddress: true } } })
          }
          continue
        }
        const values = valuesOf(blocks, kind, key)
        if (values.length === 0) continue
        const top = values.slice(0, 2)
        const rare = values[values.length - 1]
        const lists: unknown[][] =
          f.values === 'felt'
            ? [[top[0]], [feltVariant(top[0], 0), ...top.slice(1), feltVariant(rare, 1)], [feltVariant(top[0], 2), MISS_FELT, feltVariant(rare, 3), feltVariant(top[top.length - 1], 4)]]
            : [[top[0]], [...top, rare], [top[0].toLowerCase(), 'NO_SUCH_VALUE', rare]]
        for (const [li, list] of lists.entries()) {
          if (li % 3 === ri) add(`${REQUEST_KEY[kind]}.${key}=${JSON.stringify(list).slice(0, 80)}`, range, { [REQUEST_KEY[kind]]: [{ [key]: list }], fields: randomFields(r) })
        }
      }
    }
  }

  // 2. Each relation flag, from a strict subset of the source kind (its most frequent value of one
  //    filter key) and from `{}`. The requests take turns over the ranges (each runs on one, with the
  //    values of its range; `{}` on the first): every flag still runs on every range.
  const seeds: Partial<Record<Kind, string>> = { transaction: 'senderAddress', event: 'fromAddress', trace: 'contractAddress' }
  for (const kind of ['transaction', 'event', 'trace'] as Kind[]) {
    for (const flag of Object.keys(RELATIONS[kind])) {
      const target = RELATIONS[kind][flag].target
      const flagRanges = [...RANGES[rangeKind(kind)].slice(0, 2), ...(kind === 'trace' ? [] : [RANGES.trace[1]])]
      for (const [ri, range] of flagRanges.entries()) {
        const blocks = inRange(data, range)
        const key = kind === 'transaction' && range.fromBlock <= 25 && (range.toBlock ?? Infinity) <= 25 ? 'contractAddress' : seeds[kind]!
        const values = valuesOf(blocks, kind, key)
        const requests: Obj[] = [{ [flag]: true }, ...values.slice(0, 3).map((v) => ({ [key]: [v], [flag]: true })), { [key]: [values[values.length - 1] ?? MISS_FELT], [flag]: true }]
        for (const [qi, req] of requests.entries()) {
          if (qi % flagRanges.length === ri) add(`${REQUEST_KEY[kind]}[${JSON.stringify(req).slice(0, 100)}] → ${target}`, range, { [REQUEST_KEY[kind]]: [req], fields: randomFields(r) })
        }
      }
    }
  }

  // 3. Set rules: union across requests and kinds, null, [], {}, includeAllBlocks, no request at all.
  const ev = itemsOf(data, 'event').map((x) => x.item)
  const [k0, k1] = byFrequency(ev.map((e) => e.keys[0]))
  const [a0] = byFrequency(ev.map((e) => e.fromAddress))
  const [s0] = byFrequency(itemsOf(data, 'transaction').map((x) => x.item.senderAddress))
  const fields = { event: { fromAddress: true, keys: true }, transaction: { senderAddress: true, transactionHash: true }, message: { toAddress: true } }
  const setCases: Obj[] = [
    { events: [{ key0: [k0] }, { fromAddress: [a0] }, { key0: [k0], fromAddress: [feltVariant(a0, 2)] }, { key0: [k1], transaction: true }], transactions: [{ events: true, senderAddress: [s0] }] },
    { events: [{ fromAddress: [a0, feltVariant(a0, 0), feltVariant(a0, 1)], key0: [k0, k0, feltVariant(k0, 3)] }] },
    { events: [{ fromAddress: null, key0: [k0], key1: null }] },
    { events: [{ key0: [k0], transaction: false }] },
    { events: [{ key0: [] }, { fromAddress: [a0], key1: [] }], transactions: [{ senderAddress: [], events: true }] },
    { events: [{ key0: [] }], transactions: [{}] },
    { events: [{ key0: [], transaction: true }] },
    { messages: [{ toAddress: [] }], transactions: [{ type: [], messages: true }] },
    { events: [{}], includeAllBlocks: false },
    { messages: [{}], transactions: [{ type: ['L1_HANDLER'], messages: true }] },
    { transactions: [] },
    {},
    { includeAllBlocks: true },
    { transactions: [{ firstNonce: 5, lastNonce: 4 }] },
    { transactions: [{ type: ['INVOKE'], firstNonce: 1, lastNonce: 100000 }, { type: ['DEPLOY_ACCOUNT', 'DEPLOY', 'DECLARE'] }] },
  ]
  // Each case on one of three ranges, taking turns: the set rules do not depend on the range.
  const setRanges = [RANGES.any[0], RANGES.any[3], RANGES.any[4]]
  for (const [i, c] of setCases.entries()) add(`set ${JSON.stringify(c).slice(0, 120)}`, setRanges[i % 3], { fields, ...c })
  // Traces and state tables: {} with and without includeAllBlocks, relations of requests matching
  // nothing. Each case on every other range of its tables, taking turns (case i on the ranges of
  // the parity of i): each range, where the tables start and where they do not, still meets two of
  // the four cases (every trace range a request that selects traces, every state range one with
  // `{}` of a state table); the same case on the other ranges only repeats the same rule.
  for (const [ci, c] of [{ traces: [{}] }, { traces: [{ callType: [], events: true, messages: true, transaction: true }] }, { traces: [{}], messages: [{}], events: [{}] }, { traces: [{ invocationType: ['execute'], messages: true }] }].entries()) {
    for (const range of RANGES.trace.filter((_, ri) => (ri + ci) % 2 === 0)) add(`traces ${JSON.stringify(c)}`, range, { ...c, includeAllBlocks: r.chance(0.5), fields: randomFields(r) })
  }
  for (const [ci, c] of [{ stateUpdates: [{}] }, { storageDiffs: [{}] }, { stateUpdates: [{}], storageDiffs: [{ address: [] }] }, { stateUpdates: [], storageDiffs: [{}] }].entries()) {
    for (const range of RANGES.state.filter((_, ri) => (ri + ci) % 2 === 0)) add(`state ${JSON.stringify(c)}`, range, { ...c, includeAllBlocks: r.chance(0.5), fields: randomFields(r) })
  }
  // A state update with nothing selected is `{}`; identifier fields set to false stay.
  add('state update, nothing selected', RANGES.state[0], { stateUpdates: [{}] })
  add('identifiers false', RANGES.trace[0], {
    transactions: [{}], events: [{}], traces: [{}], messages: [{}],
    fields: { block: { number: false, hash: false }, transaction: { transactionIndex: false }, event: { eventIndex: false, transactionIndex: false }, trace: { traceAddress: false }, message: { order: false, traceAddress: false } },
  })
  add('identifiers false (state)', RANGES.state[0], { storageDiffs: [{}], fields: { storageDiff: { address: false, key: false } } })
  // Tables some chunks lack: traces asked where there are none, traces with state updates.
  add('traces where none', RANGES.state[0], { traces: [{}] })
  add('transaction.traces where none', RANGES.any[4], { transactions: [{ traces: true }] })
  add('storage diffs where none', RANGES.trace[0], { storageDiffs: [{}] })
  add('traces and state updates', { fromBlock: 0 }, { traces: [{}], stateUpdates: [{}] })
  // Invalid felt values → 400.
  add('invalid felt', RANGES.any[0], { events: [{ fromAddress: ['0xzz'] }] })
  add('invalid felt (no prefix)', RANGES.any[0], { storageDiffs: [{ key: ['abc'] }] })

  // 4. Random combinations: several requests of several kinds, relation flags, field subsets,
  //    includeAllBlocks, toBlock variants. Sections 1–3 already run every filter key and relation
  //    flag of every kind alone, on every range, and every set rule; these only add mixes of them,
  //    so 20 do.
  for (let i = 0; i < 20; i++) {
    const mode = r.pick(['any', 'any', 'any', 'trace', 'state'] as const)
    const kindsOf: Record<typeof mode, Kind[]> = {
      any: ['transaction', 'event', 'message'],
      trace: ['transaction', 'event', 'message', 'trace'],
      state: ['transaction', 'event', 'message', 'stateUpdate', 'storageDiff'],
    }
    const range = r.pick(RANGES[mode])
    const blocks = inRange(data, range)
    const q: Obj = { fields: randomFields(r) }
    const nReq = 1 + r.int(4)
    for (let j = 0; j < nReq; j++) {
      const kind = r.pick(kindsOf[mode])
      ;(q[REQUEST_KEY[kind]] ??= []).push(randomRequest(r, kind, blocks, data))
    }
    if (r.chance(0.3)) q.includeAllBlocks = r.chance(0.7)
    add(`random #${i}`, range, q)
  }
  return out
}

// ------------------------------------------------------------------------------------ serving and walking

/**
 * The Starknet reference as the walk uses it. A query needs the tables of the kinds it involves: a
 * 400 `table-not-available` where the first chunk of the range lacks one (docs/protocol.md §6).
 */
const REFERENCE: WalkReference<FullBlock> = {
  validate: (q) => {
    for (const k of KINDS) for (const req of (q[REQUEST_KEY[k]] ?? []) as Obj[]) compileRequest(k, req)
  },
  evaluate,
  firstDifference,
  itemCount,
  lacking: (q) => {
    const kinds = involvedKinds(q)
    return (c) => [...kinds].filter((k) => !(c && kindsOf(c).has(k)))
  },
}

type Served = ServedOf<FullBlock>

/** The full answer, chunk by chunk with the kinds each chunk has (walked: answers may stop early). */
async function fetchFull(s: Served): Promise<FullBlock[]> {
  const data: FullBlock[] = []
  for (const c of s.chunks) {
    const kinds = KINDS.filter((k) => kindsOf(c).has(k))
    const blocks = await fetchRange(s, fullQuery(c.coverFrom, c.last, kinds), c.coverFrom, c.last, (b) => {
      for (const k of KINDS) {
        const key = OUTPUT_KEY[k]
        if (kinds.includes(k)) assert.ok(Array.isArray(b[key]), `block ${b.header.number}: no ${key}`)
        else {
          assert.equal(b[key], undefined, `block ${b.header.number}: ${key} not asked for`)
          b[key] = []
        }
      }
    })
    data.push(...blocks)
  }
  return data
}

// ------------------------------------------------------------------------------------ the test

/** A small size budget: answers over the large blocks stop early and the walk continues. */
const CLUSTER_OPTIONS = { concurrency: 4, queue: 64, budgets: { sizeBytes: 300_000 }, ...STATIC_DATA_TIMERS }

describe('Starknet queries against the reference evaluation (recorded mainnet blocks, router + 2 workers)', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let height: number
  let chunks: ChunkInfo[]
  let data: FullBlock[]
  let srv: Served
  const stats = newStats()
  const walk = (q: Obj, what: string) => walkServed(srv, q, what)

  before(async () => {
    tmp = await tempDir('ba-starknet-ref-')
    const dir = path.join(tmp.dir, 'starknet-mainnet')
    await ingestRecordedStarknet(dir, 'starknet-mainnet')
    chunks = readLayout(dir)
    let heights: Record<string, number>
    ;({ cluster, heights } = await startServed(tmp.dir, { 'starknet-mainnet': 623436 }, CLUSTER_OPTIONS))
    height = heights['starknet-mainnet']
    assert.equal(height, 623436)
    srv = { base: cluster.datasets.get('starknet-mainnet')!, height, chunks, data: [], workerUrls: new Map(), stats, reference: REFERENCE }
    data = srv.data = await fetchFull(srv)
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('the chunks: traces only with block 25, state updates only with 6500–550000', () => {
    const tables = chunks.map((c) => [c.first, c.last, [...kindsOf(c)].sort()])
    assert.deepEqual(tables, [
      [25, 25, ['event', 'message', 'trace', 'transaction']],
      [6500, 550000, ['event', 'message', 'stateUpdate', 'storageDiff', 'transaction']],
      [588763, 623436, ['event', 'message', 'transaction']],
    ])
  })

  it('the full answer agrees with the recorded node answers (read directly)', () => {
    const source = sourceBlocks()
    assert.deepEqual(data.map((b) => b.header.number), SOURCE_BLOCKS)
    let checked = 0
    for (const [i, s] of source.entries()) {
      const b = data[i]
      const n = s.number
      assert.equal(b.header.number, n)
      assert.deepEqual([b.header.hash, b.header.parentHash, b.header.timestamp], [s.hash, s.parentHash, s.timestamp], `block ${n} header`)
      assert.deepEqual(b.transactions.map((t) => t.transactionIndex), s.txs.map((_, j) => j), `block ${n} transaction indexes`)
      assert.deepEqual(b.transactions.map((t) => t.transactionHash), s.txs.map((t) => t.hash), `block ${n} transaction hashes`)
      assert.deepEqual(b.transactions.map((t) => t.type), s.txs.map((t) => t.type), `block ${n} transaction types`)
      assert.deepEqual(b.transactions.map((t) => t.senderAddress), s.txs.map((t) => t.sender), `block ${n} sender addresses`)
      assert.deepEqual(b.transactions.map((t) => int(t.nonce)), s.txs.map((t) => t.nonce), `block ${n} nonces`)
      const events = s.txs.flatMap((t, ti) => t.events.map((e, ei) => ({ transactionIndex: ti, eventIndex: ei, fromAddress: e.from, keys: e.keys, data: e.data })))
      assert.deepEqual(
        b.events.map((e) => ({ transactionIndex: e.transactionIndex, eventIndex: e.eventIndex, fromAddress: e.fromAddress, keys: e.keys, data: e.data })),
        events,
        `block ${n} events`,
      )
      const messages = s.txs.flatMap((t, ti) => t.messages.map((m, order) => ({ transactionIndex: ti, order, fromAddress: m.from, toAddress: m.to, payload: m.payload })))
      assert.deepEqual(
        b.messages.map((m) => ({ transactionIndex: m.transactionIndex, order: m.order, fromAddress: m.fromAddress, toAddress: m.toAddress, payload: m.payload })),
        messages,
        `block ${n} messages`,
      )
      if (s.stateUpdate) {
        const u = s.stateUpdate
        assert.equal(b.state_updates.length, 1, `block ${n}: one state update`)
        const su = b.state_updates[0]
        assert.deepEqual(
          [su.newRoot, su.oldRoot, su.deployedContracts.length, su.nonces.length, su.declaredClasses.length, su.deprecatedDeclaredClasses.length],
          [u.newRoot, u.oldRoot, u.deployed, u.nonces, u.declared, u.oldDeclared],
          `block ${n} state update`,
        )
        const cmp = (a: string[], c: string[]) => (a[0] < c[0] ? -1 : a[0] > c[0] ? 1 : a[1] < c[1] ? -1 : a[1] > c[1] ? 1 : 0)
        assert.deepEqual(b.storage_diffs.map((d) => [d.address, d.key, d.value]), [...u.storage].sort(cmp), `block ${n} storage diffs (in address, key order)`)
      } else {
        assert.deepEqual([b.state_updates, b.storage_diffs], [[], []])
      }
      checked += b.transactions.length + b.events.length + b.messages.length + b.storage_diffs.length
    }
    assert.ok(data[4].events.length === 446 && data[5].transactions.length === 191)
    assert.ok(data.some((b) => b.messages.length > 0) && data[1].storage_diffs.length > 100)

    // Block 25: traces for every transaction of trace_block_25, numbered as docs/protocol.md §6.4
    // says, and its L2→L1 message attached to the call that sent it.
    const traced = fixture('nethermind-idealis', 'starknet', 'trace_block_25.json.gz') as any[]
    const b25 = data[0]
    const index = new Map(b25.transactions.map((t) => [t.transactionHash, t.transactionIndex]))
    assert.equal(traced.length, b25.transactions.length)
    const expTraces: Obj[] = []
    const expMessageCalls: Obj[] = []
    for (const entry of traced) {
      const ti = index.get(felt(entry.transaction_hash))
      assert.ok(ti !== undefined, `traced transaction ${entry.transaction_hash} is not in block 25`)
      for (const { address, call } of tracedCalls(entry)) {
        expTraces.push({ transactionIndex: ti, traceAddress: address, contractAddress: felt(call.contract_address), callerAddress: felt(call.caller_address), calldata: felts(call.calldata), result: felts(call.result) })
        for (const m of call.messages ?? []) expMessageCalls.push({ transactionIndex: ti, traceAddress: address, toAddress: felt(m.to_address), payload: felts(m.payload) })
      }
    }
    expTraces.sort((a, c) => a.transactionIndex - c.transactionIndex || compareAddress(a.traceAddress, c.traceAddress))
    assert.deepEqual(
      b25.traces.map((t) => ({ transactionIndex: t.transactionIndex, traceAddress: t.traceAddress, contractAddress: t.contractAddress, callerAddress: t.callerAddress, calldata: t.calldata, result: t.result })),
      expTraces,
      'block 25 traces',
    )
    assert.ok(new Set(b25.traces.map((t) => t.transactionIndex)).size === b25.transactions.length, 'a transaction of block 25 without traces')
    assert.deepEqual(b25.messages.map((m) => ({ transactionIndex: m.transactionIndex, traceAddress: m.traceAddress, toAddress: m.toAddress, payload: m.payload })), expMessageCalls, 'block 25 messages')
    assert.ok(expMessageCalls.length > 0)
    console.log(`# starknet reference: full answer of ${data.length} blocks, ${checked} items + ${b25.traces.length} traces checked against the recorded answers`)
  })

  it('generated queries: every filter, relation, set rule, field selection and range', async () => {
    const t0 = performance.now()
    const queries = generateQueries(data)
    const before = { ...stats }
    const nonEmpty = await walkAll(srv, queries)
    const secs = ((performance.now() - t0) / 1000).toFixed(1)
    const d = (k: keyof typeof stats) => stats[k] - before[k]
    console.log(`# starknet reference: ${queries.length} generated queries (${nonEmpty} selecting items), ${d('requests')} requests, ${d('answers')} answers compared, ${d('items')} items compared, ${d('refusals')} expected 400s, ${secs} s`)
    // The cover: every filter key (that has values in the data) and every relation flag of every kind runs alone.
    for (const kind of KINDS) {
      const single = queries.map((g) => g.q[REQUEST_KEY[kind]]).filter((reqs) => reqs?.length === 1).map((reqs) => reqs[0])
      for (const key of Object.keys(FILTERS[kind]).filter((k) => FILTERS[kind][k].kind !== 'in' || valuesOf(data, kind, k).length > 0)) assert.ok(single.some((req) => Object.keys(req).join() === key), `${kind}.${key} alone`)
      for (const flag of Object.keys(RELATIONS[kind])) assert.ok(single.some((req) => req[flag] === true), `${kind}.${flag}`)
    }
    assert.ok(queries.length >= 120, `${queries.length} queries`)
    assert.ok(nonEmpty >= queries.length / 2, `only ${nonEmpty} of ${queries.length} queries selected items`)
    // Some answers must have stopped early (the walk continued inside a range).
    assert.ok(d('answers') > d('queries') - d('refusals'))
  })

  it('the real queries of fixtures/queries/starknet, re-based onto the data', async () => {
    const fixtures = loadQueries(SQ)
    assert.equal(fixtures.length, 5)
    const ranges = [{ fromBlock: 0, toBlock: height }, ...chunks.map((c) => ({ fromBlock: c.first, toBlock: c.last }))]
    const before = { ...stats }
    const selecting = new Set<string>()
    for (const { name, query } of fixtures) {
      for (const range of ranges) {
        const q = rebase(query, data, range)
        // The shape stays: same keys, same number of requests, same selection.
        assert.deepEqual(Object.keys(q).sort(), [...new Set([...Object.keys(query), 'fromBlock'])].sort(), name)
        for (const k of KINDS) assert.equal(q[REQUEST_KEY[k]]?.length, query[REQUEST_KEY[k]]?.length, name)
        assert.deepEqual(q.fields, query.fields)
        const got = await walk(q, `fixture ${name} on [${range.fromBlock}, ${range.toBlock}]`)
        if (itemCount(got) > 0) selecting.add(name)
      }
    }
    const d = (k: keyof typeof stats) => stats[k] - before[k]
    console.log(`# starknet reference: ${fixtures.length} real queries × ${ranges.length} ranges, ${d('answers')} answers, ${d('items')} items compared, ${d('refusals')} expected 400s; selecting items: ${[...selecting].join(', ')}`)
    // rich_transactions needs traces (block 25 only) and senders (none in block 25); traces filters
    // on entryPointSelector, which block 25's (old) traces do not have: both select nothing.
    for (const name of ['l1_message', 'state_update', 'storage']) assert.ok(selecting.has(name), `${name} selected nothing`)
    console.log(`# starknet reference total: ${stats.queries} queries, ${stats.requests} requests, ${stats.answers} answers, ${stats.items} items compared`)
  })
})

// ------------------------------------------------------------------------------------ trace relations on 480000

/*
 * The relations `traces[].events` and `traces[].messages` select the items of the same transaction
 * AND the same trace address, `traces[].transaction` and the transaction's relations the same
 * transaction only. The recorded blocks above exercise them poorly (block 25: no events, one message
 * in a transaction with one call), so this suite serves a second dataset: block 25 (recorded
 * getBlockWithReceipts + traces) and block 480000, whose TRACES ARE RECORDED (119 transactions,
 * 3 roots each, nested calls, 671 events inside the calls) but whose HEADER AND RECEIPTS ARE DERIVED
 * from those traces (helpers/starknet-480000.ts: synthetic block hash, parent hash, new root,
 * timestamp; receipt events rebuilt from the calls' events in root/`order` order): no
 * getBlockWithReceipts of 480000 is public. The trace of 480000 sends no L2→L1 message, so
 * `messages: true` only selects something in block 25.
 */

const TRACED_DATASET = 'starknet-traced'

/** One chunk per bundle, written as ingest writes them (normaliser → ChunkBuilder). */
async function writeStarknetDataset(dir: string, name: string, bundles: StarknetBlockBundle[]): Promise<ChunkRef[]> {
  await mkdir(dir, { recursive: true })
  const meta: DatasetMeta = { name, family: 'starknet' }
  await writeFile(path.join(dir, 'dataset.json'), JSON.stringify(meta))
  const refs: ChunkRef[] = []
  for (const bundle of bundles) {
    const rows = normalizeStarknetBlock(bundle)
    const tables = ['blocks', 'transactions', 'events', 'messages', ...(rows.traces ? ['traces'] : [])]
    const builder = new ChunkBuilder(starknetFamily, dir, tables)
    const h = rows.blocks[0]
    await builder.addBlock(h.number as number, h.hash as string, h.parent_hash as string, rows)
    refs.push(await builder.finish(nextTop(refs, builder.first, 500)))
  }
  return refs
}

const TRACE_FIELDS: Obj = {
  block: { timestamp: true },
  transaction: { transactionHash: true, senderAddress: true, type: true },
  event: { fromAddress: true, keys: true, traceAddress: true },
  trace: { contractAddress: true, entryPointSelector: true, invocationType: true, callerAddress: true },
  message: { fromAddress: true, toAddress: true, payload: true },
}

/** Events (messages) of the transactions of the selected traces vs those the relation selects. */
interface RelationCase {
  name: string
  /** selected by the relation (same transaction and trace address) */
  byCall: number
  /** of the same transactions */
  byTx: number
}

function traceRelationQueries(data: FullBlock[]): { queries: NamedQuery[]; cases: { events: RelationCase[]; messages: RelationCase[] } } {
  const b480 = data.filter((b) => b.header.number === 480000)
  const b25 = data.filter((b) => b.header.number === 25)
  const traces = itemsOf(b480, 'trace').map((x) => x.item)
  const freq = (key: string) => byFrequency(traces.map((t) => t[key]))
  const topAndRare = (values: string[]) => [...values.slice(0, 3), ...values.slice(-2)]
  const contracts = freq('contractAddress')
  const selectors = freq('entryPointSelector')
  const callers = freq('callerAddress')
  // The call of block 25 that sent its message.
  const m25 = b25[0].messages[0]
  const sender25 = b25[0].traces.find((t) => t.transactionIndex === m25.transactionIndex && compareAddress(t.traceAddress, m25.traceAddress) === 0)!
  const bases: Obj[] = [
    {},
    ...topAndRare(contracts).map((c) => ({ contractAddress: [c] })),
    ...topAndRare(selectors).map((s) => ({ entryPointSelector: [feltVariant(s, 0)] })),
    ...freq('invocationType').map((t) => ({ invocationType: [t] })),
    { contractAddress: [contracts[0]], invocationType: ['execute'] },
    { entryPointSelector: [selectors[0], selectors[1]], invocationType: ['execute', 'validate'] },
    { callerAddress: [callers[0]] },
    { contractAddress: [sender25.contractAddress] },
  ]
  const flagSets: Obj[] = [{ events: true }, { messages: true }, { transaction: true }, { events: true, messages: true, transaction: true }]
  const ranges: Range[] = [{ fromBlock: 0 }, { fromBlock: 480000, toBlock: 480000 }]
  const queries: NamedQuery[] = []
  const cases = { events: [] as RelationCase[], messages: [] as RelationCase[] }
  let n = 0
  const add = (name: string, range: Range, body: Obj) => {
    const fields = n++ % 3 === 2 ? ALL_FIELDS : TRACE_FIELDS
    queries.push({ name, q: { type: 'starknet', ...range, fields, ...body } })
  }
  // Each base with two of the four flag sets, taking turns (base i: sets i and i + 2, mod 4): each
  // flag set still runs from about half of the bases, among them `{}`, top and rare contracts and
  // selectors, each invocation type; the other sets from the same base only repeat those relations.
  // The call of block 25 that sent its message (the only message) runs all four.
  for (const [bi, base] of bases.entries()) {
    for (const [fi, flags] of flagSets.entries()) {
      if ((fi - bi) % 2 !== 0 && bi !== bases.length - 1) continue
      const req = { ...base, ...flags }
      // The two ranges take turns, shifted per base so that each flag set meets both: a relation
      // stays within its transaction, and both ranges hold all of 480000.
      add(`traces[${JSON.stringify(req).slice(0, 140)}]`, ranges[(bi + fi) % 2], { traces: [req] })
      // What the relation selects compared with what "same transaction" would select (whole data).
      for (const rel of ['events', 'messages'] as const) {
        if (!flags[rel]) continue
        const kind: Kind = rel === 'events' ? 'event' : 'message'
        let byCall = 0
        let byTx = 0
        for (const b of data) {
          const sel = selectItems(b, { traces: [req] })
          const txs = new Set(b.traces.filter((t) => sel.trace.has(itemKey('trace', t))).map((t) => t.transactionIndex))
          const sameTx = b[OUTPUT_KEY[kind]].filter((x) => txs.has(x.transactionIndex))
          for (const x of b[OUTPUT_KEY[kind]]) if (sel[kind].has(itemKey(kind, x))) assert.ok(txs.has(x.transactionIndex), 'a related item outside the transactions of the selected traces')
          byCall += sel[kind].size
          byTx += sameTx.length
        }
        cases[rel].push({ name: JSON.stringify(req), byCall, byTx })
      }
    }
  }
  // Trace relations together with event, message and transaction requests.
  const events = itemsOf(b480, 'event').map((x) => x.item)
  const [a0, a1] = byFrequency(events.map((e) => e.fromAddress))
  const [k0, k1] = byFrequency(events.map((e) => e.keys[0]))
  const [s0] = byFrequency(itemsOf(b480, 'transaction').map((x) => x.item.senderAddress))
  const combos: Obj[] = [
    { traces: [{ contractAddress: [contracts[1]], events: true }], events: [{ fromAddress: [a0] }] },
    { traces: [{ invocationType: ['fee_transfer'], events: true }], events: [{ key0: [k0], transaction: true }] },
    { traces: [{ invocationType: ['validate'], events: true, transaction: true }], events: [{ fromAddress: [a1] }], transactions: [{ type: ['DEPLOY_ACCOUNT'] }] },
    { traces: [{ entryPointSelector: [selectors[0]], events: true, messages: true }], events: [{ fromAddress: [a1], transaction: true }], messages: [{}] },
    { transactions: [{ senderAddress: [s0], traces: true, events: true }], traces: [{ contractAddress: [contracts[2]], events: true }] },
    { traces: [{ contractAddress: [contracts[0]], events: true }, { invocationType: ['validate'], transaction: true }], events: [{ key0: [k1] }] },
    { traces: [{ contractAddress: [sender25.contractAddress], messages: true, events: true }, { entryPointSelector: [selectors.at(-1)], events: true }], messages: [{ toAddress: [MISS_FELT] }] },
    { traces: [{ callType: ['DELEGATE'], events: true }], events: [{ key0: [k0, k1], fromAddress: [a0] }] },
    { traces: [{ entryPointType: ['EXTERNAL'], invocationType: ['execute'], events: true, messages: true }], events: [{}] },
    { traces: [{ contractAddress: [contracts[0]], events: false, messages: false, transaction: false }], events: [{ fromAddress: [a0] }] },
  ]
  // Each on two of the three ranges, taking turns: each range still meets two thirds of them.
  const comboRanges = [...ranges, { fromBlock: 0, toBlock: 25 }]
  for (const [ci, c] of combos.entries()) for (const range of comboRanges.filter((_, ri) => ri !== ci % 3)) add(`combined ${JSON.stringify(c).slice(0, 160)}`, range, c)
  return { queries, cases }
}

describe('Starknet trace relations against the reference: block 25 recorded, block 480000 with recorded traces and DERIVED header/receipts', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let srv: Served
  let data: FullBlock[]
  let derived: Derived480000

  before(async () => {
    tmp = await tempDir('ba-starknet-traced-')
    const dir = path.join(tmp.dir, TRACED_DATASET)
    derived = derived480000()
    const block25: StarknetBlockBundle = { block: fixture('nethermind-idealis', 'starknet', 'get_block_with_txs_25.json.gz'), traces: fixture('nethermind-idealis', 'starknet', 'trace_block_25.json.gz') }
    await writeStarknetDataset(dir, TRACED_DATASET, [block25, derived.bundle])
    const chunks = readLayout(dir)
    let heights: Record<string, number>
    ;({ cluster, heights } = await startServed(tmp.dir, { [TRACED_DATASET]: 480000 }, CLUSTER_OPTIONS))
    const height = heights[TRACED_DATASET]
    assert.equal(height, 480000)
    srv = { base: cluster.datasets.get(TRACED_DATASET)!, height, chunks, data: [], workerUrls: new Map(), stats: newStats(), reference: REFERENCE }
    data = srv.data = await fetchFull(srv)
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('the data: 480000 traces as recorded, events on the calls that emitted them (header and receipts DERIVED from the traces)', () => {
    assert.deepEqual(srv.chunks.map((c) => [c.first, c.last, [...kindsOf(c)].sort()]), [
      [25, 25, ['event', 'message', 'trace', 'transaction']],
      [480000, 480000, ['event', 'message', 'trace', 'transaction']],
    ])
    assert.deepEqual(data.map((b) => b.header.number), [25, 480000])
    const b = data[1]
    // The synthetic header of helpers/starknet-480000.ts, not mainnet's.
    assert.deepEqual([b.header.hash, b.header.parentHash, b.header.newRoot], ['0x480000', '0x47ffff', '0x480000aa'])

    // Traces: every call of the recorded trace, numbered by root and position.
    const exp: Obj[] = []
    for (const [i, entry] of derived.traces.entries()) {
      assert.equal(b.transactions[i].transactionHash, felt(entry.transaction_hash))
      let k = 0
      for (const key of ROOT_KEYS) {
        const root = entry.trace_root[key]
        if (!root) continue
        const invocationType = key.replace('_invocation', '')
        if (root.contract_address == null) exp.push({ transactionIndex: i, traceAddress: [k], invocationType, contractAddress: null, entryPointSelector: null, revertReason: root.revert_reason })
        else {
          for (const [at, inv] of invocations(root)) {
            exp.push({ transactionIndex: i, traceAddress: [k, ...at], invocationType, contractAddress: felt(inv.contract_address), entryPointSelector: felt(inv.entry_point_selector), revertReason: inv.revert_reason ?? null })
          }
        }
        k++
      }
    }
    exp.sort((x, y) => x.transactionIndex - y.transactionIndex || compareAddress(x.traceAddress, y.traceAddress))
    assert.deepEqual(
      b.traces.map((t) => ({ transactionIndex: t.transactionIndex, traceAddress: t.traceAddress, invocationType: t.invocationType, contractAddress: t.contractAddress, entryPointSelector: t.entryPointSelector, revertReason: t.revertReason })),
      exp,
    )

    // Events: each on the call that emitted it (the derivation knows the call).
    assert.equal(b.events.length, derived.expectedAddress.size)
    for (const e of b.events) assert.deepEqual(e.traceAddress, derived.expectedAddress.get(`${e.transactionIndex}/${e.eventIndex}`), `event ${e.transactionIndex}/${e.eventIndex}`)
    const placed = b.events.filter((e) => e.traceAddress.length > 0).length
    assert.ok(placed / b.events.length > 0.9, `${placed} of ${b.events.length} events have a trace address`)
    assert.equal(b.messages.length, 0) // the recorded trace of 480000 sends no L2→L1 message
    assert.equal(derived.expectedMessageAddress.size, 0)

    // "Same transaction" and "same transaction + trace address" differ: transactions with several
    // calls, and with events on several calls.
    const tracesPerTx = new Map<number, number>()
    for (const t of b.traces) tracesPerTx.set(t.transactionIndex, (tracesPerTx.get(t.transactionIndex) ?? 0) + 1)
    const multiTrace = [...tracesPerTx.values()].filter((n) => n > 1).length
    const callsWithEvents = new Map<number, Set<string>>()
    for (const e of b.events) {
      if (!callsWithEvents.has(e.transactionIndex)) callsWithEvents.set(e.transactionIndex, new Set())
      callsWithEvents.get(e.transactionIndex)!.add(e.traceAddress.join('.'))
    }
    const multiCallEvents = [...callsWithEvents.values()].filter((s) => s.size > 1).length
    assert.ok(multiTrace > 100 && multiCallEvents > 50, `${multiTrace} transactions with several traces, ${multiCallEvents} with events on several calls`)
    const m25 = data[0].messages
    assert.equal(m25.length, 1)
    console.log(
      `# starknet trace relations: 480000 (traces recorded, header/receipts DERIVED): ${b.transactions.length} transactions, ${b.traces.length} traces, ${b.events.length} events (${placed} = ${((100 * placed) / b.events.length).toFixed(1)}% with a trace address), 0 messages; ` +
        `${multiTrace} transactions with several traces, ${multiCallEvents} with events on several calls; block 25: ${data[0].traces.length} traces, ${m25.length} message at ${JSON.stringify(m25[0].traceAddress)}`,
    )
  })

  it('traces[].events / .messages / .transaction (with event, message and transaction requests) agree with the reference', async () => {
    const t0 = performance.now()
    const { queries, cases } = traceRelationQueries(data)
    const nonEmpty = await walkAll(srv, queries)
    const st = srv.stats
    const strict = (list: RelationCase[]) => list.filter((c) => c.byCall > 0 && c.byCall < c.byTx)
    const strictEvents = strict(cases.events)
    const strictMessages = strict(cases.messages)
    const secs = ((performance.now() - t0) / 1000).toFixed(1)
    console.log(
      `# starknet trace relations: ${queries.length} queries (${nonEmpty} selecting items), ${st.requests} requests, ${st.answers} answers, ${st.items} items compared, ${st.refusals} expected 400s, ${secs} s; ` +
        `events: true selects a strict non-empty subset of the same transactions' events in ${strictEvents.length} of ${cases.events.length} single-request queries ` +
        `(e.g. ${strictEvents[0]?.name}: ${strictEvents[0]?.byCall} of ${strictEvents[0]?.byTx}); messages: ${strictMessages.length} of ${cases.messages.length}`,
    )
    assert.ok(queries.length >= 50, `${queries.length} queries`)
    assert.ok(nonEmpty >= queries.length * 0.8, `only ${nonEmpty} of ${queries.length} queries selected items`)
    assert.ok(strictEvents.length >= 5, `events: true selects a strict subset of the same transactions' events in only ${strictEvents.length} queries`)
    assert.ok(cases.messages.some((c) => c.byCall > 0), 'messages: true selects no message')
  })
})
