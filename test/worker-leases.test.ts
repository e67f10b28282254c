import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ChunkRef } from '../src/chunks/layout.js'
import { prepareQuery } from '../src/query/engine.js'
import { ArchiveStorage } from '../src/server/storage.js'
import { WorkerNode } from '../src/server/worker.js'
import { ChunkCache } from '../src/storage/chunk-cache.js'
import type { LocalTables } from '../src/storage/local-forms.js'
import { until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { streamText } from './helpers/http.js'
import { fullQuery } from './helpers/reference-evm.js'

/*
 * A worker's leases (WorkerNode.lease in src/server/worker.ts) over 8 real chunks of the recorded
 * anvil chain (8 blocks each): a query acquires the local forms of the chunks it reads and no
 * others, and gives back exactly those; a chunk that stops being wanted leaves the view after the
 * grace period but is deleted only once the queries leased before that have ended; one wanted again
 * before that is served again as it is.
 */

const BUDGETS = { sizeBytes: 1 << 30, timeMs: 600_000 }
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Storage that records the worker's calls, and can hide chunks from the listing (they stop being wanted). */
class RecordingStorage extends ArchiveStorage {
  /** Chunks a local form was asked for, and those whose form was acquired (it was built). */
  asked: string[] = []
  acquired: string[] = []
  released: string[] = []
  fetched: string[] = []
  dropped: string[] = []
  hidden = new Set<string>()

  override async listChunks(dataset: string): Promise<ChunkRef[]> {
    return (await super.listChunks(dataset)).filter((c) => !this.hidden.has(c.path))
  }
  override localForm(dataset: string, chunk: ChunkRef): LocalTables | undefined {
    this.asked.push(chunk.path)
    const tables = super.localForm(dataset, chunk)
    if (tables) this.acquired.push(chunk.path)
    return tables
  }
  override releaseLocalForm(dataset: string, chunk: ChunkRef): void {
    this.released.push(chunk.path)
    super.releaseLocalForm(dataset, chunk)
  }
  override async fetchChunk(dataset: string, chunk: ChunkRef): Promise<string> {
    this.fetched.push(chunk.path)
    return super.fetchChunk(dataset, chunk)
  }
  override async dropChunk(dataset: string, chunk: ChunkRef): Promise<void> {
    this.dropped.push(chunk.path)
    await super.dropChunk(dataset, chunk)
  }
}

/** The whole answer to `query` under a lease of its own. */
async function answer(node: WorkerNode, query: unknown): Promise<string> {
  const lease = node.lease('anvil')!
  try {
    return await streamText((await prepareQuery(lease.view, query, BUDGETS)).body)
  } finally {
    lease.release()
  }
}

const sorted = (a: string[]) => [...a].sort()

describe('worker leases', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let data: string
  let chunks: ChunkRef[]
  const nodes: WorkerNode[] = []

  /** A standalone worker over the dataset; heartbeats only when the test calls them. */
  const startNode = async (id: string, storage: RecordingStorage, dropGraceMs = 100) => {
    const node = new WorkerNode({ id, publicUrl: 'http://127.0.0.1:1', storage, heartbeatMs: 3_600_000, dropGraceMs })
    nodes.push(node)
    await node.start()
    assert.deepEqual(node.state().anvil, [[0, 63]])
    return node
  }

  before(async () => {
    tmp = await tempDir('ba-worker-leases-')
    data = path.join(tmp.dir, 'anvil')
    // 64 blocks: every local form is built before the first test's queries (more chunks only
    // repeat the build); a single chunk and three in the middle are still apart from both ends.
    chunks = await writeDataset(data, 'anvil', (await anvilRecords()).slice(0, 64), 8)
    assert.equal(chunks.length, 8)
  })

  after(async () => {
    for (const n of nodes) await n.stop()
    await tmp?.cleanup()
  })

  it('a query acquires the local forms of the chunks it reads, no others, and gives back exactly those', async () => {
    const parquet = await startNode('parquet', new RecordingStorage({ roots: [data] }))
    const storage = new RecordingStorage({ roots: [data], cache: new ChunkCache({ root: path.join(tmp.dir, 'cache'), label: 'leases', formsAfterReads: 0 }) })
    const node = await startNode('forms', storage)
    await until('forms built', async () => (node.localForms().pending === 0 && node.localForms().built === chunks.length) || undefined, 180_000)

    // one chunk, and three in the middle of the dataset
    for (const [a, b] of [[5, 5], [2, 4]]) {
      storage.asked = []
      storage.acquired = []
      storage.released = []
      const reads = chunks.slice(a, b + 1).map((c) => c.path)
      const query = fullQuery(chunks[a].first, chunks[b].last)
      const lease = node.lease('anvil')!
      assert.deepEqual(storage.asked, [], 'a lease alone acquires no form')
      const got = await streamText((await prepareQuery(lease.view, query, BUDGETS)).body)
      assert.deepEqual(sorted(storage.asked), sorted(reads), `chunks ${a}–${b}: forms asked for`)
      assert.deepEqual(sorted(storage.acquired), sorted(reads), `chunks ${a}–${b}: read from their forms`)
      assert.deepEqual(storage.released, [], 'held while the lease runs')
      lease.release()
      lease.release()
      assert.deepEqual(sorted(storage.released), sorted(storage.acquired), 'the lease gives back what it acquired, once')
      assert.equal(got, await answer(parquet, query), 'the same answer as from the Parquet files')
    }
  })

  it('a chunk no longer wanted leaves the view after the grace period and is deleted once the queries leased before that have ended', async () => {
    const storage = new RecordingStorage({ roots: [data] })
    const node = await startNode('drop', storage)
    const victim = chunks[5]
    const has = (lease: { view: { chunks: ChunkRef[] } }) => lease.view.chunks.some((c) => c.path === victim.path)
    const query = fullQuery(victim.first, victim.last)
    const want = await answer(node, query)

    // Leased while wanted, the query prepared (its first chunk opened) but not read yet.
    const early = node.lease('anvil')!
    const stream = await prepareQuery(early.view, query, BUDGETS)
    storage.hidden.add(victim.path)
    await node.heartbeat()
    // Within the grace period: still served, and a query leased now may read it too.
    assert.ok(node.state().anvil.some(([a, b]) => a <= victim.first && victim.last <= b), 'still served during the grace period')
    const during = node.lease('anvil')!
    assert.ok(has(during))

    await sleep(150)
    await node.heartbeat()
    // Past the grace period: new queries no longer see it, and it is not reported; not deleted yet.
    assert.ok(!node.state().anvil.some(([a, b]) => a <= victim.first && victim.last <= b), 'not reported once retired')
    const late = node.lease('anvil')!
    assert.ok(!has(late), 'a lease taken now does not see it')
    assert.deepEqual(storage.dropped, [], 'not deleted while queries leased before still run')
    assert.equal(await streamText(stream.body), want, 'the early query still reads it whole')

    early.release()
    await node.heartbeat()
    assert.deepEqual(storage.dropped, [], 'not deleted while the query leased during the grace period runs')

    during.release()
    await node.heartbeat()
    assert.deepEqual(storage.dropped, [victim.path], 'deleted once they ended, whatever leases taken after it left the view')
    late.release()
    await node.heartbeat()
    assert.deepEqual(storage.dropped, [victim.path], 'once')
  })

  it('a chunk wanted again before it is deleted is served again as it is', async () => {
    const storage = new RecordingStorage({ roots: [data] })
    const node = await startNode('back', storage)
    const victim = chunks[3]
    const early = node.lease('anvil')!
    storage.hidden.add(victim.path)
    await node.heartbeat()
    await sleep(150)
    await node.heartbeat()
    const late = node.lease('anvil')!
    assert.ok(!late.view.chunks.some((c) => c.path === victim.path), 'left the view')
    late.release()

    storage.hidden.delete(victim.path)
    await node.heartbeat()
    assert.deepEqual(node.state().anvil, [[0, 63]])
    const again = node.lease('anvil')!
    assert.ok(again.view.chunks.some((c) => c.path === victim.path), 'back in the view')
    early.release()
    again.release()
    await node.heartbeat()
    assert.deepEqual(storage.dropped, [])
    assert.equal(storage.fetched.filter((p) => p === victim.path).length, 1, 'not fetched again')
  })
})
