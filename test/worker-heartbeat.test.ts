import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ChunkRef } from '../src/chunks/layout.js'
import { prepareQuery } from '../src/query/engine.js'
import { ArchiveStorage } from '../src/server/storage.js'
import { WorkerNode } from '../src/server/worker.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { streamText } from './helpers/http.js'
import { fullQuery } from './helpers/reference-evm.js'

/*
 * A worker's heartbeat while nothing changes (src/server/worker.ts): it costs the same however many
 * chunks are held. Over 8 real chunks of the recorded anvil chain, a standalone worker that looks at
 * 3 chunks' files per pass keeps its view across beats, looks at each chunk in turn, and a chunk
 * whose files are found changed is dropped at once and fetched again.
 */

const BUDGETS = { sizeBytes: 1 << 30, timeMs: 600_000 }

/** Storage that records the chunks whose files the worker looks at, and can report chunks as changed on disk. */
class RecordingStorage extends ArchiveStorage {
  looked: string[] = []
  fetched: string[] = []
  damaged = new Set<string>()

  override async intact(dataset: string, chunk: ChunkRef): Promise<boolean> {
    this.looked.push(chunk.path)
    return !this.damaged.has(chunk.path) && (await super.intact(dataset, chunk))
  }
  override async fetchChunk(dataset: string, chunk: ChunkRef): Promise<string> {
    this.fetched.push(chunk.path)
    this.damaged.delete(chunk.path) // fetched again: as it should be
    return super.fetchChunk(dataset, chunk)
  }
}

describe('worker heartbeat at rest', { timeout: 300_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let chunks: ChunkRef[]
  let storage: RecordingStorage
  let node: WorkerNode

  before(async () => {
    tmp = await tempDir('ba-worker-heartbeat-')
    const data = path.join(tmp.dir, 'anvil')
    chunks = await writeDataset(data, 'anvil', (await anvilRecords()).slice(0, 64), 8)
    assert.equal(chunks.length, 8)
    storage = new RecordingStorage({ roots: [data] })
    // heartbeats only when the test calls them
    node = new WorkerNode({ id: 'beat', publicUrl: 'http://127.0.0.1:1', storage, heartbeatMs: 3_600_000, dropGraceMs: 100, intactPerPass: 3 })
    await node.start()
    assert.deepEqual(node.state().anvil, [[0, 63]])
  })

  after(async () => {
    await node?.stop()
    await tmp?.cleanup()
  })

  it('keeps its view and looks at a bounded share of the held chunks per beat, each in turn', async () => {
    const before = node.lease('anvil')!
    before.release()
    const perBeat: string[][] = []
    for (let beat = 0; beat < 3; beat++) {
      storage.looked = []
      await node.heartbeat()
      perBeat.push(storage.looked)
    }
    for (const looked of perBeat) assert.equal(looked.length, 3, `one beat looked at ${looked.join(', ')}`)
    assert.deepEqual(new Set(perBeat.flat()), new Set(chunks.map((c) => c.path)), 'every chunk within ceil(8 / 3) beats')
    const afterBeats = node.lease('anvil')!
    afterBeats.release()
    assert.equal(afterBeats.view.chunks, before.view.chunks, 'the same view: nothing was rebuilt')
    assert.deepEqual(storage.fetched.length, chunks.length, 'nothing fetched again')
  })

  it('a chunk found changed on disk by a beat is dropped and fetched again; the answers stay whole', async () => {
    const victim = chunks[6]
    const query = fullQuery(chunks[0].first, chunks[7].last)
    const lease = node.lease('anvil')!
    const want = await streamText((await prepareQuery(lease.view, query, BUDGETS)).body)
    lease.release()
    storage.fetched = []
    storage.damaged.add(victim.path)
    for (let beat = 0; beat < 3 && storage.fetched.length === 0; beat++) await node.heartbeat()
    await node.settled()
    assert.deepEqual(storage.fetched, [victim.path], 'found by a beat within ceil(8 / 3) beats, fetched again, alone')
    assert.deepEqual(node.state().anvil, [[0, 63]])
    const again = node.lease('anvil')!
    try {
      assert.equal(await streamText((await prepareQuery(again.view, query, BUDGETS)).body), want)
    } finally {
      again.release()
    }
  })
})
