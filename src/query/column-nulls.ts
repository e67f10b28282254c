import { footerNulls, tableNullsOf, type TableNulls } from '../chunks/chunk-nulls.js'
import type { Sql } from './lazy-connection.js'
import type { Nulls } from './sql.js'
import { metaReader, type ChunkMetaReader } from './summary.js'

/*
 * What a chunk's tables hold of NULLs, column by column (src/chunks/chunk-nulls.ts): a row's JSON
 * text is built without a NULL case for a column that has none and with the literal `null` for a
 * column that is all NULL (sql.ts, `itemJsonSql`). Read from the chunk's meta.json, where the ingest
 * and the compactor write it, or, for a chunk written before, from its Parquet footers with one
 * statement. The local form of a chunk holds the same rows, so the same answer holds there. Chunks
 * are immutable: a table's answer is read once per worker, kept for the most recent `MAX_TABLES`
 * tables read, and most tables share one of a few distinct answers (kept once).
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
 * The NULLs of each of `tables` in the chunk in `dir`: from its meta.json (`meta`: the reader the
 * query already read it with), else one statement reads the footers of the tables not known yet.
 * If that fails (a file missing, say), nothing is known of them, and the next query asks again.
 */
export async function columnNulls(con: Sql, dir: string, tables: string[], meta: ChunkMetaReader = metaReader(dir)): Promise<Map<string, ColumnNulls>> {
  const out = new Map<string, ColumnNulls>()
  let missing: string[] = []
  for (const table of tables) {
    const hit = known.get(key(dir, table))
    if (hit) out.set(table, hit)
    else if (!missing.includes(table)) missing.push(table)
  }
  if (missing.length === 0) return out
  let stored: Record<string, unknown> | undefined
  try {
    stored = meta()?.nulls
  } catch {
    // An unreadable meta.json: the footers say the same.
  }
  const found: Record<string, TableNulls> = {}
  for (const t of missing) {
    const facts = tableNullsOf(stored?.[t])
    if (facts) found[t] = facts
  }
  missing = missing.filter((t) => !found[t])
  if (missing.length > 0) {
    try {
      Object.assign(found, await footerNulls(con, dir, missing))
    } catch {
      for (const t of missing) out.set(t, NOTHING_KNOWN)
    }
  }
  for (const [table, facts] of Object.entries(found)) {
    const nulls = shared(facts)
    remember(key(dir, table), nulls)
    out.set(table, nulls)
  }
  return out
}

/** One map per distinct answer. */
function shared(facts: TableNulls): ColumnNulls {
  const text = JSON.stringify(facts)
  let nulls = distinct.get(text)
  if (!nulls) {
    nulls = new Map([...facts.none.map((c) => [c, 'none'] as const), ...facts.all.map((c) => [c, 'all'] as const)])
    if (distinct.size < MAX_DISTINCT) distinct.set(text, nulls)
  }
  return nulls
}

const key = (dir: string, table: string) => `${dir}\0${table}`

function remember(k: string, nulls: ColumnNulls): void {
  known.delete(k)
  known.set(k, nulls)
  // Maps iterate in insertion order: the first key is the one set longest ago.
  if (known.size > MAX_TABLES) known.delete(known.keys().next().value!)
}
