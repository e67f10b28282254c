import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateDataset } from '../src/bench-data/generate.js'
import { fmtRate, mb, ms } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { progress } from '../src/bench-data/progress.js'

export interface GenerateBenchOptions {
  out?: string
  blocks: number
  chunkBlocks: number
  first: number
  seed?: string
  traces: boolean
  stateDiffs: boolean
  force?: boolean
}

/** `bench generate`: build a synthetic dataset and report how fast it was written. */
export async function runGenerate(o: GenerateBenchOptions): Promise<void> {
  const out = o.out ?? path.join(tmpdir(), 'block-archive-bench', `generated-${o.blocks}`)
  console.log(`machine: ${machine()}`)
  console.log(`writing ${o.blocks} blocks (chunks of ${o.chunkBlocks}) into ${out}`)
  const bar = progress('generate', o.blocks)
  let s
  try {
    s = await generateDataset({
      out, blocks: o.blocks, chunkBlocks: o.chunkBlocks, first: o.first, seed: o.seed, force: o.force,
      withTraces: o.traces, withStateDiffs: o.stateDiffs,
      onBlock: (d) => bar.update(d),
      onEstimate: (projected, free) => process.stderr.write(`\nprojected dataset size ${(projected / 1e9).toFixed(2)} GB (${(free / 1e9).toFixed(0)} GB free)\n`),
    })
  } finally {
    bar.stop()
  }
  const totalRows = Object.values(s.rows).reduce((a, b) => a + b, 0)
  printTable(`generate: ${s.blocks} blocks → ${s.chunks} chunks`, ['measure', 'value'], [
    ['elapsed', `${(s.elapsedMs / 1000).toFixed(1)} s`],
    ['blocks/s', fmtRate(s.blocks, s.elapsedMs)],
    ['rows/s', fmtRate(totalRows, s.elapsedMs)],
    ...Object.entries(s.rows).map(([t, n]) => [`rows: ${t}`, `${n.toLocaleString('en-US')} (${(n / s.blocks).toFixed(1)}/block)`]),
    ['normalised rows (NDJSON)', `${mb(s.rowBytes)} MB`],
    ['dataset on disk (Parquet)', `${mb(s.datasetBytes)} MB (${mb(s.datasetBytes / s.chunks)} MB/chunk)`],
    ['main thread: tile', `${ms(s.tileMs)} ms (${ms(s.tileMs / s.blocks)} ms/block)`],
    ['main thread: normalise', `${ms(s.normalizeMs)} ms (${ms(s.normalizeMs / s.blocks)} ms/block)`],
    ['main thread: rows → NDJSON', `${ms(s.addBlockMs)} ms (${ms(s.addBlockMs / s.blocks)} ms/block)`],
    ['waiting for Parquet encoding', `${ms(s.finishWaitMs)} ms`],
  ])
}
