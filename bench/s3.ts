import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { readDatasetMeta } from '../src/chunks/layout.js'
import { ArchiveClient } from '../src/client/archive-client.js'
import { listObjects } from '../src/storage/s3.js'
import { metricSum } from '../test/helpers/cli.js'
import { startS3, uploadDataset } from '../test/helpers/s3.js'
import { ensureDataset } from './lib/dataset.js'
import { fmtRate } from './lib/measure.js'
import { deploy } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'

export interface S3BenchOptions {
  blocks: number
  workers: number
  shape: string
}

/**
 * `bench s3`: the generated dataset published to a loopback S3 server (s3rver), then router + worker
 * processes with their own caches: upload rate, time from worker start to all chunks routable,
 * download rate into the caches, and a full-range sync against the same dataset served from a folder.
 */
export async function runS3(o: S3BenchOptions): Promise<void> {
  const { dir } = await ensureDataset(o.blocks)
  const s3 = await startS3(['bench'])
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'ba-bench-s3-'))
  const rows: string[][] = []
  try {
    console.log(`machine: ${machine()}`)
    let t0 = performance.now()
    const uploaded = await uploadDataset(dir, 'bench', 'ds')
    const uploadMs = performance.now() - t0
    const bytes = await datasetBytes()
    console.log(`uploaded ${uploaded.length} chunks, ${(bytes / 2 ** 20).toFixed(1)} MiB in ${(uploadMs / 1000).toFixed(1)} s: ${(bytes / 2 ** 20 / (uploadMs / 1000)).toFixed(1)} MiB/s`)

    t0 = performance.now()
    const remote = await deploy('s3://bench/ds', o.workers, { cache: (i) => path.join(tmp, `cache-${i}`), env: s3.env, dataset: (await readDatasetMeta(dir))!.name })
    const routableMs = performance.now() - t0
    let downloaded = 0
    for (const w of remote.workers) downloaded += await metricSum(w.url, 'block_archive_worker_download_bytes_total')
    console.log(`router + ${o.workers} workers started, every chunk routable after ${(routableMs / 1000).toFixed(1)} s; ` +
      `${(downloaded / 2 ** 20).toFixed(1)} MiB downloaded (replication 2): ${(downloaded / 2 ** 20 / (routableMs / 1000)).toFixed(1)} MiB/s including process start`)
    const remoteSync = await sync(remote.base, o.shape)
    await remote.stop()

    const local = await deploy(dir, o.workers)
    const localSync = await sync(local.base, o.shape)
    await local.stop()
    for (const [name, r] of [['s3 + worker caches', remoteSync], ['folder read in place', localSync]] as const) {
      rows.push([name, String(r.blocks), `${(r.ms / 1000).toFixed(2)} s`, fmtRate(r.blocks, r.ms)])
    }
    printTable(`full-range sync (${o.shape}), ${o.blocks} blocks, ${o.workers} workers`, ['storage', 'blocks', 'time', 'blocks/s'], rows)
    console.log(`ratio s3/folder sync time: ${(remoteSync.ms / localSync.ms).toFixed(2)}`)
  } finally {
    await s3.stop()
    await rm(tmp, { recursive: true, force: true })
  }
}

async function datasetBytes(): Promise<number> {
  return (await listObjects('bench', 'ds/')).reduce((n, o) => n + o.size, 0)
}

async function sync(base: string, shapeName: string): Promise<{ blocks: number; ms: number }> {
  const client = new ArchiveClient(base)
  const height = await client.getHeight()
  const { fromBlock: _f, toBlock: _t, ...query } = shapeByName(shapeName).query(0, height)
  const t0 = performance.now()
  let blocks = 0
  for await (const batch of client.batches(query, { fromBlock: 0, toBlock: height })) blocks += batch.blocks.length
  return { blocks, ms: performance.now() - t0 }
}
