import path from 'node:path'
import type { Sql } from './lazy-connection.js'
import { ident, lit } from '../db.js'
import { Bloom, buildSummary, summaryKey } from '../chunks/chunk-summary.js'
import { readMetaInDir, type ChunkMeta } from '../chunks/layout.js'
import type { QueryPlan } from './plan.js'

/*
 * Per-chunk summaries kept in memory: for a (chunk, table, column) that a list filter names, a
 * Bloom filter of the column's distinct values (src/chunks/chunk-summary.ts). A chunk in which no
 * request can match (every request has a list filter none of whose values is in the chunk) is
 * passed over without running any statement on it (opening a chunk costs ~1.2 ms per file in DuckDB
 * alone, and a selective query runs 4–6 statements per chunk). The filters come from the chunk's
 * meta.json, where the ingest and the compactor write them; a chunk written without them gets them
 * built by the first query that needs them, with one `SELECT DISTINCT` on that column only. Chunks
 * are immutable, so a summary never goes stale. The filters kept are bounded by bytes (`SummaryCache`).
 */

/**
 * A fact about an immutable chunk, computed once per key; a failure is not kept (the next query
 * tries again) and answers `fallback`.
 */
function cached<T>(cache: Map<string, Promise<T>>, key: string, fallback: T, compute: () => Promise<T>): Promise<T> {
  let p = cache.get(key)
  if (!p) {
    p = compute().catch(() => {
      cache.delete(key)
      return fallback
    })
    cache.set(key, p)
  }
  return p
}

/** Bytes an entry costs besides its filter's bits (the key, the map's entry, the objects). */
const ENTRY_OVERHEAD = 200

/**
 * The filters kept, least recently used first, within `budgetBytes`: a worker holding a whole
 * chain's chunks (100,000 and more) would otherwise keep one per chunk and column ever queried, up to
 * 128 KiB each. One evicted is read from the chunk's meta.json again when a query needs it.
 */
export class SummaryCache {
  private readonly entries = new Map<string, { value: Promise<Bloom | null>; bytes: number }>()
  private held = 0

  /** `budgetBytes`: BLOCK_ARCHIVE_SUMMARY_MB (default 64 MiB). */
  constructor(public budgetBytes = Number(process.env.BLOCK_ARCHIVE_SUMMARY_MB ?? 64) * 1024 * 1024) {}

  /** null: no summary (too many distinct values, or building it failed); a failure is not kept. */
  get(key: string, compute: () => Promise<Bloom | null>): Promise<Bloom | null> {
    const hit = this.entries.get(key)
    if (hit) {
      this.entries.delete(key)
      this.entries.set(key, hit)
      return hit.value
    }
    const entry = { value: Promise.resolve<Bloom | null>(null), bytes: 0 }
    entry.value = compute().then(
      (bloom) => {
        if (this.entries.get(key) === entry) {
          entry.bytes = (bloom?.bytes ?? 0) + key.length * 2 + ENTRY_OVERHEAD
          this.held += entry.bytes
          this.trim()
        }
        return bloom
      },
      () => {
        if (this.entries.get(key) === entry) this.entries.delete(key)
        return null
      },
    )
    this.entries.set(key, entry)
    return entry.value
  }

  /** Filters kept, and their bytes (with the entries' overhead). */
  stats(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.held }
  }

  private trim(): void {
    for (const [key, e] of this.entries) {
      if (this.held <= this.budgetBytes) return
      if (e.bytes === 0) continue // still being read
      this.entries.delete(key)
      this.held -= e.bytes
    }
  }
}

export const summaryCache = new SummaryCache()

function summary(con: Sql, dir: string, table: string, column: string, meta: ChunkMetaReader): Promise<Bloom | null> {
  return summaryCache.get(`${dir}\0${table}\0${column}`, async () => {
    const written = storedSummaries(meta)?.[summaryKey(table, column)]
    if (written === null) return null
    if (typeof written === 'string') {
      const bloom = Bloom.fromBase64(written)
      if (bloom) return bloom
    }
    return buildSummary(con, dir, table, column)
  })
}

/** The chunk's meta.json, read at most once however often it is asked for (invalid JSON throws each time). */
export type ChunkMetaReader = () => ChunkMeta | undefined

/**
 * A reader of the meta.json in `dir` for the questions a query asks about a chunk when it first
 * meets it (its tables, the summary of each column it filters on): one read and parse for all of
 * them. Only what is asked is kept, in the caches of those questions.
 */
export function metaReader(dir: string): ChunkMetaReader {
  let read: { meta?: ChunkMeta; error?: unknown } | undefined
  return () => {
    if (!read) {
      try {
        read = { meta: readMetaInDir(dir) }
      } catch (error) {
        read = { error }
      }
    }
    if (read.error !== undefined) throw read.error
    return read.meta
  }
}

/** The `summaries` of the chunk's meta.json (undefined: none written). */
function storedSummaries(meta: ChunkMetaReader): Record<string, unknown> | undefined {
  const s = meta()?.summaries as unknown
  return s && typeof s === 'object' && !Array.isArray(s) ? (s as Record<string, unknown>) : undefined
}

const dense = new Map<string, Promise<boolean>>()

/**
 * Whether the chunk in `dir` holds every block from its first to its last (chunks of a chain do;
 * sparse recorded data does not). Then the blocks of a range are known without reading them.
 */
export function chunkIsDense(con: Sql, dir: string, table: string, column: string): Promise<boolean> {
  const col = ident(column)
  return cached(dense, `${dir}\0${table}`, false, async () => {
    const r = await con.runAndReadAll(`SELECT count(*) = max(${col}) - min(${col}) + 1 FROM read_parquet(${lit(path.join(dir, `${table}.parquet`))})`)
    return r.getRows()[0]?.[0] === true
  })
}

/**
 * True when no request of the plan can match a row of the chunk in `dir`, so that the chunk
 * contributes nothing but (possibly) boundary headers. Never true for includeAllBlocks queries.
 */
export async function chunkCannotMatch(con: Sql, plan: QueryPlan, dir: string, meta = metaReader(dir)): Promise<boolean> {
  // Without requests a chunk inside the range adds nothing (no items, no boundary): the loop below says so.
  if (plan.query.includeAllBlocks) return false
  for (const scan of plan.scans) {
    let ruledOut = false
    for (const [name, value] of Object.entries(scan.filters)) {
      const f = scan.request.filters[name]
      if (f.kind !== 'in' || f.values === 'integer' || !Array.isArray(value)) continue
      if (value.length === 0) {
        ruledOut = true
        break
      }
      const bloom = await summary(con, dir, scan.item.table, f.column, meta)
      if (bloom && !value.some((v) => bloom.mayContain(String(v)))) {
        ruledOut = true
        break
      }
    }
    if (!ruledOut) return false
  }
  return true
}
