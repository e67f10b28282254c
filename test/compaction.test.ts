import assert from 'node:assert/strict'
import { cp, readdir } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { footerNulls } from '../src/chunks/chunk-nulls.js'
import { listLocalChunks, readChunkMeta, scanLocalChunks } from '../src/chunks/layout.js'
import { resolveChunks, supersede } from '../src/chunks/supersede.js'
import { Compactor } from '../src/compact/compactor.js'
import { tailBound } from '../src/compact/plan.js'
import { connect } from '../src/db.js'
import { evmFamily } from '../src/families/evm.js'
import { FolderTarget } from '../src/ingest/target.js'
import { RouterServer } from '../src/server/router-http.js'
import { ArchiveStorage, LocalStorage } from '../src/server/storage.js'
import { ChunkCache } from '../src/storage/chunk-cache.js'
import { S3IngestTarget } from '../src/ingest/s3-target.js'
import { startS3, uploadDataset } from './helpers/s3.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { killChildren, runCli, until } from './helpers/cli.js'
import { serveMetrics } from '../src/compact/metrics.js'
import { anvilRecords, startStandaloneWorker, tempDir, writeDataset, writeDatasetChunks, type AnvilRecord } from './helpers/dataset.js'
import { answers } from './helpers/compaction.js'
import { freePort, postJson } from './helpers/http.js'

/*
 * Compaction over real chunks of the recorded anvil chain (traces and state diffs included), real
 * DuckDB and real Parquet: merged chunks answer byte for byte as the small chunks did, the fresh
 * end stays within the tier bound, superseded chunks go only after the grace period, and a router
 * with two workers swaps a merged chunk in while every block stays routable and answerable.
 */

/** Block counts of the small chunks: fresh chunks of 1–3 blocks, as an ingest that flushes at every poll writes them. */
const SIZES = [1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 2, 3, 1, 1, 2, 1, 1, 1, 1, 2, 1, 3, 1, 1, 1, 2]

async function openTarget(dir: string, name: string): Promise<FolderTarget> {
  const t = new FolderTarget(dir)
  await t.open({ name, family: 'evm' })
  return t
}

