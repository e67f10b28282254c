import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { WorkerServer } from '../src/server/worker-http.js'
import type { EvmBlockBundle } from '../src/ingest/evm/normalize.js'
import { anvilBundle, anvilRecords, REPO_ROOT, tempDir, writeDataset, startStandaloneWorker } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'
import { checkFullAgainstSource, fetchFull, mainnetBundles, writeBundleDataset } from './helpers/reference-data.js'
import {
  ALL_FIELDS,
  FILTERS,
  KINDS,
  RELATIONS,
  REQUEST_KEY,
  byFrequency,
  evaluate,
  firstDifference,
  involvedKinds,
  itemsOf,
  type FullBlock,
  type Kind,
  type Obj,
} from './helpers/reference-evm.js'
import { loadQueries, rebase, type RebaseRange } from './helpers/reference-rebase.js'

/*
 * Filters and relations (docs/protocol.md §3.1, §3.2, §3.3, §3.4, §3.5, §3.6, §3.7; docs/protocol.md §3.6, §5) checked against an
 * independent evaluation: everything is fetched once with empty-filter requests through a real
 * worker over HTTP, checked against the source rows, then every query's answer is computed in plain
 * TypeScript (helpers/reference-evm.ts) and compared with the worker's.
 *
 * Queries: the real ones in fixtures/queries/ethereum re-based onto the data, one query per filter key
 * (with values in upper/mixed case), relation flags over partial matches, set rules (union, null,
 * empty list) and a 20,000-address IN list. Data: the recorded anvil chain's first 64 blocks (traces and state diffs)
 * and two recorded mainnet blocks as a sparse dataset (a gap before, between and after them, one
 * chunk without a traces table).
 */

const FIXTURES = path.join(REPO_ROOT, 'fixtures/queries/ethereum')

interface Dataset {
  url: string
  data: FullBlock[]
  /** Range for multi-block queries. */
  range: RebaseRange
  /**
   * First block from which the chunks have the table of an item kind (absent: from the start;
   * Infinity: never). The engine answers 400 to a query that needs a table its first chunk lacks.
   */
  availableFrom: Partial<Record<Kind, number>>
}

async function query(url: string, q: Obj): Promise<Obj[]> {
  const res = await postJson(url, q)
  assert.equal(res.status, 200, `${res.status}: ${res.text.slice(0, 500)}\nquery: ${JSON.stringify(q).slice(0, 1000)}`)
  assert.equal(res.headers['content-type'], 'application/json')
  return JSON.parse(res.text)
}

/**
 * POST `q` and compare with the reference evaluation; returns the answer. A query needing an item
 * kind whose table the first chunk of its range lacks must be refused with a 400; it is then moved
 * to where the table exists (if it does within the range).
 */
async function check(ds: Dataset, q: Obj, what = ''): Promise<Obj[]> {
  const needs = Math.max(q.fromBlock, ...[...involvedKinds(q)].map((k) => ds.availableFrom[k] ?? 0))
  if (needs > q.fromBlock) {
    const res = await postJson(ds.url, q)
    assert.equal(res.status, 400, `${what}: a query needing a table the data lacks answered ${res.status}: ${res.text.slice(0, 300)}`)
    assert.equal(res.headers['content-type']?.split(';')[0], 'application/json')
    const body = JSON.parse(res.text)
    assert.ok(typeof body.error === 'string' && typeof body.message === 'string', res.text)
    if (needs > (q.toBlock ?? Infinity) || needs === Infinity) return []
    q = { ...q, fromBlock: needs }
  }
  const expected = evaluate(ds.data, q)
  const got = await query(ds.url, q)
  const diff = firstDifference(got, expected)
  assert.equal(diff, undefined, `${what}\n${diff}\nquery: ${JSON.stringify(q).slice(0, 1500)}`)
  return got
}

const itemCount = (blocks: Obj[]) => blocks.reduce((n, b) => n + KINDS.reduce((m, k) => m + (b[REQUEST_KEY[k]]?.length ?? 0), 0), 0)

