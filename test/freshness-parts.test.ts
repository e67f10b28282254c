import assert from 'node:assert/strict'
import { readFile, rename } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { parseDatasetHead } from '../src/chunks/head-file.js'
import { HeadWriter } from '../src/ingest/head-writer.js'
import { extendListing } from '../src/server/freshness.js'
import { HeadLag } from '../src/server/head-lag.js'
import { RouterState } from '../src/server/router.js'
import { LocalStorage } from '../src/server/storage.js'
import { anvilRecords, tempDir, writeChunk, writeDataset } from './helpers/dataset.js'

/*
 * The pieces of freshness on their own: the ingest's head file as written and parsed, the lag the
 * router derives from it, a worker's listing extended from a ping answer, and the router appending
 * the chunks a head file names (real chunks of the recorded anvil chain in a folder), or refusing
 * to when they do not continue its list.
 */

let tmp: Awaited<ReturnType<typeof tempDir>>
before(async () => {
  tmp = await tempDir('ba-fresh-parts-')
})
after(async () => {
  await tmp?.cleanup()
})

const ref = (first: number, last: number, top = 0) => {
  const pad = (n: number) => String(n).padStart(10, '0')
  return { top, first, last, hash: 'abcdef01', path: `${pad(top)}/${pad(first)}-${pad(last)}-abcdef01` }
}

describe('head file', () => {
  it('says what was published and since when the node is ahead', async () => {
    const dir = path.join(tmp.dir, 'head')
    await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }))
    const w = new HeadWriter({ out: dir, dataset: 'x', written: [ref(0, 9)] })
    const t0 = Date.now()
    w.node(12, 11)
    w.published(ref(10, 11))
    w.node(13, 12)
    await w.close()
    const head = parseDatasetHead(await readFile(path.join(dir, 'head.json'), 'utf8'))
    assert.ok(head)
    assert.deepEqual(head.chunks, [ref(0, 9).path, ref(10, 11).path])
    assert.equal(head.last, 11)
    assert.deepEqual({ head: head.node!.head, confirmed: head.node!.confirmed }, { head: 13, confirmed: 12 })
    assert.equal(head.behind!.block, 12)
    assert.ok(head.behind!.since >= t0 && head.publishedAt! >= t0)
  })

  it('rejects what is not a head file', () => {
    assert.equal(parseDatasetHead('{'), undefined)
    assert.equal(parseDatasetHead('{"dataset":"x","chunks":["nope"],"last":1,"writtenAt":1,"node":null,"behind":null,"publishedAt":null}'), undefined)
    assert.equal(parseDatasetHead('{"dataset":"x","chunks":[],"last":"1","writtenAt":1,"node":null,"behind":null,"publishedAt":null}'), undefined)
    assert.ok(parseDatasetHead('{"dataset":"x","chunks":[],"last":-1,"writtenAt":1,"node":null,"behind":null,"publishedAt":null}'))
  })
})

describe('lag from the head file', () => {
  it('counts blocks from the node head and seconds from the oldest block not served', () => {
    const lag = new HeadLag()
    const t = 1_000_000
    lag.note({ dataset: 'x', chunks: [], last: 8, publishedAt: t, node: { head: 10, confirmed: 10, at: t + 500 }, behind: { block: 9, since: t }, writtenAt: t + 500 })
    assert.deepEqual(lag.lag(8, t + 2000), { nodeHead: 10, blocks: 2, seconds: 2, headWrittenAt: t + 500 })
    // block 9 served: the oldest one not served (10) was reported at t + 500
    assert.equal(lag.lag(9, t + 2000)!.seconds, 1.5)
    assert.equal(lag.lag(10, t + 2000)!.seconds, 0)
    assert.equal(lag.lag(10, t + 2000)!.blocks, 0)
    assert.equal(new HeadLag().lag(0), undefined)
  })
})

describe('a worker listing extended from a ping answer', () => {
  it('only when the router\'s newest chunks include the listing\'s last', () => {
    const listing = [ref(0, 9), ref(10, 19)]
    assert.deepEqual(extendListing(listing, [ref(10, 19), ref(20, 20), ref(21, 21)]), [...listing, ref(20, 20), ref(21, 21)])
    assert.equal(extendListing(listing, [ref(20, 20)]), undefined) // can't tell what lies between
    assert.equal(extendListing([], [ref(0, 9)]), undefined)
    assert.deepEqual(extendListing(listing, [ref(0, 9), ref(10, 19)]), listing)
  })
})

describe('the router appends the chunks a head file names', () => {
  it('when they continue its list, and not otherwise', async () => {
    const dir = path.join(tmp.dir, 'anvil')
    // Written as an ingest writes them: each chunk's meta.json names the block it was written after.
    const records = (await anvilRecords()).slice(0, 48)
    await writeDataset(dir, 'anvil', [], 16)
    const chunks: Awaited<ReturnType<typeof writeChunk>>[] = []
    for (let i = 0; i < records.length; i += 16) await writeChunk(dir, records.slice(i, i + 16), chunks, { previousLast: chunks.at(-1)?.last ?? -1 })
    assert.equal(chunks.length, 3)
    const aside = (c: (typeof chunks)[number]) => path.join(tmp.dir, `aside-${c.first}`)
    // The router lists the first chunk only; the two others appear afterwards.
    await rename(path.join(dir, chunks[1].path), aside(chunks[1]))
    await rename(path.join(dir, chunks[2].path), aside(chunks[2]))
    const state = new RouterState(new LocalStorage(dir), { replication: 1, heartbeatMs: 1000, missedHeartbeats: 3 })
    await state.relist(true)
    const count = () => state.status().datasets[0].chunks
    assert.equal(count(), 1)
    // Named but not in storage: refused.
    assert.equal(await state.appendChunks('anvil', [chunks[1]]), false)
    await rename(aside(chunks[1]), path.join(dir, chunks[1].path))
    await rename(aside(chunks[2]), path.join(dir, chunks[2].path))
    // Skipping a chunk (its successor says it was written after it): refused, the list stays.
    assert.equal(await state.appendChunks('anvil', [chunks[2]]), false)
    assert.equal(count(), 1)
    const nudged: string[][] = []
    state.onNewChunks = (urls) => nudged.push(urls)
    state.ping({ worker_id: 'w', worker_url: 'http://127.0.0.1:1', state: {} })
    assert.equal(await state.appendChunks('anvil', chunks), true)
    assert.equal(count(), 3)
    assert.equal(state.status().datasets[0].lastChunkBlock, chunks[2].last)
    assert.deepEqual(nudged, [['http://127.0.0.1:1']])
    // Announced again: nothing new.
    assert.equal(await state.appendChunks('anvil', chunks), true)
    assert.equal(nudged.length, 1)
  })
})
