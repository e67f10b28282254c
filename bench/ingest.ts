import { rm } from 'node:fs/promises'
import path from 'node:path'
import { nextTop, type ChunkRef } from '../src/chunks/layout.js'
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
}
