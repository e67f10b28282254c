import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ArchiveClient, type Block, type RangeOptions } from '../src/client/archive-client.js'
import type { ChunkRef } from '../src/chunks/layout.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { stallTolerant, anvilRecords, tempDir, writeChunk, writeDataset, type AnvilRecord, startStandaloneWorker } from './helpers/dataset.js'
import { postJson, request } from './helpers/http.js'
import { fetchFull } from './helpers/reference-data.js'
import { KINDS, REQUEST_KEY, evaluate, firstDifference, type FullBlock, type Obj } from './helpers/reference-evm.js'
import type { QueryBudgets } from '../src/query/types.js'

/*
 * Response budgets (docs/protocol.md §3.5, §3.7): workers with a small size budget, a size budget below
 * any block, and a 1 ms time budget, over real chunks of the recorded anvil chain (dense, and sparse
 * with gaps). A cut answer must end on a block boundary, never be empty, start at the first existing
 * block ≥ fromBlock, hold complete blocks; continuing from last + 1 (by hand through the router, or
 * with the client library) must give the uncut answer with no gap or duplicate.
 */

const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'
const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i)
const SPARSE_CHUNKS = [range(3, 9), range(20, 37), [...range(40, 44), ...range(60, 75)], range(100, 127)]

/** Queries of different shapes and weights. */
const QUERIES: Record<string, Obj> = {
  // Every block, heavy fields (contract code in inputs and traces).
  everything: {
    includeAllBlocks: true,
    transactions: [{}],
    logs: [{}],
    traces: [{}],
    stateDiffs: [{}],
    fields: {
      block: { timestamp: true, logsBloom: true, extraData: true },
      transaction: { hash: true, input: true, from: true, to: true, value: true },
      log: { data: true, topics: true, address: true },
      trace: { createInit: true, createResultCode: true, callInput: true, callResultOutput: true, callFrom: true },
      stateDiff: { prev: true, next: true },
    },
  },
  // Items in most blocks, with relations, no includeAllBlocks: cut answers end in blocks with or without items.
  transfers: {
    logs: [{ topic0: [TRANSFER], transaction: true, transactionTraces: true }],
    fields: { log: { address: true, topics: true, data: true }, transaction: { hash: true, input: true }, trace: { callInput: true } },
  },
  // Items in every third block or so (one of three rotating senders): cut points fall between them.
  someBlocks: {
    transactions: [{ from: ['0x90f79bf6eb2c4f870365e785982e1f101e93b906'], logs: true }],
    fields: { transaction: { input: true, hash: true }, log: { data: true } },
  },
  // Few matching blocks: most of the range has nothing.
  sparseItems: {
    traces: [{ type: ['create', 'suicide'], transaction: true }],
    fields: { trace: { createInit: true, suicideRefundAddress: true }, transaction: { input: true } },
  },
}

/*
 * `everything` reads every block whole (about 50 kB of JSON each, above every size budget here): its
 * walks span blocks 0..40 or so, across two chunk borders, where the lighter queries walk the whole
 * chain; what a budget does to a walk does not depend on how long the walk is.
 */
const EVERYTHING_SPAN = 40

const isEmpty = (b: Obj) => KINDS.every((k) => !b[REQUEST_KEY[k]] || b[REQUEST_KEY[k]].length === 0)

