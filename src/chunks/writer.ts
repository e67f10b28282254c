import { createWriteStream, type WriteStream } from 'node:fs'
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import type { DuckDBAppender, DuckDBConnection, DuckDBListType } from '@duckdb/node-api'
import { connect, duckdbApi, ident, lit } from '../db.js'
import type { ColumnDecl, FamilyDecl, TableDecl } from '../families/declaration.js'
import { chunkPath, hashFile, shortHash, type ChunkFileInfo, type ChunkMeta, type ChunkRef, parseChunkPath } from './layout.js'
import { chunkSummaries, distinctTexts, summaryKey, textSummaryColumns } from './chunk-summary.js'
import { footerNulls } from './chunk-nulls.js'
import { ndjsonObjectBound } from './ndjson-bound.js'
import { asText, ndjsonTables, ndjsonText, textSize, type BlockRows, type Row, type RowsText } from './rows.js'

/** How a chunk is written: its Parquet settings (`ParquetSettings`, defaults `PARQUET_DEFAULTS`) and more. */
export interface WriteOptions extends ParquetSettings {
  /** Extra members of meta.json (e.g. which RPC methods filled each table). */
  extraMeta?: Record<string, unknown>
  /**
   * Tables written the other way: rows appended as NDJSON to a temp file as blocks arrive, then
   * DuckDB `read_json` + `ORDER BY` (default: the tables the family declares `ndjson`, e.g. EVM
   * traces and statediffs, whose many null columns make the Appender slower than DuckDB's parallel
   * JSON reader and sort).
   */
  ndjsonTables?: string[]
  /** Tables whose rows come from a spool of raw answers (blocks added with `spool` files) instead of rows. */
  spool?: SpoolWriter
}

/** A block's part of a spool: the files holding its answers (per kind), and whether they need the thorough checks. */
export interface SpoolEntry {
  files: Record<string, string>
  checked?: boolean
}

/**
 * Turns the spool of a chunk (files of raw source answers, each holding blocks of a range; files may
 * hold blocks of neighbouring chunks too) into the rows of its tables.
 */
export interface SpoolWriter {
  readonly tables: string[]
  /**
   * Per table, a SELECT of its declared columns (unsorted) over blocks `first`..`last` of `files`; it
   * may build temp tables named after `prefix` (dropped by `release`). `checked`: some block's entry
   * asked for the thorough checks.
   */
  prepare(con: DuckDBConnection, files: Record<string, string>[], first: number, last: number, prefix: string, checked: boolean): Promise<Record<string, string>>
  /** The error to stop with when `prepare` or a statement over its SELECTs failed (malformed answers: naming the block and the method). */
  failure(error: unknown, files: Record<string, string>[], first: number, last: number): Promise<unknown>
  release(con: DuckDBConnection, prefix: string): Promise<void>
  /**
   * The chunk's rows per table, normalised in JS, when the chunk is small enough for that to cost less
   * than the statements (`bytes`: the size of its answers); undefined: `prepare`'s SELECTs. Throws
   * what `failure` would return for malformed answers.
   */
  rows?(files: Record<string, string>[], first: number, last: number, bytes: number): Promise<Record<string, Row[]> | undefined>
}

/** Time spent in `finish`, per step (for measurements). */
export interface FinishTimes {
  /** Normalising a small chunk's spooled answers in JS (`SpoolWriter.rows`). */
  normalizeMs: number
  /** Sorting the rows in JS. */
  sortMs: number
  /** Handing the rows to DuckDB (Appender). */
  appendMs: number
  /** DuckDB writing the zstd Parquet files. */
  parquetMs: number
}

/**
 * Builds one chunk. Blocks added with a spool entry (their raw answers on disk) become rows at
 * `finish`, one statement per table of the `spool` writer (read, normalise, sort, write Parquet).
 * Otherwise the rows of its blocks are kept as they arrive (the bound on a chunk's size,
 * `bytes`, is also the bound on the memory it holds), then `finish` sorts each table in JS, hands the
 * rows to DuckDB with its Appender (typed values, no text round trip), writes a zstd Parquet file per
 * table into a temp folder, lists each file's size and SHA-256 in meta.json (`files`) and renames the
 * whole folder into place, so a reader never sees a partial chunk.
 */
