import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { after, before, describe, it } from 'node:test'
import { ingestRecordedSidecar } from '../src/ingest/substrate/sidecar/recorded.js'
import type { SidecarChain } from '../src/ingest/substrate/sidecar/replay.js'
import type { Cluster } from '../src/server/cluster.js'
import { REPO_ROOT, tempDir } from './helpers/dataset.js'
import {
  COMPARE,
  KINDS,
  LISTS,
  LIST_NAMES,
  OUTPUT_KEY,
  compareAddress,
  ethereumTransactOf,
  evmLogOf,
  fullQuery,
  itemCount,
  itemsOf,
  loadQueries,
  matchedItems,
  rebase,
  relatedItems,
  valuesOf,
  type FullBlock,
  type Obj,
} from './helpers/reference-substrate.js'
import {
  fetchRange,
  inRange,
  newStats,
  randomValues,
  readLayout,
  rng,
  startServed,
  STATIC_DATA_TIMERS,
  walkAll,
  walkServed,
  type GenQuery,
  type Range,
  type Rng,
  type Served as ServedOf,
  type Stats,
} from './helpers/walk.js'
import { SUBSTRATE_REFERENCE, randomFields, relationTallies, type RelationTally } from './helpers/walk-substrate.js'

/*
 * Substrate queries against an independent evaluation (helpers/reference-substrate.ts). The recorded
 * Sidecar blocks (fixtures/substrate/substrate-api-sidecar: moonbeam 11728459 with 9
 * Ethereum.transact and 9 EVM.Log; 6 kusama and 4 polkadot blocks with utility batches, a multisig,
 * sudo_as, failed extrinsics) go through the real ingest loop (a replay Sidecar), plus one SYNTHETIC
 * dataset `kusama-nested`: recorded kusama 8113510 and kusama 13556605 with an added extrinsic whose
 * call tree is two levels deep under three different parents (no recorded block nests deeper than
 * one level, where "same parent" and "same depth" cannot differ) and events in onInitialize /
 * onFinalize (none of the recorded blocks has any). A router and two workers (small size budget, so
 * answers stop early) serve them. Everything is fetched once with every field, checked against the
 * raw Sidecar JSON read here directly, then each query is walked through the router like a client
 * and every answer is compared with what the reference computes for the range it covers.
 */

const QUERIES = path.join(REPO_ROOT, 'fixtures/queries/moonbeam')
const SIDECAR = path.join(REPO_ROOT, 'fixtures/substrate/substrate-api-sidecar/decoded-blocks')
const CHAINS = ['moonbeam', 'kusama', 'polkadot'] as const
const NESTED = 'kusama-nested'
const DATASETS = [...CHAINS, NESTED] as const
type Dataset = (typeof DATASETS)[number]

// ------------------------------------------------------------------------------------ recorded source

/** The recorded Sidecar `/blocks/{n}` answers of a chain, ascending (read here, not by the replay server). */
function rawBlocks(chain: string): any[] {
  const dir = path.join(SIDECAR, chain, 'blocks')
  return readdirSync(dir)
    .filter((f) => /^\d+\.json\.gz$/.test(f))
    .map((f) => JSON.parse(gunzipSync(readFileSync(path.join(dir, f))).toString('utf8')))
    .sort((a, b) => Number(a.number) - Number(b.number))
}

/** Runtime pallet name: first letter upper-cased (`evm` is `EVM`). */
const pallet = (p: string) => (p === 'evm' ? 'EVM' : p[0].toUpperCase() + p.slice(1))
/** Runtime call name: snake_case of sidecar's camelCase (`batchAll` → `batch_all`, `asMultiThreshold1` → `as_multi_threshold_1`). */
const snake = (m: string) => m.replace(/([A-Z]|[0-9]+)/g, (c) => '_' + c.toLowerCase())
const rawEventName = (e: any) => `${pallet(e.method.pallet)}.${e.method.method}`
const rawCallName = (c: any) => `${pallet(c.method.pallet)}.${snake(c.method.method)}`

/** The block's events in System.Events order: onInitialize, each extrinsic's, onFinalize. */
function rawEvents(b: any): { e: any; phase: string; ex: number | null }[] {
  return [
    ...(b.onInitialize?.events ?? []).map((e: any) => ({ e, phase: 'Initialization', ex: null })),
    ...b.extrinsics.flatMap((x: any, i: number) => x.events.map((e: any) => ({ e, phase: 'ApplyExtrinsic', ex: i }))),
    ...(b.onFinalize?.events ?? []).map((e: any) => ({ e, phase: 'Finalization', ex: null })),
  ]
}

/**
 * The call tree of a raw extrinsic as docs/protocol.md §7 describes it: the extrinsic's call at
 * `[]`, batch items at `[…, i]`, the call wrapped by proxy / multisig / sudo at `[…, 0]`. A failed
 * extrinsic has its root call only (its inner calls did not run).
 */