describe('response budgets', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let chunks: ChunkRef[]
  const workers: Record<string, WorkerServer> = {}
  const url = (w: string, ds = 'anvil') => `${workers[w].url}/datasets/${ds}/query`
  let full: FullBlock[]
  let sparseFull: FullBlock[]
  const SMALL = 12_000

  before(async () => {
    tmp = await tempDir('ba-budgets-')
    records = await anvilRecords()
    chunks = await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    const sparseDir = path.join(tmp.dir, 'sparse')
    const existing = await writeDataset(sparseDir, 'sparse', SPARSE_CHUNKS[0].map((n) => records[n]), SPARSE_CHUNKS[0].length)
    for (const c of SPARSE_CHUNKS.slice(1)) await writeChunk(sparseDir, c.map((n) => records[n]), existing)
    const common = { storage: new LocalStorage(tmp.dir), heartbeatMs: 1000, dropGraceMs: 2000, concurrency: 2, queue: 8, queueTimeoutMs: 60_000 }
    const budgets: Record<string, QueryBudgets> = {
      uncut: { sizeBytes: 1 << 30, timeMs: 600_000 },
      small: { sizeBytes: SMALL, timeMs: 600_000 },
      // Every slice counts as heavy: one at a time, output held until the statement is done.
      gated: { sizeBytes: SMALL, timeMs: 600_000, heavySliceBytes: 0 },
      // Below the size of any block: every answer is one whole block.
      tiny: { sizeBytes: 1, timeMs: 600_000 },
      fast: { sizeBytes: 1 << 30, timeMs: 1 },
    }
    for (const [name, b] of Object.entries(budgets)) {
      workers[name] = new WorkerServer({ ...common, budgets: b })
      await workers[name].start('127.0.0.1', 0)
    }
    full = await fetchFull(url('uncut'), 0)
    sparseFull = await fetchFull(url('uncut', 'sparse'), 0)
  })

  after(async () => {
    for (const w of Object.values(workers)) await w.stop()
    await tmp?.cleanup()
  })

  /**
   * Walk [fromBlock, toBlock] on one worker, continuing from last + 1, checking every answer against
   * the reference; returns the answers.
   */
  async function walk(worker: string, ds: 'anvil' | 'sparse', q: Obj, fromBlock: number, toBlock?: number): Promise<{ text: string; blocks: Obj[] }[]> {
    const data = ds === 'anvil' ? full : sparseFull
    const end = Math.min(toBlock ?? Infinity, data.at(-1)!.header.number)
    const answers: { text: string; blocks: Obj[] }[] = []
    let cur = fromBlock
    while (cur <= end) {
      const query = { ...q, fromBlock: cur, ...(toBlock === undefined ? {} : { toBlock }) }
      const res = await postJson(url(worker, ds), query)
      assert.equal(res.status, 200, `${worker} from ${cur}: ${res.status} ${res.text.slice(0, 300)}`)
      const blocks: Obj[] = JSON.parse(res.text) // a cut answer is still valid JSON
      assert.ok(blocks.length > 0, `${worker} from ${cur}: empty answer`)
      const expected = evaluate(data, query)
      // Starts at the first existing block ≥ fromBlock.
      assert.equal(blocks[0].header.number, data.find((b) => b.header.number >= cur)!.header.number, `${worker} from ${cur}: first block`)
      // All but the last block are the uncut answer's; the last is the uncut answer's block (complete),
      // or, where the answer stopped without items, that block's header with empty arrays.
      const k = blocks.length - 1
      const prefixDiff = firstDifference(blocks.slice(0, k), expected.slice(0, k))
      assert.equal(prefixDiff, undefined, `${worker} from ${cur}: ${prefixDiff}`)
      const last = blocks[k]
      const n = last.header.number
      if (expected[k]?.header.number === n) {
        const d = firstDifference([last], [expected[k]])
        assert.equal(d, undefined, `${worker} from ${cur}: last block ${d}`)
      } else {
        assert.ok(isEmpty(last), `${worker} from ${cur}: last block ${n} has items but is not in the uncut answer`)
        assert.ok(k === 0 || n > blocks[k - 1].header.number)
        assert.ok(expected[k] === undefined || n < expected[k].header.number, `${worker} from ${cur}: the answer skipped block ${expected[k]?.header.number} with items`)
        const same = evaluate(data, { ...query, fromBlock: n, toBlock: n, includeAllBlocks: true })[0]
        assert.deepEqual(last.header, same.header)
      }
      answers.push({ text: res.text, blocks })
      assert.ok(n >= cur && n <= end)
      cur = n + 1
    }
    return answers
  }

  /** The answers put together equal the uncut answer (extra blocks may only be empty cut points). */
  function checkConcatenation(answers: { blocks: Obj[] }[], uncut: Obj[], what: string): void {
    const all = answers.flatMap((a) => a.blocks)
    const numbers = all.map((b) => b.header.number)
    for (let i = 1; i < numbers.length; i++) assert.ok(numbers[i] > numbers[i - 1], `${what}: block ${numbers[i]} repeated or out of order`)
    const uncutNumbers = new Set(uncut.map((b) => b.header.number))
    for (const b of all) if (!uncutNumbers.has(b.header.number)) assert.ok(isEmpty(b), `${what}: extra block ${b.header.number} with items`)
    const d = firstDifference(all.filter((b) => uncutNumbers.has(b.header.number)), uncut)
    assert.equal(d, undefined, `${what}: ${d}`)
  }

  it('the uncut worker answers the reference answer in one piece', async () => {
    for (const [name, q] of Object.entries(QUERIES)) {
      const query = { ...q, fromBlock: 0, toBlock: 127 }
      const res = await postJson(url('uncut'), query)
      assert.equal(res.status, 200)
      assert.equal(firstDifference(JSON.parse(res.text), evaluate(full, query)), undefined, name)
    }
  })

  it('a small size budget cuts answers at block boundaries; continuing from last + 1 gives the uncut answer', async () => {
    const ranges: Record<string, [number, number | undefined]> = { everything: [5, 5 + EVERYTHING_SPAN], transfers: [0, 127], someBlocks: [1, 126], sparseItems: [17, undefined] }
    for (const [name, q] of Object.entries(QUERIES)) {
      {
        const [from, to] = ranges[name]
        const answers = await walk('small', 'anvil', q, from, to)
        const uncut = evaluate(full, { ...q, fromBlock: from, toBlock: to })
        checkConcatenation(answers, uncut, `${name} [${from}, ${to}]`)
        if (name === 'everything') assert.ok(answers.length > 4, `${name}: only ${answers.length} answers: the budget did not cut`)
        const end = to ?? 127
        for (const a of answers.slice(0, -1)) {
          // An answer stopped before the end only because it reached the budget...
          assert.ok(a.text.length + 2 >= SMALL, `${name}: an answer of ${a.text.length} bytes stopped at ${a.blocks.at(-1)!.header.number} < ${end}`)
        }
        for (const a of answers) {
          // ...with its last block: the size is checked before every block, so everything before
          // the last block is under the budget. (A header-only block may follow: the end of the
          // scanned chunk, where the next request starts.) `before` counts the opening bracket
          // and a comma after each block; the engine counts the commas between blocks.
          let last = a.blocks.length - 1
          while (last > 0 && isEmpty(a.blocks[last])) last--
          const before = a.blocks.slice(0, last).reduce((n, b) => n + JSON.stringify(b).length + 1, 1)
          assert.ok(before < SMALL + 2, `${name}: ${before} bytes before block ${a.blocks[last].header.number} of an answer, budget ${SMALL}`)
        }
        assert.equal(answers.at(-1)!.blocks.at(-1)!.header.number, end, 'the last answer ends at the end of the range')
      }
    }
  })

  it('heavy slices, one at a time per worker, give the same answers to concurrent walks', async () => {
    // The four queries walked at once (twice the worker's concurrency), from block 0 and from the middle
    // of a chunk in turn.
    const walks = Object.entries(QUERIES).map(async ([name, q], i) => {
      const from = i % 2 === 0 ? 0 : 9
      const to = name === 'everything' ? from + EVERYTHING_SPAN : i % 2 === 0 ? 127 : 100
      const answers = await walk('gated', 'anvil', q, from, to)
      checkConcatenation(answers, evaluate(full, { ...q, fromBlock: from, toBlock: to }), `gated ${name} [${from}, ${to}]`)
      return answers.length
    })
    const counts = await Promise.all(walks)
    assert.ok(counts.some((n) => n > 4), 'the small budget cuts some walks into many answers')
  })

  it('a block bigger than the size budget is returned whole, one block per answer', async () => {
    const q = QUERIES.everything
    const answers = await walk('tiny', 'anvil', q, 40, 60)
    assert.deepEqual(answers.map((a) => a.blocks.length), answers.map(() => 1))
    checkConcatenation(answers, evaluate(full, { ...q, fromBlock: 40, toBlock: 60 }), 'tiny budget')
    // Without includeAllBlocks: still never empty, and no block with items is skipped.
    const t = QUERIES.transfers
    checkConcatenation(await walk('tiny', 'anvil', t, 0, 30), evaluate(full, { ...t, fromBlock: 0, toBlock: 30 }), 'tiny budget, transfers')
  })

  it('sparse dataset: cut answers start at the first existing block ≥ fromBlock and skip no block', async () => {
    const cases: [string, string, number, number | undefined][] = [
      // Up to block 62: the gaps 10–19, 38–39 and 45–59 (the last inside a chunk).
      ['small', 'everything', 0, 62],
      ['small', 'transfers', 10, 65],
      ['small', 'someBlocks', 45, undefined],
      ['small', 'sparseItems', 0, undefined],
      ['tiny', 'someBlocks', 10, 65],
      ['tiny', 'everything', 38, 62],
    ]
    for (const [worker, name, from, to] of cases) {
      const q = QUERIES[name]
      const answers = await walk(worker, 'sparse', q, from, to)
      checkConcatenation(answers, evaluate(sparseFull, { ...q, fromBlock: from, toBlock: to }), `${worker} sparse ${name} [${from}, ${to}]`)
    }
  })

  it('a 1 ms time budget still returns the whole first chunk and stops at a block boundary', async () => {
    for (const [name, q] of Object.entries(QUERIES)) {
      for (const from of [0, 21, 77]) {
        const to = name === 'everything' ? Math.min(127, from + EVERYTHING_SPAN) : 127
        const answers = await walk('fast', 'anvil', q, from, to)
        checkConcatenation(answers, evaluate(full, { ...q, fromBlock: from, toBlock: to }), `fast ${name} from ${from}`)
        // Each answer covers at least to the end of the chunk it started in (the budget counts after the first chunk).
        for (const [i, a] of answers.entries()) {
          const start = i === 0 ? from : answers[i - 1].blocks.at(-1)!.header.number + 1
          const chunk = chunks.find((c) => c.first <= start && start <= c.last)!
          assert.ok(a.blocks.at(-1)!.header.number >= Math.min(chunk.last, to), `${name}: answer from ${start} stopped at ${a.blocks.at(-1)!.header.number}, inside its first chunk ${chunk.first}-${chunk.last}`)
        }
      }
    }
    // The sparse dataset too.
    for (const [name, q] of Object.entries(QUERIES)) {
      const answers = await walk('fast', 'sparse', q, 0, undefined)
      checkConcatenation(answers, evaluate(sparseFull, { ...q, fromBlock: 0 }), `fast sparse ${name}`)
    }
  })

  it('without toBlock an answer ends at the end of the data; the next block is above the height', async () => {
    for (const worker of ['uncut', 'small', 'fast']) {
      const answers = await walk(worker, 'anvil', QUERIES.transfers, 100, undefined)
      assert.equal(answers.at(-1)!.blocks.at(-1)!.header.number, 127)
    }
    const res = await postJson(url('small'), { fromBlock: 128 })
    assert.equal(res.status, 400)
  })
})

