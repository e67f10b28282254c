import { createHash } from 'node:crypto'
import { closeSync, createReadStream, openSync, readSync } from 'node:fs'
import { readdir, readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { pipeline } from 'node:stream/promises'
import type { TableNulls } from './chunk-nulls.js'
import { resolveChunks } from './supersede.js'

/*
 * Chunk layout (docs/protocol.md §8): `{top}/{first}-{last}-{hash}/{table}.parquet`, numbers padded to
 * 10 digits. `top` is the first block of the first chunk in that top folder. A chunk folder is
 * complete when it has `blocks.parquet`; writers build it under a temp name and rename it.
 */

export interface ChunkRef {
  top: number
  first: number
  last: number
  /** Short hash of the last block (8 hex chars after `0x`). */
  hash: string
  /** Relative path of the chunk folder inside the dataset: `{top}/{first}-{last}-{hash}`. */
  path: string
}

/** The tables of the chunk in the folder `dir`: the names of its `{table}.parquet` files. */
export async function chunkTableNames(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((f) => f.endsWith('.parquet')).map((f) => f.slice(0, -'.parquet'.length))
}

/** Written next to the parquet files: what the chunk holds. */
export interface ChunkMeta {
  family: string
  first: number
  last: number
  /** Full hash of the last block and of the first block's parent, for continuity checks. */
  lastHash: string
  firstParentHash: string
  /** Last block of the chunk this one was written after (-1: the first chunk); tells a deliberate jump from a missing chunk. */
  previousLast?: number
  /** Numbers of the blocks actually present (sparse datasets skip numbers). */
  blockCount: number
  /** The size `--chunk-mb` bounds (its rows as NDJSON; on the spooled path, its RPC answers' bytes); compaction merges only chunks that give it. */
  rowBytes?: number
  tables: string[]
  rows: Record<string, number>
  /** A chunk merged by compaction: how many merges deep it is (the ingest's chunks are tier 0). */
  tier?: number
  /** A chunk merged by compaction: the chunk paths it replaces, and when it was published (their deletion waits a grace period from then). */
  replaces?: string[]
  compactedAt?: string
  /** A merged chunk compaction merges no further (more of its tier would not fit the chunk bounds). */
  sealed?: boolean
  /** Bloom filters of the columns list filters name, `table.column` → base64 (null: too many values); src/chunks/chunk-summary.ts. */
  summaries?: Record<string, string | null>
  /** Per table, its columns without NULLs and with only NULLs; src/chunks/chunk-nulls.ts. Older chunks lack it. */
  nulls?: Record<string, TableNulls>
  /**
   * Every file of the chunk folder but meta.json (the Parquet files), with its size and SHA-256
   * (hex), so that a copy can be verified. Chunks written before the manifest existed lack it.
   */
  files?: Record<string, ChunkFileInfo>
}

export interface ChunkFileInfo {
  size: number
  sha256: string
}

/** Kept at the dataset root: which family and name the chunks belong to. */
export interface DatasetMeta {
  name: string
  family: string
}

export const pad = (n: number) => String(n).padStart(10, '0')

export function shortHash(hash: string): string {
  return hash.replace(/^0x/, '').slice(0, 8).toLowerCase()
}

export function chunkPath(top: number, first: number, last: number, hash: string): string {
  return `${pad(top)}/${pad(first)}-${pad(last)}-${hash}`
}

const TOP_RE = /^\d{10}$/
const CHUNK_RE = /^(\d{10})-(\d{10})-(\w+)$/

export function parseChunkName(top: number, name: string): ChunkRef | undefined {
  const m = CHUNK_RE.exec(name)
  if (!m) return undefined
  const first = Number(m[1])
  const last = Number(m[2])
  if (first > last || first < top) return undefined
  return { top, first, last, hash: m[3], path: `${pad(top)}/${name}` }
}

/**
 * The folder of a chunk, `dir` + its path, for strings kept per chunk (`dir` absolute and normal,
 * `rel` a chunk path). Not `path.join`: its normalising leaves each result a tree of string pieces
 * that stays in memory with it: a worker holding 20,000 chunks (before any query) had a heap of
 * 67–73 MB and 131–137 MB RSS that way, 47–51 and 111–115 MB this way.
 */
export const chunkFolder = (dir: string, rel: string): string => `${dir}${path.sep}${rel}`

/** Parse a chunk path such as `0000000000/0000000000-0000000099-abcdef01` (as listed in object storage). */
export function parseChunkPath(rel: string): ChunkRef | undefined {
  const [topName, name, ...rest] = rel.split('/').filter(Boolean)
  if (rest.length || !topName || !name || !TOP_RE.test(topName)) return undefined
  return parseChunkName(Number(topName), name)
}

/**
 * Complete chunks of a local dataset folder, ascending (overlapping ones included: the router
 * reports those). Temp folders and stray files are ignored.
 */
export async function scanLocalChunks(root: string): Promise<ChunkRef[]> {
  let tops: string[]
  try {
    tops = (await readdir(root)).filter((n) => TOP_RE.test(n)).sort()
  } catch (e: any) {
    if (e.code === 'ENOENT') return []
    throw e
  }
  const chunks: ChunkRef[] = []
  for (const topName of tops) {
    const names = (await readdir(path.join(root, topName))).sort()
    for (const name of names) {
      const ref = parseChunkName(Number(topName), name)
      if (!ref) continue
      if (!(await exists(path.join(root, ref.path, 'blocks.parquet')))) continue
      chunks.push(ref)
    }
  }
  return chunks.sort((a, b) => a.first - b.first || a.last - b.last)
}

/**
 * Complete chunks of a local dataset folder that no other contains (src/chunks/supersede.ts),
 * ascending; other overlapping chunks are an error (what an ingest resumes from).
 */
export async function listLocalChunks(root: string): Promise<ChunkRef[]> {
  return resolvedOrThrow(await scanLocalChunks(root), root)
}

/** `chunks` without the superseded ones; throws on overlaps that are not containment. */
export function resolvedOrThrow<T extends ChunkRef>(chunks: readonly T[], where: string): T[] {
  const kept = resolveChunks(chunks)
  for (let i = 1; i < kept.length; i++) {
    if (kept[i].first <= kept[i - 1].last) throw new Error(`overlapping chunks in ${where}: ${kept[i - 1].path} and ${kept[i].path}`)
  }
  return kept
}

export async function readChunkMeta(root: string, ref: ChunkRef): Promise<ChunkMeta> {
  return JSON.parse(await readFile(path.join(root, ref.path, 'meta.json'), 'utf8'))
}

/**
 * The meta.json of the chunk folder `dir` (undefined when it cannot be read; invalid JSON throws).
 * Read synchronously: a worker reads one small local file per chunk when it takes the chunk and when
 * a query first meets it, and the promise API's open, stat, read and close, each a round trip
 * through libuv's pool, cost several times the read itself. Read into one reused buffer, without
 * the `stat` and the option handling of `readFileSync`: 100,000 chunks met are 100,000 reads.
 */
export function readMetaInDir(dir: string): ChunkMeta | undefined {
  let fd: number
  try {
    fd = openSync(`${dir}/meta.json`, 'r')
  } catch {
    return undefined
  }
  let size = 0
  try {
    for (;;) {
      if (size === metaBuffer.length) metaBuffer = Buffer.concat([metaBuffer, Buffer.allocUnsafe(metaBuffer.length)])
      const n = readSync(fd, metaBuffer, size, metaBuffer.length - size, null)
      if (n === 0) break
      size += n
    }
  } catch {
    return undefined
  } finally {
    closeSync(fd)
  }
  return JSON.parse(metaBuffer.toString('utf8', 0, size))
}

/** readMetaInDir's buffer, grown to the largest meta.json read (a 200-block chunk's is about 18 KB). */
let metaBuffer = Buffer.allocUnsafe(64 * 1024)

/** Size and SHA-256 of a file, read as a stream. */
export async function hashFile(file: string): Promise<ChunkFileInfo> {
  const hash = createHash('sha256')
  let size = 0
  await pipeline(createReadStream(file), async function* (source: AsyncIterable<Buffer>) {
    for await (const chunk of source) {
      hash.update(chunk)
      size += chunk.length
    }
  })
  return { size, sha256: hash.digest('hex') }
}

export async function readDatasetMeta(root: string): Promise<DatasetMeta | undefined> {
  try {
    return JSON.parse(await readFile(path.join(root, 'dataset.json'), 'utf8'))
  } catch (e: any) {
    if (e.code === 'ENOENT') return undefined
    throw e
  }
}

export async function exists(p: string): Promise<boolean> {
  try {
    await stat(p)
    return true
  } catch {
    return false
  }
}

/** Where the next chunk goes: stay in the last top folder until it holds `topDirSize` chunks. */
export function nextTop(existing: Pick<ChunkRef, 'top'>[], first: number, topDirSize: number): number {
  const last = existing[existing.length - 1]
  if (!last) return first
  const inTop = existing.filter((c) => c.top === last.top).length
  return inTop >= topDirSize ? first : last.top
}