/** `n` valid addresses that are not in the data (deterministic). */
function fakeAddresses(n: number, salt: string): string[] {
  return Array.from({ length: n }, (_, i) => '0x' + createHash('sha256').update(`${salt}:${i}`).digest('hex').slice(0, 40))
}

/** Mixed upper/lower case of a hex value (as a checksummed address would be). */
const mixedCase = (v: string) => (v.startsWith('0x') ? '0x' + [...v.slice(2)].map((c, i) => (i % 2 ? c.toUpperCase() : c)).join('') : v)

/** The tests shared by both datasets. */
/**
 * `largeInList`: whether the 20,000-address list runs here; it runs on the anvil chain only (four
 * chunks: the list meets chunk borders), the sparse dataset's blocks add nothing to what it tests.
 */
function semantics(getDs: () => Dataset, opts: { minFixtureItems: number; largeInList: boolean }) {
  const fixtures = loadQueries(FIXTURES)

  it('re-based real queries (fixtures/queries/ethereum) give the reference answer', async () => {
    const ds = getDs()
    let nonEmpty = 0
    for (const { name, query: fixture } of fixtures) {
      const q = rebase(fixture, ds.data, ds.range)
      const got = await check(ds, q, `fixture ${name}`)
      if (itemCount(got) > 0) nonEmpty++
      // Keep the shape: same keys, same number of requests.
      assert.deepEqual(Object.keys(q).sort(), [...new Set([...Object.keys(fixture), 'fromBlock'])].sort(), name)
      for (const kind of KINDS) assert.equal(q[REQUEST_KEY[kind]]?.length, fixture[REQUEST_KEY[kind]]?.length, name)
    }
    // The re-basing must make the queries select something, or the comparison proves little.
    assert.ok(nonEmpty >= opts.minFixtureItems, `only ${nonEmpty} of ${fixtures.length} re-based queries selected items`)
  })

  it('each list filter alone, with values as stored and in mixed case', async () => {
    const ds = getDs()
    const { fromBlock, toBlock } = ds.range
    const miss = fakeAddresses(1, 'miss')[0]
    let matched = 0
    for (const kind of KINDS) {
      const items = itemsOf(ds.data.filter((b) => b.header.number >= fromBlock && b.header.number <= toBlock), kind).map((x) => x.item)
      for (const [key, f] of Object.entries(FILTERS[kind])) {
        if (f.kind !== 'in') continue
        const top = byFrequency(items.map(f.get)).slice(0, 2)
        // Hex values: the most frequent as stored, the second (or the first again) in mixed case, in
        // one list: each spelling must select its items, which the reference checks item by item.
        const hex = f.values === 'hex' || f.values === 'lower'
        const list: unknown[] =
          f.values === 'int' ? [...top, 999] : hex ? [...top.slice(0, 1), ...top.slice(0, 2).slice(-1).map((v) => mixedCase(v as string)), miss] : [...top, f.values === 'exact' ? 'no-such-value' : miss]
        const q = { fromBlock, toBlock, [REQUEST_KEY[kind]]: [{ [key]: list }], fields: ALL_FIELDS }
        const got = await check(ds, q, `${REQUEST_KEY[kind]}.${key}`)
        if (itemCount(got) > 0) matched++
      }
    }
    assert.ok(matched >= 10, `only ${matched} filter queries matched anything`)
  })

  it('range bounds and flags: firstNonce/lastNonce, *NonZero true and false', async () => {
    const ds = getDs()
    const { fromBlock, toBlock } = ds.range
    const nonces = itemsOf(ds.data, 'transaction').map((x) => Number(x.item.nonce)).sort((a, b) => a - b)
    const mid = nonces[Math.floor(nonces.length / 2)]
    const fields = { transaction: { nonce: true, from: true } }
    for (const r of [{ firstNonce: mid }, { lastNonce: mid }, { firstNonce: mid, lastNonce: mid + 5 }, { firstNonce: 0, lastNonce: 0 }, { firstNonce: mid + 1, lastNonce: mid }]) {
      await check(ds, { fromBlock, toBlock, transactions: [r], fields }, JSON.stringify(r))
    }
    const traceFields = { trace: { callValue: true, createValue: true, suicideBalance: true, rewardValue: true, callCallType: true } }
    for (const key of ['createValueNonZero', 'callValueNonZero', 'suicideBalanceNonZero', 'rewardValueNonZero']) {
      for (const v of [true, false]) {
        await check(ds, { fromBlock, toBlock, traces: [{ [key]: v }], fields: traceFields }, `${key}: ${v}`)
      }
    }
  })

  it('every relation flag, from partial matches', async () => {
    const ds = getDs()
    const { fromBlock, toBlock } = ds.range
    const inRange = ds.data.filter((b) => b.header.number >= fromBlock && b.header.number <= toBlock)
    const fields = {
      transaction: { hash: true },
      log: { address: true, topics: true },
      trace: { callTo: true, callSighash: true, subtraces: true },
      stateDiff: { next: true },
    }
    // Source requests: one of the 3 most frequent values of one filter key per kind (each a strict
    // subset), the value taking turns across the flags. Every flag of every kind still runs from a
    // partial match, and each of the values still seeds some flag; the same flag from the other
    // values only repeats the same relation.
    const seeds: Record<Kind, string> = { transaction: 'to', log: 'topic0', trace: 'callTo', stateDiff: 'address' }
    let related = 0
    for (const kind of KINDS) {
      const key = seeds[kind]
      const f = FILTERS[kind][key] as { get: (i: Obj) => unknown }
      const values = byFrequency(itemsOf(inRange, kind).map((x) => f.get(x.item))).slice(0, 3)
      for (const [fi, flag] of Object.keys(RELATIONS[kind]).entries()) {
        for (const value of values.length ? [values[fi % values.length]] : []) {
          const q = { fromBlock, toBlock, [REQUEST_KEY[kind]]: [{ [key]: [value], [flag]: true }], fields }
          const got = await check(ds, q, `${REQUEST_KEY[kind]}[{${key}: ${value}, ${flag}}]`)
          const target = RELATIONS[kind][flag].target
          if (target !== kind && got.some((b) => b[REQUEST_KEY[target]].length > 0)) related++
        }
      }
    }
    assert.ok(related >= 5, `relations pulled in items in only ${related} queries`)
  })

  it('union across requests and kinds, each item once; null = absent; [] matches nothing; {} everything', async () => {
    const ds = getDs()
    const { fromBlock, toBlock } = ds.range
    const logs = itemsOf(ds.data, 'log').map((x) => x.item)
    const [t0, t1] = byFrequency(logs.map((l) => l.topics[0]))
    const [a0] = byFrequency(logs.map((l) => l.address))
    const fields = { log: { address: true, topics: true }, transaction: { from: true } }
    const cases: Obj[] = [
      // Overlapping requests of one kind, and a relation pulling in items another request matched.
      { logs: [{ topic0: [t0] }, { address: [a0] }, { topic0: [t0], address: [a0] }, { topic0: [t1 ?? t0], transaction: true }], transactions: [{ logs: true }] },
      // Repeated values (also in another letter case) select each item once.
      { logs: [{ address: [a0, a0, mixedCase(a0)], topic0: [t0, mixedCase(t0), t0] }] },
      // null applies no condition.
      { logs: [{ address: null, topic0: [t0], topic1: null }] },
      { logs: [{ topic0: [t0], transaction: false }] },
      // An empty list matches nothing, other requests are unaffected; the kind is still involved.
      { logs: [{ topic0: [] }, { address: [a0], topic1: [] }], transactions: [{ from: [] , logs: true }] },
      { logs: [{ topic0: [] }], transactions: [{}] },
      // A relation of a request that matches nothing still involves its kind.
      { logs: [{ topic0: [], transaction: true, transactionTraces: true }] },
      { traces: [{ callTo: [], subtraces: true }], stateDiffs: [{ kind: [], transaction: true }] },
      // {} matches everything, with and without includeAllBlocks.
      { logs: [{}], includeAllBlocks: false },
      { stateDiffs: [{}], traces: [{}] },
      // No request at all: only the first and last block, or every block.
      {},
      { includeAllBlocks: true },
    ]
    for (const c of cases) {
      const q = { fromBlock, toBlock, fields, ...c }
      const got = await check(ds, q, JSON.stringify(c))
      for (const b of got) {
        for (const k of KINDS) {
          const arr: Obj[] | undefined = b[REQUEST_KEY[k]]
          if (!arr) continue
          const keys = arr.map((i) => JSON.stringify(i))
          assert.equal(new Set(keys).size, keys.length, `block ${b.header.number}: ${REQUEST_KEY[k]} repeated`)
        }
      }
    }
  })

  it('trace action/result nesting: only the trace type\'s selectors, nulls and all-null result omitted', async () => {
    const ds = getDs()
    const { fromBlock, toBlock } = ds.range
    const selections: Obj[] = [
      { callFrom: true },
      { createResultAddress: true, createResultCode: true, callResultOutput: true },
      { callResultGasUsed: true, error: true, revertReason: true },
      { suicideRefundAddress: true, rewardAuthor: true, callCallType: true, callType: true },
      { subtraces: true, createInit: true, callInput: true },
    ]
    for (const trace of selections) {
      await check(ds, { fromBlock, toBlock, traces: [{}], fields: { trace } }, JSON.stringify(trace))
    }
  })

  it('identifier fields are present whatever the selection, also when set to false', async () => {
    const ds = getDs()
    const { fromBlock, toBlock } = ds.range
    const fields = {
      block: { number: false, hash: false, parentHash: false, timestamp: true },
      transaction: { transactionIndex: false, hash: true },
      log: { logIndex: false, transactionIndex: false },
      trace: { traceAddress: false, type: false, transactionIndex: true },
      stateDiff: { key: false, kind: false, address: false, transactionIndex: false, next: true },
    }
    await check(ds, { fromBlock, toBlock, transactions: [{}], logs: [{}], traces: [{}], stateDiffs: [{}], fields }, 'ids set to false')
    const got = await check(ds, { fromBlock, toBlock, transactions: [{}], logs: [{}], fields }, 'ids set to false')
    assert.ok(got.length > 0 && 'number' in got[0].header && 'logIndex' in got.find((b) => b.logs.length > 0)!.logs[0])
  })

  if (opts.largeInList) it('a 20,000-address IN list with a few real addresses, in mixed case', async () => {
    const ds = getDs()
    const { fromBlock, toBlock } = ds.range
    const logAddresses = byFrequency(itemsOf(ds.data, 'log').map((x) => x.item.address as string))
    const toAddresses = byFrequency(itemsOf(ds.data, 'transaction').map((x) => x.item.to as string))
    const list = fakeAddresses(20_000, 'large-in')
    // A few real ones, spread through the list.
    const real = [...logAddresses.slice(0, 2), ...logAddresses.slice(-1), ...toAddresses.slice(0, 2)]
    real.forEach((a, i) => list.splice(3000 * (i + 1), 0, i % 2 ? mixedCase(a) : a))
    const q = {
      type: 'evm',
      fromBlock,
      toBlock,
      logs: [{ address: list, transaction: true }],
      transactions: [{ to: list }],
      fields: { log: { address: true, logIndex: true, transactionIndex: true }, transaction: { to: true, hash: true }, block: { number: true, hash: true, parentHash: true } },
    }
    const got = await check(ds, q, 'large IN list')
    assert.ok(itemCount(got) > 0, 'the real addresses matched nothing')
  })
}