describe('response budgets through the router and the client library', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let base: string
  let full: FullBlock[]
  let uncutWorker: WorkerServer

  before(async () => {
    tmp = await tempDir('ba-budgets-cluster-')
    const records = await anvilRecords()
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 2, replication: 1, ...stallTolerant(100), budgets: { sizeBytes: 15_000 } })
    base = cluster.datasets.get('anvil')!
    uncutWorker = await startStandaloneWorker(tmp.dir)
    full = await fetchFull(`${uncutWorker.url}/datasets/anvil/query`, 0)
    // Wait until the router serves the whole dataset.
    const deadline = Date.now() + 20_000
    while (Number((await request(`${base}/height`)).text) !== 127) {
      assert.ok(Date.now() < deadline, 'the router never reached the height of the data')
      await new Promise((r) => setTimeout(r, 100))
    }
  })

  after(async () => {
    await uncutWorker?.stop()
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('a loop of router + worker requests gives the uncut answer', async () => {
    for (const [name, q] of Object.entries(QUERIES)) {
      const [from, to] = [2, name === 'everything' ? 2 + EVERYTHING_SPAN : 125]
      const got: Obj[] = []
      let cur = from
      let answers = 0
      while (cur <= to) {
        let worker: string
        for (;;) {
          const w = await request(`${base}/${cur}/worker`)
          if (w.status === 200) {
            worker = w.text.trim()
            break
          }
          assert.equal(w.status, 503, w.text)
          await new Promise((r) => setTimeout(r, 100))
        }
        const res = await postJson(worker, { ...q, fromBlock: cur, toBlock: to })
        assert.equal(res.status, 200, res.text.slice(0, 300))
        const blocks: Obj[] = JSON.parse(res.text)
        assert.ok(blocks.length > 0)
        assert.ok(blocks[0].header.number >= cur)
        got.push(...blocks)
        cur = blocks.at(-1)!.header.number + 1
        answers++
      }
      const uncut = evaluate(full, { ...q, fromBlock: from, toBlock: to })
      const uncutNumbers = new Set(uncut.map((b) => b.header.number))
      const numbers = got.map((b) => b.header.number)
      assert.deepEqual(numbers, [...new Set(numbers)].sort((a, b) => a - b), `${name}: repeated or unordered blocks`)
      for (const b of got) if (!uncutNumbers.has(b.header.number)) assert.ok(isEmpty(b), `${name}: extra block ${b.header.number} with items`)
      const d = firstDifference(got.filter((b) => uncutNumbers.has(b.header.number)), uncut)
      assert.equal(d, undefined, `${name}: ${d}`)
      if (name === 'everything') assert.ok(answers > 8, `only ${answers} answers`)
    }
  })

  it('the client library gives the uncut answer, with and without toBlock, sequential and parallel', async () => {
    const client = new ArchiveClient(base, { backoffMs: [50, 100, 200], maxRetryAfterMs: 500 })
    const ranges: Record<string, RangeOptions[]> = {
      everything: [{ fromBlock: 0, toBlock: EVERYTHING_SPAN }, { fromBlock: 3, toBlock: 3 + 3 * 20, parallel: 3, segmentBlocks: 20 }],
      transfers: [{ fromBlock: 9 }],
      someBlocks: [{ fromBlock: 0, toBlock: 120, parallel: 2, segmentBlocks: 30 }],
      sparseItems: [{ fromBlock: 1, toBlock: 126 }],
    }
    for (const [name, q] of Object.entries(QUERIES)) {
      for (const range of ranges[name]) {
        const blocks: Block[] = []
        for await (const b of client.blocks(q, range)) blocks.push(b)
        const uncut = evaluate(full, { ...q, fromBlock: range.fromBlock, toBlock: range.toBlock })
        const uncutNumbers = new Set(uncut.map((b) => b.header.number))
        const numbers = blocks.map((b) => b.header.number)
        assert.deepEqual(numbers, [...new Set(numbers)].sort((a, b) => a - b), `${name}: repeated or unordered blocks`)
        for (const b of blocks) if (!uncutNumbers.has(b.header.number)) assert.ok(isEmpty(b), `${name}: extra block ${b.header.number} with items`)
        const d = firstDifference(blocks.filter((b) => uncutNumbers.has(b.header.number)), uncut)
        assert.equal(d, undefined, `${name} ${JSON.stringify(range)}: ${d}`)
        assert.equal(numbers.at(-1), range.toBlock ?? 127)
      }
    }
  })
})

