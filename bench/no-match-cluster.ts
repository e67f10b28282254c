import { appendFile, copyFile, link, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { existsSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { CHUNK_INDEX_FILE, chunkIndexLine } from '../src/chunks/chunk-index.js'
import { chunkPath, listLocalChunks, type ChunkMeta } from '../src/chunks/layout.js'
import { ArchiveClient } from '../src/client/archive-client.js'
import { connect, lit } from '../src/db.js'
import { anvilRecords, writeDataset } from '../test/helpers/dataset.js'
import { cpuSeconds, rss, deploy } from './lib/procs.js'
import { mb } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'

/*
 * `bench scaling --part no-match-cluster`: a query matching nothing (a topic0 no chunk holds) over
 * every block of a dataset of many chunks, through a router and 2 worker processes, with our client:
 * the whole range once as a worker meets its chunks for the first time, then again. The chunks are
 * one block each, built from one recorded anvil chunk: each has its own `blocks.parquet` (its block
 * renumbered, hashes linked into a chain) and `meta.json` (with the template's summaries), and hard
 * links to the template's other tables, which a chunk ruled out by its summaries never opens. A
 * ruled-out chunk costs the same whatever its block count, so blocks/s at 200-block chunks is 200 ×
 * the chunks/s measured here. Datasets are kept in $TMPDIR/block-archive-bench.
 */

export interface NoMatchClusterOptions {
  chunks: number
  passes: number
}

const NO_SUCH_TOPIC = '0x' + 'ab'.repeat(32)
const TOP_CHUNKS = 1000
/** A file takes at most 65,000 links on ext4: each copy of the template's tables is linked to by this many chunks. */
const LINKS_PER_COPY = 60_000

const hashOf = (i: number) => '0x' + (i + 1).toString(16).padStart(8, '0') + '0'.repeat(56)

async function ensureDataset(n: number): Promise<string> {
  const root = path.join(os.tmpdir(), 'block-archive-bench', `no-match-cluster-${n}`)
  const dir = path.join(root, 'nm')
  if (existsSync(path.join(root, '.done'))) return dir
  await rm(root, { recursive: true, force: true })
  const template = path.join(root, 'template')
  // a block with logs, so that the template's meta.json has a logs.topic0 summary
  const records = await anvilRecords()
  const withLogs = records.find((r) => r.receipts.some((x) => x.logs.length > 0))!
  await writeDataset(template, 'template', [withLogs], 1)
  const [ref] = await listLocalChunks(template)
  const tdir = path.join(template, ref.path)
  const tmeta = JSON.parse(await readFile(path.join(tdir, 'meta.json'), 'utf8')) as ChunkMeta
  const tables = (await readdir(tdir)).filter((f) => f.endsWith('.parquet') && f !== 'blocks.parquet')
  await mkdir(dir, { recursive: true })
  await writeFile(path.join(dir, 'dataset.json'), JSON.stringify({ name: 'nm', family: 'evm' }))
  const sources: string[] = [tdir]
  const sourceFor = async (i: number): Promise<string> => {
    const k = Math.floor(i / LINKS_PER_COPY)
    if (!sources[k]) {
      const copy = path.join(root, 'template-copies', String(k))
      await mkdir(copy, { recursive: true })
      for (const t of tables) await copyFile(path.join(tdir, t), path.join(copy, t))
      sources[k] = copy
    }
    return sources[k]
  }
  const con = await connect()
  const t0 = performance.now()
  let index = ''
  for (let i = 0; i < n; i++) {
    const top = Math.floor(i / TOP_CHUNKS) * TOP_CHUNKS
    const hash = hashOf(i)
    const p = chunkPath(top, i, i, hash.slice(2, 10))
    const cdir = path.join(dir, p)
    await mkdir(cdir, { recursive: true })
    const source = await sourceFor(i)
    for (const t of tables) await link(path.join(source, t), path.join(cdir, t))
    const parent = i === 0 ? '0x' + '0'.repeat(64) : hashOf(i - 1)
    await con.run(`COPY (SELECT * REPLACE (${i}::UBIGINT AS number, ${lit(hash)} AS hash, ${lit(parent)} AS parent_hash) FROM read_parquet(${lit(path.join(tdir, 'blocks.parquet'))})) TO ${lit(path.join(cdir, 'blocks.parquet'))} (FORMAT parquet, COMPRESSION zstd)`)
    const meta: ChunkMeta = { ...tmeta, first: i, last: i, lastHash: hash, firstParentHash: parent, previousLast: i - 1 }
    await writeFile(path.join(cdir, 'meta.json'), JSON.stringify(meta))
    index += chunkIndexLine({ top, first: i, last: i, hash: hash.slice(2, 10), path: p }, meta)
    if (i % 1000 === 999) {
      await appendFile(path.join(dir, CHUNK_INDEX_FILE), index)
      index = ''
      process.stdout.write(`\rno-match-cluster: ${i + 1}/${n} chunks written, ${((i + 1) / ((performance.now() - t0) / 1000)).toFixed(0)}/s`)
    }
  }
  await appendFile(path.join(dir, CHUNK_INDEX_FILE), index)
  con.closeSync()
  process.stdout.write('\n')
  await writeFile(path.join(root, '.done'), '')
  return dir
}

export async function runNoMatchCluster(o: NoMatchClusterOptions): Promise<void> {
  console.log(`machine: ${machine()}`)
  const dir = await ensureDataset(o.chunks)
  const t0 = performance.now()
  const d = await deploy(dir, 2, { missedHeartbeats: 60 }, 1000)
  console.log(`router + 2 workers started over ${o.chunks.toLocaleString('en')} chunks, every block routable: ${((performance.now() - t0) / 1000).toFixed(2)} s; workers' CPU so far: ${d.workers.map((w) => `${(cpuSeconds(w.pid) ?? 0).toFixed(2)} s`).join(', ')}`)
  const rows: string[][] = []
  try {
    const client = new ArchiveClient(d.base)
    const query = { logs: [{ topic0: [NO_SUCH_TOPIC] }], fields: { log: { address: true } } }
    for (let pass = 1; pass <= o.passes; pass++) {
      const cpu0 = d.workers.map((w) => cpuSeconds(w.pid) ?? 0)
      const t0 = performance.now()
      let answers = 0
      let last = -1
      for await (const batch of client.batches(query, { fromBlock: 0, toBlock: o.chunks - 1 })) {
        answers++
        last = batch.last
      }
      const s = (performance.now() - t0) / 1000
      if (last !== o.chunks - 1) throw new Error(`the sync ended at block ${last}, not ${o.chunks - 1}`)
      const cpu = d.workers.reduce((sum, w, i) => sum + ((cpuSeconds(w.pid) ?? 0) - cpu0[i]), 0)
      rows.push([pass === 1 ? 'first (chunks never met)' : `again (${pass})`, o.chunks.toLocaleString('en'), String(answers), `${s.toFixed(2)} s`,
        Math.round(o.chunks / s).toLocaleString('en'), `${((cpu * 1e6) / o.chunks).toFixed(0)} µs`, Math.round((o.chunks * 200) / s).toLocaleString('en')])
    }
    console.log(`workers' RSS after the passes (peak): ${d.workers.map((w) => { const r = rss(w.pid!); return `${mb(r.rss)} MB (${mb(r.peak)} MB)` }).join(', ')}`)
  } finally {
    await d.stop()
  }
  printTable(`a no-match query over every block of ${o.chunks.toLocaleString('en')} one-block chunks, router + 2 workers, our client (batches())`,
    ['pass', 'chunks', 'answers', 'time', 'chunks/s', 'workers\' CPU per chunk', 'blocks/s at 200 blocks per chunk'], rows)
}
