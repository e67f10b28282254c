import { appendFile, mkdir, writeFile } from 'node:fs/promises'
import { CHUNK_INDEX_FILE, chunkIndexLine } from '../../src/chunks/chunk-index.js'
import path from 'node:path'
import { chunkPath, type ChunkMeta, type ChunkRef } from '../../src/chunks/layout.js'
import { joinKey, putText } from '../../src/storage/s3.js'

/*
 * Datasets of many chunks for router scaling (listing, assignment), not for queries: each chunk is a
 * folder (or S3 prefix) with an empty `blocks.parquet` (what makes a chunk complete) and a real
 * `meta.json`. Sparse: chunk i holds one block, 10·i, and names the chunk before it in
 * `previousLast`, so every pair of chunks is a jump whose meta the router reads (the worst case for
 * listing).
 */

export const SYNTHETIC_TOP_CHUNKS = 500

export function syntheticChunk(i: number): { ref: ChunkRef; meta: ChunkMeta } {
  const first = i * 10
  const top = Math.floor(i / SYNTHETIC_TOP_CHUNKS) * SYNTHETIC_TOP_CHUNKS * 10
  const hash = (0x10000000 + i).toString(16).slice(-8)
  const ref: ChunkRef = { top, first, last: first, hash, path: chunkPath(top, first, first, hash) }
  const meta: ChunkMeta = {
    family: 'evm',
    first,
    last: first,
    lastHash: `0x${hash.padStart(64, '0')}`,
    firstParentHash: `0x${'0'.repeat(64)}`,
    previousLast: i === 0 ? -1 : first - 10,
    blockCount: 1,
    tables: ['blocks'],
    rows: { blocks: 1 },
  }
  return { ref, meta }
}

/** The chunk index lines (src/chunks/chunk-index.ts) of chunks `from` … `to - 1`, as an ingest appends them. */
export function syntheticIndex(from: number, to: number): string {
  let text = ''
  for (let i = from; i < to; i++) {
    const { ref, meta } = syntheticChunk(i)
    text += chunkIndexLine(ref, meta)
  }
  return text
}

/** Add chunks `from` … `to - 1` to the chunk index of a dataset folder. */
export async function appendSyntheticIndex(dir: string, from: number, to: number): Promise<void> {
  await appendFile(path.join(dir, CHUNK_INDEX_FILE), syntheticIndex(from, to))
}

/** Chunks `from` … `to - 1` into a dataset folder (dataset.json written too), then into its chunk index. */
export async function writeSyntheticFolder(dir: string, name: string, from: number, to: number): Promise<void> {
  await mkdir(dir, { recursive: true })
  await writeFile(path.join(dir, 'dataset.json'), JSON.stringify({ name, family: 'evm' }))
  await inParallel(from, to, 32, async (i) => {
    const { ref, meta } = syntheticChunk(i)
    const d = path.join(dir, ref.path)
    await mkdir(d, { recursive: true })
    await writeFile(path.join(d, 'meta.json'), JSON.stringify(meta))
    await writeFile(path.join(d, 'blocks.parquet'), '')
  })
  await appendSyntheticIndex(dir, from, to)
}

/** The same into `s3://bucket/prefix` (meta.json first, blocks.parquet last, as an ingest publishes). */
export async function writeSyntheticS3(bucket: string, prefix: string, name: string, from: number, to: number, onChunk?: (done: number) => void): Promise<void> {
  await putText(bucket, joinKey(prefix, 'dataset.json'), JSON.stringify({ name, family: 'evm' }))
  let done = 0
  // s3rver answers "internal error" to some PUTs when many arrive at once.
  await inParallel(from, to, 8, async (i) => {
    const { ref, meta } = syntheticChunk(i)
    await putText(bucket, joinKey(prefix, ref.path, 'meta.json'), JSON.stringify(meta))
    await putText(bucket, joinKey(prefix, ref.path, 'blocks.parquet'), '')
    onChunk?.(++done)
  })
}

async function inParallel(from: number, to: number, width: number, f: (i: number) => Promise<void>): Promise<void> {
  let next = from
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < to) await f(next++)
  }))
}

/** The chunk index of chunks 0 … `to - 1` at `s3://bucket/prefix` (an S3 ingest rewrites it whole). */
export async function writeSyntheticS3Index(bucket: string, prefix: string, to: number): Promise<void> {
  await putText(bucket, joinKey(prefix, CHUNK_INDEX_FILE), syntheticIndex(0, to))
}