export class ChunkBuilder {
  private readonly tmpDir: string
  /** Per table: the row lists of the blocks added, in block order. */
  private readonly blockRows = new Map<string, Row[][]>()
  private readonly ndjson: Set<string>
  private readonly streams = new Map<string, WriteStream>()
  private readonly rowCounts = new Map<string, number>()
  /** Spool files of the blocks added with `spool`, per file set (in block order). */
  private readonly spoolFiles = new Map<string, Record<string, string>>()
  private spooledBlocks = 0
  private spoolChecked = false
  /** Distinct values of the summarised text columns of tables written from rows in JS (no statement reads them again). */
  private readonly summaryValues = new Map<string, string[]>()
  /** The spooled answers were normalised in JS at close (`SpoolWriter.rows`). */
  closedInJs = false
  private ready: Promise<void>
  /**
   * Size of the rows added so far: the length of their text as NDJSON (values, column names and
   * punctuation), computed without building the text; escapes inside JSON-valued columns are not
   * counted.
   */
  bytes = 0
  blockCount = 0
  first = -1
  last = -1
  lastHash = ''
  firstParentHash = ''
  /** Filled by `finish`. */
  readonly times: FinishTimes = { normalizeMs: 0, sortMs: 0, appendMs: 0, parquetMs: 0 }

  constructor(
    private readonly family: FamilyDecl,
    private readonly root: string,
    /** Tables this chunk holds (optional tables the source did not provide are left out). */
    private readonly tables: string[],
    private readonly opts: WriteOptions = {},
  ) {
    this.tmpDir = path.join(root, `.tmp-${process.pid}-${randomBytes(4).toString('hex')}`)
    this.ready = mkdir(this.tmpDir, { recursive: true }).then(() => undefined)
    for (const t of family.tables) {
      if (!t.optional && !tables.includes(t.name)) throw new Error(`table ${t.name} is required in every chunk`)
    }
    for (const name of tables) if (!family.tables.some((t) => t.name === name)) throw new Error(`family ${family.name} has no table ${name}`)
    this.ndjson = new Set(opts.ndjsonTables ?? ndjsonTables(family))
  }

  /**
   * `bytes`: the size of `rows` and `texts` as `blockRowsSize` gives it, when the caller (a fetch
   * worker) computed it already. `texts`: rows of NDJSON tables already as text.
   */
  async addBlock(number: number, hash: string, parentHash: string, rows: BlockRows, bytes?: number, texts?: Record<string, RowsText>, spool?: SpoolEntry): Promise<void> {
    await this.ready
    if (spool && !this.opts.spool) throw new Error('a spooled block needs a chunk builder with a spool writer')
    if (this.blockCount > 0 && number <= this.last) {
      throw new Error(`block ${number} does not follow ${this.last} in the chunk being built`)
    }
    if (this.blockCount === 0) {
      this.first = number
      this.firstParentHash = parentHash
    }
    this.last = number
    this.lastHash = hash
    this.blockCount++
    if (bytes != null) this.bytes += bytes
    if (spool) {
      this.spoolFiles.set(Object.values(spool.files).join('\n'), spool.files)
      this.spooledBlocks++
      if (spool.checked) this.spoolChecked = true
    }
    for (const table of this.tables) {
      if (spool && this.opts.spool!.tables.includes(table)) continue
      const list = rows[table]
      const given = texts?.[table]
      if (given) {
        if (!this.ndjson.has(table) || list?.length) throw new Error(`table ${table}: rows as text are taken for NDJSON tables only, and instead of rows`)
        if (given.rows > 0) await this.writeText(table, given.text, given.rows, bytes == null)
        continue
      }
      if (!list || list.length === 0) continue
      if (this.ndjson.has(table)) {
        await this.writeText(table, ndjsonText(list), list.length, bytes == null)
        continue
      }
      let lists = this.blockRows.get(table)
      if (!lists) this.blockRows.set(table, (lists = []))
      lists.push(list)
      if (bytes == null) this.bytes += textSize(this.decl(table), list)
      this.rowCounts.set(table, (this.rowCounts.get(table) ?? 0) + list.length)
    }
  }

  /**
   * Write the Parquet files and move the chunk into `{top}/{first}-{last}-{hash}`. `inOrder`: awaited
   * just before the move (the previous chunk being in place, when chunks close side by side); if
   * it fails, this chunk is dropped and its error thrown.
   */
  async finish(top: number, inOrder?: () => Promise<unknown>): Promise<ChunkRef> {
    if (this.blockCount === 0) throw new Error('cannot write an empty chunk')
    try {
      return await this.write(top, inOrder)
    } catch (e) {
      await this.abort() // nothing of a chunk that cannot be written stays (malformed answers found at its close)
      throw e
    }
  }

