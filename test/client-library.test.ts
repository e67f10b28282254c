import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ArchiveClient, HttpError, lastBlockOfText, type Batch, type Block } from '../src/client/archive-client.js'
import type { ChunkRef } from '../src/chunks/layout.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { anvilRecords, tempDir, writeDataset, type AnvilRecord } from './helpers/dataset.js'
import { STATIC_DATA_TIMERS } from './helpers/walk.js'

/*
 * The client library against a router and two workers over real chunks of the recorded anvil chain.
 * Small response budgets force answers that stop inside chunks, so the range loop has to continue
 * from the right block many times.
 */

const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'
const FAST_RETRY = { backoffMs: [50, 100, 200, 400], maxRetryAfterMs: 1000 }

interface SourceLog {
  block: number
  logIndex: number
  transactionIndex: number
  address: string
  topics: string[]
  data: string
}

function sourceLogs(records: AnvilRecord[]): SourceLog[] {
  return records.flatMap((r) =>
    r.receipts.flatMap((rc: any) =>
      rc.logs.map((l: any) => ({
        block: r.number,
        logIndex: parseInt(l.logIndex, 16),
        transactionIndex: parseInt(l.transactionIndex, 16),
        address: l.address.toLowerCase(),
        topics: l.topics.map((t: string) => t.toLowerCase()),
        data: l.data.toLowerCase(),
      })),
    ),
  )
}

async function collectBatches(it: AsyncIterable<Batch>): Promise<Batch[]> {
  const out: Batch[] = []
  for await (const b of it) out.push(b)
  return out
}

async function collect(it: AsyncIterable<Block>): Promise<Block[]> {
  const out: Block[] = []
  for await (const b of it) out.push(b)
  return out
}

const numbers = (blocks: Block[]) => blocks.map((b) => b.header.number)

