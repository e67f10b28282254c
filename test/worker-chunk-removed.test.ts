import assert from 'node:assert/strict'
import { rm } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ChunkRef } from '../src/chunks/layout.js'
import type { WorkerServer } from '../src/server/worker-http.js'
import { anvilRecords, startStandaloneWorker, tempDir, writeDatasetChunks } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'

/*
 * Compaction deletes the chunks a merged chunk replaces once its grace period is over. A worker
 * whose view still holds one of them (its router has not swapped it yet: a slow machine, a grace set
 * too short) must not fail the query with a 500: a query starting in the removed chunk gets a
 * retryable 503 `not-available` (the client asks the router again), and one starting before it is
 * answered up to the chunk before, as when a later chunk lacks a table.
 */

const QUERY = { includeAllBlocks: true, fields: { block: { number: true, hash: true } }, transactions: [{}] }

describe('a chunk removed under a worker that still serves it', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let worker: WorkerServer
  let chunks: ChunkRef[]
  let dir: string

  before(async () => {
    tmp = await tempDir('ba-chunk-removed-')
    dir = path.join(tmp.dir, 'data')
    chunks = await writeDatasetChunks(dir, 'r', await anvilRecords(), [4, 4, 4, 4])
    // a standalone worker lists its storage at every heartbeat: a long one keeps the removed chunk in its view
    worker = await startStandaloneWorker(dir, { heartbeatMs: 600_000 })
  })
  after(async () => {
    await worker?.stop()
    await tmp?.cleanup()
  })

  it('a query from the removed chunk gets a retryable 503; one from before it ends before it', async () => {
    const url = `${worker.url}/datasets/r/query`
    const whole = await postJson(url, { ...QUERY, fromBlock: 0, toBlock: 15 })
    assert.equal(whole.status, 200, whole.text)
    const all = JSON.parse(whole.text) as { header: { number: number } }[]
    assert.equal(all.at(-1)!.header.number, 15)

    const removed = chunks.find((c) => c.first === 8)!
    await rm(path.join(dir, removed.path), { recursive: true })

    const inIt = await postJson(url, { ...QUERY, fromBlock: 9, toBlock: 15 })
    assert.equal(inIt.status, 503, inIt.text)
    assert.equal(JSON.parse(inIt.text).error, 'not-available')
    assert.ok(inIt.headers['retry-after'], 'Retry-After')

    const before = await postJson(url, { ...QUERY, fromBlock: 0, toBlock: 15 })
    assert.equal(before.status, 200, before.text)
    const got = JSON.parse(before.text) as { header: { number: number } }[]
    assert.ok(got.at(-1)!.header.number <= 7, `ends before the removed chunk: ${got.at(-1)!.header.number}`)
    assert.deepEqual(got, all.filter((b) => b.header.number <= got.at(-1)!.header.number), 'the same blocks as before the removal')

    // the worker goes on answering the rest of the dataset
    const afterIt = await postJson(url, { ...QUERY, fromBlock: 12, toBlock: 15 })
    assert.equal(afterIt.status, 200, afterIt.text)
  })
})
