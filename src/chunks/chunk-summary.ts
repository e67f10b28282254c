import path from 'node:path'
import { ident, lit } from '../db.js'
import type { FamilyDecl } from '../families/declaration.js'
import { asText } from './rows.js'

/*
 * Chunk summaries: for each (table, column) a list filter of the family can name, a Bloom filter
 * of the column's distinct values in the chunk. A worker passes over a chunk in which no request
 * can match without opening its Parquet files (src/query/summary.ts). The ingest and the compactor
 * write them into the chunk's meta.json (`summaries`), so even the first query over a chunk a worker
 * has just downloaded does not open it; a chunk without them gets them built by the first query that
 * needs them from the same values (a Bloom filter depends on the set, not its order), so both ways
 * give the same filter.
 */

/** Columns with more distinct values than this get no summary (they would rarely rule a chunk out). */
export const MAX_DISTINCT = 50_000
/** Bits per distinct value; with 3 probes ≈ 1.5 % false positives. */
const BITS_PER_VALUE = 12
const PROBES = 3

export class Bloom {
  private constructor(private readonly bits: Uint32Array) {}

  static of(values: string[]): Bloom {
    let size = 1024
    while (size < values.length * BITS_PER_VALUE) size *= 2
    const bloom = new Bloom(new Uint32Array(size / 32))
    for (const v of values) bloom.add(v)
    return bloom
  }

  /** A filter as `toBase64` wrote it; undefined for anything else. */
  static fromBase64(text: string): Bloom | undefined {
    const bytes = Buffer.from(text, 'base64')
    const words = bytes.length / 4
    if (words < 32 || (words & (words - 1)) !== 0) return undefined // a power of two, at least 1,024 bits
    const bits = new Uint32Array(words)
    for (let i = 0; i < words; i++) bits[i] = bytes.readUInt32LE(i * 4)
    return new Bloom(bits)
  }

  toBase64(): string {
    const bytes = Buffer.alloc(this.bits.length * 4)
    this.bits.forEach((w, i) => bytes.writeUInt32LE(w, i * 4))
    return bytes.toString('base64')
  }

  /** Bytes of its bits. */
  get bytes(): number {
    return this.bits.byteLength
  }

  private get mask(): number {
    return this.bits.length * 32 - 1
  }

  private add(v: string): void {
    const [h1, h2] = hashes(v)
    for (let i = 0; i < PROBES; i++) {
      const bit = (h1 + i * h2) & this.mask
      this.bits[bit >>> 5] |= 1 << (bit & 31)
    }
  }

  mayContain(v: string): boolean {
    return this.mayContainHashed(Bloom.hash(v))
  }

  /** The hashes of a value, for asking many filters about it (`mayContainHashed`). */
  static hash(v: string): [number, number] {
    return hashes(v)
  }

