import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, open, readdir, rm, stat, statfs, truncate, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ChunkRef } from '../src/chunks/layout.js'
import { log } from '../src/log.js'
import { prepareQuery } from '../src/query/engine.js'
import { ArchiveStorage } from '../src/server/storage.js'
import { WorkerNode } from '../src/server/worker.js'
import { ChunkCache } from '../src/storage/chunk-cache.js'
import { openDatasetStore } from '../src/storage/dataset-store.js'
import { killChildren, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeDataset, type AnvilRecord } from './helpers/dataset.js'
import { sha256, within } from './helpers/faults.js'
import { startS3, uploadDataset, type S3Server } from './helpers/s3.js'

/*
 * A worker's cache disk misbehaving, with the dataset in object storage (s3rver):
 *
 * - a cached file damaged after an answer started is not read: the answer ends before its chunk
 *   (with only true blocks), the next query there is a retryable 503, and the chunk is fetched again;
 * - a truncated cached file is never served and is fetched again (the damaged-bytes case, same size,
 *   is in s3-cluster.test.ts and chunk-cache.test.ts);
 * - a full disk (a real 1 MiB tmpfs mounted on the cache; skipped without the privilege to mount):
 *   a download that meets ENOSPC leaves no partial folder and fails with ENOSPC; with room for one
 *   chunk and a bit a worker still gets one (after ENOSPC it downloads one chunk at a time); a worker
 *   process keeps serving the chunks it has, logs the error, reports only complete chunks to the
 *   router, and fetches the rest once space returns.
 */

const QUERY = { includeAllBlocks: true, transactions: [{}], logs: [{}], fields: { block: { hash: true, parentHash: true }, transaction: { hash: true, input: true }, log: { data: true, topics: true } } }

/** Overwrite bytes in the middle of a file: same size, other bytes, new mtime. */
async function damage(file: string): Promise<void> {
  const fh = await open(file, 'r+')
  try {
    const { size } = await fh.stat()
    await fh.write(Buffer.alloc(64, 0xab), 0, 64, Math.floor(size / 2))
  } finally {
    await fh.close()
  }
}

/** Every path under `dir` (listed again when a folder disappears during the listing). */
async function listTree(dir: string): Promise<string[]> {
  for (;;) {
    try {
      return await readdir(dir, { recursive: true })
    } catch (e: any) {
      if (e?.code !== 'ENOENT') throw e
    }
  }
}

/** Read a query answer of the in-process engine into blocks. */
async function collect(body: AsyncIterable<Uint8Array>, onFirst?: () => Promise<void>): Promise<any[]> {
  const parts: Buffer[] = []
  for await (const piece of body) {
    parts.push(Buffer.from(piece))
    if (parts.length === 1) await onFirst?.()
  }
  return JSON.parse(Buffer.concat(parts).toString('utf8'))
}