describe('query semantics over the recorded anvil chain', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let worker: WorkerServer
  let ds: Dataset
  let bundles: EvmBlockBundle[]

  before(async () => {
    tmp = await tempDir('ba-semantics-')
    // 64 blocks: the contract deployments of blocks 1–7, then the chain's 3-block cycle of
    // transfers (the recorded blocks above 64 repeat it). Chunks of 16 blocks: queries cross chunk
    // boundaries, first/last blocks fall inside chunks.
    const records = (await anvilRecords()).slice(0, 64)
    bundles = records.map(anvilBundle)
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    worker = await startStandaloneWorker(tmp.dir)
    const url = `${worker.url}/datasets/anvil/query`
    // Queries over blocks 3–40: three chunks, both ends inside a chunk, the deployments and the
    // transfer cycle (the blocks above only repeat the cycle).
    ds = { url, data: await fetchFull(url, 0), range: { fromBlock: 3, toBlock: 40 }, availableFrom: {} }
  })

  after(async () => {
    await worker?.stop()
    await tmp?.cleanup()
  })

  it('the full answer holds exactly the source rows (the reference starts from them)', () => {
    checkFullAgainstSource(ds.data, bundles)
    assert.ok(ds.data.some((b) => b.traces.some((t) => t.traceAddress.length > 1)), 'no nested traces in the data')
    assert.ok(ds.data.some((b) => b.stateDiffs.length > 0), 'no state diffs in the data')
  })

  it('the full answer of a sub-range is the sub-range of the full answer', async () => {
    const part = await fetchFull(ds.url, 17, 40)
    assert.deepEqual(part, ds.data.filter((b) => b.header.number >= 17 && b.header.number <= 40))
  })

  semantics(() => ds, { minFixtureItems: 25, largeInList: true })

  it('logs_from_transaction_and_request_uppercase selects what the lower-case query selects', async () => {
    const fixture = loadQueries(FIXTURES).find((f) => f.name === 'logs_from_transaction_and_request_uppercase')!.query
    const upper = rebase(fixture, ds.data, ds.range)
    assert.ok(JSON.stringify(upper.logs).match(/[A-F]/) && JSON.stringify(upper.transactions).match(/[A-F]/), 'the re-based query lost its upper case')
    const lower = JSON.parse(JSON.stringify(upper).replace(/"0x[0-9a-fA-F]+"/g, (s) => s.toLowerCase()))
    const got = await check(ds, upper, 'upper case')
    assert.ok(itemCount(got) > 0)
    assert.deepEqual(got, await query(ds.url, lower))
  })
})