describe('blocks bigger than a slice', { timeout: 600_000 }, () => {
  it('are streamed kind by kind, row by row, to the same answer as slices of many blocks', async () => {
    const tmp = await tempDir()
    const workers: WorkerServer[] = []
    try {
      // 32 blocks in two chunks: the contract deployments of blocks 1–7 and the 3-block cycle of transfers after them.
      await writeDataset(path.join(tmp.dir, 'd'), 'd', (await anvilRecords()).slice(0, 32), 16)
      const q = {
        fromBlock: 0, toBlock: 31, transactions: [{}], logs: [{}], traces: [{}], stateDiffs: [{ kind: ['*'] }],
        fields: { transaction: { input: true }, log: { data: true }, trace: { callInput: true, createInit: true }, stateDiff: { prev: true, next: true } },
      }
      workers.push(await startStandaloneWorker(path.join(tmp.dir, 'd')))
      // Every block's estimate is above a 1,000-byte slice: each one takes the row-by-row path.
      workers.push(await startStandaloneWorker(path.join(tmp.dir, 'd'), { budgets: { sizeBytes: 1 << 30, timeMs: 600_000, sliceBytes: 1000 } }))
      const [sliced, streamed] = await Promise.all(workers.map((w) => postJson(`${w.url}/datasets/d/query`, q)))
      assert.equal(sliced.status, 200)
      assert.equal(streamed.status, 200)
      assert.ok(JSON.parse(sliced.text).length >= 31, 'blocks 1..31 have transactions')
      assert.equal(streamed.text, sliced.text)
    } finally {
      for (const w of workers) await w.stop()
      await tmp.cleanup()
    }
  })
})
