import path from 'node:path'
import type { DuckDBConnection } from '@duckdb/node-api'
import { lit } from '../../src/db.js'
import type { Shape, Stmt } from './shapes.js'

/** Output array of each table in a block object. */
export const OUTPUT_KEY: Record<string, string> = {
  blocks: 'header', transactions: 'transactions', logs: 'logs', traces: 'traces', statediffs: 'stateDiffs',
}

export interface Range {
  dir: string
  from: number
  to: number
}

function render(text: string, r: Range, blockColumn: string): string {
  return text
    .replace(/\{range:(\w+)\}/g, (_, col) => `${col} BETWEEN ${r.from} AND ${r.to}`)
    .replace(/\{range\}/g, `${blockColumn} BETWEEN ${r.from} AND ${r.to}`)
    .replace(/\{from\}/g, String(r.from))
    .replace(/\{to\}/g, String(r.to))
    .replace(/\{(\w+)\}/g, (_, table) => `read_parquet(${lit(path.join(r.dir, `${table}.parquet`))})`)
}

const fromClause = (s: Stmt) => `{${s.table}}` + (s.join ? ` ${s.join}` : '') + ` WHERE ${s.where}`

/** The statement returning one row per item with the selected values as columns. */
export function rowsSql(s: Stmt, r: Range): string {
  const cols = s.cols.map(([k, e]) => `${e} AS "${k}"`).join(', ')
  return render(`SELECT ${s.block} AS _block, ${cols} FROM ${fromClause(s)} ORDER BY ${s.order}`, r, s.block)
}

/** The statement returning, per block, the items already as JSON text (`{…},{…}`), built by DuckDB. */
export function jsonSql(s: Stmt, r: Range): string {
  const obj = `json_object(${s.cols.map(([k, e]) => `${lit(k)}, ${e}`).join(', ')})::VARCHAR`
  return render(
    `SELECT ${s.block} AS _block, string_agg(${obj}, ',' ORDER BY ${s.order}) AS items FROM ${fromClause(s)} ` +
      `GROUP BY ${s.block} ORDER BY ${s.block}`,
    r,
    s.block,
  )
}

/** Run every statement of the shape, values materialised as JS rows. Returns the item count. */
export async function runRows(con: DuckDBConnection, shape: Shape, r: Range): Promise<number> {
  let n = 0
  for (const s of shape.sql) n += (await con.runAndReadAll(rowsSql(s, r))).getRowsJS().length
  return n
}

/** Run every statement with JSON built inside DuckDB; returns the JSON bytes (UTF-16 length). */
export async function runJson(con: DuckDBConnection, shape: Shape, r: Range): Promise<number> {
  let bytes = 0
  for (const s of shape.sql) {
    for (const [, items] of (await con.runAndReadAll(jsonSql(s, r))).getRowsJS()) bytes += (items as string).length
  }
  return bytes
}

const plain = (v: unknown): unknown => {
  if (typeof v === 'bigint') return Number(v)
  if (Array.isArray(v)) return v.map(plain)
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]))
  return v
}

/**
 * The response of the shape as JS objects, grouped per block as the protocol returns them
 * (`[{header, logs, transactions, …}]`): the objects the JSON.stringify baseline serialises.
 */
export async function responseObjects(con: DuckDBConnection, shape: Shape, r: Range): Promise<Record<string, unknown>[]> {
  const blocks = new Map<number, Record<string, unknown>>()
  const lists: string[] = []
  for (const s of shape.sql) {
    const key = OUTPUT_KEY[s.table]
    if (key !== 'header') lists.push(key)
    for (const row of (await con.runAndReadAll(rowsSql(s, r))).getRowObjectsJS()) {
      const { _block, ...item } = plain(row) as Record<string, unknown>
      const b = Number(_block)
      if (key === 'header') blocks.set(b, { header: item })
      else ((blocks.get(b)![key] ??= []) as unknown[]).push(item)
    }
  }
  const out = [...blocks.values()]
  for (const b of out) for (const l of lists) b[l] ??= []
  return out
}
