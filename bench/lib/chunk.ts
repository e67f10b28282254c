import path from 'node:path'
import { listLocalChunks, readChunkMeta, type ChunkMeta } from '../../src/chunks/layout.js'
import { ensureDataset } from './dataset.js'

/** The first chunk of a (cached) synthetic dataset of `blocks` blocks. */
export async function benchChunk(blocks = 200, chunkBlocks = 200): Promise<{ root: string; dir: string; meta: ChunkMeta }> {
  const { dir: root } = await ensureDataset(blocks, chunkBlocks)
  const [ref] = await listLocalChunks(root)
  if (!ref) throw new Error(`no chunks in ${root}`)
  return { root, dir: path.join(root, ref.path), meta: await readChunkMeta(root, ref) }
}
