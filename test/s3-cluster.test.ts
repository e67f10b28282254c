import assert from 'node:assert/strict'
import type { ChildProcess } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { mkdir, open, readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ReplayServer } from '../src/ingest/replay.js'
import { downloadObject, listObjects } from '../src/storage/s3.js'
import { killChildren, metricSum, runCli, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, type AnvilRecord } from './helpers/dataset.js'
import { assertMatchesSource, blocksOf, fullSync, runProcessor } from './helpers/processor-expect.js'
import { startS3, type S3Server } from './helpers/s3.js'
import { listLocalChunks, type ChunkMeta, type ChunkRef } from '../src/chunks/layout.js'

/*
 * The archive over object storage, as separate processes: a real S3 protocol server on loopback
 * (s3rver) filled by `ingest --out s3://…` from a JSON-RPC node replaying the recorded chain,
 * `router --data s3://…` and three `worker --router … --cache <own folder>` processes with
 * replication 2. The real @subsquid/evm-processor syncs the whole recorded anvil chain, once
 * undisturbed and once with a worker killed (SIGKILL) mid-sync; what it gets equals the recorded
 * node answers. Chunks published to the bucket while serving raise the height; a cache file damaged
 * on a worker's disk is never served and is downloaded again; a restarted worker reuses its cache.
 */

// Pings every 500 ms and a relisting every second: what the tests wait for (spreading, a new chunk,
// a dead worker) takes a few of them; faster timers only cost CPU while the cluster idles.
const HB = ['--heartbeat-ms', '500']
const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex')