  private async write(top: number, inOrder?: () => Promise<unknown>): Promise<ChunkRef> {
    await this.ready
    for (const s of this.streams.values()) await new Promise<void>((resolve, reject) => s.end((e?: Error | null) => (e ? reject(e) : resolve())))
    let spool = this.spooledBlocks > 0 ? this.opts.spool! : undefined
    if (spool && this.spooledBlocks !== this.blockCount) throw new Error('a chunk cannot mix spooled blocks and blocks given as rows')
    const files = [...this.spoolFiles.values()]
    if (spool?.rows) {
      const t0 = performance.now()
      const rows = await spool.rows(files, this.first, this.last, this.bytes)
      if (rows) {
        for (const [table, list] of Object.entries(rows)) {
          this.blockRows.set(table, [list])
          this.rowCounts.set(table, list.length)
        }
        spool = undefined
        this.closedInJs = true
        this.times.normalizeMs += performance.now() - t0
      }
    }
    const con = await connect()
    const prefix = `s_${randomBytes(3).toString('hex')}`
    let summaries: Record<string, string | null> | undefined
    let nulls: ChunkMeta['nulls']
    try {
      let spooled: Record<string, string> | undefined
      if (spool) {
        const t0 = performance.now()
        spooled = await spool.prepare(con, files, this.first, this.last, prefix, this.spoolChecked).catch(async (e) => {
          throw await spool.failure(e, files, this.first, this.last)
        })
        this.times.appendMs += performance.now() - t0
      }
      for (const name of this.tables) {
        if (spooled?.[name]) {
          await this.writeTableFromQuery(con, this.decl(name), spooled[name]).catch(async (e) => {
            throw await spool!.failure(e, files, this.first, this.last)
          })
        } else if (this.ndjson.has(name)) await this.writeTableFromNdjson(con, this.decl(name))
        else await this.writeTable(con, this.decl(name))
      }
      summaries = await chunkSummaries(con, this.tmpDir, this.family, this.tables, this.tableRows(), this.summaryValues)
      nulls = await footerNulls(con, this.tmpDir, this.tables)
    } finally {
      if (spool) await spool.release(con, prefix).catch(() => undefined)
      con.closeSync()
    }
    const meta: ChunkMeta = {
      ...this.opts.extraMeta,
      family: this.family.name,
      first: this.first,
      last: this.last,
      lastHash: this.lastHash,
      firstParentHash: this.firstParentHash,
      blockCount: this.blockCount,
      rowBytes: this.bytes,
      tables: this.tables,
      rows: this.tableRows(),
      summaries,
      nulls,
      files: await this.manifest(),
    }
    await writeFile(path.join(this.tmpDir, 'meta.json'), JSON.stringify(meta, null, 2))
    const rel = chunkPath(top, this.first, this.last, shortHash(this.lastHash))
    const dest = path.join(this.root, rel)
    await inOrder?.()
    await mkdir(path.dirname(dest), { recursive: true })
    await rename(this.tmpDir, dest)
    return parseChunkPath(rel)!
  }

  /** Rows per table of the chunk (0 for a table without rows). */
  private tableRows(): Record<string, number> {
    return Object.fromEntries(this.tables.map((t) => [t, this.rowCounts.get(t) ?? 0]))
  }

  /** Size and SHA-256 of each Parquet file; anything else in the folder (an NDJSON temp file) is a bug. */
  private async manifest(): Promise<Record<string, ChunkFileInfo>> {
    const names = (await readdir(this.tmpDir)).sort()
    const stray = names.filter((n) => !n.endsWith('.parquet'))
    if (stray.length) throw new Error(`unexpected files in the chunk being finished (${this.tmpDir}): ${stray.join(', ')}`)
    const infos = await Promise.all(names.map((n) => hashFile(path.join(this.tmpDir, n))))
    return Object.fromEntries(names.map((n, i) => [n, infos[i]]))
  }

  async abort(): Promise<void> {
    this.blockRows.clear()
    for (const s of this.streams.values()) s.destroy()
    await this.ready.catch(() => undefined)
    await rm(this.tmpDir, { recursive: true, force: true })
  }

