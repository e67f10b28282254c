import { Command, InvalidArgumentError } from 'commander'
import { generateDataset } from './generate.js'
import { progress } from './progress.js'

const int = (v: string) => {
  const n = Number(v)
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n)) throw new InvalidArgumentError(`expected a non-negative integer, got "${v}"`)
  return n
}

/**
 * `synthetic` command: a mainnet-like EVM dataset tiled from the real blocks in fixtures/ (for
 * benchmarks, demos and load tests). `npm run bench -- generate` runs the same with a rate report.
 */
export function registerSynthetic(program: Command): void {
  program
    .command('synthetic')
    .description('write a synthetic mainnet-like EVM dataset (real blocks tiled into a chain) into a chunk folder')
    .requiredOption('--out <folder>', 'dataset folder to create')
    .option('--blocks <n>', 'number of blocks', int, 100_000)
    .option('--first <n>', 'number of the first block', int, 0)
    .option('--chunk-blocks <n>', 'blocks per chunk', int, 200)
    .option('--seed <text>', 'seed of the random bytes (same seed → same dataset)', 'block-archive')
    .option('--no-traces', 'leave out the traces table')
    .option('--no-state-diffs', 'leave out the statediffs table')
    .option('--force', 'replace the output folder if it is not empty')
    .action(async (o) => {
      const bar = progress('synthetic', o.blocks)
      let s
      try {
        s = await generateDataset({
          out: o.out, blocks: o.blocks, first: o.first, chunkBlocks: o.chunkBlocks, seed: o.seed, force: o.force,
          withTraces: o.traces, withStateDiffs: o.stateDiffs, onBlock: (d) => bar.update(d),
        })
      } finally {
        bar.stop()
      }
      console.log(`${s.blocks} blocks in ${s.chunks} chunks, ${(s.datasetBytes / 1e6).toFixed(0)} MB, ` +
        `${(s.blocks / (s.elapsedMs / 1000)).toFixed(1)} blocks/s → ${o.out}`)
    })
}