  mayContainHashed([h1, h2]: [number, number]): boolean {
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

interface Sql {
  runAndReadAll(sql: string): Promise<{ getColumnsJS(): unknown[][] }>
}

/** `table.column`: the key of a summary in meta.json. */
export const summaryKey = (table: string, column: string) => `${table}.${column}`

/** The Bloom filter of a column of the chunk in `dir`; null when it has too many distinct values. */
export async function buildSummary(con: Sql, dir: string, table: string, column: string): Promise<Bloom | null> {
  const col = ident(column)
  const r = await con.runAndReadAll(`SELECT DISTINCT ${col} FROM read_parquet(${lit(path.join(dir, `${table}.parquet`))}) WHERE ${col} IS NOT NULL LIMIT ${MAX_DISTINCT + 1}`)
  return bloomOf(r.getColumnsJS()[0] ?? [])
}

/** The (table, column) pairs list filters of the family name (integer lists excepted: ranges do better there). */
export function summaryColumns(family: FamilyDecl): { table: string; column: string }[] {
  const out = new Map<string, { table: string; column: string }>()
  for (const item of family.items) {
    for (const request of item.requests) {
      for (const f of Object.values(request.filters)) {
        if (f.kind === 'in' && f.values !== 'integer') out.set(summaryKey(item.table, f.column), { table: item.table, column: f.column })
      }
    }
  }
  return [...out.values()]
}

/**
 * Tables of at most this many rows get the summaries of all their columns from one statement: below
 * it a statement's fixed cost outweighs reading a column alone (a one-block EVM chunk: 5 ms instead of
 * 21–24 for its 21 columns; a 200-block mainnet-like chunk: 100–209 ms column by column, 181–327 at once).
 */
export const ONE_STATEMENT_ROWS = 10_000

/** The summarised columns of `table` whose values are text (VARCHAR): their summaries can be taken from rows in JS (`distinctTexts`). */
export function textSummaryColumns(family: FamilyDecl, table: string): string[] {
  return summaryColumns(family).filter((c) => c.table === table && isVarchar(family, c)).map((c) => c.column)
}

const isVarchar = (family: FamilyDecl, c: { table: string; column: string }) =>
  family.tables.find((t) => t.name === c.table)?.columns.find((d) => d.name === c.column)?.type === 'VARCHAR'

const SURROGATE = /[\uD800-\uDFFF]/
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g

/**
 * The distinct non-null values of a VARCHAR column as the chunk's file holds them, from the rows the
 * writer appends (a value that is not a string is stored as `asText` gives it; a lone UTF-16
 * surrogate becomes U+FFFD in UTF-8), up to one more than `MAX_DISTINCT`.
 */
export function distinctTexts(rows: readonly Record<string, unknown>[], column: string): string[] {
  const seen = new Set<string>()
  for (const r of rows) {
    const v = r[column]
    if (v == null) continue
    const text = typeof v === 'string' ? v : asText(v)
    seen.add(SURROGATE.test(text) ? text.replace(LONE_SURROGATE, '\uFFFD') : text)
    if (seen.size > MAX_DISTINCT) break
  }
  return [...seen]
}

/**
 * The summaries of a chunk just written in `dir` (its `tables`, with their `rows` when known), for
 * its meta.json: base64 filters, null for too many values. `known`: the distinct values of columns
 * taken from the rows in JS (`distinctTexts`), by `summaryKey`; no statement reads those. A column
 * the table lacks (chunks written before the column was declared) gets no summary, as queries build
 * none: if the statement for the small tables fails, their columns are read one by one.
 */
export async function chunkSummaries(
  con: Sql, dir: string, family: FamilyDecl, tables: readonly string[], rows?: Record<string, number>, known?: ReadonlyMap<string, string[]>,
): Promise<Record<string, string | null>> {
  const columns = summaryColumns(family).filter((c) => tables.includes(c.table))
  const together = columns.filter((c) => !known?.has(summaryKey(c.table, c.column)) && rows?.[c.table] !== undefined && rows[c.table] <= ONE_STATEMENT_ROWS && isVarchar(family, c))
  const values = together.length ? await distinctValues(con, dir, together).catch(() => undefined) : undefined
  const out: Record<string, string | null> = {}
  for (const c of columns) {
    const i = together.indexOf(c)
    const given = known?.get(summaryKey(c.table, c.column))
    const bloom = given ? bloomOf(given) : values && i >= 0 ? bloomOf(values[i]) : await buildSummary(con, dir, c.table, c.column).catch(() => undefined)
    if (bloom !== undefined) out[summaryKey(c.table, c.column)] = bloom?.toBase64() ?? null
  }
  return out
}

/** Per column, its distinct non-null values (the set `buildSummary` reads), in one statement; each table's file is read once. */
async function distinctValues(con: Sql, dir: string, columns: { table: string; column: string }[]): Promise<unknown[][]> {
  const tables = [...new Set(columns.map((c) => c.table))]
  const reads = tables.map((t, i) => {
    const cols = columns.filter((c) => c.table === t).map((c) => ident(c.column))
    return `t${i} AS MATERIALIZED (SELECT ${cols.join(', ')} FROM read_parquet(${lit(path.join(dir, `${t}.parquet`))}))`
  })
  const distinct = columns.map((c, i) => `(SELECT DISTINCT ${i} AS i, ${ident(c.column)} AS v FROM t${tables.indexOf(c.table)} WHERE ${ident(c.column)} IS NOT NULL)`)
  const [index = [], value = []] = (await con.runAndReadAll(`WITH ${reads.join(', ')} ${distinct.join(' UNION ALL ')}`)).getColumnsJS()
  const out: unknown[][] = columns.map(() => [])
  index.forEach((i, k) => out[Number(i)].push(value[k]))
  return out
}

const bloomOf = (values: unknown[]): Bloom | null => (values.length > MAX_DISTINCT ? null : Bloom.of(values.map(String)))