describe('client library over router + 2 workers', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let chunks: ChunkRef[]
  let cluster: Cluster
  let base: string

  before(async () => {
    tmp = await tempDir()
    records = await anvilRecords()
    chunks = await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    cluster = await startCluster({
      storage: new LocalStorage(tmp.dir),
      workers: 2,
      replication: 1,
      // The data does not change while it serves: pings every 500 ms, not 100 (less background CPU).
      ...STATIC_DATA_TIMERS,
      budgets: { sizeBytes: 2_000 },
    })
    base = cluster.datasets.get('anvil')!
    const client = new ArchiveClient(base, FAST_RETRY)
    await until(async () => (await client.getHeight()) === chunks.at(-1)!.last, 60_000)
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('returns every block of the range exactly once, in order, with the source headers', async () => {
    const client = new ArchiveClient(base, FAST_RETRY)
    const batches = []
    for await (const b of client.batches({ includeAllBlocks: true, fields: { block: { timestamp: true } } }, { fromBlock: 0 })) batches.push(b)
    const blocks = batches.flatMap((b) => b.blocks)
    assert.deepEqual(numbers(blocks), records.map((r) => r.number))
    for (const b of blocks) {
      const r = records[b.header.number]
      assert.equal(b.header.hash, r.block.hash.toLowerCase())
      assert.equal(b.header.parentHash, r.block.parentHash.toLowerCase())
      assert.equal(b.header.timestamp, parseInt(r.block.timestamp, 16))
    }
    // Both workers answered: chunks alternate in runs between them with replication 1.
    assert.ok(batches.length > chunks.length, `${batches.length} answers for ${chunks.length} chunks: the size budget did not cut answers`)
  })

  it('returns each matching log once, with its fields as in the source', async () => {
    const client = new ArchiveClient(base, FAST_RETRY)
    const query = { logs: [{ topic0: [TRANSFER] }], fields: { log: { address: true, topics: true, data: true } } }
    const blocks = await collect(client.blocks(query, { fromBlock: 3, toBlock: 120 }))
    const got = blocks.flatMap((b) => (b.logs as any[]).map((l) => ({ block: b.header.number, ...l })))
    const expected = sourceLogs(records).filter((l) => l.block >= 3 && l.block <= 120 && l.topics[0] === TRANSFER)
    assert.ok(expected.length > 20, 'the fixture has too few transfers for this test')
    const key = (l: { block: number; logIndex: number }) => `${l.block}:${l.logIndex}`
    assert.deepEqual(got.map(key), expected.map(key))
    for (const [i, l] of got.entries()) {
      const e = expected[i]
      assert.deepEqual(
        { address: l.address, topics: l.topics, data: l.data, transactionIndex: l.transactionIndex },
        { address: e.address, topics: e.topics, data: e.data, transactionIndex: e.transactionIndex },
      )
    }
    const ns = numbers(blocks)
    assert.deepEqual(ns, [...new Set(ns)].sort((a, b) => a - b), 'blocks repeated or out of order')
    assert.equal(ns[0] >= 3 && ns.at(-1)! <= 120, true)
    assert.equal(ns.at(-1), 120, 'the last block of the range is always returned')
  })

  it('gives the same blocks in parallel mode, in order', async () => {
    const client = new ArchiveClient(base, FAST_RETRY)
    const query = { transactions: [{}], logs: [{ topic0: [TRANSFER] }], fields: { transaction: { hash: true }, log: { data: true } } }
    // Blocks 0–63: four chunks, about a hundred answers under the small budget, so segments start
    // and end inside chunks and across their borders (the whole chain only repeats that).
    const LAST = 63
    const sequential = await collect(client.blocks(query, { fromBlock: 0, toBlock: LAST }))
    const parallel = await collect(client.blocks(query, { fromBlock: 0, toBlock: LAST, parallel: 3, segmentBlocks: 10 }))
    assert.deepEqual(parallel, sequential)
    // Default segments: a first answer alone, then the rest split; a range one answer covers is not split.
    const batches = await collectBatches(client.batches(query, { fromBlock: 0, toBlock: LAST, parallel: 3 }))
    assert.ok(batches.length > 2, `the small budget cuts the range into ${batches.length} answers`)
    assert.deepEqual(batches.flatMap((b) => b.blocks), sequential)
    const short = { fromBlock: 0, toBlock: 3 }
    assert.equal((await collectBatches(client.batches(query, short))).length, 1, 'one answer covers blocks 0–3')
    assert.equal((await collectBatches(client.batches(query, { ...short, parallel: 3 }))).length, 1, 'a range one answer covers is not split')
    // The height is read once per range, not once more per segment.
    let heightCalls = 0
    const counting = new (class extends ArchiveClient {
      override getHeight(signal?: AbortSignal) {
        heightCalls++
        return super.getHeight(signal)
      }
    })(base, FAST_RETRY)
    assert.deepEqual(await collect(counting.blocks(query, { fromBlock: 0, toBlock: LAST, parallel: 3, segmentBlocks: 10 })), sequential)
    assert.equal(heightCalls, 1)
    // The workers' answers let parallel segments read the last block from the text (and defer the parse).
    const worker = (await (await fetch(`${base}/0/worker`)).text()).trim()
    const text = await (await fetch(worker, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...query, fromBlock: 0, toBlock: LAST }) })).text()
    assert.equal(lastBlockOfText(text), JSON.parse(text).at(-1).header.number)
    // Stopping early does not hang and leaves nothing running.
    let n = 0
    for await (const _ of client.blocks(query, { fromBlock: 0, toBlock: LAST, parallel: 4, segmentBlocks: 5 })) if (++n === 7) break
    assert.equal(n, 7)
  })

  it('stops at the height when toBlock is above it', async () => {
    const client = new ArchiveClient(base, FAST_RETRY)
    const height = await client.getHeight()
    assert.equal(height, chunks.at(-1)!.last)
    // With a toBlock the height is read only when the range reaches past it: the router's "above the
    // height" answer is not waited out as a retry.
    let heightCalls = 0
    let retries = 0
    const counting = new (class extends ArchiveClient {
      override getHeight(signal?: AbortSignal) {
        heightCalls++
        return super.getHeight(signal)
      }
    })(base, { ...FAST_RETRY, onRetry: () => retries++ })
    const blocks = await collect(counting.blocks({ includeAllBlocks: true }, { fromBlock: 120, toBlock: 10_000 }))
    assert.deepEqual(numbers(blocks), [120, 121, 122, 123, 124, 125, 126, 127])
    assert.deepEqual({ heightCalls, retries }, { heightCalls: 1, retries: 0 })
    assert.deepEqual(await collect(counting.blocks({ includeAllBlocks: true }, { fromBlock: 200, toBlock: 300 })), [], 'a range above the height is empty')
    assert.deepEqual({ heightCalls, retries }, { heightCalls: 2, retries: 0 })
    // A range below the height needs no height at all; without a toBlock it is read first.
    assert.deepEqual(numbers(await collect(counting.blocks({ includeAllBlocks: true }, { fromBlock: 100, toBlock: 102 }))), [100, 101, 102])
    assert.equal(heightCalls, 2)
    assert.deepEqual(numbers(await collect(counting.blocks({ includeAllBlocks: true }, { fromBlock: 125 }))), [125, 126, 127])
    assert.deepEqual({ heightCalls, retries }, { heightCalls: 3, retries: 0 })
  })

  it('throws a 400 at once, without retrying', async () => {
    let retries = 0
    const client = new ArchiveClient(base, { ...FAST_RETRY, onRetry: () => retries++ })
    await assert.rejects(collect(client.blocks({ logs: [{ adress: [] }] }, { fromBlock: 0, toBlock: 5 })), (e: unknown) => {
      assert.ok(e instanceof HttpError)
      assert.equal(e.status, 400)
      assert.match(e.body, /adress/)
      return true
    })
    assert.equal(retries, 0)
  })
})