  private async writeText(table: string, text: string, rows: number, count: boolean): Promise<void> {
    let s = this.streams.get(table)
    if (!s) {
      s = createWriteStream(path.join(this.tmpDir, `${table}.ndjson`))
      this.streams.set(table, s)
    }
    if (count) this.bytes += text.length
    this.rowCounts.set(table, (this.rowCounts.get(table) ?? 0) + rows)
    if (!s.write(text)) await new Promise<void>((resolve) => s!.once('drain', () => resolve()))
  }

  private decl(name: string): TableDecl {
    const table = this.family.tables.find((t) => t.name === name)
    if (!table) throw new Error(`family ${this.family.name} has no table ${name}`)
    return table
  }

  private async writeTable(con: DuckDBConnection, table: TableDecl): Promise<void> {
    const out = path.join(this.tmpDir, `${table.name}.parquet`)
    const columns = table.columns.map((c) => `${ident(c.name)} ${c.type}`).join(', ')
    const tmpName = `w_${table.name}_${randomBytes(3).toString('hex')}`
    const tmp = `temp.main.${ident(tmpName)}`
    let t0 = performance.now()
    const rows = (this.blockRows.get(table.name) ?? []).flat()
    this.blockRows.delete(table.name)
    sortRows(rows, table.sortBy)
    for (const column of textSummaryColumns(this.family, table.name)) this.summaryValues.set(summaryKey(table.name, column), distinctTexts(rows, column))
    this.times.sortMs += performance.now() - t0
    await con.run(`CREATE TEMP TABLE ${ident(tmpName)} (${columns})`)
    try {
      if (rows.length) {
        t0 = performance.now()
        const appender = await con.createAppender(tmpName, 'main', 'temp')
        try {
          await appendRows(appender, table.columns, rows)
        } finally {
          appender.closeSync()
        }
        this.times.appendMs += performance.now() - t0
      }
      rows.length = 0
      t0 = performance.now()
      // rows are in sort order already; the table scan keeps insertion order (preserve_insertion_order)
      await con.run(`COPY ${tmp} TO ${lit(out)} ${this.parquetOptions(table)}`)
      this.times.parquetMs += performance.now() - t0
    } finally {
      await con.run(`DROP TABLE ${tmp}`)
    }
  }

  private parquetOptions(table: TableDecl): string {
    return parquetOptions(this.family, table, this.opts)
  }

  /** The rows of a spool writer's SELECT, sorted as declared, written as Parquet (one statement: read, normalise, sort, write). */
  private async writeTableFromQuery(con: DuckDBConnection, table: TableDecl, select: string): Promise<void> {
    const out = path.join(this.tmpDir, `${table.name}.parquet`)
    const t0 = performance.now()
    const written = await con.runAndReadAll(`COPY (SELECT * FROM (${select}) ORDER BY ${sortOrder(table)}) TO ${lit(out)} ${this.parquetOptions(table)}`)
    this.rowCounts.set(table.name, Number(written.getRows()[0][0]))
    this.times.parquetMs += performance.now() - t0
  }

  /** The NDJSON way: DuckDB reads the temp file with explicit columns, sorts and writes Parquet. */
  private async writeTableFromNdjson(con: DuckDBConnection, table: TableDecl): Promise<void> {
    const src = path.join(this.tmpDir, `${table.name}.ndjson`)
    const out = path.join(this.tmpDir, `${table.name}.parquet`)
    const columns = table.columns.map((c) => `${ident(c.name)} ${c.type}`).join(', ')
    const tmpName = `w_${table.name}_${randomBytes(3).toString('hex')}`
    const t0 = performance.now()
    await con.run(`CREATE TEMP TABLE ${ident(tmpName)} (${columns})`)
    try {
      if (this.rowCounts.get(table.name)) {
        const spec = table.columns.map((c) => `${lit(c.name)}: ${lit(c.type)}`).join(', ')
        await con.run(
          `INSERT INTO temp.main.${ident(tmpName)} SELECT * FROM read_json(${lit(src)}, format = 'newline_delimited', ` +
            `columns = {${spec}}, maximum_object_size = ${await ndjsonObjectBound([src])})`,
        )
      }
      await con.run(`COPY (SELECT * FROM temp.main.${ident(tmpName)} ORDER BY ${sortOrder(table)}) TO ${lit(out)} ${this.parquetOptions(table)}`)
    } finally {
      await con.run(`DROP TABLE temp.main.${ident(tmpName)}`)
    }
    await rm(src, { force: true })
    this.times.parquetMs += performance.now() - t0
  }
}