function rawCallTree(x: any): { address: number[]; name: string }[] {
  const out: { address: number[]; name: string }[] = []
  const visit = (c: any, address: number[]) => {
    out.push({ address, name: rawCallName(c) })
    if (!x.success) return
    const name = rawCallName(c)
    if (/^Utility\.(batch|batch_all|force_batch)$/.test(name)) c.args.calls.forEach((s: any, i: number) => visit(s, [...address, i]))
    else if (/^(Proxy\.proxy|Multisig\.as_multi|Sudo\.sudo|Sudo\.sudo_as)$/.test(name)) visit(c.args.call ?? c.args.proposal, [...address, 0])
  }
  visit(x, [])
  return out.sort((a, b) => compareAddress(a.address, b.address))
}

// ------------------------------------------------------------------------------------ the synthetic block

const NESTED_HASH = '0x' + 'ab'.repeat(32)

/**
 * Kusama 13556605 with a fourth extrinsic (SYNTHETIC, built from the events of the recorded batch of
 * extrinsic 2) and events in onInitialize / onFinalize:
 *
 *   []      Utility.batch
 *   [0]       Utility.batch          [0,0] [0,1] Staking.payout_stakers
 *   [1]       Utility.batch_all      [1,0]       Staking.payout_stakers
 *   [2]       Proxy.proxy            [2,0]       Balances.transfer_keep_alive (recorded kusama 6566865 extrinsic 1)
 *
 * Its events and the call each belongs to by the runtime's order (a batch item's events come before
 * its Utility.ItemCompleted, which belongs to the batch; the fee withdrawal goes with the first item;
 * the closing System.ExtrinsicSuccess has no call address, as squid's parser leaves it).
 */
function nestedBlock(b: any, transfer: any): { block: any; callAddresses: (number[] | null | undefined)[] } {
  const block = structuredClone(b)
  const x2 = block.extrinsics[2]
  const ev = (p: string, m: string) => structuredClone(x2.events.find((e: any) => e.method.pallet === p && e.method.method === m))
  const payout = (era: string) => ({ method: { pallet: 'staking', method: 'payoutStakers' }, args: { ...x2.args.calls[0].args, era } })
  const signer = x2.signature.signer.id
  const itemCompleted = x2.events.findIndex((e: any) => e.method.method === 'ItemCompleted')
  const tail = x2.events.slice(x2.events.findIndex((e: any) => e.method.method === 'BatchCompleted') + 1) // fee deposits, ExtrinsicSuccess
  assert.ok(itemCompleted > 0 && tail.at(-1).method.method === 'ExtrinsicSuccess')
  const IC = () => ev('utility', 'ItemCompleted')
  const BC = () => ev('utility', 'BatchCompleted')
  const PS = () => ev('staking', 'PayoutStarted')
  const R = () => ev('staking', 'Rewarded')
  const D = () => ev('balances', 'Deposit')
  const events: [any, number[] | null][] = [
    [ev('balances', 'Withdraw'), [0, 0]],
    [PS(), [0, 0]], [R(), [0, 0]], [IC(), [0]],
    [PS(), [0, 1]], [R(), [0, 1]], [IC(), [0]], [BC(), [0]],
    [IC(), []],
    [PS(), [1, 0]], [D(), [1, 0]], [R(), [1, 0]], [IC(), [1]], [BC(), [1]],
    [IC(), []],
    [structuredClone(transfer.events[0]), [2, 0]], [{ method: { pallet: 'proxy', method: 'ProxyExecuted' }, data: [{ ok: null }] }, [2]],
    [IC(), []], [BC(), []],
    ...tail.map((e: any): [any, number[] | null] => [structuredClone(e), e.method.method === 'ExtrinsicSuccess' ? null : []]),
  ]
  const x3 = {
    ...structuredClone(x2),
    hash: NESTED_HASH,
    nonce: String(Number(x2.nonce) + 1),
    args: {
      calls: [
        { method: { pallet: 'utility', method: 'batch' }, args: { calls: [payout('3960'), payout('3961')] } },
        { method: { pallet: 'utility', method: 'batchAll' }, args: { calls: [payout('3962')] } },
        { method: { pallet: 'proxy', method: 'proxy' }, args: { real: { id: signer }, force_proxy_type: null, call: { method: transfer.method, args: transfer.args } } },
      ],
    },
    events: events.map(([e]) => e),
  }
  block.extrinsics.push(x3)
  block.onInitialize = { events: [D(), ev('balances', 'Deposit')] }
  block.onFinalize = { events: [ev('staking', 'Rewarded')] }
  // Expected call address of every event of the block (undefined: a recorded extrinsic's, not asserted here).
  const all = rawEvents(block)
  const start = all.findIndex((r) => r.ex === 3)
  const callAddresses = all.map(({ ex }, i) => (ex === null ? null : ex === 3 ? events[i - start][1] : undefined))
  return { block, callAddresses }
}

// ------------------------------------------------------------------------------------ serving

/** A dataset served by the cluster. */
type Served = ServedOf<FullBlock> & { name: Dataset }