describe('client retries', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]

  before(async () => {
    tmp = await tempDir()
    records = await anvilRecords()
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records.slice(0, 64), 16)
  })

  after(async () => {
    await tmp?.cleanup()
  })

  it('gives up after maxAttempts on a 503 that does not go away', async () => {
    // Router only: nobody serves the data.
    const cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 0, heartbeatMs: 100 })
    try {
      const retries: number[] = []
      const client = new ArchiveClient(cluster.datasets.get('anvil')!, { maxAttempts: 3, backoffMs: [10], maxRetryAfterMs: 50, onRetry: (r) => retries.push(r.pauseMs) })
      assert.equal(await client.getHeight(), -1)
      await assert.rejects(client.query({ fromBlock: 0, toBlock: 10 }), (e: unknown) => e instanceof HttpError && e.status === 503)
      // Retry-After (1 s) is honoured up to maxRetryAfterMs.
      assert.deepEqual(retries, [50, 50])
    } finally {
      await cluster.stop()
    }
  })

  it('keeps going when a worker dies: its replica serves the rest', async () => {
    const cluster = await startCluster({
      storage: new LocalStorage(tmp.dir),
      workers: 2,
      replication: 2,
      heartbeatMs: 100,
      budgets: { sizeBytes: 1_000 },
    })
    try {
      let retries = 0
      const client = new ArchiveClient(cluster.datasets.get('anvil')!, { ...FAST_RETRY, onRetry: () => retries++ })
      const seen: number[] = []
      let killed = false
      for await (const batch of client.batches({ includeAllBlocks: true }, { fromBlock: 0, toBlock: 63 })) {
        seen.push(...batch.blocks.map((b) => b.header.number))
        if (!killed && seen.length > 10) {
          killed = true
          await cluster.workers[0].stop()
        }
      }
      assert.ok(killed)
      assert.deepEqual(seen, records.slice(0, 64).map((r) => r.number))
      // Until the router noticed, it still sent every other request to the dead worker's closed port.
      assert.ok(retries >= 1, 'no request was retried')
    } finally {
      await cluster.stop()
    }
  })
})

describe('client library over a sparse dataset', { timeout: 600_000 }, () => {
  it('ends a range whose end lies in a gap, sequentially and in parallel segments', async () => {
    const tmp = await tempDir()
    const records = await anvilRecords()
    // Blocks 5–9 and 20–29 only (docs/protocol.md §3.5), in chunks of 5.
    const kept = records.filter((r) => (r.number >= 5 && r.number <= 9) || (r.number >= 20 && r.number <= 29))
    await writeDataset(path.join(tmp.dir, 'sparse'), 'sparse', kept, 5)
    const cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 2, heartbeatMs: 100 })
    try {
      const client = new ArchiveClient(cluster.datasets.get('sparse')!, FAST_RETRY)
      await until(async () => (await client.getHeight()) === 29)
      const q = { includeAllBlocks: true }
      assert.deepEqual(numbers(await collect(client.blocks(q, { fromBlock: 0, toBlock: 15 }))), [5, 6, 7, 8, 9])
      assert.deepEqual(numbers(await collect(client.blocks(q, { fromBlock: 12, toBlock: 29 }))), [20, 21, 22, 23, 24, 25, 26, 27, 28, 29])
      const parallel = await collect(client.blocks(q, { fromBlock: 0, toBlock: 29, parallel: 3, segmentBlocks: 4 }))
      assert.deepEqual(numbers(parallel), kept.map((r) => r.number))
      // A range entirely in a gap is empty, not an error.
      assert.deepEqual(await collect(client.blocks(q, { fromBlock: 11, toBlock: 18 })), [])
    } finally {
      await cluster.stop()
      await tmp.cleanup()
    }
  })
})

async function until(probe: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error('timed out')
    await new Promise((r) => setTimeout(r, 50))
  }
}