/** How a chunk's Parquet files are encoded (the writer's defaults: `PARQUET_DEFAULTS`). */
export interface ParquetSettings {
  /** Rows per Parquet row group (the header table's are a fifth of it). */
  rowGroupSize?: number
  /** DuckDB's Parquet codec: zstd, lz4_raw, snappy, uncompressed, … */
  compression?: string
  /** zstd's level (other codecs have none). */
  compressionLevel?: number
  /** Parquet format version: V1 or V2 (data page V2, newer encodings). */
  version?: 'V1' | 'V2'
}

/*
 * zstd level 1: smaller than level 3 in DuckDB's writer (55.9 against 59.5 MB for the bench chunk)
 * and cheaper to read and to write — logs+tx 18–26 % less CPU, the JSON rate of all tx+logs 19–22 %
 * higher, a full scan 15–27 % less, writing about half (`bench chunk-format`, BENCHMARKS.md "Chunk
 * format"). Row groups of 2,048 rows made filtered trace and state-diff reads 20–80 % slower.
 */
export const PARQUET_DEFAULTS: Required<ParquetSettings> = { rowGroupSize: 10_000, compression: 'zstd', compressionLevel: 1, version: 'V1' }
/** The settings chunks were written with before (for comparisons: readers take both alike). */
export const PARQUET_BEFORE: Required<ParquetSettings> = { rowGroupSize: 10_000, compression: 'zstd', compressionLevel: 3, version: 'V1' }

/** Parquet options of a table's file: codec, row-group size (the header table's is a fifth). Chunks merged by compaction are written the same way. */
export function parquetOptions(family: FamilyDecl, table: TableDecl, o: ParquetSettings = {}): string {
  const groupSize = o.rowGroupSize ?? PARQUET_DEFAULTS.rowGroupSize
  const rowGroup = table.name === family.header.table ? Math.max(1000, Math.floor(groupSize / 5)) : groupSize
  const codec = o.compression ?? PARQUET_DEFAULTS.compression
  const level = codec === 'zstd' ? `, COMPRESSION_LEVEL ${o.compressionLevel ?? PARQUET_DEFAULTS.compressionLevel}` : ''
  const version = o.version && o.version !== 'V1' ? `, PARQUET_VERSION ${o.version}` : ''
  return `(FORMAT parquet, COMPRESSION ${codec}${level}, ROW_GROUP_SIZE ${rowGroup}${version})`
}

/** The `ORDER BY` keys of a table's rows in its Parquet file, as the family declares them. */
export function sortOrder(table: TableDecl): string {
  return table.sortBy.map((c) => `${ident(c)} NULLS FIRST`).join(', ')
}

// ---------------------------------------------------------------- sorting

/**
 * Sort rows as DuckDB's `ORDER BY c1 NULLS FIRST, c2 NULLS FIRST, …` does: numbers by value, strings
 * by code point (= UTF-8 byte order, DuckDB's default collation), lists element by element. The sort
 * is stable, so rows equal on every key keep their block order.
 */
export function sortRows(rows: Row[], keys: string[]): void {
  if (rows.length < 2) return
  // the key values are read once into one array per key, and an index array is sorted
  const cols = keys.map((k) => rows.map((r) => r[k]))
  const order = Array.from({ length: rows.length }, (_, i) => i)
  const ncols = cols.length
  order.sort((i, j) => {
    for (let c = 0; c < ncols; c++) {
      const col = cols[c]
      const a = col[i]
      const b = col[j]
      if (a === b) continue
      const r = typeof a === 'string' && typeof b === 'string' ? compareStrings(a, b) : compareValues(a, b)
      if (r !== 0) return r
    }
    return i - j
  })
  const copy = rows.slice()
  for (let i = 0; i < order.length; i++) rows[i] = copy[order[i]]
}

function compareValues(a: unknown, b: unknown): number {
  if (a === b) return 0
  if (a == null) return b == null ? 0 : -1
  if (b == null) return 1
  if (typeof a === 'string' && typeof b === 'string') return compareStrings(a, b)
  if (typeof a === 'number' && typeof b === 'number') return a < b ? -1 : a > b ? 1 : 0
  if (Array.isArray(a) && Array.isArray(b)) {
    const n = Math.min(a.length, b.length)
    for (let i = 0; i < n; i++) {
      const c = compareValues(a[i], b[i])
      if (c !== 0) return c
    }
    return a.length - b.length
  }
  const x = String(a)
  const y = String(b)
  return x < y ? -1 : x > y ? 1 : 0
}

