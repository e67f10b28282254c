import { spawn } from 'node:child_process'
import { rm } from 'node:fs/promises'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import path from 'node:path'
import { listLocalChunks, nextTop, readChunkMeta, type ChunkRef } from '../src/chunks/layout.js'
import { ChunkBuilder } from '../src/chunks/writer.js'
import { evmFamily } from '../src/families/evm.js'
import { bundleTables, normalizeEvmBlock } from '../src/ingest/evm/normalize.js'
import { loadTemplates } from '../src/bench-data/templates.js'
import { templateFor, tileBlock } from '../src/bench-data/tile.js'
import { benchRoot } from './lib/dataset.js'
import { fmtRate, mb, ms } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { progress } from '../src/bench-data/progress.js'

export interface IngestBenchOptions {
  blocks: number
  chunkBlocks: number
  traces: boolean
  /** Blocks for the end-to-end run through `block-archive replay-rpc` + `block-archive ingest` (0: none). */
  replayBlocks: number
}

/**
 * `bench ingest`: throughput of the write path, stage by stage and without overlap: RPC JSON →
 * rows (normalizeEvmBlock), rows → chunk temp files (ChunkBuilder.addBlock), temp files → sorted
 * zstd Parquet (ChunkBuilder.finish). The RPC JSON comes from the tiler (its time is shown apart).
 */
export async function runIngest(o: IngestBenchOptions): Promise<void> {
  const out = path.join(benchRoot(), `ingest-${process.pid}`)
  await rm(out, { recursive: true, force: true })
  const templates = loadTemplates()
  const t = { tile: 0, normalize: 0, add: 0, finish: 0 }
  const rowCount: Record<string, number> = {}
  let inputBytes = 0
  let rowBytes = 0
  const written: ChunkRef[] = []
  const bar = progress('ingest', o.blocks)
  try {
    let builder: ChunkBuilder | undefined
    for (let n = 0; n < o.blocks; n++) {
      let t0 = performance.now()
      const bundle = tileBlock(templateFor(n, templates), n, { seed: 'bench-ingest' })
      if (!o.traces) {
        delete bundle.traces
        delete bundle.stateDiffs
      }
      t.tile += performance.now() - t0
      if (n < 25) inputBytes += JSON.stringify(bundle).length // JSON size of the first blocks, extrapolated below
      t0 = performance.now()
      const rows = normalizeEvmBlock(bundle)
      t.normalize += performance.now() - t0
      for (const [table, list] of Object.entries(rows)) rowCount[table] = (rowCount[table] ?? 0) + list.length
      t0 = performance.now()
      builder ??= new ChunkBuilder(evmFamily, out, bundleTables(bundle))
      const before = builder.bytes
      await builder.addBlock(n, bundle.block.hash, bundle.block.parentHash, rows)
      rowBytes += builder.bytes - before
      t.add += performance.now() - t0
      if (builder.blockCount >= o.chunkBlocks || n === o.blocks - 1) {
        t0 = performance.now()
        written.push(await builder.finish(nextTop(written, builder.first, 500)))
        t.finish += performance.now() - t0
        builder = undefined
      }
      bar.update(n + 1)
    }
  } finally {
    bar.stop()
    await rm(out, { recursive: true, force: true })
  }
  inputBytes = (inputBytes / Math.min(25, o.blocks)) * o.blocks
  const rows = Object.values(rowCount).reduce((a, b) => a + b, 0)
  const line = (stage: string, msTotal: number, bytes?: number) => [
    stage, `${(msTotal / 1000).toFixed(2)} s`, fmtRate(o.blocks, msTotal), fmtRate(rows, msTotal),
    bytes == null ? '' : (bytes / 1e6 / (msTotal / 1000)).toFixed(0),
  ]
  console.log(`machine: ${machine()}`)
  console.log(`${o.blocks} blocks in ${written.length} chunks of ${o.chunkBlocks}; rows: ` +
    Object.entries(rowCount).map(([k, v]) => `${v} ${k}`).join(', ') +
    `; RPC JSON ≈ ${mb(inputBytes)} MB, rows as NDJSON ${mb(rowBytes)} MB; DuckDB default threads`)
  printTable('ingest stages (one process, no overlap)', ['stage', 'time', 'blocks/s', 'rows/s', 'MB/s'], [
    line('tile real blocks (benchmark input, not ingest)', t.tile),
    line('normalise: RPC JSON → rows', t.normalize, inputBytes),
    line('ChunkBuilder.addBlock: rows → NDJSON temp files', t.add, rowBytes),
    line('ChunkBuilder.finish: NDJSON → sorted zstd Parquet', t.finish, rowBytes),
    line('write path (addBlock + finish)', t.add + t.finish, rowBytes),
    line('normalise + write', t.normalize + t.add + t.finish, inputBytes),
  ])
  console.log(`per block: normalise ${ms(t.normalize / o.blocks)} ms, addBlock ${ms(t.add / o.blocks)} ms, finish ${ms(t.finish / o.blocks)} ms`)
  if (o.replayBlocks > 0) await replayIngest(o.replayBlocks, o.chunkBlocks)
}

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli.js')

