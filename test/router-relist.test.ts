import assert from 'node:assert/strict'
import { rm } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { syntheticChunk, writeSyntheticFolder, writeSyntheticS3, writeSyntheticS3Index, SYNTHETIC_TOP_CHUNKS } from '../bench/lib/synthetic-chunks.js'
import { readChunkMeta, scanLocalChunks } from '../src/chunks/layout.js'
import { CHUNK_INDEX_FILE, linksOf } from '../src/chunks/chunk-index.js'
import { RouterState } from '../src/server/router.js'
import { ArchiveStorage } from '../src/server/storage.js'
import { openDatasetStore } from '../src/storage/dataset-store.js'
import { storageRequests } from '../src/storage/metrics.js'
import { deleteObjects } from '../src/storage/s3.js'
import { tempDir } from './helpers/dataset.js'
import { startS3, type S3Server } from './helpers/s3.js'

/*
 * What a router's relisting costs, counted in storage requests: over a folder and over a real S3
 * server (s3rver), a dataset of sparse synthetic chunks (every chunk a jump whose meta.json the
 * router reads) in several top folders. A relisting with nothing new reads no chunk again; a new
 * chunk costs a few requests, whatever the dataset's size. With the dataset's chunk index
 * (src/chunks/chunk-index.ts) the first listing reads one file instead of a meta.json per jump.
 */

const OPTS = { replication: 1, heartbeatMs: 1000, missedHeartbeats: 3 }
const CHUNKS = 2 * SYNTHETIC_TOP_CHUNKS + 100

/** Storage requests of `storage` made while `f` runs, by operation. */
async function counted(storage: 'folder' | 's3', f: () => Promise<unknown>): Promise<Record<string, number>> {
  const snapshot = async () => {
    const out: Record<string, number> = {}
    for (const v of (await storageRequests.get()).values) if (v.labels.storage === storage) out[String(v.labels.op)] = v.value
    return out
  }
  const before = await snapshot()
  await f()
  const after = await snapshot()
  const diff: Record<string, number> = {}
  for (const [op, n] of Object.entries(after)) if (n - (before[op] ?? 0) > 0) diff[op] = n - (before[op] ?? 0)
  return diff
}

const total = (c: Record<string, number>) => Object.values(c).reduce((a, b) => a + b, 0)