describe('compaction', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  const last = SIZES.reduce((a, b) => a + b, 0) - 1

  before(async () => {
    tmp = await tempDir('ba-compaction-')
    records = await anvilRecords()
  })
  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  it('merged chunks answer byte for byte as the small ones, the tail stays in its bound, and superseded chunks go after the grace', async () => {
    const dir = path.join(tmp.dir, 'merge')
    const small = await writeDatasetChunks(dir, 'm', records, SIZES)
    const reference = path.join(tmp.dir, 'merge-reference')
    await cp(dir, reference, { recursive: true })
    const refWorker = await startStandaloneWorker(reference)
    const want = await answers(`${refWorker.url}/datasets/m/query`, last)
    await refWorker.stop()
    assert.ok(want.every((t) => JSON.parse(t).length > 0), 'every query matches something')

    const bounds = { fanout: 4, chunkBlocks: 16, chunkBytes: 1 << 30 }
    const target = await openTarget(dir, 'm')
    try {
      const compactor = new Compactor(target, evmFamily, { ...bounds, dataset: 'm', graceMs: 3_600_000 })
      const r = await compactor.catchUp()
      assert.ok(r.merged >= 5, `merged ${r.merged}`)
      const all = await scanLocalChunks(dir)
      const { kept, superseded } = supersede(all)
      assert.equal(superseded.length, all.length - kept.length)
      assert.equal(r.removed, 0, 'nothing deleted within the grace period')
      assert.ok(small.every((c) => all.some((a) => a.path === c.path)), 'the small chunks are still there')
      // one contiguous cover of every block, every merged chunk within the bounds
      assert.equal(kept[0].first, 0)
      assert.equal(kept.at(-1)!.last, last)
      for (let i = 1; i < kept.length; i++) assert.equal(kept[i].first, kept[i - 1].last + 1)
      const metas = await Promise.all(kept.map((c) => readChunkMeta(dir, c)))
      for (const m of metas) assert.ok(m.blockCount <= bounds.chunkBlocks, `${m.first}-${m.last}: ${m.blockCount} blocks`)
      const open = metas.filter((m) => !m.sealed && m.blockCount < bounds.chunkBlocks)
      assert.ok(open.length <= tailBound(bounds), `${open.length} open chunks, bound ${tailBound(bounds)}`)
      assert.ok(kept.length < small.length / 3, `${kept.length} chunks instead of ${small.length}`)
      for (const [i, m] of metas.entries()) {
        if (!m.replaces) continue
        const rows = m.replaces.map((p) => all.find((c) => c.path === p)!)
        assert.equal(m.blockCount, (await Promise.all(rows.map((c) => readChunkMeta(dir, c)))).reduce((n, x) => n + x.blockCount, 0), kept[i].path)
        // The merged chunk's NULL facts are those of its own files (src/chunks/chunk-nulls.ts).
        const con = await connect()
        try {
          assert.deepEqual(m.nulls, await footerNulls(con, path.join(dir, kept[i].path), m.tables), kept[i].path)
        } finally {
          con.closeSync()
        }
      }
      // the ingest resumes after the merged chunks: the listing it reads has no overlap
      assert.deepEqual((await listLocalChunks(dir)).map((c) => c.path), kept.map((c) => c.path))

      // a standalone worker over the folder with both generations serves the merged ones only
      const worker = await startStandaloneWorker(dir)
      try {
        const lease = worker.node!.lease('m')!
        assert.deepEqual(lease.view.chunks.map((c) => c.path), kept.map((c) => c.path))
        lease.release()
        assert.deepEqual(await answers(`${worker.url}/datasets/m/query`, last), want)
      } finally {
        await worker.stop()
      }

      const removal = new Compactor(target, evmFamily, { ...bounds, dataset: 'm', graceMs: 0 })
      const r2 = await removal.catchUp()
      assert.equal(r2.removed, superseded.length)
      assert.deepEqual((await scanLocalChunks(dir)).map((c) => c.path), kept.map((c) => c.path))
      assert.deepEqual((await readdir(dir)).filter((n) => n.startsWith('.tmp-')), [])
      const after = await startStandaloneWorker(dir)
      try {
        assert.deepEqual(await answers(`${after.url}/datasets/m/query`, last), want)
      } finally {
        await after.stop()
      }
    } finally {
      await target.close()
    }
  })

  it('the compact command: one pass, clear one-line errors, refused beside an ingest; /metrics', async () => {
    const dir = path.join(tmp.dir, 'cli')
    await writeDatasetChunks(dir, 'c', records, [1, 1, 1, 1, 2])
    const missing = await runCli(['compact', '--out', path.join(tmp.dir, 'nothing')])
    assert.equal(missing.code, 1)
    assert.match(missing.stderr.trim(), /^[^\n]*is not a dataset \(no dataset\.json\)$/)
    const fanout = await runCli(['compact', '--out', dir, '--compact-fanout', '1'])
    assert.notEqual(fanout.code, 0)
    assert.match(fanout.stderr, /expected an integer ≥ 2/)
    const held = await openTarget(dir, 'c')
    try {
      const locked = await runCli(['compact', '--out', dir], undefined, { LOG_LEVEL: 'warn' })
      assert.equal(locked.code, 1)
      assert.match(locked.stderr, /another ingest \(pid \d+\) is writing/)
    } finally {
      await held.close()
    }
    const ok = await runCli(['compact', '--out', dir, '--compact-fanout', '4', '--compact-grace-ms', '0'], undefined, { LOG_LEVEL: 'warn' })
    assert.equal(ok.code, 0, ok.stderr)
    assert.match(ok.stdout, /compacted c: 1 merged chunks written, 4 superseded chunks deleted; 2 chunks still open to merging/)
    assert.deepEqual((await scanLocalChunks(dir)).map((c) => [c.first, c.last]), [[0, 3], [4, 5]])

    const port = await freePort()
    const server = await serveMetrics(port)
    try {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()
      for (const name of ['block_archive_compaction_merges_total', 'block_archive_compaction_merge_seconds_count', 'block_archive_compaction_chunks_removed_total', 'block_archive_compaction_open_chunks']) {
        assert.match(text, new RegExp(`^${name}\\{dataset="m"\\} [1-9]`, 'm'), name)
      }
      assert.equal((await fetch(`http://127.0.0.1:${port}/other`)).status, 404)
    } finally {
      server.close()
    }
  })

  /**
   * Eight 2-block chunks served by a router and two workers (replication 1: each worker holds part),
   * merged into one while clients ask for every block through the router; then the small chunks are
   * deleted. `s3`: the dataset in s3rver, the workers downloading into their caches.
   */
  async function swapWhilePolled(kind: 'folder' | 's3'): Promise<void> {
    const dir = path.join(tmp.dir, `swap-${kind}`)
    const data = path.join(dir, 'data')
    const chunks = await writeDataset(path.join(data, 's'), 's', records.slice(0, 16), 2)
    assert.equal(chunks.length, 8)
    const s3 = kind === 's3' ? await startS3(['archive']) : undefined
    if (s3) await uploadDataset(path.join(data, 's'), 'archive', 's')
    const url = s3 ? 's3://archive/s' : path.join(data, 's')
    // Pings every 250 ms (each one has a worker check its held chunks' files; dead after 30 s of
    // silence), listings every 500 ms: the swap takes some pings and listings either way.
    const HEARTBEAT = 250
    // one chunk per assignment group: the eight parts are spread over both workers. In object
    // storage a relisting reads only keys after the last chunk listed, and the merged chunk
    // (0-15) sorts before them: the router sees it at its next full listing, every second here
    // (60 s by default), while the clients keep asking. No head files here: they are checked
    // every second only (each check of one in s3rver costs this process a request).
    const router = new RouterServer({
      storage: new ArchiveStorage({ roots: [url], fullListingMs: 1000 }), replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: 120, relistMs: 500, groupChunks: 1,
      headWatch: { folderMs: 1000, s3Ms: 1000 },
    })
    await router.start('127.0.0.1', 0)
    const workers: WorkerServer[] = []
    let polling = true
    let poller: Promise<void> | undefined
    try {
      for (const id of ['w1', 'w2']) {
        const w = new WorkerServer({
          storage: s3 ? new ArchiveStorage({ cache: new ChunkCache({ root: path.join(dir, `cache-${id}`), label: id, localForms: false }) }) : new LocalStorage(data),
          routerUrl: router.url,
          id,
          heartbeatMs: HEARTBEAT,
          dropGraceMs: HEARTBEAT * 2,
          concurrency: 2,
          queue: 16,
          queueTimeoutMs: 60_000,
          budgets: { sizeBytes: 1 << 30, timeMs: 600_000 },
        })
        await w.start('127.0.0.1', 0)
        workers.push(w)
      }
      const base = `${router.url}/datasets/s`
      await until('both workers serve part of every block', async () => {
        const s = await (await fetch(`${router.url}/status`)).json()
        const busy = s.workers.filter((w: any) => (w.state.s ?? []).length > 0).length
        return (await (await fetch(`${base}/height`)).text()) === '15' && busy === 2 ? true : undefined
      }, 60_000)
      const query = (b: number) => ({ fromBlock: b, toBlock: b, includeAllBlocks: true, transactions: [{}], logs: [{}] })
      const reference = await Promise.all(Array.from({ length: 16 }, async (_, b) => (await postJson(await (await fetch(`${base}/${b}/worker`)).text(), query(b))).text))

      // clients keep asking for every block, through the router, while the merge is swapped in
      const failures: string[] = []
      let lastHeight = -1
      let rounds = 0
      poller = (async () => {
        while (polling) {
          const h = Number(await (await fetch(`${base}/height`)).text())
          if (h < lastHeight) failures.push(`height went down from ${lastHeight} to ${h}`)
          lastHeight = h
          for (let b = 0; b < 16; b++) {
            const res = await fetch(`${base}/${b}/worker`)
            const text = await res.text()
            if (res.status !== 200) {
              failures.push(`block ${b}: router answered ${res.status} ${text}`)
              continue
            }
            const q = await postJson(text, query(b))
            if (q.status !== 200 || q.text !== reference[b]) failures.push(`block ${b}: worker answered ${q.status} ${q.text.slice(0, 200)}`)
          }
          rounds++
        }
      })()
      const target = s3 ? new S3IngestTarget(url, { lease: { settleMs: 50 } }) : new FolderTarget(url)
      await target.open({ name: 's', family: 'evm' })
      try {
        // all eight in one merged chunk: its parts are spread over both workers
        const compact = (graceMs: number) => new Compactor(target, evmFamily, { fanout: 8, chunkBlocks: 100, chunkBytes: 1 << 30, dataset: 's', graceMs }).catchUp()
        assert.equal((await compact(3_600_000)).merged, 1)
        const merged = resolveChunks(await target.listComplete())
        assert.equal(merged.length, 1)
        await until('the router routes to the merged chunk and each worker serves it or nothing', async () => {
          const s = await (await fetch(`${router.url}/status`)).json()
          if (s.datasets[0].chunks !== 1) return undefined
          const views = workers.map((w) => {
            const lease = w.node!.lease('s')
            const paths = lease?.view.chunks.map((c) => c.path) ?? []
            lease?.release()
            return paths
          })
          return views.every((v) => v.length === 0 || (v.length === 1 && v[0] === merged[0].path)) && views.some((v) => v.length === 1) ? true : undefined
        }, 150_000)
        const seen = rounds
        await until('clients went on asking after the swap', async () => (rounds >= seen + 2 ? true : undefined), 60_000)
        // the small chunks are gone from every view: deleting them now is what the grace period allows
        assert.equal((await compact(0)).removed, 8)
        const more = rounds
        await until('clients went on asking after the deletion', async () => (rounds >= more + 2 ? true : undefined), 60_000)
      } finally {
        polling = false
        await poller
        await target.close()
      }
      assert.deepEqual(failures, [])
      assert.equal(lastHeight, 15)
    } finally {
      polling = false
      await poller
      for (const w of workers) await w.stop()
      await router.stop()
      await s3?.stop()
    }
  }

  it('a router with two workers swaps a merged chunk in: no block is ever unavailable, height never goes down', () => swapWhilePolled('folder'))

  it('the same over s3rver, the workers downloading the merged chunk into their caches', () => swapWhilePolled('s3'))
})