/** The full answer, walked (answers may stop early). */
function fetchFull(s: Served): Promise<FullBlock[]> {
  return fetchRange(s, fullQuery(0), 0, s.height, (b) => {
    for (const k of KINDS) assert.ok(Array.isArray(b[OUTPUT_KEY[k]]), `${s.name} block ${b.header.number}: no ${OUTPUT_KEY[k]}`)
  })
}

// ------------------------------------------------------------------------------------ generated queries

/** The same hex value written another way: upper-case digits, `0X`, mixed case. */
function hexVariant(v: string, which: number): string {
  const body = v.slice(2)
  switch (which % 4) {
    case 0:
      return '0x' + body.toUpperCase()
    case 1:
      return '0X' + body
    case 2:
      return '0X' + body.toUpperCase()
    default:
      return '0x' + [...body].map((c, i) => (i % 2 ? c.toUpperCase() : c)).join('')
  }
}

const MISS_HEX = '0x' + '77'.repeat(20)

/** Ranges of each dataset: whole, single blocks, sub-ranges, gaps only, open-ended from inside. */
function rangesOf(data: FullBlock[]): Range[] {
  const ns = data.map((b) => b.header.number as number)
  const first = ns[0]
  const last = ns[ns.length - 1]
  const out: Range[] = [{ fromBlock: 0 }, { fromBlock: first, toBlock: last }, { fromBlock: last, toBlock: last }]
  if (ns.length > 1) {
    out.push({ fromBlock: first, toBlock: first }, { fromBlock: ns[1] }, { fromBlock: first + 1, toBlock: ns[ns.length - 2] }, { fromBlock: ns[1] - 1, toBlock: last - 1 })
    out.push({ fromBlock: first + 1, toBlock: ns[1] - 1 }) // a gap only → 400
  } else {
    out.push({ fromBlock: first - 100, toBlock: first + 100 }, { fromBlock: 1, toBlock: 10 })
  }
  return out
}

/** Lists whose kind of item the data has (the others only ever select nothing). */
const listsWithData = (data: FullBlock[]) =>
  LIST_NAMES.filter((l) => {
    const d = LISTS[l]
    return itemsOf(data, d.kind).some((x) => d.name === undefined || x.item.name === d.name)
  })

/** A random list of values for a filter: frequent and rare ones, other spellings, misses. */
function randomList(r: Rng, list: string, key: string, blocks: FullBlock[], all: FullBlock[]): unknown[] {
  const f = LISTS[list].filters[key]
  let values = valuesOf(blocks, list, key)
  if (values.length === 0) values = valuesOf(all, list, key)
  return randomValues(r, values, f.values === 'hex' ? MISS_HEX : 'No.such_name', (v) =>
    f.values === 'hex' && r.chance(0.6) ? hexVariant(v, r.int(4)) : f.values === 'exact' && r.chance(0.1) ? v.toLowerCase() : v,
  )
}

function randomRequest(r: Rng, list: string, blocks: FullBlock[], all: FullBlock[]): Obj {
  const decl = LISTS[list]
  const req: Obj = {}
  const keys = Object.keys(decl.filters)
  const nKeys = r.pick([0, 1, 1, 1, 2, 2, 3])
  for (let i = 0; i < nKeys; i++) {
    const key = r.pick(keys)
    const roll = r.next()
    if (roll < 0.05) req[key] = null
    else if (roll < 0.09) req[key] = []
    else req[key] = randomList(r, list, key, blocks, all)
  }
  for (const flag of Object.keys(decl.relations)) if (r.chance(0.35)) req[flag] = r.chance(0.85)
  return req
}

/** The filter key a list is best seeded by (the one with most distinct values in the data). */
function seedKey(list: string, data: FullBlock[]): string | undefined {
  const keys = Object.keys(LISTS[list].filters)
  const counts = keys.map((k) => [k, valuesOf(data, list, k).length] as const).filter(([, n]) => n > 0)
  return counts.sort((a, b) => b[1] - a[1])[0]?.[0]
}