describe('relisting cost', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let s3: S3Server

  before(async () => {
    tmp = await tempDir('ba-relist-')
    s3 = await startS3(['relist'])
  })

  after(async () => {
    await s3?.stop()
    await tmp?.cleanup()
  })

  it('over a folder without a chunk index: nothing new reads no chunk again, a new chunk costs one stat and one meta read', async () => {
    const dir = path.join(tmp.dir, 'folder', 'sim')
    await writeSyntheticFolder(dir, 'sim', 0, CHUNKS)
    await rm(path.join(dir, CHUNK_INDEX_FILE))
    const router = new RouterState(new ArchiveStorage({ roots: [path.dirname(dir)] }), OPTS)
    const first = await counted('folder', () => router.relist(true))
    assert.equal(first.stat, CHUNKS, JSON.stringify(first))
    assert.equal(first.read, CHUNKS - 1 + 1, 'one meta.json per jump, and the chunk index (absent)')
    assert.equal(router.status().datasets[0].chunks, CHUNKS)

    const again = await counted('folder', () => router.relist())
    assert.equal(again.stat ?? 0, 0, JSON.stringify(again))
    assert.equal(again.read ?? 0, 0, JSON.stringify(again))
    assert.ok((again.readdir ?? 0) <= 3, `root, dataset folder, last top folder: ${JSON.stringify(again)}`)

    await writeSyntheticFolder(dir, 'sim', CHUNKS, CHUNKS + 10)
    const grown = await counted('folder', () => router.relist())
    assert.equal(grown.stat, 10, JSON.stringify(grown))
    assert.equal(grown.read, 10, JSON.stringify(grown))
    assert.equal(router.status().datasets[0].chunks, CHUNKS + 10)
  })

  it('over a folder with a chunk index: the first listing reads the index, no chunk, and agrees with a real listing', async () => {
    const dir = path.join(tmp.dir, 'indexed', 'sim')
    await writeSyntheticFolder(dir, 'sim', 0, CHUNKS)
    const router = new RouterState(new ArchiveStorage({ roots: [path.dirname(dir)] }), OPTS)
    const first = await counted('folder', () => router.relist(true))
    assert.equal(first.stat ?? 0, 0, JSON.stringify(first))
    assert.equal(first.read, 1, `the index only: ${JSON.stringify(first)}`)
    assert.equal(router.status().datasets[0].chunks, CHUNKS)
    assert.deepEqual(router.status().datasets[0].problems, [])

    // What the index says is what the listing and the metas say.
    const store = openDatasetStore(dir)
    const listed = await store.listChunks()
    assert.deepEqual(listed.map((c) => c.path), (await scanLocalChunks(dir)).map((c) => c.path))
    for (const c of listed) assert.deepEqual(await store.chunkLinks(c), linksOf(await readChunkMeta(dir, c)), c.path)
    // What a worker taking a chunk reads of its links instead of its meta.json.
    for (const c of listed) assert.deepEqual(store.indexedLinks(c), linksOf(await readChunkMeta(dir, c)), c.path)

    // Until the next full listing reads the index again, new chunks cost a stat and a meta read each, as without one.
    await writeSyntheticFolder(dir, 'sim', CHUNKS, CHUNKS + 10)
    const before = new Set(listed.map((c) => c.path))
    const fresh = (await store.listChunks()).filter((c) => !before.has(c.path))
    assert.equal(fresh.length, 10)
    for (const c of fresh) assert.equal(store.indexedLinks(c), undefined, `${c.path}: not in the index read`)
    const grown = await counted('folder', () => router.relist())
    assert.equal(grown.stat, 10, JSON.stringify(grown))
    assert.equal(grown.read, 10, JSON.stringify(grown))
    assert.equal(router.status().datasets[0].chunks, CHUNKS + 10)
  })

  it('over a folder with a chunk index: a chunk deleted behind the index is not listed, and what follows it is not routed', async () => {
    const dir = path.join(tmp.dir, 'stale', 'sim')
    await writeSyntheticFolder(dir, 'sim', 0, CHUNKS)
    const gone = syntheticChunk(3).ref
    await rm(path.join(dir, gone.path), { recursive: true })
    const store = openDatasetStore(dir)
    assert.ok(!(await store.listChunks()).some((c) => c.path === gone.path))
    const router = new RouterState(new ArchiveStorage({ roots: [path.dirname(dir)] }), OPTS)
    await router.relist(true)
    const ds = router.status().datasets[0]
    assert.equal(ds.chunks, 3, 'served up to the chunk before the one missing')
    assert.equal(ds.lastChunkBlock, syntheticChunk(2).ref.last)
    assert.match(ds.problems[0], /a chunk is missing/)
  })

  it('over a folder: the listing matches a full scan, and a full pass notices chunks deleted from earlier top folders', async () => {
    const dir = path.join(tmp.dir, 'folder2')
    await writeSyntheticFolder(dir, 'sim', 0, CHUNKS)
    const incremental = openDatasetStore(dir, { fullListingMs: 3_600_000 })
    const everyTime = openDatasetStore(dir, { fullListingMs: 0 })
    const paths = async (s = incremental) => (await s.listChunks()).map((c) => c.path)
    assert.deepEqual(await paths(), (await scanLocalChunks(dir)).map((c) => c.path))
    assert.deepEqual(await paths(everyTime), await paths())
    const early = syntheticChunk(3).ref
    const late = syntheticChunk(CHUNKS - 2).ref
    await rm(path.join(dir, early.path), { recursive: true })
    await rm(path.join(dir, late.path), { recursive: true })
    const expected = (await scanLocalChunks(dir)).map((c) => c.path)
    // The last top folder is read at every listing; earlier ones only in a full pass.
    const seen = await paths()
    assert.ok(!seen.includes(late.path))
    assert.ok(seen.includes(early.path))
    assert.deepEqual(await paths(everyTime), expected)
    // Put back, both are found again by the full pass.
    await writeSyntheticFolder(dir, 'sim', 3, 4)
    await writeSyntheticFolder(dir, 'sim', CHUNKS - 2, CHUNKS - 1)
    assert.deepEqual(await paths(everyTime), (await scanLocalChunks(dir)).map((c) => c.path))
  })

  // The S3 datasets are small (every chunk is two PUTs into s3rver): what a listing costs does not
  // depend on their size, and the folder tests above cover datasets over several top folders.
  it('over S3: nothing new costs one list call, a new chunk one meta read more', async () => {
    const n = 30
    await writeSyntheticS3('relist', 'data/sim', 'sim', 0, n)
    const router = new RouterState(new ArchiveStorage({ roots: ['s3://relist/data'] }), OPTS)
    const first = await counted('s3', () => router.relist(true))
    assert.equal(first.GetObject, n - 1 + 3, `one meta.json per jump, dataset.json twice, the chunk index (absent): ${JSON.stringify(first)}`)
    assert.equal(router.status().datasets[0].chunks, n)

    const again = await counted('s3', () => router.relist())
    assert.deepEqual(again, { ListObjectsV2: 2, GetObject: 2 }, 'listing the root and the chunks after the last one; dataset.json of the root and the dataset')

    await writeSyntheticS3('relist', 'data/sim', 'sim', n, n + 10)
    const grown = await counted('s3', () => router.relist())
    assert.equal(grown.GetObject, 2 + 10, JSON.stringify(grown))
    assert.equal(grown.ListObjectsV2, 2, JSON.stringify(grown))
    assert.ok(total(grown) <= 14)
    assert.equal(router.status().datasets[0].chunks, n + 10)
  })

  it('over S3 with a chunk index: one GET of the index instead of a meta.json per jump; a chunk deleted behind it is not routed', async () => {
    const n = 30
    await writeSyntheticS3('relist', 'idx/sim', 'sim', 0, n)
    await writeSyntheticS3Index('relist', 'idx/sim', n)
    const router = new RouterState(new ArchiveStorage({ roots: ['s3://relist/idx'] }), OPTS)
    const first = await counted('s3', () => router.relist(true))
    assert.equal(first.GetObject, 3, `dataset.json twice and the index: ${JSON.stringify(first)}`)
    assert.equal(router.status().datasets[0].chunks, n)
    assert.deepEqual(router.status().datasets[0].problems, [])

    const store = openDatasetStore('s3://relist/idx/sim')
    for (const c of await store.listChunks()) {
      assert.deepEqual(await store.chunkLinks(c), linksOf(await store.chunkMeta(c)), c.path)
      assert.deepEqual(store.indexedLinks(c), linksOf(await store.chunkMeta(c)), c.path)
    }

    await deleteObjects('relist', [`idx/sim/${syntheticChunk(5).ref.path}/blocks.parquet`])
    const restarted = new RouterState(new ArchiveStorage({ roots: ['s3://relist/idx'] }), OPTS)
    await restarted.relist(true)
    assert.equal(restarted.status().datasets[0].chunks, 5)
    assert.match(restarted.status().datasets[0].problems[0], /a chunk is missing/)
  })
})
