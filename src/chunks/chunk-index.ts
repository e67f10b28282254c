import { appendFile, readFile } from 'node:fs/promises'
import path from 'node:path'
import { parseChunkPath, type ChunkMeta, type ChunkRef } from './layout.js'

/*
 * `chunk-index.ndjson` at the root of a dataset: one line per published chunk with what a router
 * needs of its meta.json (the chunk it was written after, the chunks a merged chunk replaces), so a
 * router starting over 100,000 chunks reads one file instead of every chunk's meta.json (and, in a
 * folder, skips the `blocks.parquet` stat of each chunk the index names). Written by the ingest and
 * the compactor after a chunk is published. It is a hint: the listing of chunk folders stays the
 * truth. A line is used only for a chunk the listing shows; chunks the index does not name are read
 * as before (their meta.json), and lines of chunks deleted since are ignored.
 */

export const CHUNK_INDEX_FILE = 'chunk-index.ndjson'

/** What the router reads of a chunk's meta.json: how it links to the chunks before it. */
export type ChunkLinks = Pick<ChunkMeta, 'previousLast' | 'replaces'>

export interface ChunkIndexLine extends ChunkLinks {
  path: string
}

/** The index line of a published chunk (a line of JSON, newline included). */
export function chunkIndexLine(ref: ChunkRef, meta: ChunkMeta): string {
  const line: ChunkIndexLine = { path: ref.path, previousLast: meta.previousLast }
  if (meta.replaces?.length) line.replaces = meta.replaces
  return JSON.stringify(line) + '\n'
}

/**
 * Chunk path → links. Lines that do not parse (a line cut short by a crash while appending) are
 * skipped; of two lines for the same path the later wins.
 */
export function parseChunkIndex(text: string): Map<string, ChunkLinks> {
  const out = new Map<string, ChunkLinks>()
  for (const line of text.split('\n')) {
    if (!line) continue
    let v: any
    try {
      v = JSON.parse(line)
    } catch {
      continue
    }
    if (!v || typeof v.path !== 'string' || !parseChunkPath(v.path)) continue
    if (v.previousLast !== undefined && !Number.isSafeInteger(v.previousLast)) continue
    if (v.replaces !== undefined && !(Array.isArray(v.replaces) && v.replaces.every((p: unknown) => typeof p === 'string'))) continue
    out.set(v.path, v.replaces ? { previousLast: v.previousLast, replaces: v.replaces } : { previousLast: v.previousLast })
  }
  return out
}

/** The links kept of a meta.json read in full. */
export function linksOf(meta: ChunkMeta): ChunkLinks {
  return meta.replaces ? { previousLast: meta.previousLast, replaces: meta.replaces } : { previousLast: meta.previousLast }
}

/** A local dataset folder: add a published chunk's line (one append; a single ingest writes a dataset). */
export async function appendToFolderIndex(root: string, ref: ChunkRef, meta: ChunkMeta): Promise<void> {
  await appendFile(path.join(root, CHUNK_INDEX_FILE), chunkIndexLine(ref, meta))
}

/** A local dataset folder's index; undefined without one. */
export async function readFolderIndex(root: string): Promise<Map<string, ChunkLinks> | undefined> {
  try {
    return parseChunkIndex(await readFile(path.join(root, CHUNK_INDEX_FILE), 'utf8'))
  } catch (e: any) {
    if (e.code === 'ENOENT') return undefined
    throw e
  }
}
