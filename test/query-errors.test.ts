import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks } from '../src/chunks/layout.js'
import { ApiError } from '../src/errors.js'
import { evmFamily } from '../src/families/evm.js'
import { prepareQuery } from '../src/query/engine.js'
import type { DatasetView } from '../src/query/types.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { stallTolerant, anvilRecords, tempDir, writeChunk, writeDataset, type AnvilRecord, startStandaloneWorker } from './helpers/dataset.js'
import { postJson, request, type RawAnswer } from './helpers/http.js'
import { FILTERS, KINDS, REQUEST_KEY, type Obj } from './helpers/reference-evm.js'

/*
 * Every error class of the query protocol (docs/protocol.md §1, §2, §3.5, §3.7, §4) through real HTTP against a
 * worker over real chunks of the recorded anvil chain: a dense dataset, and a sparse one with gaps
 * before, between and inside chunks. Each error answer must be JSON `{error, message, path?}` with
 * `content-type: application/json`, and the worker must go on answering afterwards.
 * (Not repeated here, see server-worker.test.ts: 413 with a small body limit, 415 for text/form
 * bodies, 400 for unparsable JSON, 400 above the height, 404 routes.)
 */

const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i)

/** Sparse selection of the anvil chain: blocks 5–9 | 20–29 | 40–44 50–54 (gap inside a chunk) | 100–109. */
const SPARSE_CHUNKS = [range(5, 9), range(20, 29), [...range(40, 44), ...range(50, 54)], range(100, 109)]

