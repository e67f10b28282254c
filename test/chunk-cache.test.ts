import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { open, readdir, readFile, stat, utimes } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ChunkMeta, ChunkRef } from '../src/chunks/layout.js'
import { CacheFull, ChunkCache } from '../src/storage/chunk-cache.js'
import { openDatasetStore, type DatasetStore } from '../src/storage/dataset-store.js'
import { joinKey, putText } from '../src/storage/s3.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { registrySum } from './helpers/metrics.js'
import { startS3, uploadDataset, type S3Server } from './helpers/s3.js'

/*
 * A worker's chunk cache over a real S3 protocol server (s3rver on loopback) holding a small EVM
 * dataset (64 recorded anvil blocks, 16 per chunk): downloads verified against the chunk manifest,
 * one download per chunk however many ask, the byte limit, reuse and re-checking after a restart,
 * and a dataset whose storage URL changed.
 */

const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex')
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const downloaded = (label: string) => registrySum('block_archive_worker_download_bytes_total', { worker: label })

/** Overwrite `n` bytes in the middle of a file: same size, other bytes, new mtime. */
async function damage(file: string, n = 32): Promise<void> {
  const fh = await open(file, 'r+')
  try {
    const { size } = await fh.stat()
    const at = Math.floor(size / 2)
    const old = Buffer.alloc(n)
    await fh.read(old, 0, n, at)
    await fh.write(Buffer.from(old.map((b) => b ^ 0xff)), 0, n, at)
  } finally {
    await fh.close()
  }
}