describe('cache disk faults', { timeout: 600_000 }, () => {
  let s3: S3Server
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let local: string
  let records: AnvilRecord[]
  let chunks: ChunkRef[]
  let level: string
  let n = 0

  before(async () => {
    level = log.level
    log.level = 'error' // the worker's warnings about the damage are expected here
    s3 = await startS3(['archive'])
    tmp = await tempDir('ba-faults-cache-')
    records = await anvilRecords()
    local = path.join(tmp.dir, 'anvil')
    chunks = await writeDataset(local, 'anvil', records, 16)
    await uploadDataset(local, 'archive', 'evm/anvil')
  })

  after(async () => {
    log.level = level
    killChildren()
    await s3?.stop()
    await tmp?.cleanup()
  })

  /** The chunk's cached files are byte for byte the source's. */
  const assertAsSource = async (dir: string, c: ChunkRef) => {
    const want = (await readdir(path.join(local, c.path))).sort()
    assert.deepEqual((await readdir(dir)).filter((f) => f !== '.verified.json').sort(), want, dir)
    for (const f of want) assert.equal(sha256(path.join(dir, f)), sha256(path.join(local, c.path, f)), `${c.path}/${f}`)
  }
  /** What the recorded chain has for blocks first..last under QUERY: block hashes and transaction hashes. */
  const truth = (first: number, last: number) => records.filter((r) => r.number >= first && r.number <= last).map((r) => ({ number: r.number, hash: r.block.hash.toLowerCase(), txs: r.block.transactions.map((t: any) => t.hash.toLowerCase()) }))
  const summary = (blocks: any[]) => blocks.map((b) => ({ number: b.header.number, hash: b.header.hash, txs: (b.transactions ?? []).map((t: any) => t.hash) }))

  /** A standalone worker node (it holds every chunk of the bucket's dataset) with its cache in `root`. */
  const s3Node = (id: string, root: string) =>
    new WorkerNode({
      id,
      publicUrl: 'http://127.0.0.1:1',
      storage: new ArchiveStorage({ datasets: [{ name: 'anvil', url: 's3://archive/evm/anvil' }], cache: new ChunkCache({ root, label: id }) }),
      heartbeatMs: 100,
      dropGraceMs: 200,
    })

  /** The same, started, with a cache of its own. */
  const startNode = async () => {
    const root = path.join(tmp.dir, `cache-${++n}`)
    const node = s3Node(`node-${n}`, root)
    await node.start()
    assert.deepEqual(node.state().anvil, [[0, 127]])
    return { node, root, dir: (c: ChunkRef) => path.join(root, 'anvil', c.path) }
  }

  it('a cached file damaged after an answer started is not read: the answer ends before its chunk, the next query there is a retryable 503, the chunk is fetched again', async () => {
    const { node, dir } = await startNode()
    try {
      const victim = chunks[5]
      const file = path.join(dir(victim), 'transactions.parquet')
      const good = sha256(file)
      const budgets = { sizeBytes: 1 << 30, timeMs: 600_000 }
      // The answer for the whole range, undisturbed.
      const calm = node.lease('anvil')!
      const all = await collect((await prepareQuery(calm.view, { ...QUERY, fromBlock: 0, toBlock: 127 }, budgets)).body)
      calm.release()
      assert.deepEqual(summary(all), truth(0, 127))

      // Again, damaging chunk 5's file once the first piece of the answer is out (chunks 0–1 read, at most chunk 2 prepared).
      const lease = node.lease('anvil')!
      const stream = await prepareQuery(lease.view, { ...QUERY, fromBlock: 0, toBlock: 127 }, { sizeBytes: 1 << 30, timeMs: 600_000 })
      let damagedAt = -1
      const blocks = await collect(stream.body, async () => {
        damagedAt = stream.stats.lastBlock
        await new Promise((r) => setTimeout(r, 20)) // past the file system's timestamp granularity
        await damage(file)
      })
      lease.release()
      assert.ok(damagedAt < victim.first, `damaged while block ${damagedAt} was written`)
      const last = blocks.at(-1).header.number
      assert.equal(last, victim.first - 1, 'the answer ends before the damaged chunk')
      assert.deepEqual(summary(blocks), truth(0, last), 'every block of the answer is true')

      // The client continues at the damaged chunk: a retryable 503 (ask the router again), never its bytes.
      const next = node.lease('anvil')!
      await assert.rejects(prepareQuery(next.view, { ...QUERY, fromBlock: victim.first, toBlock: 127 }, budgets).then((s) => collect(s.body)), (e: any) => {
        assert.equal(e.status ?? e.statusCode, 503, e.message)
        return true
      })
      next.release()
      // Fetched again, byte for byte, and served.
      await within(20_000, 'the chunk fetched again', until('fetched again', async () => (existsSync(file) && sha256(file) === good && node.state().anvil?.[0]?.[1] === 127 ? true : undefined), 20_000))
      await assertAsSource(dir(victim), victim)
      const again = node.lease('anvil')!
      assert.deepEqual(summary(await collect((await prepareQuery(again.view, { ...QUERY, fromBlock: victim.first, toBlock: 127 }, budgets)).body)), truth(victim.first, 127))
      again.release()
    } finally {
      await node.stop()
    }
  })

  it('a truncated cached file is never served and is fetched again', async () => {
    const { node, dir } = await startNode()
    try {
      const victim = chunks[2]
      const file = path.join(dir(victim), 'blocks.parquet')
      const good = sha256(file)
      await truncate(file, Math.floor((await stat(file)).size / 3))
      const budgets = { sizeBytes: 1 << 30, timeMs: 600_000 }
      // A query starting in the chunk: retryable 503; one starting before it ends before it.
      const a = node.lease('anvil')!
      await assert.rejects(prepareQuery(a.view, { ...QUERY, fromBlock: victim.first + 3 }, budgets), (e: any) => (e.status ?? e.statusCode) === 503)
      a.release()
      const b = node.lease('anvil')!
      const blocks = await collect((await prepareQuery(b.view, { ...QUERY, fromBlock: 0, toBlock: 127 }, budgets)).body).catch(() => [])
      b.release()
      if (blocks.length) {
        assert.ok(blocks.at(-1).header.number < victim.first, 'nothing of the truncated chunk')
        assert.deepEqual(summary(blocks), truth(0, blocks.at(-1).header.number))
      }
      await within(20_000, 'the chunk fetched again', until('fetched again', async () => (existsSync(file) && sha256(file) === good && node.state().anvil?.[0]?.[1] === 127 ? true : undefined), 20_000))
      await assertAsSource(dir(victim), victim)
    } finally {
      await node.stop()
    }
  })

  describe('a full cache disk (1 MiB tmpfs)', () => {
    let fs = ''
    let unavailable: string | undefined
    const filler = () => path.join(fs, 'filler')
    /** Fill the file system up to `free` bytes left. */
    const fill = async (free: number) => {
      await rm(filler(), { force: true })
      const s = await statfs(fs)
      const have = s.bavail * s.bsize
      if (have > free) await writeFile(filler(), Buffer.alloc(have - free))
    }
    /** Bytes a chunk takes on the file system (whole pages per file). */
    const onDisk = async (c: ChunkRef) => {
      let bytes = 4096 // .verified.json
      for (const f of await readdir(path.join(local, c.path))) bytes += Math.ceil((await stat(path.join(local, c.path, f))).size / 4096) * 4096
      return bytes
    }

    before(async () => {
      fs = path.join(tmp.dir, 'tmpfs')
      await mkdir(fs)
      if (process.platform !== 'linux') unavailable = `needs Linux (this is ${process.platform})`
      else if (process.getuid?.() !== 0) unavailable = 'needs root to mount a tmpfs (CI runs as root)'
      else {
        try {
          execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', fs], { stdio: 'pipe' })
        } catch (e: any) {
          unavailable = `mount -t tmpfs failed: ${String(e.stderr ?? e.message).trim()}`
        }
      }
    })
    after(() => {
      killChildren()
      if (!unavailable) execFileSync('umount', ['-l', fs], { stdio: 'pipe' })
    })

    it('a download that meets ENOSPC fails with it and leaves nothing behind; it succeeds once space returns', async (t) => {
      if (unavailable) return t.skip(unavailable)
      const root = path.join(fs, 'inproc')
      const cache = new ChunkCache({ root, label: 'enospc' })
      const store = openDatasetStore('s3://archive/evm/anvil')
      const c = chunks[0]
      await cache.open()
      await fill((await onDisk(c)) / 2)
      await assert.rejects(cache.fetch('anvil', store, c), (e: any) => {
        assert.equal(e.code, 'ENOSPC', e.message)
        return true
      })
      assert.deepEqual(await readdir(root, { recursive: true }).then((l) => l.filter((p) => p.includes('.part-') || p.includes('-'))), [])
      assert.equal(cache.bytes, 0)
      await rm(filler())
      await assertAsSource(await cache.fetch('anvil', store, c), c)
      await rm(root, { recursive: true })
    })

    it('with room for one chunk and a bit, a worker still gets one: after ENOSPC it downloads one chunk at a time', async (t) => {
      if (unavailable) return t.skip(unavailable)
      // Three chunk downloads at once share the space left and, for some amounts of it, all fail,
      // pass after pass (which amounts depends on how the downloads interleave): try several.
      const unit = await onDisk(chunks[0])
      for (const room of [1.1, 1.3, 1.5, 1.7, 1.9]) {
        await fill(Math.floor(room * unit))
        const root = path.join(fs, `serial-${room}`)
        const node = s3Node(`serial-${room}`, root)
        try {
          await node.start()
          const held = await until(`a chunk held with room for ${room} chunks`, async () => ((node.state().anvil ?? []).length ? node.state().anvil : undefined), 5_000)
          for (const c of chunks.filter((x) => held.some(([a, b]) => a <= x.first && x.last <= b))) await assertAsSource(path.join(root, 'anvil', c.path), c)
        } finally {
          await node.stop()
          await rm(root, { recursive: true, force: true })
        }
      }
      await rm(filler(), { force: true })
    })

    it('a worker process on a full disk keeps serving what it has, logs ENOSPC, reports only complete chunks, and fetches the rest once space returns', async (t) => {
      if (unavailable) return t.skip(unavailable)
      const cacheDir = path.join(fs, 'worker')
      // Room for three chunks and a half: the first three parallel downloads fit, the others do not.
      await fill(Math.floor(3.5 * (await onDisk(chunks[0]))))
      const router = await startCli(['router', '--data', 's3://archive/evm', '--port', '0', '--relist-ms', '300', '--heartbeat-ms', '200'], ['router', 'dataset anvil'], s3.env)
      const routerUrl = router.lines.get('router')![0]
      const worker = await startCli(['worker', '--router', routerUrl, '--cache', cacheDir, '--id', 'w0', '--port', '0', '--heartbeat-ms', '200'], ['worker'], s3.env)
      const workerUrl = worker.lines.get('worker')![0]
      const reported = async () => ((await (await fetch(`${routerUrl}/status`)).json()).workers.find((w: any) => w.id === 'w0')?.state.anvil ?? []) as [number, number][]
      const held = (ranges: [number, number][]) => chunks.filter((c) => ranges.some(([a, b]) => a <= c.first && c.last <= b))
      await until('ENOSPC logged', async () => (/cannot fetch chunk.*ENOSPC|ENOSPC.*cannot fetch chunk/.test(worker.stderr()) ? true : undefined), 20_000)
      const ranges = await until('some chunks reported', async () => {
        const r = await reported()
        return r.length ? r : undefined
      })
      const have = held(ranges)
      assert.ok(have.length >= 1 && have.length < chunks.length, `holds ${have.length} of ${chunks.length} chunks`)

      // While full: partial folders do not stay; reported chunks are complete and verified; others are not in the cache.
      const firstSeen = new Map<string, number>()
      const lived: number[] = []
      const t0 = Date.now()
      while (Date.now() - t0 < 1500) {
        const parts = new Set((await listTree(cacheDir)).filter((p) => /\.part-[0-9a-f]+$/.test(p)))
        for (const p of parts) if (!firstSeen.has(p)) firstSeen.set(p, Date.now())
        for (const [p, at] of firstSeen) {
          if (!parts.has(p)) {
            lived.push(Date.now() - at)
            firstSeen.delete(p)
          }
        }
        await new Promise((r) => setTimeout(r, 20))
      }
      for (const [p, at] of firstSeen) assert.ok(Date.now() - at < 1000, `${p} left behind`)
      for (const c of held(await reported())) await assertAsSource(path.join(cacheDir, 'anvil', c.path), c)
      for (const c of chunks) {
        if (existsSync(path.join(cacheDir, 'anvil', c.path))) assert.ok(have.some((h) => h.path === c.path) || held(await reported()).some((h) => h.path === c.path), `${c.path} in the cache but not reported`)
      }
      // It answers from what it has.
      const c = have[0]
      const res = await fetch(`${workerUrl}/datasets/anvil/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...QUERY, fromBlock: c.first, toBlock: c.last }) })
      assert.equal(res.status, 200)
      assert.deepEqual(summary((await res.json()) as any[]), truth(c.first, c.last))
      assert.match(worker.stderr(), /"msg":"worker: cannot fetch chunk"/)
      // DuckDB would spill onto this full disk too (its folder in the cache folder): queries that fit in memory do not notice.
      assert.equal((await (await fetch(`${workerUrl}/status`)).json()).duckdb.temp_directory, path.join(cacheDir, `.duckdb-spill-${worker.child.pid}`))

      // Space returns: it fetches the rest.
      await rm(filler())
      await until('every chunk reported', async () => (JSON.stringify(await reported()) === '[[0,127]]' ? true : undefined), 30_000)
      for (const c of chunks) await assertAsSource(path.join(cacheDir, 'anvil', c.path), c)
      assert.deepEqual((await listTree(cacheDir)).filter((p) => p.includes('.part-')), [])
      const all = await fetch(`${workerUrl}/datasets/anvil/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...QUERY, fromBlock: 0, toBlock: 127 }) })
      assert.equal(all.status, 200)
      const blocks = (await all.json()) as any[]
      assert.deepEqual(summary(blocks), truth(0, blocks.at(-1).header.number))
      t.diagnostic(`held ${have.length} of ${chunks.length} chunks while full; partial folders lived ${lived.length ? Math.max(...lived) : 0} ms at most`)
      worker.child.kill('SIGKILL')
      router.child.kill('SIGKILL')
    })
  })
})