describe('query errors', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let worker: WorkerServer
  let dense: string
  let sparse: string

  before(async () => {
    tmp = await tempDir('ba-errors-')
    records = await anvilRecords()
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    const sparseDir = path.join(tmp.dir, 'sparse')
    // The first chunk starts the dataset; the others are appended one by one.
    const existing = await writeDataset(sparseDir, 'sparse', SPARSE_CHUNKS[0].map((n) => records[n]), SPARSE_CHUNKS[0].length)
    for (const c of SPARSE_CHUNKS.slice(1)) await writeChunk(sparseDir, c.map((n) => records[n]), existing)
    // Default body limit (8 MiB) on purpose.
    worker = await startStandaloneWorker(tmp.dir, { queueTimeoutMs: 30_000, budgets: undefined })
    dense = `${worker.url}/datasets/anvil/query`
    sparse = `${worker.url}/datasets/sparse/query`
  })

  after(async () => {
    await worker?.stop()
    await tmp?.cleanup()
  })

  /** The worker still answers a normal query. */
  async function alive(): Promise<void> {
    const res = await postJson(dense, { fromBlock: 7, toBlock: 9, includeAllBlocks: true })
    assert.equal(res.status, 200, `the worker stopped answering: ${res.status} ${res.text.slice(0, 200)}`)
    assert.deepEqual(JSON.parse(res.text).map((b: Obj) => b.header.number), [7, 8, 9])
  }

  /** An error answer as docs/protocol.md §4 says; returns its body. */
  function errorBody(res: RawAnswer, status: number, what: string): Obj {
    assert.equal(res.status, status, `${what}: ${res.status} ${res.text.slice(0, 300)}`)
    assert.equal(res.headers['content-type']?.split(';')[0].trim(), 'application/json', `${what}: content-type`)
    const body = JSON.parse(res.text)
    assert.equal(typeof body.error, 'string', `${what}: error code`)
    assert.ok(/^[a-z0-9-]+$/.test(body.error), `${what}: error code "${body.error}" is not a stable code`)
    assert.equal(typeof body.message, 'string', `${what}: message`)
    assert.ok(body.message.length >= 10, `${what}: message "${body.message}"`)
    if ('path' in body) assert.equal(typeof body.path, 'string', `${what}: path`)
    const allowed = new Set(['error', 'message', 'path', ...(status === 409 ? ['previousBlocks'] : [])])
    for (const k of Object.keys(body)) assert.ok(allowed.has(k), `${what}: unexpected member "${k}"`)
    return body
  }

  async function expect400(q: unknown, what: string, opts: { path?: string | RegExp; message?: RegExp; url?: string } = {}): Promise<Obj> {
    const res = await postJson(opts.url ?? dense, q)
    const body = errorBody(res, 400, what)
    if (typeof opts.path === 'string') assert.equal(body.path, opts.path, `${what}: path in ${res.text}`)
    else if (opts.path) assert.match(String(body.path), opts.path, `${what}: path in ${res.text}`)
    if (opts.message) assert.match(body.message, opts.message, `${what}: message`)
    return body
  }

  async function expect200(q: unknown, what: string, url = dense): Promise<Obj[]> {
    const res = await postJson(url, q)
    assert.equal(res.status, 200, `${what}: ${res.status} ${res.text.slice(0, 300)}`)
    const blocks = JSON.parse(res.text)
    assert.ok(Array.isArray(blocks) && blocks.length > 0, `${what}: empty answer`)
    return blocks
  }

  it('type: absent, evm, eth → EVM; another family or an unknown type → 400', async () => {
    for (const type of [undefined, 'evm', 'eth']) await expect200({ type, fromBlock: 0, toBlock: 1 }, `type ${type}`)
    for (const type of ['substrate', 'starknet']) {
      await expect400({ type, fromBlock: 0, toBlock: 1 }, `type ${type}`, { path: 'type', message: new RegExp(type) })
    }
    for (const type of ['solana', 'EVM', '', 5, true, ['evm'], { evm: true }]) {
      await expect400({ type, fromBlock: 0, toBlock: 1 }, `type ${JSON.stringify(type)}`, { path: 'type' })
    }
    // Request lists of another family are unknown keys here.
    await expect400({ fromBlock: 0, events: [{}] }, 'substrate request on EVM', { path: 'events' })
    await alive()
  })

  it('fromBlock required, integer ≥ 0; toBlock integer ≥ fromBlock', async () => {
    const bad: [Obj, string | undefined][] = [
      [{}, 'fromBlock'],
      [{ toBlock: 5 }, 'fromBlock'],
      [{ fromBlock: -1 }, 'fromBlock'],
      [{ fromBlock: 1.5 }, 'fromBlock'],
      [{ fromBlock: '5' }, 'fromBlock'],
      [{ fromBlock: null }, 'fromBlock'],
      [{ fromBlock: [5] }, 'fromBlock'],
      [{ fromBlock: 2 ** 64 }, 'fromBlock'],
      [{ fromBlock: 0, toBlock: -1 }, 'toBlock'],
      [{ fromBlock: 0, toBlock: 2.5 }, 'toBlock'],
      [{ fromBlock: 0, toBlock: '7' }, 'toBlock'],
      // A range error need not name a path.
      [{ fromBlock: 10, toBlock: 9 }, undefined],
      [{ fromBlock: 10, toBlock: 0 }, undefined],
    ]
    for (const [q, p] of bad) await expect400(q, JSON.stringify(q), { path: p })
    assert.deepEqual((await expect200({ fromBlock: 10, toBlock: 10 }, 'toBlock = fromBlock')).map((b) => b.header.number), [10])
    await alive()
  })

  it('unknown keys at every level → 400 naming the JSON path', async () => {
    const cases: [Obj, string][] = [
      [{ fromBlock: 0, fromBlok: 1 }, 'fromBlok'],
      [{ fromBlock: 0, include_all_blocks: true }, 'include_all_blocks'],
      [{ fromBlock: 0, logs: [{ adress: ['0x00'] }] }, 'logs[0].adress'],
      [{ fromBlock: 0, transactions: [{}, { form: [] }] }, 'transactions[1].form'],
      [{ fromBlock: 0, traces: [{ callToo: [] }] }, 'traces[0].callToo'],
      [{ fromBlock: 0, stateDiffs: [{ kinds: ['+'] }] }, 'stateDiffs[0].kinds'],
      // Relation flags of another request kind.
      [{ fromBlock: 0, stateDiffs: [{ logs: true }] }, 'stateDiffs[0].logs'],
      [{ fromBlock: 0, traces: [{ transactionStateDiffs: true }] }, 'traces[0].transactionStateDiffs'],
      [{ fromBlock: 0, transactions: [{ transaction: true }] }, 'transactions[0].transaction'],
      [{ fromBlock: 0, logs: [{ subtraces: true }] }, 'logs[0].subtraces'],
      // Selectors and field names.
      [{ fromBlock: 0, fields: { blok: { number: true } } }, 'fields.blok'],
      [{ fromBlock: 0, fields: { logs: { address: true } } }, 'fields.logs'],
      [{ fromBlock: 0, fields: { log: { adress: true } } }, 'fields.log.adress'],
      [{ fromBlock: 0, fields: { block: { blockNumber: true } } }, 'fields.block.blockNumber'],
      [{ fromBlock: 0, fields: { trace: { action: true } } }, 'fields.trace.action'],
      [{ fromBlock: 0, fields: { transaction: { blockNumber: true } } }, 'fields.transaction.blockNumber'],
      [{ fromBlock: 0, fields: { stateDiff: { value: true } } }, 'fields.stateDiff.value'],
    ]
    for (const [q, p] of cases) await expect400(q, p, { path: p, message: new RegExp(p.split('.').at(-1)!.replace(/\[\d+\]/g, '')) })
    // Unknown field names are refused even set to false.
    await expect400({ fromBlock: 0, fields: { log: { adress: false } } }, 'unknown field set to false', { path: 'fields.log.adress' })
    await alive()
  })

  it('wrong types → 400 naming the path and the expected type', async () => {
    const cases: [Obj, string | RegExp, RegExp][] = [
      [{ fromBlock: 0, logs: {} }, 'logs', /array|list/i],
      [{ fromBlock: 0, logs: '0x00' }, 'logs', /array|list/i],
      [{ fromBlock: 0, logs: [5] }, 'logs[0]', /object/i],
      [{ fromBlock: 0, logs: [[]] }, 'logs[0]', /object/i],
      [{ fromBlock: 0, logs: [{ address: '0x00' }] }, 'logs[0].address', /array|list/i],
      [{ fromBlock: 0, logs: [{ topic0: [5] }] }, /^logs\[0\]\.topic0/, /string/i],
      [{ fromBlock: 0, transactions: [{ firstNonce: '5' }] }, 'transactions[0].firstNonce', /integer/i],
      [{ fromBlock: 0, transactions: [{ lastNonce: 1.5 }] }, 'transactions[0].lastNonce', /integer/i],
      [{ fromBlock: 0, transactions: [{ type: ['2'] }] }, /^transactions\[0\]\.type/, /integer/i],
      [{ fromBlock: 0, traces: [{ type: [1] }] }, /^traces\[0\]\.type/, /string/i],
      [{ fromBlock: 0, stateDiffs: [{ kind: '+' }] }, 'stateDiffs[0].kind', /array|list/i],
      [{ fromBlock: 0, includeAllBlocks: 'yes' }, 'includeAllBlocks', /boolean/i],
      [{ fromBlock: 0, includeAllBlocks: 1 }, 'includeAllBlocks', /boolean/i],
      [{ fromBlock: 0, fields: [] }, 'fields', /object/i],
      [{ fromBlock: 0, fields: { log: true } }, 'fields.log', /object/i],
      [{ fromBlock: 0, logs: [{ transaction: 1 }] }, 'logs[0].transaction', /boolean/i],
      [{ fromBlock: 0, logs: [{ transaction: 'true' }] }, 'logs[0].transaction', /boolean/i],
      [{ fromBlock: 0, traces: [{ callValueNonZero: 'true' }] }, 'traces[0].callValueNonZero', /boolean/i],
      [{ fromBlock: 0, parentBlockHash: 5 }, 'parentBlockHash', /string/i],
      // Field flags must be booleans (docs/protocol.md §2).
      [{ fromBlock: 0, fields: { log: { address: 1 } } }, 'fields.log.address', /boolean/i],
      [{ fromBlock: 0, fields: { log: { address: 'true' } } }, 'fields.log.address', /boolean/i],
      [{ fromBlock: 0, fields: { block: { timestamp: {} } } }, 'fields.block.timestamp', /boolean/i],
      [{ fromBlock: 0, fields: { trace: { callFrom: [true] } } }, 'fields.trace.callFrom', /boolean/i],
    ]
    for (const [q, p, type] of cases) await expect400(q, JSON.stringify(q), { path: p, message: type })
    await alive()
  })

  it('a query that is valid JSON but not an object → 400', async () => {
    for (const body of ['[]', '5', '"fromBlock"', 'null', 'true', '[{"fromBlock":0}]']) {
      const res = await postJson(dense, body)
      errorBody(res, 400, body)
    }
    await alive()
  })

  it('hex filter values: any case matches, anything but 0x + hex digits → 400', async () => {
    let n = 0
    for (const kind of KINDS) {
      for (const [key, f] of Object.entries(FILTERS[kind])) {
        if (f.kind !== 'in' || f.values !== 'hex') continue
        const list = REQUEST_KEY[kind]
        for (const bad of ['abc', '0xzz', '0x12g4', ' 0x12', '0x12 ', '0X1G', 'x12', '', '12']) {
          await expect400({ fromBlock: 0, [list]: [{ [key]: ['0x00', bad] }] }, `${list}.${key} = ${JSON.stringify(bad)}`, {
            path: new RegExp(`^${list}\\[0\\]\\.${key}`),
          })
          n++
        }
        await expect200({ fromBlock: 0, toBlock: 3, [list]: [{ [key]: ['0xABCDEF', '0XABCDEF', '0xabcdef0123456789'] }] }, `${list}.${key} upper case`)
      }
    }
    assert.ok(n >= 9 * 12, `${n} cases`)
    await expect400({ fromBlock: 1, parentBlockHash: 'not-a-hash' }, 'parentBlockHash', { path: 'parentBlockHash' })
    await alive()
  })

  it('at most 100 item requests in total', async () => {
    const reqs = (n: number) => Array.from({ length: n }, (_, i) => ({ address: ['0x' + i.toString(16).padStart(40, '0')] }))
    await expect200({ fromBlock: 0, toBlock: 5, logs: reqs(100) }, '100 log requests')
    await expect200({ fromBlock: 0, toBlock: 5, logs: reqs(40), transactions: Array(30).fill({}), traces: Array(20).fill({}), stateDiffs: Array(10).fill({}) }, '100 requests of 4 kinds')
    await expect400({ fromBlock: 0, logs: reqs(101) }, '101 log requests', { message: /100/ })
    await expect400({ fromBlock: 0, logs: reqs(40), transactions: Array(30).fill({}), traces: Array(20).fill({}), stateDiffs: Array(11).fill({}) }, '101 requests of 4 kinds', { message: /100/ })
    await alive()
  })

  it('request body: 8 MiB by default → 413 above, served below; JSON with a charset is JSON', async () => {
    const limit = 8 * 1024 * 1024
    const padded = (size: number) => {
      const q = JSON.stringify({ fromBlock: 0, toBlock: 2 })
      return q.slice(0, -1) + ' '.repeat(size - q.length) + '}'
    }
    const under = await postJson(dense, padded(limit - 1024))
    assert.equal(under.status, 200, under.text.slice(0, 200))
    const over = await postJson(dense, padded(limit + 1024))
    errorBody(over, 413, 'body over 8 MiB')
    const charset = await postJson(dense, { fromBlock: 0, toBlock: 2 }, { 'content-type': 'application/json; charset=utf-8' })
    assert.equal(charset.status, 200, charset.text.slice(0, 200))
    for (const type of ['application/xml', 'multipart/form-data; boundary=x']) {
      const res = await request(dense, { method: 'POST', headers: { 'content-type': type }, body: '{"fromBlock":0}' })
      errorBody(res, 415, type)
    }
    await alive()
  })

  it('parentBlockHash: 409 fork with the previous blocks when it differs, 200 when it matches', async () => {
    const hash = (n: number) => records[n].block.hash.toLowerCase()
    const wrong = '0x' + 'ab'.repeat(32)
    for (const from of [1, 16, 50, 120, 127]) {
      const ok = await expect200({ fromBlock: from, toBlock: from, parentBlockHash: hash(from - 1) }, `match at ${from}`)
      assert.deepEqual(ok.map((b) => b.header.number), [from])
      // Hex case does not matter.
      await expect200({ fromBlock: from, toBlock: from, parentBlockHash: '0x' + hash(from - 1).slice(2).toUpperCase() }, `upper-case match at ${from}`)
      for (const bad of [wrong, hash(from)]) {
        const res = await postJson(dense, { fromBlock: from, parentBlockHash: bad, logs: [{}] })
        const body = errorBody(res, 409, `fork at ${from}`)
        assert.equal(body.error, 'fork')
        const prev: { number: number; hash: string }[] = body.previousBlocks
        // Up to 100 blocks, read back across the earlier chunks (16 blocks each here).
        assert.equal(prev.length, Math.min(100, from), `${prev?.length} previous blocks at ${from}`)
        assert.equal(prev.at(-1)!.number, from - 1, 'previousBlocks do not end at fromBlock − 1')
        for (const [i, p] of prev.entries()) {
          assert.deepEqual(Object.keys(p).sort(), ['hash', 'number'])
          assert.equal(p.hash, hash(p.number), `hash of ${p.number}`)
          if (i > 0) assert.equal(p.number, prev[i - 1].number + 1, 'previousBlocks are not ascending and consecutive')
        }
      }
    }
    // fromBlock 0 has no parent in the dataset: nothing to check.
    await expect200({ fromBlock: 0, toBlock: 0, parentBlockHash: wrong }, 'fromBlock 0')
    await alive()
  })

  it('parentBlockHash: previousBlocks read back across the earlier chunks a worker holds, and stop where a chunk is held elsewhere', async () => {
    const root = path.join(tmp.dir, 'anvil')
    const refs = await listLocalChunks(root)
    assert.ok(refs.length >= 8, `${refs.length} chunks`)
    const chunks = refs.map((ref, i) => ({ ...ref, coverFrom: i > 0 ? refs[i - 1].last + 1 : 0, dir: path.join(root, ref.path) }))
    const hash = (n: number) => records[n].block.hash.toLowerCase()
    /** previousBlocks of a fork answer at `from` by a worker holding `held` of the chunks. */
    const previousAt = async (held: number[], from: number): Promise<number[]> => {
      const view: DatasetView = { name: 'anvil', family: evmFamily, chunks: held.map((i) => chunks[i]), height: chunks.at(-1)!.last }
      const err = await prepareQuery(view, { fromBlock: from, parentBlockHash: '0x' + 'ef'.repeat(32) }, { sizeBytes: 1 << 20, timeMs: 2000 }).then(
        () => assert.fail(`no fork answer at ${from}`),
        (e: unknown) => e,
      )
      assert.ok(err instanceof ApiError && err.status === 409, String(err))
      const prev = err.extra!.previousBlocks as { number: number; hash: string }[]
      for (const p of prev) assert.equal(p.hash, hash(p.number), `hash of ${p.number}`)
      return prev.map((p) => p.number)
    }
    const all = chunks.map((_, i) => i)
    const last = chunks.at(-1)!.last
    // Every chunk held: 100 blocks, over seven 16-block chunks.
    assert.deepEqual(await previousAt(all, last), range(last - 100, last - 1))
    assert.deepEqual(await previousAt(all, 40), range(0, 39))
    // Chunk 3 (blocks 48–63) is on another worker: the blocks above it only, no hole in the list.
    const without3 = all.filter((i) => i !== 3)
    assert.deepEqual(await previousAt(without3, last), range(64, last - 1))
    // The parent is that chunk's last block: only the parent, as named by the first block held.
    assert.deepEqual(await previousAt(without3, 64), [63])
    assert.deepEqual(await previousAt(without3, 47), range(0, 46))
  })

  it('parentBlockHash in a sparse dataset: checked only when the parent exists; previous blocks skip gaps', async () => {
    const hash = (n: number) => records[n].block.hash.toLowerCase()
    const wrong = '0x' + 'cd'.repeat(32)
    const existing = SPARSE_CHUNKS.flat()
    // Parents that do not exist (in a gap, also inside a chunk, also below the first chunk).
    for (const from of [5, 20, 50, 100, 12, 47]) {
      await expect200({ fromBlock: from, toBlock: 109, parentBlockHash: wrong }, `parent of ${from} is not in the dataset`, sparse)
    }
    // fromBlock in a gap whose parent exists (the last block before the gap): checked too.
    for (const from of [7, 21, 41, 53, 105, 10, 30, 45]) {
      await expect200({ fromBlock: from, toBlock: 109, parentBlockHash: hash(from - 1) }, `match at ${from}`, sparse)
      const res = await postJson(sparse, { fromBlock: from, parentBlockHash: wrong })
      const body = errorBody(res, 409, `fork at ${from}`)
      assert.equal(body.error, 'fork')
      const prev: { number: number; hash: string }[] = body.previousBlocks
      assert.ok(prev.length >= 1 && prev.length <= 100)
      assert.equal(prev.at(-1)!.number, from - 1)
      // Ascending, existing blocks only, none skipped between the first and the last listed.
      const below = existing.filter((n) => n < from)
      assert.deepEqual(prev.map((p) => p.number), below.slice(below.length - prev.length), `previous blocks of ${from}`)
      for (const p of prev) assert.equal(p.hash, hash(p.number))
    }
    await alive()
  })

  it('sparse dataset: a range without any existing block → 400 no-blocks-in-range; otherwise the first existing block', async () => {
    for (const [fromBlock, toBlock] of [[0, 4], [10, 19], [12, 15], [30, 39], [45, 49], [55, 99], [0, 0]]) {
      for (const includeAllBlocks of [false, true]) {
        const body = await expect400({ fromBlock, toBlock, includeAllBlocks, logs: [{}] }, `[${fromBlock}, ${toBlock}]`, { url: sparse })
        assert.equal(body.error, 'no-blocks-in-range', JSON.stringify(body))
      }
    }
    const existing = SPARSE_CHUNKS.flat()
    const ranges: [number, number | undefined][] = [[0, 5], [10, 25], [45, 52], [30, 109], [55, 200], [2, undefined]]
    for (const [fromBlock, toBlock] of ranges) {
      const q = { fromBlock, ...(toBlock === undefined ? {} : { toBlock }), includeAllBlocks: true }
      const got = await expect200(q, JSON.stringify(q), sparse)
      const expected = existing.filter((n) => n >= fromBlock && n <= (toBlock ?? Infinity))
      assert.deepEqual(got.map((b) => b.header.number), expected, JSON.stringify(q))
      const noItems = await expect200({ ...q, includeAllBlocks: false, logs: [{ topic0: [] }] }, 'boundaries only', sparse)
      assert.deepEqual(noItems.map((b) => b.header.number), [...new Set([expected[0], expected.at(-1)])])
    }
    await alive()
  })
})

