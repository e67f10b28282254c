import path from 'node:path'
import { lit } from '../db.js'
import type { Sql } from './lazy-connection.js'
import type { Nulls } from './sql.js'

/*
 * What a chunk's tables hold of NULLs, column by column, from the statistics of its Parquet files
 * (each row group's null count; the footer only, no data read). A row's JSON text is built without
 * a NULL case for a column that has none and with the literal `null` for a column that is all NULL
 * (sql.ts, `itemJsonSql`). The local form of a chunk holds the same rows, so the same answer holds
 * there. Chunks are immutable: a table's answer is read once per worker, kept for the most recent
 * `MAX_TABLES` tables read, and most tables share one of a few distinct answers (kept once).
 */

/** Columns that have no NULL (`none`) or only NULLs (`all`); a column not named may have some. */
export type ColumnNulls = ReadonlyMap<string, Exclude<Nulls, 'some'>>

/** About 170 bytes each (the key, the map's slot): at most about 3 MB. */
const MAX_TABLES = 16_384
const known = new Map<string, ColumnNulls>()
/** Distinct answers, by their text: 100,000 chunks of one chain hold a handful of them. */
const distinct = new Map<string, ColumnNulls>()
const MAX_DISTINCT = 1024
const NOTHING_KNOWN: ColumnNulls = new Map()

/**
 * The NULLs of each of `tables` in the chunk in `dir`. One statement reads the footers of the
 * tables not known yet; if it fails (a file missing, a file without statistics), nothing is known
 * of them, and the next query asks again.
 */
export async function columnNulls(con: Sql, dir: string, tables: string[]): Promise<Map<string, ColumnNulls>> {
  const out = new Map<string, ColumnNulls>()
  const missing: string[] = []
  for (const table of tables) {
    const hit = known.get(key(dir, table))
    if (hit) out.set(table, hit)
    else if (!missing.includes(table)) missing.push(table)
  }
  if (missing.length === 0) return out
  const files = missing.map((t) => path.join(dir, `${t}.parquet`))
  let rows: unknown[][]
  try {
    const r = await con.runAndReadAll(
      `SELECT file_name, path_in_schema, sum(stats_null_count)::BIGINT, bool_or(stats_null_count IS NULL), sum(row_group_num_rows)::BIGINT ` +
        `FROM parquet_metadata([${files.map(lit).join(', ')}]) GROUP BY ALL`,
    )
    rows = r.getRows()
  } catch {
    for (const t of missing) out.set(t, NOTHING_KNOWN)
    return out
  }
  const byFile = new Map<string, [string, Exclude<Nulls, 'some'>][]>(files.map((f) => [f, []]))
  for (const [file, column, nulls, unknown, count] of rows) {
    // A nested column's statistics count its elements' NULLs, not the column's.
    if (unknown !== false || String(column).includes(',')) continue
    const n = Number(nulls)
    const state = n === 0 ? 'none' : n === Number(count) ? 'all' : undefined
    if (state) byFile.get(String(file))?.push([String(column), state])
  }
  missing.forEach((table, i) => {
    const entries = byFile.get(files[i])!.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    const text = JSON.stringify(entries)
    let nulls = distinct.get(text)
    if (!nulls) {
      nulls = new Map(entries)
      if (distinct.size < MAX_DISTINCT) distinct.set(text, nulls)
    }
    remember(key(dir, table), nulls)
    out.set(table, nulls)
  })
  return out
}

const key = (dir: string, table: string) => `${dir}\0${table}`

function remember(k: string, nulls: ColumnNulls): void {
  known.delete(k)
  known.set(k, nulls)
  // Maps iterate in insertion order: the first key is the one set longest ago.
  if (known.size > MAX_TABLES) known.delete(known.keys().next().value!)
}
