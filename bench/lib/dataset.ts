import { existsSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateDataset, type GenerateStats } from '../../src/bench-data/generate.js'
import { progress } from '../../src/bench-data/progress.js'

export const benchRoot = () => process.env.BENCH_DIR ?? path.join(tmpdir(), 'block-archive-bench')

/**
 * A synthetic dataset of `blocks` blocks for benchmarks, generated once and reused by later runs
 * (a `.complete` marker is written after the last chunk).
 */
export async function ensureDataset(blocks: number, chunkBlocks = 200): Promise<{ dir: string; generated?: GenerateStats }> {
  const dir = path.join(benchRoot(), `synthetic-${blocks}-${chunkBlocks}`)
  const marker = path.join(dir, '.complete')
  if (existsSync(marker)) return { dir }
  const bar = progress(`generating ${blocks} blocks into ${dir}`, blocks)
  try {
    const generated = await generateDataset({ out: dir, blocks, chunkBlocks, force: true, onBlock: (d) => bar.update(d) })
    await writeFile(marker, new Date().toISOString() + '\n')
    return { dir, generated }
  } finally {
    bar.stop()
  }
}
