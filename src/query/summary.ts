import path from 'node:path'
import type { Sql } from './lazy-connection.js'
import { ident, lit } from '../db.js'
import type { QueryPlan } from './plan.js'

/*
 * Per-chunk summaries kept in memory: for a (chunk, table, column) that a list filter names, a
 * Bloom filter of the column's distinct values. A chunk in which no request can match (every
 * request has a list filter none of whose values is in the chunk) is passed over without running
 * any statement on it (opening a chunk costs ~1.2 ms per file in DuckDB alone, and a selective
 * query runs 4–6 statements per chunk). Chunks are immutable, so a summary never goes stale; it is
 * built by the first query that needs it, with one `SELECT DISTINCT` on that column only.
 */

/** Columns with more distinct values than this get no summary (they would rarely rule a chunk out). */
const MAX_DISTINCT = 50_000
/** Bits per distinct value; with 3 probes ≈ 1.5 % false positives. */
const BITS_PER_VALUE = 12
const PROBES = 3

class Bloom {
  private readonly bits: Uint32Array
  private readonly mask: number

  constructor(values: string[]) {
    let size = 1024
    while (size < values.length * BITS_PER_VALUE) size *= 2
    this.bits = new Uint32Array(size / 32)
    this.mask = size - 1
    for (const v of values) {
      const [h1, h2] = hashes(v)
      for (let i = 0; i < PROBES; i++) {
        const bit = (h1 + i * h2) & this.mask
        this.bits[bit >>> 5] |= 1 << (bit & 31)
      }
    }
  }

  mayContain(v: string): boolean {
    const [h1, h2] = hashes(v)
    for (let i = 0; i < PROBES; i++) {
      const bit = (h1 + i * h2) & this.mask
      if ((this.bits[bit >>> 5] & (1 << (bit & 31))) === 0) return false
    }
    return true
  }
}

/** Two 32-bit FNV-1a hashes with different offsets (double hashing); h2 is odd. */
function hashes(s: string): [number, number] {
  let a = 0x811c9dc5
  let b = 0x01000193 ^ 0x5bd1e995
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    a = Math.imul(a ^ c, 0x01000193)
    b = Math.imul(b ^ c, 0x5bd1e995)
  }
  return [a >>> 0, (b | 1) >>> 0]
}

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

/** null: no summary (too many distinct values, or building it failed). */
const summaries = new Map<string, Promise<Bloom | null>>()

function summary(con: Sql, dir: string, table: string, column: string): Promise<Bloom | null> {
  const file = lit(path.join(dir, `${table}.parquet`))
  const col = ident(column)
  return cached(summaries, `${dir}\0${table}\0${column}`, null, async () => {
    const r = await con.runAndReadAll(`SELECT DISTINCT ${col} FROM read_parquet(${file}) WHERE ${col} IS NOT NULL LIMIT ${MAX_DISTINCT + 1}`)
    const values = r.getColumnsJS()[0] ?? []
    return values.length > MAX_DISTINCT ? null : new Bloom(values.map(String))
  })
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
export async function chunkCannotMatch(con: Sql, plan: QueryPlan, dir: string): Promise<boolean> {
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
      const bloom = await summary(con, dir, scan.item.table, f.column)
      if (bloom && !value.some((v) => bloom.mayContain(String(v)))) {
        ruledOut = true
        break
      }
    }
    if (!ruledOut) return false
  }
  return true
}