describe('query errors: a worker asked for blocks it does not hold', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let records: AnvilRecord[]

  before(async () => {
    tmp = await tempDir('ba-errors-cluster-')
    records = await anvilRecords()
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    // chunk by chunk (groupChunks 1): the eight chunks are spread over both workers
    cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 2, replication: 1, groupChunks: 1, ...stallTolerant(100) })
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('fromBlock outside the worker\'s ranges → 503 + Retry-After naming the block (the client asks the router again); inside → 200 up to the end of its range; parent on the other worker still checked', async () => {
    const held = async (w: WorkerServer): Promise<[number, number][]> => JSON.parse((await request(`${w.url}/status`)).text).state?.available?.anvil ?? []
    // Wait until both workers hold a part.
    const deadline = Date.now() + 30_000
    while ((await Promise.all(cluster.workers.map(held))).some((r) => r.length === 0)) {
      assert.ok(Date.now() < deadline, 'chunks were not assigned to both workers')
      await new Promise((r) => setTimeout(r, 100))
    }
    /**
     * POST `q` to worker `w` and give `check` the answer with the ranges the worker held before and
     * after it; retried while the router moves chunks in between (assignments may change at any time).
     */
    async function onStableHoldings(w: WorkerServer, q: Obj, check: (res: RawAnswer, ranges: [number, number][]) => void): Promise<void> {
      for (let attempt = 0; ; attempt++) {
        const before = await held(w)
        const res = await postJson(`${w.url}/datasets/anvil/query`, q)
        const after = await held(w)
        if (JSON.stringify(before) === JSON.stringify(after) && before.length > 0) return check(res, before)
        assert.ok(attempt < 50, 'the assignment never settled')
        await new Promise((r) => setTimeout(r, 100))
      }
    }
    const inRanges = (ranges: [number, number][], n: number) => ranges.find(([a, b]) => a <= n && n <= b)
    let refused = 0
    let forks = 0
    for (const [i, w] of cluster.workers.entries()) {
      for (const from of [0, 15, 16, 63, 64, 100, 127]) {
        // Held: served up to the end of the contiguous range the worker holds (no toBlock, §18);
        // not held: 503 naming the block, retryable (a chunk that just moved; see DECISIONS-LOCAL.md).
        await onStableHoldings(w, { fromBlock: from, includeAllBlocks: true }, (res, ranges) => {
          const r = inRanges(ranges, from)
          if (r) {
            assert.equal(res.status, 200, `worker ${i} holding ${JSON.stringify(ranges)}, block ${from}: ${res.text.slice(0, 200)}`)
            assert.deepEqual(JSON.parse(res.text).map((x: Obj) => x.header.number), range(from, r[1]))
          } else {
            assert.equal(res.status, 503, `worker ${i} holding ${JSON.stringify(ranges)}, block ${from}: ${res.status} ${res.text.slice(0, 200)}`)
            assert.equal(res.headers['retry-after'], '1')
            assert.equal(res.headers['content-type']?.split(';')[0], 'application/json')
            const body = JSON.parse(res.text)
            assert.ok(body.error && body.message.includes(String(from)), res.text)
            refused++
          }
        })
        if (from === 0) continue
        // The parent of the first block it holds may be on the other worker: still checked (§5, §27).
        const parent = records[from - 1].block.hash.toLowerCase()
        await onStableHoldings(w, { fromBlock: from, toBlock: from, parentBlockHash: '0x' + 'ee'.repeat(32) }, (res, ranges) => {
          if (!inRanges(ranges, from)) return
          assert.equal(res.status, 409, `worker ${i} holding ${JSON.stringify(ranges)}, fork at ${from}: ${res.status} ${res.text.slice(0, 200)}`)
          const body = JSON.parse(res.text)
          assert.equal(body.error, 'fork')
          assert.deepEqual(body.previousBlocks.at(-1), { number: from - 1, hash: parent })
          if (!inRanges(ranges, from - 1)) forks++
        })
        await onStableHoldings(w, { fromBlock: from, toBlock: from, parentBlockHash: parent }, (res, ranges) => {
          if (inRanges(ranges, from)) assert.equal(res.status, 200, res.text.slice(0, 200))
        })
      }
    }
    assert.ok(refused >= 3, `only ${refused} blocks were refused: the workers did not split the data`)
    assert.ok(forks >= 1, 'no fork check with the parent on the other worker happened')
  })
})