describe('query semantics over recorded mainnet blocks (sparse dataset)', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let worker: WorkerServer
  let ds: Dataset
  let bundles: EvmBlockBundle[]

  before(async () => {
    tmp = await tempDir('ba-semantics-main-')
    bundles = await mainnetBundles()
    // Two chunks: 18000000 without a traces table, 18500000 with its traces. Blocks below, between
    // and above do not exist.
    await writeBundleDataset(path.join(tmp.dir, 'mainnet'), 'mainnet', [[bundles[0]], [bundles[1]]])
    worker = await startStandaloneWorker(tmp.dir)
    const url = `${worker.url}/datasets/mainnet/query`
    // fromBlock in the gap below the first chunk: the answer starts at the first existing block.
    const b1 = parseInt(bundles[0].block.number, 16)
    const data = [...(await fetchFull(url, 17_000_000, b1, ['transaction', 'log'])), ...(await fetchFull(url, b1 + 1, undefined, ['transaction', 'log', 'trace']))]
    ds = { url, data, range: { fromBlock: 17_999_990, toBlock: 18_600_000 }, availableFrom: { trace: b1 + 1, stateDiff: Infinity } }
  })

  after(async () => {
    await worker?.stop()
    await tmp?.cleanup()
  })

  it('the full answer holds exactly the source rows (the reference starts from them)', () => {
    checkFullAgainstSource(ds.data, bundles)
    assert.equal(ds.data[0].traces.length, 0)
    assert.ok(ds.data[1].traces.length > 100)
  })

  semantics(() => ds, { minFixtureItems: 20, largeInList: false })

  it('ranges that start or end in a gap answer from the existing blocks in them', async () => {
    const fields = { block: { timestamp: true }, log: { address: true } }
    const [b1, b2] = ds.data.map((b) => b.header.number)
    const ranges: [number, number | undefined][] = [
      [b1 - 10, b1],
      [b1 + 1, b2 + 5],
      [b1 - 1, b2 - 1],
      [b1 + 1, undefined],
      [b1, b2],
    ]
    for (const [fromBlock, toBlock] of ranges) {
      for (const includeAllBlocks of [true, false]) {
        const q = { fromBlock, ...(toBlock === undefined ? {} : { toBlock }), includeAllBlocks, logs: [{ topic0: [] }], fields }
        const got = await check(ds, q, `[${fromBlock}, ${toBlock}]`)
        assert.ok(got.length > 0)
      }
    }
  })
})