describe('chunk cache over S3', { timeout: 600_000 }, () => {
  let s3: S3Server
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let local: string
  let chunks: ChunkRef[]
  let store: DatasetStore
  /** Bytes of each chunk as stored (every file, meta.json included). */
  const size = new Map<string, number>()
  let n = 0
  /** A fresh cache folder. */
  const root = () => path.join(tmp.dir, `cache-${++n}`)
  const cached = (r: string, c: ChunkRef, dataset = 'anvil') => path.join(r, dataset, c.path)

  before(async () => {
    s3 = await startS3(['archive'])
    tmp = await tempDir('ba-chunk-cache-')
    local = path.join(tmp.dir, 'anvil')
    chunks = await writeDataset(local, 'anvil', (await anvilRecords()).slice(0, 64), 16)
    assert.equal(chunks.length, 4)
    await uploadDataset(local, 'archive', 'evm/anvil')
    store = openDatasetStore('s3://archive/evm/anvil')
    for (const c of chunks) {
      let bytes = 0
      for (const f of await readdir(path.join(local, c.path))) bytes += (await stat(path.join(local, c.path, f))).size
      size.set(c.path, bytes)
    }
  })

  after(async () => {
    await s3?.stop()
    await tmp?.cleanup()
  })

  it('downloads a chunk byte for byte, verified, once however often and however concurrently it is asked for', async () => {
    const r = root()
    const cache = new ChunkCache({ root: r, label: 'fetch' })
    const c = chunks[0]
    const dir = await cache.fetch('anvil', store, c)
    assert.equal(dir, cached(r, c))
    const sourceFiles = (await readdir(path.join(local, c.path))).sort()
    assert.ok(sourceFiles.includes('blocks.parquet') && sourceFiles.includes('meta.json'))
    assert.deepEqual((await readdir(dir)).sort(), [...sourceFiles, '.verified.json'].sort())
    for (const f of sourceFiles) assert.equal(sha256(path.join(dir, f)), sha256(path.join(local, c.path, f)), f)
    const verified = JSON.parse(await readFile(path.join(dir, '.verified.json'), 'utf8')).files
    const manifest = (JSON.parse(await readFile(path.join(local, c.path, 'meta.json'), 'utf8')) as ChunkMeta).files!
    assert.ok(Object.keys(manifest).length > 0)
    for (const [f, info] of Object.entries(manifest)) assert.equal(verified[f].sha256, info.sha256, f)
    assert.equal(await downloaded('fetch'), size.get(c.path))
    assert.equal(cache.bytes, size.get(c.path))
    assert.equal(await cache.intact('anvil', c.path), true)

    // Asked again: served from the folder.
    assert.equal(await cache.fetch('anvil', store, c), dir)
    assert.equal(await downloaded('fetch'), size.get(c.path))

    // Asked by several at once: one download.
    const c1 = chunks[1]
    const dirs = await Promise.all([1, 2, 3, 4].map(() => cache.fetch('anvil', store, c1)))
    assert.deepEqual(new Set(dirs), new Set([cached(r, c1)]))
    assert.equal(await downloaded('fetch'), size.get(c.path)! + size.get(c1.path)!)
    assert.equal(cache.bytes, size.get(c.path)! + size.get(c1.path)!)
    assert.deepEqual((await readdir(path.join(r, 'anvil', String(c1.path).split('/')[0]))).filter((n) => n.includes('.part-')), [])
  })

  it('refuses a download whose bytes do not match the manifest, leaving nothing behind', async () => {
    await uploadDataset(local, 'archive', 'evm/bad')
    const c = chunks[2]
    const meta = JSON.parse(await readFile(path.join(local, c.path, 'meta.json'), 'utf8')) as ChunkMeta
    const victim = 'transactions.parquet'
    assert.ok(meta.files?.[victim], `${victim} is in the manifest`)
    meta.files![victim].sha256 = '0'.repeat(64)
    await putText('archive', joinKey('evm/bad', c.path, 'meta.json'), JSON.stringify(meta, null, 2))
    const bad = openDatasetStore('s3://archive/evm/bad')

    const r = root()
    const cache = new ChunkCache({ root: r, label: 'bad' })
    for (let attempt = 0; attempt < 2; attempt++) {
      await assert.rejects(cache.fetch('bad', bad, c), (e: Error) => {
        assert.match(e.message, new RegExp(`${c.path}.*${victim.replace('.', '\\.')}`))
        assert.match(e.message, /sha256 0{64}/)
        return true
      })
      assert.equal(existsSync(cached(r, c, 'bad')), false)
      const top = path.dirname(cached(r, c, 'bad'))
      const left = existsSync(top) ? await readdir(top) : []
      assert.deepEqual(left, [], 'no chunk folder nor .part- folder remains')
    }
    assert.equal(cache.bytes, 0)
    assert.equal(await downloaded('bad'), 0)
    assert.equal(await cache.intact('bad', c.path), false)

    // The other chunks of that dataset are fine.
    assert.equal(await cache.fetch('bad', bad, chunks[0]), cached(r, chunks[0], 'bad'))
  })

  it('stays under its byte limit: refuses while what it holds fills it, evicts unheld chunks first', async () => {
    const [c0, c1] = chunks
    const s0 = size.get(c0.path)!
    const s1 = size.get(c1.path)!
    const r = root()
    const limitBytes = Math.max(s0, s1) + 1024
    assert.ok(s0 + s1 > limitBytes)
    const cache = new ChunkCache({ root: r, label: 'limit', limitBytes })
    await cache.fetch('anvil', store, c0)
    await assert.rejects(cache.fetch('anvil', store, c1), CacheFull)
    assert.equal(existsSync(cached(r, c1)), false)
    assert.equal(cache.bytes, s0)
    await cache.release('anvil', c0.path)
    assert.equal(existsSync(cached(r, c0)), false)
    assert.equal(cache.bytes, 0)
    assert.equal(await cache.fetch('anvil', store, c1), cached(r, c1))
    assert.equal(cache.bytes, s1)

    // Two downloads at once that do not fit together: one is refused, the limit holds.
    const [c2, c3] = chunks.slice(2)
    const bothLimit = Math.max(size.get(c2.path)!, size.get(c3.path)!) + 1024
    assert.ok(size.get(c2.path)! + size.get(c3.path)! > bothLimit)
    const racing = new ChunkCache({ root: root(), label: 'limit-race', limitBytes: bothLimit })
    const settled = await Promise.allSettled([racing.fetch('anvil', store, c2), racing.fetch('anvil', store, c3)])
    assert.deepEqual(settled.map((s) => s.status).sort(), ['fulfilled', 'rejected'])
    assert.ok(settled.some((s) => s.status === 'rejected' && s.reason instanceof CacheFull))
    assert.ok(racing.bytes <= bothLimit, `${racing.bytes} bytes cached, limit ${bothLimit}`)

    // Chunks found at start are not held until asked for: they make room first, and pruneUnheld removes them.
    const r2 = root()
    const first = new ChunkCache({ root: r2, label: 'limit-fill' })
    for (const c of chunks.slice(0, 3)) await first.fetch('anvil', store, c)
    const all = chunks.reduce((n, c) => n + size.get(c.path)!, 0)
    const evictions = () => registrySum('block_archive_worker_cache_evictions_total', { worker: 'limit-lru', reason: 'space' })
    const later = new ChunkCache({ root: r2, label: 'limit-lru', limitBytes: all - 1 })
    await later.open()
    assert.equal(later.bytes, all - size.get(chunks[3].path)!)
    await later.fetch('anvil', store, chunks[1])
    assert.equal(await downloaded('limit-lru'), 0)
    // One of the unheld chunks 0 and 2 must go for chunk 3 to fit; the held chunk 1 stays.
    await later.fetch('anvil', store, chunks[3])
    assert.equal(await evictions(), 1)
    const present = chunks.map((c) => existsSync(cached(r2, c)))
    assert.equal(present[1], true)
    assert.equal(present[3], true)
    assert.equal(Number(present[0]) + Number(present[2]), 1, `present: ${present}`)
    assert.ok(later.bytes <= all - 1)
    await later.pruneUnheld()
    assert.deepEqual(chunks.map((c) => existsSync(cached(r2, c))), [false, true, false, true])
    assert.equal(later.bytes, size.get(chunks[1].path)! + size.get(chunks[3].path)!)
  })

  it('local forms share the limit and give way to downloads', async () => {
    const [c0, c1] = chunks
    const tables = ['blocks', 'transactions', 'logs', 'traces', 'statediffs']
    // The size of chunk 0's form, measured in a cache without a limit.
    const probe = new ChunkCache({ root: root(), label: 'forms-probe' })
    assert.equal(await probe.forms!.build('c0', await probe.fetch('anvil', store, c0), tables), true)
    const formBytes = probe.forms!.bytes
    assert.ok(formBytes > 0)
    await probe.forms!.close()

    const s0 = size.get(c0.path)!
    const s1 = size.get(c1.path)!
    // Room for chunk 0 and its form, or for chunks 0 and 1, not for all three.
    const limitBytes = s0 + formBytes + Math.floor(s1 / 2)
    const cache = new ChunkCache({ root: root(), label: 'forms-limit', limitBytes })
    assert.equal(await cache.forms!.build('c0', await cache.fetch('anvil', store, c0), tables), true)
    assert.equal(cache.forms!.bytes, formBytes)
    // A form a query is reading is not dropped: the download is refused.
    const reading = cache.forms!.acquire('c0')
    assert.ok(reading)
    await assert.rejects(cache.fetch('anvil', store, c1), CacheFull)
    cache.forms!.release('c0')
    // Once nothing reads it, the form gives way and the chunk is downloaded.
    await cache.fetch('anvil', store, c1)
    assert.equal(cache.forms!.has('c0'), false)
    assert.equal(cache.forms!.bytes, 0)
    assert.equal(cache.bytes, s0 + s1)
    // A form is kept only within the limit (built, or refused when it does not fit).
    const built = await cache.forms!.build('c1', path.join(cache.opts.root, 'anvil', c1.path), tables)
    assert.equal(built, cache.forms!.bytes > 0)
    assert.ok(cache.bytes + cache.forms!.bytes <= limitBytes, `${cache.bytes} + ${cache.forms!.bytes} bytes, limit ${limitBytes}`)
    await cache.forms!.close()
  })

  it('reuses its chunks after a restart, re-hashing files whose mtime changed', async () => {
    const r = root()
    const first = new ChunkCache({ root: r, label: 'restart-1' })
    for (const c of chunks.slice(0, 3)) await first.fetch('anvil', store, c)

    // Restart: everything is there, nothing is downloaded.
    const second = new ChunkCache({ root: r, label: 'restart-2' })
    await second.open()
    assert.equal(second.bytes, first.bytes)
    for (const c of chunks.slice(0, 3)) assert.equal(await second.fetch('anvil', store, c), cached(r, c))
    assert.equal(await downloaded('restart-2'), 0)

    // While no cache runs: chunk 1 gets other bytes (same size), chunk 2 a new mtime only.
    await sleep(30) // past the file system's timestamp granularity
    const changed = path.join(cached(r, chunks[1]), 'transactions.parquet')
    const sizeBefore = (await stat(changed)).size
    await damage(changed)
    assert.equal((await stat(changed)).size, sizeBefore)
    const touched = path.join(cached(r, chunks[2]), 'blocks.parquet')
    const later = new Date(Date.now() + 60_000)
    await utimes(touched, later, later)

    const third = new ChunkCache({ root: r, label: 'restart-3' })
    await third.open()
    assert.equal(existsSync(cached(r, chunks[1])), false, 'the changed chunk is deleted')
    assert.equal(existsSync(cached(r, chunks[2])), true, 'the touched chunk is kept')
    assert.equal(await registrySum('block_archive_worker_cache_corrupt_total', { worker: 'restart-3' }), 1)
    assert.equal(third.bytes, size.get(chunks[0].path)! + size.get(chunks[2].path)!)
    // The touched file's new mtime was recorded: the chunk is intact and a further restart does not hash it again.
    const verified = JSON.parse(await readFile(path.join(cached(r, chunks[2]), '.verified.json'), 'utf8')).files
    assert.equal(verified['blocks.parquet'].mtimeMs, (await stat(touched)).mtimeMs)
    assert.equal(await third.fetch('anvil', store, chunks[2]), cached(r, chunks[2]))
    assert.equal(await third.intact('anvil', chunks[2].path), true)
    assert.equal(await downloaded('restart-3'), 0)
    // The deleted chunk is downloaded again, byte for byte.
    await third.fetch('anvil', store, chunks[1])
    assert.equal(await downloaded('restart-3'), size.get(chunks[1].path))
    assert.equal(sha256(changed), sha256(path.join(local, chunks[1].path, 'transactions.parquet')))

    // Changed while the cache runs: intact() notices.
    await sleep(30)
    assert.equal(await third.intact('anvil', chunks[1].path), true)
    await damage(changed)
    assert.equal(await third.intact('anvil', chunks[1].path), false)
    assert.equal(await registrySum('block_archive_worker_cache_corrupt_total', { worker: 'restart-3' }), 2)
  })

  it('drops the cached chunks of a dataset whose storage URL changed', async () => {
    await uploadDataset(local, 'archive', 'evm/moved')
    const moved = openDatasetStore('s3://archive/evm/moved')
    const r = root()
    const source = async () => JSON.parse(await readFile(path.join(r, 'anvil', 'source.json'), 'utf8')).url
    const cache = new ChunkCache({ root: r, label: 'source' })
    await cache.fetch('anvil', store, chunks[0])
    assert.equal(await source(), store.url)
    await cache.fetch('anvil', moved, chunks[1])
    assert.equal(existsSync(cached(r, chunks[0])), false)
    assert.equal(existsSync(cached(r, chunks[1])), true)
    assert.equal(await source(), 's3://archive/evm/moved')
    assert.equal(cache.bytes, size.get(chunks[1].path))

    // Also across a restart: the URL is remembered on disk.
    const again = new ChunkCache({ root: r, label: 'source-2' })
    await again.open()
    assert.equal(again.bytes, size.get(chunks[1].path))
    await again.fetch('anvil', store, chunks[2])
    assert.equal(existsSync(cached(r, chunks[1])), false)
    assert.equal(existsSync(cached(r, chunks[2])), true)
    assert.equal(await source(), store.url)
    assert.equal(again.bytes, size.get(chunks[2].path))
  })
})