/**
 * End to end through the real ingest: `block-archive replay-rpc` serves the recorded mainnet
 * blocks 18000000 and 18500000 (with receipts) over and over as one chain, and `block-archive
 * ingest` (JSON-RPC client, batching, normalisation, chunk writer) writes them, each in its own
 * process. Blocks, transactions and logs only (the recorded blocks have no state diffs).
 */
async function replayIngest(blocks: number, chunkBlocks: number): Promise<void> {
  const out = path.join(benchRoot(), `ingest-replay-${process.pid}`)
  await rm(out, { recursive: true, force: true })
  const rpc = spawn(process.execPath, [CLI, 'replay-rpc', '--only', '18000000,18500000', '--repeat', String(Math.ceil(blocks / 2)), '--port', '0'],
    { stdio: ['ignore', 'pipe', 'inherit'] })
  try {
    const url = await new Promise<string>((resolve, reject) => {
      rpc.once('exit', (code) => reject(new Error(`replay-rpc exited with ${code}`)))
      createInterface({ input: rpc.stdout! }).on('line', (line) => {
        const m = /^rpc: (\S+)/.exec(line)
        if (m) resolve(m[1])
      })
    })
    const t0 = performance.now()
    await new Promise<void>((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, 'ingest', '--rpc', url, '--dataset', 'replay', '--out', out, '--from', '0', '--to', String(blocks - 1),
        '--chunk-blocks', String(chunkBlocks), '--progress', 'none'], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
      let err = ''
      child.stderr!.on('data', (x) => (err = (err + x).slice(-3000)))
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`ingest exited with ${code}: ${err}`))))
    })
    const wall = performance.now() - t0
    const rows: Record<string, number> = {}
    for (const ref of await listLocalChunks(out)) {
      const meta = await readChunkMeta(out, ref)
      for (const [k, v] of Object.entries(meta.rows)) rows[k] = (rows[k] ?? 0) + v
    }
    const total = Object.values(rows).reduce((a, b) => a + b, 0)
    printTable(`end to end: replay-rpc → block-archive ingest, ${blocks} mainnet blocks (18000000/18500000 alternating), chunks of ${chunkBlocks}`,
      ['blocks', 'rows', 'time', 'blocks/s', 'rows/s', 'target'],
      [[String(blocks), Object.entries(rows).map(([k, v]) => `${v} ${k}`).join(', '), `${(wall / 1000).toFixed(2)} s`, fmtRate(blocks, wall), fmtRate(total, wall),
        `≥ 1,000 blocks/s${blocks / (wall / 1000) >= 1000 ? '' : ' ✗'}`]])
  } finally {
    rpc.kill('SIGTERM')
    await rm(out, { recursive: true, force: true })
  }
}