/** `part`: the dataset's index (the set rules take turns across the datasets). */
function generateQueries(data: FullBlock[], seed: number, part: number): GenQuery[] {
  const r = rng(seed)
  const out: GenQuery[] = []
  const ranges = rangesOf(data)
  const add = (name: string, range: Range, body: Obj) => out.push({ name, q: { type: 'substrate', ...range, ...body } })
  const lists = listsWithData(data)

  // 1. Each filter key alone, for every list the data has items of: frequent values, rare values,
  //    upper-case and `0X` hex, names in the wrong case, misses. Each value set runs on one of the two
  //    ranges (alternately, with the values of that range): every set and every spelling still runs,
  //    and every key on both ranges; the same set on the other range only repeats the same filter.
  for (const list of lists) {
    for (const [key, f] of Object.entries(LISTS[list].filters)) {
      for (const [ri, range] of ranges.slice(0, 2).entries()) {
        const values = valuesOf(inRange(data, range), list, key)
        if (values.length === 0) continue
        const top = values.slice(0, 2)
        const rare = values[values.length - 1]
        const sets: string[][] =
          f.values === 'hex'
            ? [[top[0]], [...top, rare], [hexVariant(top[0], 0), hexVariant(rare, 1)], [hexVariant(top[0], 2), MISS_HEX], [hexVariant(rare, 3), hexVariant(top[top.length - 1], 0)]]
            : [[top[0]], [...top, rare], [top[0].toLowerCase(), 'No.such_name'], [rare], [top[0].toUpperCase()]]
        for (const [si, vs] of sets.entries()) if (si % 2 === ri) add(`${list}.${key}=${JSON.stringify(vs).slice(0, 90)}`, range, { [list]: [{ [key]: vs }], fields: randomFields(r) })
      }
    }
  }
  // Lists without items in the data: `{}` and a filter select nothing (the kind's array is still
  // there). Each such list lacks items in at least three of the four datasets (events and calls are
  // in all): the two cases take turns across the datasets, so each still runs on some dataset.
  for (const [li, list] of LIST_NAMES.filter((l) => !lists.includes(l)).entries()) {
    const key = Object.keys(LISTS[list].filters)[0]
    if ((li + part) % 2 === 0) add(`${list} {}`, ranges[0], { [list]: [{}] })
    else add(`${list}.${key} miss`, ranges[1], { [list]: [{ [key]: [hexVariant(MISS_HEX, 0)], ...Object.fromEntries(Object.keys(LISTS[list].relations).map((f) => [f, true])) }] })
  }

  // 2. Every relation flag of every list: each flag alone and every flag at once from `{}` (every
  //    item of the list); from the 3 most frequent and the 2 rarest values of the seed key (calls:
  //    every call name, so every call with children) every flag at once and one flag alone, the flag taking turns across the seeds, so
  //    that every flag also runs alone from several seeds (the relation tallies below check that
  //    these cases are not trivial). Calls: a flag alone on the whole range, every flag at once on
  //    the whole range or another one, taking turns across the seeds (every call name still runs
  //    every flag at once; each range kind still meets many of them).
  for (const list of lists) {
    const decl = LISTS[list]
    const key = seedKey(list, data)
    const values = key ? valuesOf(data, list, key) : []
    const seeds: Obj[] = [{}, ...(list === 'calls' ? values : [...values.slice(0, 3), ...values.slice(-2)]).map((v) => ({ [key!]: [v] }))]
    const flags = Object.keys(decl.relations)
    for (const [si, base] of [...new Set(seeds.map((s) => JSON.stringify(s)))].map((s) => JSON.parse(s)).entries()) {
      // Calls (one seed per call name): a flag alone from every other name, the flags still taking
      // turns (5 flags, odd step), every flag at once from every name.
      const alone = list === 'calls' && si % 2 === 0 ? [] : [flags[(si - 1) % flags.length]]
      for (const flag of si === 0 ? [...flags, '*'] : [...alone, '*']) {
        const req = flag === '*' ? { ...base, ...Object.fromEntries(flags.map((f) => [f, true])) } : { ...base, [flag]: true }
        const where = list !== 'calls' ? [r.chance(0.5) ? ranges[0] : r.pick(ranges.slice(1))] : flag === '*' ? [si % 2 ? ranges[0] : r.pick(ranges.slice(1))] : [ranges[0]]
        for (const range of where) add(`${list}[${JSON.stringify(req).slice(0, 120)}]`, range, { [list]: [req], fields: randomFields(r) })
      }
    }
  }

  // 3. Set rules: union across requests and lists, null, [], {}, includeAllBlocks, no request, flags false.
  const eventNames = valuesOf(data, 'events', 'name')
  const callNames = valuesOf(data, 'calls', 'name')
  const [e0, e1] = eventNames
  const [c0, c1] = callNames
  const eRare = eventNames.at(-1)!
  const cRare = callNames.at(-1)!
  const fields = { event: { name: true, phase: true }, call: { name: true, success: true }, extrinsic: { hash: true, success: true } }
  const setCases: Obj[] = [
    { events: [{ name: [e0] }, { name: [e1], extrinsic: true }, { name: [e0, e1] }], calls: [{ name: [cRare], events: true }] },
    { events: [{ name: [e0, e0, eRare] }], calls: [{ name: [c0] }, { name: [c0], stack: true }] },
    { events: [{ name: null, call: true }] },
    { events: [{ name: [eRare], extrinsic: false, call: false, stack: false }] },
    { events: [{ name: [] }, { name: [e0], extrinsic: true }], calls: [{ name: [], subcalls: true, events: true }] },
    { events: [{ name: [] }], calls: [{}] },
    { calls: [{ name: [], extrinsic: true, stack: true, subcalls: true, siblings: true, events: true }] },
    { events: [{}], includeAllBlocks: false },
    { calls: [{ name: [c1], siblings: true }, { name: [cRare], subcalls: true }], events: [{ name: [eRare], stack: true }] },
    { events: [] },
    { calls: [] },
    {},
    { includeAllBlocks: true },
    { includeAllBlocks: true, calls: [{ name: ['No.such_call'] }] },
    { evmLogs: [{}], ethereumTransactions: [{}], events: [{ name: ['EVM.Log'] }] },
    { evmLogs: [{ address: [] }], ethereumTransactions: [{ to: [], extrinsic: true }] },
    { contractsEvents: [{}], gearMessagesQueued: [{}], gearMessagesEnqueued: [{}], gearUserMessagesSent: [{}], reviveContractEmitted: [{}] },
  ]
  // Each case on one of the first three ranges, taking turns: the set rules do not depend on the
  // range, and each range still meets several cases. Each case runs on two of the four datasets
  // (every other one, by index): they do not depend on the chain either, and each dataset still
  // meets half of them (each with that dataset's frequent and rare names).
  for (const [i, c] of setCases.entries()) if ((i + part) % 2 === 0) add(`set ${JSON.stringify(c).slice(0, 140)}`, ranges[i % 3], { fields, ...c })
  // Identifier fields set to false stay; no fields at all.
  add('identifiers false', ranges[0], {
    events: [{}], calls: [{ extrinsic: true }],
    fields: { block: { number: false, hash: false, parentHash: false }, event: { index: false, extrinsicIndex: false, callAddress: false }, call: { address: false, extrinsicIndex: false }, extrinsic: { index: false } },
  })
  add('no fields', ranges[1], { events: [{ call: true }], calls: [{ extrinsic: true }] })
  // Invalid requests → 400.
  add('invalid hex', ranges[0], { evmLogs: [{ address: ['0xzz'] }] })
  add('hex without prefix', ranges[0], { ethereumTransactions: [{ to: ['abcd'] }] })
  add('subcalls on ethereumTransactions', ranges[0], { ethereumTransactions: [{ subcalls: true }] })
  add('name on evmLogs', ranges[0], { evmLogs: [{ name: ['EVM.Log'] }] })
  add('call on calls', ranges[0], { calls: [{ call: true }] })

  // 4. Random combinations: several requests of several lists, relation flags, field subsets,
  //    includeAllBlocks, ranges.
  //    Sections 1–3 already run every filter key and relation flag of every list alone and every
  //    set rule; these only add mixes of them, so 8 per dataset (32 in all) do.
  for (let i = 0; i < 8; i++) {
    const range = r.pick(ranges)
    const blocks = inRange(data, range)
    const q: Obj = { fields: randomFields(r) }
    const nReq = 1 + r.int(4)
    for (let j = 0; j < nReq; j++) {
      const list = r.chance(0.85) ? r.pick(lists) : r.pick(LIST_NAMES)
      ;(q[list] ??= []).push(randomRequest(r, list, blocks, data))
    }
    if (r.chance(0.3)) q.includeAllBlocks = r.chance(0.7)
    add(`random #${i}`, range, q)
  }
  return out
}