/** Code point order (UTF-16 code unit order differs only between surrogates and U+E000–U+FFFF). */
function compareStrings(a: string, b: string): number {
  // UTF-16 order is code point order unless the first difference is a surrogate against U+E000–U+FFFF
  const n = Math.min(a.length, b.length)
  let i = 0
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++
  if (i === n) return a.length - b.length
  let x = a.charCodeAt(i)
  let y = b.charCodeAt(i)
  if (x < 0xd800 || y < 0xd800) return x - y
  x = x >= 0xe000 ? x - 0x800 : x + 0x2000
  y = y >= 0xe000 ? y - 0x800 : y + 0x2000
  return x - y
}

// ---------------------------------------------------------------- appending

/** DuckDB's list types, from its library: loaded when the first rows are appended (an ingest that fails at its first fetch never loads it). */
let listTypes: Promise<Record<'VARCHAR[]' | 'INTEGER[]', DuckDBListType>> | undefined
const loadListTypes = () => (listTypes ??= Promise.resolve().then(() => {
  const { INTEGER, LIST, VARCHAR } = duckdbApi()
  return { 'VARCHAR[]': LIST(VARCHAR), 'INTEGER[]': LIST(INTEGER) }
}))
const HEX = /^0x[0-9a-fA-F]*$/

/**
 * Append rows column by column with the typed Appender calls (DuckDB casts where the JS type differs:
 * decimal strings into UBIGINT, …). Yields to the event loop now and then, so that fetching goes on.
 */
async function appendRows(ap: DuckDBAppender, columns: ColumnDecl[], rows: Row[]): Promise<void> {
  const LIST_TYPES = await loadListTypes()
  const names = columns.map((c) => c.name)
  const types = columns.map((c) => c.type)
  const width = columns.length
  for (let start = 0; start < rows.length; start += 4096) {
    if (start > 0) await new Promise<void>((resolve) => setImmediate(resolve))
    const end = Math.min(rows.length, start + 4096)
    for (let r = start; r < end; r++) {
      const row = rows[r]
      for (let i = 0; i < width; i++) {
        const v = row[names[i]]
        if (v == null) {
          ap.appendNull()
          continue
        }
        switch (types[i]) {
          case 'VARCHAR':
            ap.appendVarchar(typeof v === 'string' ? v : asText(v))
            break
          case 'BIGINT':
          case 'UBIGINT':
            if (typeof v === 'number' && Number.isSafeInteger(v) && (v >= 0 || types[i] === 'BIGINT')) ap.appendDouble(v)
            else if (typeof v === 'bigint') ap.appendVarchar(v.toString())
            else ap.appendVarchar(asText(v))
            break
          case 'INTEGER':
            if (typeof v === 'number' && (v | 0) === v) ap.appendInteger(v)
            else ap.appendVarchar(asText(v))
            break
          case 'DOUBLE':
            if (typeof v === 'number') ap.appendDouble(v)
            else ap.appendVarchar(asText(v))
            break
          case 'BOOLEAN':
            if (typeof v === 'boolean') ap.appendBoolean(v)
            else ap.appendVarchar(asText(v))
            break
          case 'VARCHAR[]':
            if (!Array.isArray(v)) throw new Error(`column ${names[i]}: expected a list, got ${asText(v).slice(0, 100)}`)
            // hex elements as list text (DuckDB casts it, ~3× faster than building a list value); others as a list value
            if (v.every((x) => typeof x === 'string' && HEX.test(x))) ap.appendVarchar(`[${v.join(',')}]`)
            else ap.appendList(v.map((x) => (x == null ? null : typeof x === 'string' ? x : asText(x))), LIST_TYPES['VARCHAR[]'])
            break
          case 'INTEGER[]':
            if (!Array.isArray(v) || v.some((x) => !(typeof x === 'number' && (x | 0) === x))) {
              if (Array.isArray(v) && v.every((x) => x == null || (typeof x === 'number' && (x | 0) === x))) {
                ap.appendList(v as (number | null)[], LIST_TYPES['INTEGER[]'])
                break
              }
              throw new Error(`column ${names[i]}: expected a list of integers, got ${asText(v).slice(0, 100)}`)
            }
            ap.appendVarchar(`[${v.join(',')}]`) // list text: DuckDB casts it
            break
          default:
            ap.appendVarchar(asText(v))
        }
      }
      ap.endRow()
    }
  }
}
