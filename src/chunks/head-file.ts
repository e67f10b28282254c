import { parseChunkPath, type ChunkRef } from './layout.js'

/*
 * `head.json` at the root of a dataset that a following ingest writes: the newest chunks it
 * published and the node's head as it last read it. Routers watch this one small object instead of
 * listing storage to learn of new chunks (docs/serving.md, "Freshness"), and compute the dataset's
 * lag behind the node from it. It is a hint: the chunk folders stay the truth, and a router that
 * cannot use the file lists storage as before.
 */

export const HEAD_FILE = 'head.json'

/** Newest chunk paths kept in the file: a reader that missed a few writes can still append them all. */
export const HEAD_RECENT_CHUNKS = 16

export interface DatasetHead {
  dataset: string
  /** Paths of the newest chunks published, ascending (at most HEAD_RECENT_CHUNKS). */
  chunks: string[]
  /** Last block in the dataset (-1: none). */
  last: number
  /** When the newest chunk was published (ms since the epoch), null before the first. */
  publishedAt: number | null
  /** The node's head as last read: its number, the confirmed head the ingest may write up to, and when it was read. */
  node: { head: number; confirmed: number; at: number } | null
  /** The first confirmed block not published yet and when the node first reported it; null when caught up. */
  behind: { block: number; since: number } | null
  /** When this file was written (ms since the epoch). */
  writtenAt: number
}

/** The file's text parsed and checked; undefined for anything else (a reader then ignores it). */
export function parseDatasetHead(text: string): DatasetHead | undefined {
  let v: any
  try {
    v = JSON.parse(text)
  } catch {
    return undefined
  }
  const int = (x: unknown) => Number.isSafeInteger(x)
  if (!v || typeof v !== 'object' || typeof v.dataset !== 'string' || !Array.isArray(v.chunks) || !int(v.last) || !int(v.writtenAt)) return undefined
  if (!v.chunks.every((p: unknown) => typeof p === 'string' && parseChunkPath(p))) return undefined
  if (v.node !== null && !(v.node && int(v.node.head) && int(v.node.confirmed) && int(v.node.at))) return undefined
  if (v.behind !== null && !(v.behind && int(v.behind.block) && int(v.behind.since))) return undefined
  if (v.publishedAt !== null && !int(v.publishedAt)) return undefined
  return v as DatasetHead
}

/** The chunks the file names, ascending. */
export function headChunks(head: DatasetHead): ChunkRef[] {
  return head.chunks.map((p) => parseChunkPath(p)!).sort((a, b) => a.first - b.first)
}
