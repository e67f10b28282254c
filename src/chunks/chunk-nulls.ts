import path from 'node:path'
import type { DuckDBConnection } from '@duckdb/node-api'
import { lit } from '../db.js'

/*
 * Which columns of a chunk's tables hold no NULL and which hold nothing else, from the statistics
 * of its Parquet files (each row group's null count: the footers only). The ingest and the
 * compactor write them into meta.json (`nulls`); a query builds a row's JSON text without a NULL
 * case for the first kind and as `null` for the second (src/query/column-nulls.ts).
 */

/** A table's columns without NULLs (`none`) and with only NULLs (`all`), each list sorted. */
export interface TableNulls {
  none: string[]
  all: string[]
}

/**
 * The NULL facts of each of `tables` in `dir` from their files' footers, in one statement. A
 * column whose statistics lack a null count, and a nested column (its statistics count its
 * elements), is in neither list. Throws when a file is missing or unreadable.
 */
export async function footerNulls(con: Pick<DuckDBConnection, 'runAndReadAll'>, dir: string, tables: string[]): Promise<Record<string, TableNulls>> {
  const files = tables.map((t) => path.join(dir, `${t}.parquet`))
  const r = await con.runAndReadAll(
    `SELECT file_name, path_in_schema, sum(stats_null_count)::BIGINT, bool_or(stats_null_count IS NULL), sum(row_group_num_rows)::BIGINT ` +
      `FROM parquet_metadata([${files.map(lit).join(', ')}]) GROUP BY ALL ORDER BY ALL`,
  )
  const out: Record<string, TableNulls> = Object.fromEntries(tables.map((t) => [t, { none: [], all: [] }]))
  const tableOf = new Map(files.map((f, i) => [f, tables[i]]))
  for (const [file, column, nulls, unknown, rows] of r.getRows()) {
    const facts = out[tableOf.get(String(file)) ?? '']
    if (!facts || unknown !== false || String(column).includes(',')) continue
    if (Number(nulls) === 0) facts.none.push(String(column))
    else if (Number(nulls) === Number(rows)) facts.all.push(String(column))
  }
  return out
}

/** `nulls` of a meta.json as written, or undefined when it is not that shape. */
export function tableNullsOf(value: unknown): TableNulls | undefined {
  const v = value as TableNulls | undefined
  const strings = (a: unknown) => Array.isArray(a) && a.every((x) => typeof x === 'string')
  return v && typeof v === 'object' && strings(v.none) && strings(v.all) ? v : undefined
}