describe('object storage: router and three worker processes over S3', { timeout: 600_000 }, () => {
  let s3: S3Server
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let node: ReplayServer
  /** The bucket's dataset, downloaded (the ingest's files, to compare the caches with). */
  let local: string
  let chunks: ChunkRef[]
  let routerUrl: string
  let base: string
  const workers: { id: string; cache: string; child?: ChildProcess; url?: string }[] = []
  const measured: Record<string, number> = {}

  const startWorker = async (w: (typeof workers)[number]) => {
    const t0 = performance.now()
    const started = await startCli(['worker', '--router', routerUrl, '--cache', w.cache, '--id', w.id, '--port', '0', '--max-response-bytes', '30000', ...HB], ['worker'], s3.env)
    w.child = started.child
    w.url = started.lines.get('worker')![0]
    // Routable: the router has it alive and serving chunks.
    await until(`${w.id} routable`, async () => {
      const s = await (await fetch(`${routerUrl}/status`)).json()
      const me = s.workers.find((x: any) => x.id === w.id)
      return me?.alive && (me.state.anvil ?? []).length > 0 ? true : undefined
    }, 60_000)
    return performance.now() - t0
  }

  before(async () => {
    s3 = await startS3(['archive'])
    tmp = await tempDir('ba-s3-cluster-')
    records = await anvilRecords()
    local = path.join(tmp.dir, 'anvil')
    node = new ReplayServer(records.map((r) => ({ number: r.number, block: r.block, receipts: r.receipts, traceBlock: r.parityTraces, replay: r.replay })))
    await node.start()
    // The first 96 blocks are in the bucket before the cluster starts; the rest arrive while it runs.
    await ingest(95)
    chunks = await mirror()
    const router = await startCli(['router', '--data', 's3://archive/evm', '--port', '0', '--replication', '2', '--group-chunks', '1', '--relist-ms', '1000', ...HB], ['router', 'dataset anvil'], s3.env)
    routerUrl = router.lines.get('router')![0]
    base = router.lines.get('dataset anvil')![0]
    for (let i = 0; i < 3; i++) workers.push({ id: `w${i}`, cache: path.join(tmp.dir, `cache-${i}`) })
    const times = await Promise.all(workers.map(startWorker))
    measured.routableMsMax = Math.round(Math.max(...times))
  })

  /** `block-archive ingest` into the bucket, up to block `to`, 16 blocks per chunk. */
  const ingest = async (to: number) => {
    const r = await runCli(['ingest', '--rpc', node.url, '--dataset', 'anvil', '--out', 's3://archive/evm/anvil', '--to', String(to), '--chunk-blocks', '16',
      '--traces', 'trace_block', '--state-diffs', 'replay', '--progress', 'none'], undefined, s3.env)
    assert.equal(r.code, 0, r.stderr)
  }
  /** Download the bucket's dataset into `local`; returns its chunks. */
  const mirror = async () => {
    for (const o of await listObjects('archive', 'evm/anvil/')) {
      const dest = path.join(local, o.key.slice('evm/anvil/'.length))
      if (!existsSync(dest)) {
        await mkdir(path.dirname(dest), { recursive: true })
        await downloadObject('archive', o.key, dest)
      }
    }
    return listLocalChunks(local)
  }

  after(async () => {
    killChildren()
    await node?.close()
    await s3?.stop()
    await tmp?.cleanup()
    console.log(`# measured: ${JSON.stringify(measured)}`)
  })

  it('each worker holds a share of the chunks, downloaded and verified against the manifest', async () => {
    // Workers registered one after another: the first ones held everything until the chunks were spread out.
    const copiesOf = (s: any) => chunks.map((c) => s.workers.filter((x: any) => (x.state.anvil as [number, number][]).some(([a, b]) => a <= c.first && c.last <= b)).length)
    const s = await until('two copies of each chunk', async () => {
      const s = await (await fetch(`${routerUrl}/status`)).json()
      return copiesOf(s).every((n) => n === 2) ? s : undefined
    }, 60_000)
    assert.equal(s.datasets[0].height, 95)
    assert.equal(s.datasets[0].url, 's3://archive/evm/anvil')
    let downloaded = 0
    for (const w of workers) {
      const held = s.workers.find((x: any) => x.id === w.id).state.anvil as [number, number][]
      assert.ok(held.length > 0, `${w.id} holds something`)
      downloaded += await metricSum(w.url!, 'block_archive_worker_download_bytes_total')
      assert.ok((await metricSum(w.url!, 'block_archive_worker_download_seconds_total')) > 0)
    }
    // Replication 2 over 3 workers: nobody holds everything, and chunks given back were deleted from the cache.
    for (const w of s.workers) assert.ok(JSON.stringify(w.state.anvil) !== '[[0,95]]', `${w.id} holds everything`)
    for (const w of workers) {
      const held = s.workers.find((x: any) => x.id === w.id).state.anvil as [number, number][]
      await until(`${w.id} cache = what it holds`, async () => {
        const onDisk = chunks.filter((c) => existsSync(path.join(w.cache, 'anvil', c.path))).map((c) => c.path)
        const want = chunks.filter((c) => held.some(([a, b]) => a <= c.first && c.last <= b)).map((c) => c.path)
        return JSON.stringify(onDisk) === JSON.stringify(want) ? true : undefined
      })
    }
    // Cached files are byte-identical to what the ingest wrote.
    for (const w of workers) {
      for (const c of chunks) {
        const dir = path.join(w.cache, 'anvil', c.path)
        if (!existsSync(dir)) continue
        const meta = JSON.parse(await readFile(path.join(local, c.path, 'meta.json'), 'utf8')) as ChunkMeta
        for (const f of await readdir(path.join(local, c.path))) {
          assert.equal(sha256(path.join(dir, f)), sha256(path.join(local, c.path, f)), `${w.id} ${c.path}/${f}`)
          if (meta.files?.[f]) assert.equal(meta.files[f].sha256, sha256(path.join(dir, f)))
        }
      }
    }
    measured.downloadMB = +(downloaded / 2 ** 20).toFixed(2)
  })

  it('chunks ingested into the bucket while serving appear in /height', async () => {
    const t0 = performance.now()
    await ingest(127)
    measured.ingestMs = Math.round(performance.now() - t0)
    const before = chunks.length
    chunks = await mirror()
    assert.equal(chunks.length, before + 2)
    await until('height 127', async () => ((await (await fetch(`${base}/height`)).text()) === '127' ? true : undefined), 60_000)
    measured.newChunkToHeightMs = Math.round(performance.now() - t0)
  })

  it('the real evm-processor gets exactly the source data, also with a worker killed mid-sync', async () => {
    const config = fullSync(base, records)
    let t0 = performance.now()
    // Three minutes per sync: on a loaded machine a full sync of 128 blocks has taken over one.
    const calm = await runProcessor(tmp.dir, 'calm', config, undefined, 180_000)
    measured.syncMs = Math.round(performance.now() - t0)
    assert.equal(calm.code, 0, calm.stderr)
    assertMatchesSource(blocksOf(calm), records)

    t0 = performance.now()
    const out = path.join(tmp.dir, 'killed.ndjson')
    const victim = workers[0]
    let killedAtBatch = -1
    const watcher = (async () => {
      await until('a few batches', async () => (existsSync(out) && readFileSync(out, 'utf8').split('\n').filter(Boolean).length >= 3 ? true : undefined), 60_000)
      killedAtBatch = readFileSync(out, 'utf8').split('\n').filter(Boolean).length
      victim.child!.kill('SIGKILL')
    })()
    const killed = await runProcessor(tmp.dir, 'killed', config, undefined, 180_000)
    await watcher
    measured.syncWithKillMs = Math.round(performance.now() - t0)
    assert.equal(killed.code, 0, killed.stderr)
    assert.ok(killedAtBatch >= 3 && killedAtBatch < killed.batches.length, `killed mid-sync (batch ${killedAtBatch} of ${killed.batches.length})`)
    assertMatchesSource(blocksOf(killed), records)
  })

  it('a cache file damaged on disk is never served and is downloaded again', async () => {
    const w = workers[1]
    const s = await (await fetch(`${routerUrl}/status`)).json()
    const held = s.workers.find((x: any) => x.id === w.id).state.anvil as [number, number][]
    const chunk = chunks.find((c) => held.some(([a, b]) => a <= c.first && c.last <= b) && existsSync(path.join(w.cache, 'anvil', c.path)))!
    const file = path.join(w.cache, 'anvil', chunk.path, 'transactions.parquet')
    const good = sha256(file)
    const before = await metricSum(w.url!, 'block_archive_worker_cache_corrupt_total')
    const fh = await open(file, 'r+')
    const { size } = await fh.stat()
    await fh.write(Buffer.alloc(64, 0xab), 0, 64, Math.floor(size / 2))
    await fh.close()
    assert.notEqual(sha256(file), good)
    // Asked directly right away: either a retryable "not here" or the true data, never the damaged bytes.
    const query = { fromBlock: chunk.first, toBlock: chunk.last, includeAllBlocks: true, transactions: [{}], fields: { transaction: { hash: true } } }
    const expected = records.filter((r) => r.number >= chunk.first && r.number <= chunk.last).flatMap((r) => r.block.transactions.map((t: any) => t.hash.toLowerCase()))
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${w.url}/datasets/anvil/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(query) })
      if (res.status === 200) {
        const blocks = (await res.json()) as any[]
        assert.deepEqual(blocks.flatMap((b) => (b.transactions ?? []).map((t: any) => t.hash)), expected.slice(0, blocks.flatMap((b) => b.transactions ?? []).length))
        assert.ok(blocks.at(-1).header.number <= chunk.last)
      } else {
        assert.equal(res.status, 503, await res.text())
      }
    }
    await until('the chunk downloaded again', async () => (existsSync(file) && sha256(file) === good ? true : undefined), 60_000)
    assert.ok((await metricSum(w.url!, 'block_archive_worker_cache_corrupt_total')) > before)
    const res = await fetch(`${w.url}/datasets/anvil/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(query) })
    assert.equal(res.status, 200)
    assert.deepEqual(((await res.json()) as any[]).flatMap((b) => (b.transactions ?? []).map((t: any) => t.hash)), expected)
  })

  it('a restarted worker serves from its cache without downloading what it has', async () => {
    const w = workers[0] // killed in the sync above
    assert.ok(existsSync(w.cache))
    measured.restartRoutableMs = Math.round(await startWorker(w))
    await until(`${w.id} ready`, async () => ((await fetch(`${w.url}/ready`)).status === 200 ? true : undefined), 20_000)
    const downloaded = await metricSum(w.url!, 'block_archive_worker_download_bytes_total')
    const cached = await metricSum(w.url!, 'block_archive_worker_cache_bytes')
    assert.ok(cached > 0)
    assert.ok(downloaded < cached, `downloaded ${downloaded} of ${cached} cached bytes again`)
    measured.restartDownloadedBytes = downloaded
  })
})