// ------------------------------------------------------------------------------------ the test

describe('Substrate queries against the reference evaluation (recorded Sidecar blocks + a synthetic nested block, router + 2 workers)', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  const served = new Map<Dataset, Served>()
  const raw = new Map<Dataset, any[]>()
  let nestedCallAddresses: (number[] | null | undefined)[]
  const stats = newStats()
  const generated = new Map<Dataset, GenQuery[]>()

  before(async () => {
    tmp = await tempDir('ba-substrate-ref-')
    for (const chain of CHAINS) raw.set(chain, rawBlocks(chain))
    // The synthetic dataset: recorded kusama 8113510 and the nested version of 13556605.
    const kusama = raw.get('kusama')!
    const nested = nestedBlock(kusama.find((b) => Number(b.number) === 13556605), kusama.find((b) => Number(b.number) === 6566865).extrinsics[1])
    nestedCallAddresses = nested.callAddresses
    raw.set(NESTED, [kusama.find((b) => Number(b.number) === 8113510), nested.block])
    const fixtures = path.join(tmp.dir, 'fixtures')
    const blocksDir = path.join(fixtures, 'substrate', 'substrate-api-sidecar', 'decoded-blocks', NESTED, 'blocks')
    await mkdir(blocksDir, { recursive: true })
    for (const b of raw.get(NESTED)!) await writeFile(path.join(blocksDir, `${Number(b.number)}.json`), JSON.stringify(b))

    const store = path.join(tmp.dir, 'store')
    for (const name of DATASETS) {
      const opts = name === NESTED ? { workers: 0, fixturesDir: fixtures } : { workers: 0 }
      const r = await ingestRecordedSidecar(path.join(store, name), name, name as SidecarChain, opts)
      assert.equal(r.blocks, raw.get(name)!.length, name)
    }
    const want = Object.fromEntries(DATASETS.map((name) => [name, Math.max(...raw.get(name)!.map((b) => Number(b.number)))]))
    // A small size budget: answers over several blocks stop early and the walk continues.
    let heights: Record<string, number>
    ;({ cluster, heights } = await startServed(store, want, { concurrency: 4, queue: 64, budgets: { sizeBytes: 30_000 }, ...STATIC_DATA_TIMERS }))
    for (const name of DATASETS) {
      const height = heights[name]
      assert.equal(height, want[name], name)
      const s: Served = { name, base: cluster.datasets.get(name)!, height, chunks: readLayout(path.join(store, name)), data: [], workerUrls: new Map(), stats, reference: SUBSTRATE_REFERENCE }
      s.data = await fetchFull(s)
      served.set(name, s)
    }
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('the full answer agrees with the recorded Sidecar JSON (read directly)', () => {
    let blocks = 0
    let extrinsics = 0
    let events = 0
    let calls = 0
    for (const name of DATASETS) {
      const s = served.get(name)!
      for (const c of s.chunks) assert.deepEqual(c.tables, ['blocks', 'calls', 'events', 'extrinsics'], `${name}: chunk tables`)
      const source = raw.get(name)!
      assert.deepEqual(s.data.map((b) => b.header.number), source.map((b) => Number(b.number)), `${name}: blocks`)
      for (const [i, rb] of source.entries()) {
        const b = s.data[i]
        const w = `${name} ${rb.number}`
        assert.deepEqual([b.header.hash, b.header.parentHash], [rb.hash.toLowerCase(), rb.parentHash.toLowerCase()], `${w} header`)
        // extrinsics: count, index, hash, success
        assert.deepEqual(b.extrinsics.map((x) => [x.index, x.hash, x.success]), rb.extrinsics.map((x: any, j: number) => [j, x.hash.toLowerCase(), x.success]), `${w} extrinsics`)
        // events: names in System.Events order, phase, extrinsic
        const re = rawEvents(rb)
        assert.deepEqual(b.events.map((e) => [e.index, e.name, e.phase, e.extrinsicIndex]), re.map((r, j) => [j, rawEventName(r.e), r.phase, r.ex]), `${w} events`)
        // no callAddress: events outside extrinsics, the closing System.ExtrinsicSuccess / ExtrinsicFailed
        // and every event of a failed extrinsic (squid's parser, the node source); every other event has one
        for (const e of b.events) {
          const none = e.extrinsicIndex === null || /^System\.Extrinsic(Success|Failed)$/.test(e.name) || !rb.extrinsics[e.extrinsicIndex].success
          assert.equal(e.callAddress === null, none, `${w} event ${e.index} (${e.name}): callAddress ${JSON.stringify(e.callAddress)}`)
        }
        // calls: one tree per extrinsic as the args describe it, in (extrinsicIndex, address) order
        const expCalls = rb.extrinsics.flatMap((x: any, j: number) => rawCallTree(x).map((c) => [j, c.address, c.name]))
        assert.deepEqual(b.calls.map((c) => [c.extrinsicIndex, c.address, c.name]), expCalls, `${w} calls`)
        for (const k of KINDS) {
          const arr: Obj[] = b[OUTPUT_KEY[k]]
          assert.ok(arr.every((x, j) => j === 0 || COMPARE[k](arr[j - 1], x) < 0), `${w} ${OUTPUT_KEY[k]} out of order`)
        }
        // every event's call exists (the emitting call of an event in an extrinsic is a call of the tree)
        for (const e of b.events.filter((e) => e.callAddress !== null)) {
          assert.ok(b.calls.some((c) => c.extrinsicIndex === e.extrinsicIndex && JSON.stringify(c.address) === JSON.stringify(e.callAddress)), `${w} event ${e.index}: no call at ${JSON.stringify(e.callAddress)}`)
        }
        // the values the special lists filter on, from the args, against the raw JSON
        for (const [j, r] of re.entries()) {
          if (rawEventName(r.e) !== 'EVM.Log') continue
          const log = evmLogOf(b.events[j].args)!
          assert.deepEqual([log.address, log.topics], [r.e.data[0].address.toLowerCase(), r.e.data[0].topics.map((t: string) => t.toLowerCase())], `${w} EVM.Log ${j}`)
        }
        for (const c of b.calls.filter((c) => c.name === 'Ethereum.transact')) {
          const tx = Object.values(rb.extrinsics[c.extrinsicIndex].args.transaction)[0] as any
          assert.deepEqual(ethereumTransactOf(c.args), { to: tx.action.call?.toLowerCase() ?? null, sighash: tx.input.slice(0, 10).toLowerCase() }, `${w} Ethereum.transact ${c.extrinsicIndex}`)
        }
        blocks++
        extrinsics += b.extrinsics.length
        events += b.events.length
        calls += b.calls.length
      }
    }
    // The synthetic block: the events on the calls the runtime's order puts them on.
    const nb = served.get(NESTED)!.data[1]
    nestedCallAddresses.forEach((a, j) => {
      if (a !== undefined) assert.deepEqual(nb.events[j].callAddress, a, `${NESTED} event ${j} (${nb.events[j].name})`)
    })
    const moonbeam = served.get('moonbeam')!.data[0]
    assert.equal(moonbeam.events.filter((e) => e.name === 'EVM.Log').length, 9)
    assert.equal(moonbeam.calls.filter((c) => c.name === 'Ethereum.transact').length, 9)
    assert.ok(served.get('polkadot')!.data.some((b) => b.calls.some((c) => c.name === 'Multisig.as_multi')))
    assert.ok(served.get('kusama')!.data.some((b) => b.extrinsics.some((x) => !x.success)))
    console.log(`# substrate reference: full answer of ${blocks} blocks (${DATASETS.join(', ')}): ${extrinsics} extrinsics, ${calls} calls, ${events} events checked against the Sidecar JSON`)
  })

  it('generated queries: every filter, relation, set rule, field selection and range', async () => {
    const t0 = performance.now()
    const before = { ...stats }
    let total = 0
    let nonEmpty = 0
    for (const [i, name] of DATASETS.entries()) {
      const s = served.get(name)!
      const queries = generateQueries(s.data, 20240700 + i, i)
      generated.set(name, queries)
      total += queries.length
      nonEmpty += await walkAll(s, queries)
    }
    const secs = ((performance.now() - t0) / 1000).toFixed(1)
    const d = (k: keyof Stats) => stats[k] - before[k]
    console.log(
      `# substrate reference: ${total} generated queries (${DATASETS.map((n) => `${n} ${generated.get(n)!.length}`).join(', ')}; ${nonEmpty} selecting items), ` +
        `${d('requests')} requests, ${d('answers')} answers compared, ${d('items')} items compared, ${d('refusals')} expected 400s, ${secs} s`,
    )
    // The cover: on each dataset every filter key (that has values in the data) and every relation
    // flag of every list with data runs alone.
    for (const name of DATASETS) {
      const single = (list: string) => generated.get(name)!.map((g) => g.q).filter((q) => q[list]?.length === 1).map((q) => q[list][0])
      for (const list of listsWithData(served.get(name)!.data)) {
        const flags = Object.keys(LISTS[list].relations)
        for (const key of Object.keys(LISTS[list].filters).filter((k) => valuesOf(served.get(name)!.data, list, k).length > 0)) assert.ok(single(list).some((req) => Object.keys(req).join() === key), `${name}: ${list}.${key} alone`)
        for (const flag of flags) assert.ok(single(list).some((req) => req[flag] === true && flags.filter((f) => req[f]).length === 1), `${name}: ${list}.${flag} alone`)
      }
    }
    assert.ok(total >= 300, `${total} queries`)
    assert.ok(nonEmpty >= total / 2, `only ${nonEmpty} of ${total} queries selected items`)
    // Some answers stopped early (the walk continued inside a range).
    assert.ok(d('answers') > d('queries') - d('refusals'))

    // The relations are not "same extrinsic" (nor same depth / same call) on the data.
    const tallies = relationTallies([...served.values()].map((s) => ({ data: s.data, queries: generated.get(s.name)! })))
    const line = [...tallies.entries()].filter(([, t]) => t.cases > 0).map(([k, t]) => `${k} ${t.cases}/${t.notSameExtrinsic}/${t.notAlternative}`).join(', ')
    console.log(`# substrate relations (single-request queries selecting something / strict subset of same extrinsic / differing from the alternative rule): ${line}`)
    const need: [string, keyof RelationTally][] = [
      ['calls.stack', 'notSameExtrinsic'],
      ['calls.subcalls', 'notSameExtrinsic'],
      ['calls.siblings', 'notSameExtrinsic'],
      ['calls.siblings', 'notAlternative'], // ≠ same depth
      ['calls.events', 'notSameExtrinsic'],
      ['calls.events', 'notAlternative'], // ≠ the call's own events only
      ['events.call', 'notSameExtrinsic'],
      ['events.stack', 'notSameExtrinsic'],
      ['events.stack', 'notAlternative'], // ≠ the emitting call only
      ['ethereumTransactions.events', 'cases'],
      ['evmLogs.call', 'cases'],
    ]
    for (const [k, what] of need) assert.ok((tallies.get(k)?.[what] ?? 0) >= 2, `${k}: ${what} ${tallies.get(k)?.[what]}`)
  })

  it('the real queries of fixtures/queries/moonbeam, re-based onto the data', async () => {
    const fixtures = loadQueries(QUERIES)
    assert.equal(fixtures.length, 10)
    const before = { ...stats }
    const selecting = new Map<Dataset, Set<string>>()
    let walks = 0
    for (const name of DATASETS) {
      const s = served.get(name)!
      selecting.set(name, new Set())
      // Every real query on the whole range and on one single block, the block taking turns across
      // the queries: each query still runs on every dataset twice (re-based onto the values of the
      // range), and each block of a dataset still meets several queries; the same query on every
      // other block only repeats the same filters and relations. A dataset of one block (moonbeam)
      // has the same values and the same answer on both: the whole range only.
      const blocks = s.data.map((b) => ({ fromBlock: b.header.number, toBlock: b.header.number }))
      for (const [fi, { name: qn, query }] of fixtures.entries()) {
        for (const range of [{ fromBlock: 0, toBlock: s.height }, ...(blocks.length > 1 ? [blocks[fi % blocks.length]] : [])]) {
          const q = rebase(query, s.data, range)
          // The shape stays: same keys, same number of requests, same flags, same selection.
          assert.deepEqual(Object.keys(q).sort(), Object.keys(query).sort(), qn)
          for (const l of LIST_NAMES) assert.equal(q[l]?.length, query[l]?.length, qn)
          assert.deepEqual(q.fields, query.fields)
          const got = await walkServed(s, q, `fixture ${qn} on [${range.fromBlock}, ${range.toBlock}]`)
          walks++
          if (itemCount(got) > 0) selecting.get(name)!.add(qn)
        }
      }
    }
    const d = (k: keyof Stats) => stats[k] - before[k]
    console.log(
      `# substrate reference: ${fixtures.length} real queries, ${walks} re-based walks, ${d('answers')} answers, ${d('items')} items compared, ${d('refusals')} expected 400s; selecting items: ` +
        DATASETS.map((n) => `${n} ${selecting.get(n)!.size}`).join(', '),
    )
    // On moonbeam every real query applies (calls/events by name are re-based onto names that occur).
    assert.equal(selecting.get('moonbeam')!.size, fixtures.length, [...selecting.get('moonbeam')!].join(', '))
    console.log(`# substrate reference total: ${stats.queries} queries, ${stats.requests} requests, ${stats.answers} answers, ${stats.items} items compared`)
  })

  it('the reference itself: relation rules on the synthetic tree', () => {
    const b = served.get(NESTED)!.data[1]
    const calls = (xs: Obj[]) => xs.map((c) => `${c.extrinsicIndex}:${JSON.stringify(c.address)}`)
    const x3 = (request: Obj, at: string) => matchedItems(b, 'calls', request).filter((c) => c.extrinsicIndex === 3 && JSON.stringify(c.address) === at)
    const rel = (request: Obj, at: string, flag: string) => relatedItems(b, 'calls', flag, x3(request, at))
    const payout = { name: ['Staking.payout_stakers'] }
    assert.deepEqual(calls(b.calls.filter((c) => c.extrinsicIndex === 3)), ['[]', '[0]', '[0,0]', '[0,1]', '[1]', '[1,0]', '[2]', '[2,0]'].map((a) => `3:${a}`))
    assert.deepEqual(calls(rel(payout, '[0,1]', 'siblings')), ['3:[0,0]', '3:[0,1]'])
    assert.deepEqual(calls(rel(payout, '[1,0]', 'siblings')), ['3:[1,0]'])
    assert.deepEqual(calls(rel({ name: ['Utility.batch'] }, '[0]', 'siblings')), ['3:[0]', '3:[1]', '3:[2]'])
    assert.deepEqual(calls(rel({ name: ['Utility.batch'] }, '[]', 'siblings')), ['3:[]'])
    assert.deepEqual(calls(rel({ name: ['Balances.transfer_keep_alive'] }, '[2,0]', 'stack')), ['3:[]', '3:[2]'])
    assert.deepEqual(calls(rel({ name: ['Balances.transfer_keep_alive'] }, '[2,0]', 'siblings')), ['3:[2,0]'])
    assert.deepEqual(calls(rel({ name: ['Utility.batch'] }, '[0]', 'subcalls')), ['3:[0,0]', '3:[0,1]'])
    assert.deepEqual(calls(rel({ name: ['Utility.batch'] }, '[]', 'subcalls')).length, 7)
    const evs = rel({ name: ['Utility.batch'] }, '[0]', 'events')
    assert.deepEqual(evs.map((e) => JSON.stringify(e.callAddress)), ['[0,0]', '[0,0]', '[0,0]', '[0]', '[0,1]', '[0,1]', '[0]', '[0]'])
    // `events` of the root call: every event of the extrinsic but the closing ExtrinsicSuccess (no call address)
    const own = b.events.filter((e) => e.extrinsicIndex === 3)
    const closing = own.filter((e) => e.callAddress === null)
    assert.deepEqual(closing.map((e) => e.name), ['System.ExtrinsicSuccess'])
    assert.deepEqual(closing, [own.at(-1)])
    assert.deepEqual(rel({ name: ['Utility.batch'] }, '[]', 'events'), own.slice(0, -1))
    // the closing event reaches its extrinsic, but no call and no stack
    assert.deepEqual(relatedItems(b, 'events', 'extrinsic', closing).map((x) => x.index), [3])
    for (const flag of ['call', 'stack']) assert.deepEqual(relatedItems(b, 'events', flag, closing), [])
    // events outside extrinsics have no extrinsic, call or stack
    const outside = matchedItems(b, 'events', {}).filter((e) => e.extrinsicIndex === null)
    assert.equal(outside.length, 3)
    for (const flag of ['extrinsic', 'call', 'stack']) assert.deepEqual(relatedItems(b, 'events', flag, outside), [])
  })
})
