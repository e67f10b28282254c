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

/**
 * Bytes an entry costs besides its filter's bits: the entry, its promise, the `Bloom` with its typed
 * array and buffer, the map's slot (measured in a heap snapshot: about 450).
 */
const ENTRY_OVERHEAD = 450

interface Entry {
  dir: string
  column: string
  value: Promise<Bloom | null>
  /** 0 while being read. */
  bytes: number
  /** Asked for since the eviction scan last passed it. */
  used: boolean
}

/**
 * The filters kept within `budgetBytes`: a worker holding a whole chain's chunks (100,000 and more)
 * would otherwise keep one per chunk and column ever queried, up to 128 KiB each. Past the budget
 * the oldest go first, but one asked for since the scan last passed it gets another round (a second
 * chance: a hit costs a flag, not a reordering). One evicted is read from the chunk's meta.json again
 * when a query needs it.
 */
export class SummaryCache {
  /**
   * Chunk folder → its entries (one, or a list when several columns of the chunk are asked for: a
   * map per chunk would cost more than its filter): the folder string a query holds keeps its hash.
   */
  private readonly byDir = new Map<string, Entry | Entry[]>()
  /** Entries in the order the eviction scan meets them, from `head` on. */
  private queue: Entry[] = []
  private head = 0
  private held = 0
  private count = 0

  /** `budgetBytes`: BLOCK_ARCHIVE_SUMMARY_MB (default 64 MiB). */
  constructor(public budgetBytes = Number(process.env.BLOCK_ARCHIVE_SUMMARY_MB ?? 64) * 1024 * 1024) {}

  /** null: no summary (too many distinct values, or building it failed); a failure is not kept. */
  get(dir: string, column: string, compute: () => Promise<Bloom | null>): Promise<Bloom | null> {
    const held = this.byDir.get(dir)
    const hit = held === undefined ? undefined : Array.isArray(held) ? held.find((e) => e.column === column) : held.column === column ? held : undefined
    if (hit) {
      hit.used = true
      return hit.value
    }
    const entry: Entry = { dir, column, value: Promise.resolve(null), bytes: 0, used: false }
    entry.value = compute().then(
      (bloom) => {
        if (this.live(entry)) {
          entry.bytes = (bloom?.bytes ?? 0) + ENTRY_OVERHEAD
          this.held += entry.bytes
          this.trim()
        }
        return bloom
      },
      () => {
        if (this.live(entry)) this.remove(entry)
        return null
      },
    )
    this.byDir.set(dir, held === undefined ? entry : Array.isArray(held) ? [...held, entry] : [held, entry])
    this.queue.push(entry)
    this.count++
    return entry.value
  }

  /** Filters kept, and their bytes (with the entries' overhead). */
  stats(): { entries: number; bytes: number } {
    return { entries: this.count, bytes: this.held }
  }

  private live(e: Entry): boolean {
    const held = this.byDir.get(e.dir)
    return held === e || (Array.isArray(held) && held.includes(e))
  }

  private remove(e: Entry): void {
    const held = this.byDir.get(e.dir)!
    const rest = Array.isArray(held) ? held.filter((x) => x !== e) : []
    if (rest.length === 0) this.byDir.delete(e.dir)
    else this.byDir.set(e.dir, rest.length === 1 ? rest[0] : rest)
    this.held -= e.bytes
    this.count--
  }

  private trim(): void {
    // each entry is met at most twice: once to take its second chance, once to go
    for (let steps = 2 * (this.queue.length - this.head); this.held > this.budgetBytes && steps > 0 && this.head < this.queue.length; steps--) {
      const e = this.queue[this.head++]
      if (!this.live(e)) continue
      if (e.used || e.bytes === 0) {
        e.used = false
        this.queue.push(e)
      } else this.remove(e)
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head)
      this.head = 0
    }
  }
}

export const summaryCache = new SummaryCache()

function summary(con: Sql, dir: string, f: SummaryFilter, meta: ChunkMetaReader): Promise<Bloom | null> {
  return summaryCache.get(dir, f.key, async () => {
    const written = storedSummaries(meta)?.[f.key]
    if (written === null) return null
    if (typeof written === 'string') {
      const bloom = Bloom.fromBase64(written)
      if (bloom) return bloom
    }
    return buildSummary(con, dir, f.table, f.column)
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

/** A list filter of a scan that summaries can rule on: its table and column, and its values hashed. */
interface SummaryFilter {
  table: string
  column: string
  /** `table.column` */
  key: string
  hashes: [number, number][]
}

/** Per plan, per scan: its list filters (a scan with an empty list rules every chunk out: `null`). */
const summaryFilters = new WeakMap<QueryPlan, (SummaryFilter[] | null)[]>()

/** The list filters of each scan of the plan, computed once per query rather than once per chunk. */
function filtersOf(plan: QueryPlan): (SummaryFilter[] | null)[] {
  let out = summaryFilters.get(plan)
  if (!out) {
    out = plan.scans.map((scan) => {
      const filters: SummaryFilter[] = []
      for (const [name, value] of Object.entries(scan.filters)) {
        const f = scan.request.filters[name]
        if (f.kind !== 'in' || f.values === 'integer' || !Array.isArray(value)) continue
        if (value.length === 0) return null
        filters.push({ table: scan.item.table, column: f.column, key: summaryKey(scan.item.table, f.column), hashes: value.map((v) => Bloom.hash(String(v))) })
      }
      return filters
    })
    summaryFilters.set(plan, out)
  }
  return out
}

/**
 * True when no request of the plan can match a row of the chunk in `dir`, so that the chunk
 * contributes nothing but (possibly) boundary headers. Never true for includeAllBlocks queries.
 */
export async function chunkCannotMatch(con: Sql, plan: QueryPlan, dir: string, meta = metaReader(dir)): Promise<boolean> {
  // Without requests a chunk inside the range adds nothing (no items, no boundary): the loop below says so.
  if (plan.query.includeAllBlocks) return false
  for (const filters of filtersOf(plan)) {
    if (filters === null) continue // an empty list: nothing of this scan matches anywhere
    let ruledOut = false
    for (const f of filters) {
      const bloom = await summary(con, dir, f, meta)
      if (bloom && !f.hashes.some((h) => bloom.mayContainHashed(h))) {
        ruledOut = true
        break
      }
    }
    if (!ruledOut) return false
  }
  return true
}
