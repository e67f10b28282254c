import type { FamilyDecl, TableDecl } from '../families/declaration.js'

/*
 * Rows as the chunk writer takes them, and their size as NDJSON: no DuckDB here, so that fetch
 * workers, which build rows and size them, do not load it (a smaller heap to mark at each full
 * garbage collection).
 */

/** A row of one table: column name → value (JSON-serialisable; arrays for list columns). */
export type Row = Record<string, unknown>

/** One block's rows, per table name. The block table has exactly one row. */
export type BlockRows = Record<string, Row[]>

/** Tables of a family written through NDJSON unless `ndjsonTables` says otherwise. */
export function ndjsonTables(family: FamilyDecl): string[] {
  return family.tables.filter((t) => t.ndjson).map((t) => t.name)
}

/** Rows of a table already as NDJSON text (built by a fetch worker). */
export interface RowsText {
  text: string
  rows: number
}

/**
 * Text of a value that is not of its column's JS type, as DuckDB's JSON reader would see it (DuckDB
 * casts it): what the chunk writer appends, and what the chunk summaries count, for such a value.
 */
export const asText = (v: unknown): string => (typeof v === 'object' ? JSON.stringify(v) : String(v))

// ---------------------------------------------------------------- sizes

/** NDJSON length of a value (strings without escapes). */
function valueSize(v: unknown): number {
  if (v == null) return 4
  switch (typeof v) {
    case 'string':
      return v.length + 2
    case 'number':
      return v >= 0 && v < 1e6 && Number.isInteger(v) ? (v < 10 ? 1 : v < 100 ? 2 : v < 1000 ? 3 : v < 1e4 ? 4 : v < 1e5 ? 5 : 6) : String(v).length
    case 'boolean':
      return v ? 4 : 5
    default:
      if (Array.isArray(v)) {
        let n = 2 + Math.max(0, v.length - 1)
        for (const x of v) n += valueSize(x)
        return n
      }
      return JSON.stringify(v).length
  }
}

const overheadCache = new WeakMap<TableDecl, number>()

/** Rows as NDJSON text. */
export function ndjsonText(rows: Row[]): string {
  let text = ''
  for (const r of rows) text += JSON.stringify(r) + '\n'
  return text
}

/** NDJSON length of the rows of the given tables of a block (what `ChunkBuilder.bytes` counts). */
export function blockRowsSize(family: FamilyDecl, tables: string[], rows: BlockRows): number {
  let n = 0
  for (const name of tables) {
    const list = rows[name]
    const table = family.tables.find((t) => t.name === name)
    if (list?.length && table) n += textSize(table, list)
  }
  return n
}

/** NDJSON length of rows: `{"name":value,...}\n` per row. */
export function textSize(table: TableDecl, rows: Row[]): number {
  let overhead = overheadCache.get(table)
  if (overhead == null) {
    overhead = 2 + table.columns.reduce((n, c) => n + c.name.length + 4, 0) // braces + newline - last comma; quotes, colon, comma
    overheadCache.set(table, overhead)
  }
  let n = overhead * rows.length
  for (const r of rows) for (const v of Object.values(r)) n += valueSize(v) // column names and punctuation are in `overhead`
  return n
}
