import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { mkdir, rm, stat, statfs } from 'node:fs/promises'
import path from 'node:path'
import type { DuckDBConnection } from '@duckdb/node-api'
import { connect, ident, inTransaction, lit } from '../db.js'
import { log } from '../log.js'
import { retry } from '../retry.js'
import { Mutex } from '../semaphore.js'
import { localFormBuilds, localFormBytes, localFormSeconds } from './metrics.js'

/*
 * A worker's fast local copy of the chunks it serves. Parquet (zstd) stays the storage and the
 * interchange format; a worker copies every table of a chunk it serves into one DuckDB database file
 * of its own (`local-forms.duckdb` in its cache folder), which DuckDB reads 1.5–2.5× faster for the
 * queries that decode many rows (docs/benchmark-history.md, step 22). A chunk's tables are copied in
 * one transaction together with their row in the `forms` registry, so a crash leaves either the whole
 * form or none. Rows keep the Parquet file's order, so a table's `rowid` is the file's row number.
 * Until a chunk's form is built, and when the cache limit leaves no room for it, queries read the
 * Parquet files.
 */

let instances = 0
/**
 * The storage version of a new forms file. DuckDB writes version v1.0.0 unless told, for older
 * readers; the forms file is only read by this process, and the newer version compresses more
 * (`npm run bench -- chunk-format` compares both). A file written before keeps its version.
 */
export const FORMS_STORAGE_VERSION = 'v1.5.0'
/** DuckDB's error when another process holds the file open. */
const inUse = (e: unknown) => /lock/i.test(String(e))
const MiB = 1024 * 1024

/** The warning when another process holds the file: DuckDB's lock error names its PID. */
function inUseMessage(file: string, e: unknown): string {
  const pid = /PID (\d+)/.exec(String(e))?.[1]
  const holder = pid ? `process ${pid}${pid === String(process.pid) ? ' (this one)' : ''}` : 'another process'
  return `local forms: ${file} is in use by ${holder}, another archive with the same cache folder; queries read the Parquet files. Give each archive its own --cache`
}
/**
 * A form's size per byte of Parquet, measured with storage v1.0.0: DuckDB's file is 3.0–3.3× the
 * zstd Parquet; a block-ordered copy adds 4.2× its table's Parquet (the bench chunk: 193 → 440 MB
 * from 59.5 MB). Forms of storage v1.5.0 are about a quarter smaller (338 MB): the estimate errs on
 * the side of room.
 */
const MEASURED_GROWTH = 3.2
const MEASURED_COPY_GROWTH = 4.2
/** DuckDB's unit of file space: a table takes at least one. */
const FILE_BLOCK = 256 * 1024
/** Room asked for before a build, per byte of estimate (a margin). */
const MARGIN = 1.1
/** A form no query has read for `ms` may make room for the form of a chunk being read (tests lower it). */
export const formIdle = { ms: 60_000 }
/** Disk space always left free by forms (beyond twice the form being built). */
const DISK_MARGIN = 64 * MiB

export interface LocalFormsOptions {
  /** The database file. */
  file: string
  /** Label of logs and metrics (the worker id). */
  label: string
  /** Bytes the forms may take in all (the cache limit minus the chunks cached); default no limit. */
  room?: () => number
  /** DuckDB storage version of a new file (default `FORMS_STORAGE_VERSION`). */
  storageVersion?: string
}

/**
 * Narrow copies of wide columns. DuckDB stores a string of 4,096 bytes or more outside its column
 * segment ("overflow"), and a scan copies every such string of a 2,048-row vector to read any row of
 * it (measured: 80 transactions of a vector holding 15 MB of calldata, 2.7–10 ms). So in a local
 * form, where a vector's *wide* values (`bytes` or more) of a column sum to `vectorBytes` or more,
 * the vector's other rows also hold their values of that column in a narrow copy
 * (`<column>__narrow`, uncompressed, so that a scan points into the segment and copies nothing) and
 * the flag `__narrow_row` (a BOOLEAN column of the table). A query reads a flagged row's values from the
 * copies, any other row's from the columns themselves. Only those vectors' narrow values are
 * copied: the bench chunk's form grows from 181 to 194 MB, its build from 2.4 to 2.6–3.1 s. Tests
 * lower the limits to split many columns.
 */
export const narrowCopies = { bytes: 4000, vectorBytes: 1 << 20 }
/** Suffix of a column's narrow copy in a local form; and the name of the row flag. */
export const NARROW_SUFFIX = '__narrow'
export const NARROW_FLAG = '__narrow_row'
/**
 * Suffix of a table's block-ordered copy. A chunk's files are sorted by filter keys, so a slice of
 * blocks that reads every row of a table (an unfiltered request) touches every vector of it, and
 * DuckDB must sort what it reads into the answer's order. The copy holds the same rows in the
 * answer's order (`blockOrders` of the family: block, then the item's key), so such a slice reads
 * only its own vectors, in order (measured: a 16 MiB slice of all transactions and logs, 41 → 21 CPU
 * ms; docs/benchmark-history.md, step 34). It costs the form the size of those tables once more.
 */
export const BY_BLOCK_SUFFIX = '__by_block'
/** Bytes of rows sorted at once for a block-ordered copy, and a table's size in memory per byte of its Parquet file (an estimate). */
const COPY_SORT_BYTES = 16 * MiB
const UNCOMPRESSED = 5
/** Rows of a DuckDB vector (rowid // VECTOR is a row's vector in a table). */
const VECTOR = 2048

/** The SQL name of each table of a chunk in its local form. */
export interface LocalTables {
  (table: string): string
  /**
   * Columns of the table that have a narrow copy (`<column>__narrow`): a row with the flag
   * `__narrow_row` reads the same values from the copies, without decoding its vector's wide strings.
   */
  narrow(table: string): readonly string[]
  /** SQL name of the table's block-ordered copy (see `BY_BLOCK_SUFFIX`), if the form has one. */
  byBlock(table: string): string | undefined
}

/** A column of a table in the forms file. */
interface TableColumn {
  name: string
  /** DuckDB type, e.g. VARCHAR. */
  type: string
}

interface Form {
  key: string
  prefix: string
  tables: string[]
  /** Columns with a narrow copy, per table (read from the file's catalog: forms built before have none). */
  narrow: Record<string, string[]>
  /** Tables with a block-ordered copy (read from the file's catalog: forms built before have none). */
  byBlock: string[]
  /** Sizes and mtimes of the Parquet files the form was built from (files written anew get a new form). */
  source: string
  bytes: number
  refs: number
  lastUsed: number
  /** Dropped once the last query reading it is done. */
  dropping?: boolean
}

export class LocalForms {
  private readonly alias = `local_forms_${++instances}`
  private opened?: Promise<DuckDBConnection | undefined>
  private readonly forms = new Map<string, Form>()
  /** Builds and drops, one at a time (each measures the file's growth). */
  private readonly writing = new Mutex()
  /** Chunks with no room for a form (logged once each). */
  private readonly noRoom = new Set<string>()
  bytes = 0

  constructor(readonly opts: LocalFormsOptions) {}

  /** Attach the database file (once); undefined when it cannot be used (logged; queries read Parquet). */
  private open(): Promise<DuckDBConnection | undefined> {
    this.opened ??= this.attach()
    return this.opened
  }

  private async attach(): Promise<DuckDBConnection | undefined> {
    await mkdir(path.dirname(this.opts.file), { recursive: true })
    const con = await connect()
    const tryAttach = async () => {
      await con.run(`ATTACH ${lit(this.opts.file)} AS ${this.alias} (STORAGE_VERSION ${lit(this.opts.storageVersion ?? FORMS_STORAGE_VERSION)})`)
      await con.run(`CREATE TABLE IF NOT EXISTS ${this.alias}.forms (key VARCHAR, prefix VARCHAR, tables VARCHAR, source VARCHAR, bytes BIGINT)`)
    }
    try {
      try {
        await tryAttach()
      } catch (e) {
        // Another process has it open: serve from Parquet. Anything else (a damaged or older file): start afresh.
        if (inUse(e)) throw e
        log.warn({ worker: this.opts.label, file: this.opts.file, err: String(e) }, 'local forms: cannot open the database file; starting a new one')
        await con.run(`DETACH DATABASE IF EXISTS ${this.alias}`).catch(() => undefined)
        await rm(this.opts.file, { force: true })
        await rm(`${this.opts.file}.wal`, { force: true })
        await tryAttach()
      }
      const rows = (await con.runAndReadAll(`SELECT key, prefix, tables, source, bytes FROM ${this.alias}.forms`)).getRows()
      const narrow = await this.narrowColumns(con)
      const copies = await this.blockOrderedCopies(con)
      for (const [key, prefix, tables, source, bytes] of rows) {
        const names: string[] = JSON.parse(String(tables))
        const of = Object.fromEntries(names.map((t) => [t, narrow.get(`${String(prefix)}${t}`) ?? []]))
        const byBlock = names.filter((t) => copies.has(`${String(prefix)}${t}`))
        this.add({ key: String(key), prefix: String(prefix), tables: names, narrow: of, byBlock, source: String(source), bytes: Number(bytes), refs: 0, lastUsed: 0 })
      }
      log.info({ worker: this.opts.label, file: this.opts.file, chunks: this.forms.size, mb: +(this.bytes / MiB).toFixed(1) }, 'local forms: opened')
      return con
    } catch (e) {
      if (inUse(e)) log.warn({ worker: this.opts.label, file: this.opts.file, err: String(e) }, inUseMessage(this.opts.file, e))
      else log.warn({ worker: this.opts.label, file: this.opts.file, err: String(e) }, 'local forms: not used (queries read the Parquet files)')
      con.closeSync()
      return undefined
    }
  }

  private add(f: Form): void {
    this.forms.set(f.key, f)
    this.count(f.bytes)
  }

  private count(delta: number): void {
    this.bytes += delta
    localFormBytes.set({ worker: this.opts.label }, this.bytes)
  }

  /**
   * Make sure the chunk in `dir` (its `tables`) has a form: reuse one built from the same files
   * with the same block-ordered copies, else build it when there is room. `byBlock`: the order of
   * each table that gets a block-ordered copy (`blockOrders` of the family). `evictIdle`: when the
   * limit leaves no room, drop forms no query has read for `formIdle.ms` first, least recently read
   * first. Returns whether the chunk has a form now.
   */
  async build(key: string, dir: string, tables: string[], byBlock: Record<string, string[]> = {}, opts: { evictIdle?: boolean } = {}): Promise<boolean> {
    const stats = await Promise.all(tables.map((t) => stat(path.join(dir, `${t}.parquet`))))
    const sizes = stats.map((s) => s.size)
    // Each table and copy also takes at least one of the file's blocks: most of a small chunk's form.
    const estimate = sizes.reduce((n, size, i) => n + size * (MEASURED_GROWTH + (byBlock[tables[i]] ? MEASURED_COPY_GROWTH : 0)) + (byBlock[tables[i]] ? 2 : 1) * FILE_BLOCK, 0)
    const need = estimate * MARGIN
    // Forms only speed queries up: they never take the disk space downloads need (the file does not shrink).
    if (!this.forms.has(key) && !(await this.diskHasRoom(need))) return false
    const con = await this.open()
    if (!con) return false
    if (opts.evictIdle && this.opts.room && !this.forms.has(key)) await this.free(need - (this.opts.room() - this.bytes), Date.now() - formIdle.ms)
    const source = JSON.stringify(Object.fromEntries(tables.map((t, i) => [t, [stats[i].size, stats[i].mtimeMs]])))
    // A form built before block-ordered copies existed is built again (once no query reads it); a
    // table without the order's columns gets no copy (copyByBlock), so only "none at all" counts.
    const wantsCopies = tables.some((t) => byBlock[t])
    const current = (f: Form) => f.source === source && (f.byBlock.length > 0 || !wantsCopies || f.refs > 0)
    const known = this.forms.get(key)
    if (known && current(known) && !known.dropping) return true
    const unlock = await this.writing.lock()
    try {
      const again = this.forms.get(key)
      if (again && !current(again)) await this.remove(con, again)
      else if (again) return !again.dropping
      if (this.opts.room && this.opts.room() - this.bytes < need) return this.noRoomFor(key, need)
      this.noRoom.delete(key)
      const t0 = performance.now()
      const before = await this.usedBytes(con)
      const prefix = `c${createHash('sha256').update(key).digest('hex').slice(0, 20)}_`
      const narrow: Record<string, string[]> = {}
      const ordered: string[] = []
      const write = (copies: Record<string, string[]>) =>
        inTransaction(con, async () => {
          ordered.length = 0
          for (const [i, t] of tables.entries()) {
            await con.run(`CREATE TABLE ${this.alias}.${ident(prefix + t)} AS SELECT * FROM read_parquet(${lit(path.join(dir, `${t}.parquet`))})`)
            const columns = await this.columnsOf(con, prefix + t)
            if (copies[t] && (await this.copyByBlock(con, prefix + t, columns, copies[t], sizes[i]))) ordered.push(t)
            narrow[t] = await this.splitWide(con, prefix + t, columns)
          }
          await con.run(`DELETE FROM ${this.alias}.forms WHERE key = ${lit(key)}`)
          await con.run(`INSERT INTO ${this.alias}.forms VALUES (${lit(key)}, ${lit(prefix)}, ${lit(JSON.stringify(tables))}, ${lit(source)}, 0)`)
        })
      try {
        await write(byBlock)
      } catch (e) {
        // A block too big to sort within DuckDB's memory limit, say: the form without the copies.
        if (!wantsCopies) throw e
        log.warn({ worker: this.opts.label, chunk: key, err: String(e) }, 'local forms: block-ordered copies failed; the form is built without them')
        await write({})
      }
      await this.checkpoint(con)
      // Without a checkpoint (another transaction was writing) the growth is not known yet: estimate it.
      const grown = (await this.usedBytes(con)) - before
      const bytes = grown > 0 ? grown : Math.round(estimate)
      await con.run(`UPDATE ${this.alias}.forms SET bytes = ${bytes} WHERE key = ${lit(key)}`)
      this.add({ key, prefix, tables, narrow, byBlock: ordered, source, bytes, refs: 0, lastUsed: Date.now() })
      if (this.opts.room && this.opts.room() - this.bytes < 0) {
        // Bigger than estimated (small chunks take whole 256 KiB blocks): it does not fit after all.
        await this.remove(con, this.forms.get(key)!)
        return this.noRoomFor(key, bytes)
      }
      const seconds = (performance.now() - t0) / 1000
      localFormBuilds.inc({ worker: this.opts.label })
      localFormSeconds.inc({ worker: this.opts.label }, seconds)
      log.debug({ worker: this.opts.label, chunk: key, mb: +(bytes / MiB).toFixed(1), ms: Math.round(seconds * 1000) }, 'local forms: chunk built')
      return true
    } catch (e) {
      log.warn({ worker: this.opts.label, chunk: key, err: String(e) }, 'local forms: build failed; the chunk is read from Parquet')
      return false
    } finally {
      unlock()
    }
  }

  /** No form for the chunk: the cache limit leaves no room for `bytes` (logged once until it fits again). */
  private noRoomFor(key: string, bytes: number): false {
    if (!this.noRoom.has(key)) log.info({ worker: this.opts.label, chunk: key, needMb: +(bytes / MiB).toFixed(1) }, 'local forms: no room in the cache limit; the chunk is read from Parquet')
    this.noRoom.add(key)
    return false
  }

  /** Free disk space for twice the estimated form and 64 MiB more; logged once per chunk when not. */
  private async diskHasRoom(need: number): Promise<boolean> {
    const folder = path.dirname(this.opts.file)
    await mkdir(folder, { recursive: true })
    const fs = await statfs(folder)
    const free = fs.bavail * fs.bsize
    if (free >= 2 * need + DISK_MARGIN) return true
    if (!this.noDisk) log.info({ worker: this.opts.label, freeMb: +(free / MiB).toFixed(1), needMb: +(need / MiB).toFixed(1) }, 'local forms: too little free disk space; chunks are read from Parquet')
    this.noDisk = true
    return false
  }

  private noDisk = false

  /** The chunk's tables for one query (give them back with `release`); undefined without a form. */
  acquire(key: string): LocalTables | undefined {
    const f = this.forms.get(key)
    if (!f || f.dropping) return undefined
    f.refs++
    f.lastUsed = Date.now()
    const tables = (table: string) => {
      if (!f.tables.includes(table)) throw new Error(`table ${table} is not in the local form of ${key}`)
      return `${this.alias}.${ident(f.prefix + table)}`
    }
    const byBlock = (table: string) => (f.byBlock.includes(table) ? `${this.alias}.${ident(f.prefix + table + BY_BLOCK_SUFFIX)}` : undefined)
    return Object.assign(tables, { narrow: (table: string) => f.narrow[table] ?? [], byBlock })
  }

  /**
   * Narrow copies of a new table's wide columns (see `narrowCopies`; `columns`: the table's, from `columnsOf`); returns the columns copied.
   * Rows keep their order (an UPDATE in place).
   */
  private async splitWide(con: DuckDBConnection, table: string, columns: TableColumn[]): Promise<string[]> {
    const name = `${this.alias}.${ident(table)}`
    const varchar = columns.filter((c) => c.type === 'VARCHAR').map((c) => c.name)
    if (varchar.length === 0) return []
    const { bytes, vectorBytes } = narrowCopies
    const wideBytes = (c: string) => `coalesce(sum(strlen(${ident(c)})) FILTER (strlen(${ident(c)}) >= ${bytes}), 0)`
    // Per column, the most bytes of wide values in one vector.
    const max = (
      await con.runAndReadAll(`SELECT ${varchar.map((_, i) => `max(w${i})`).join(', ')} FROM (SELECT ${varchar.map((c, i) => `${wideBytes(c)} AS w${i}`).join(', ')} FROM ${name} GROUP BY rowid // ${VECTOR})`)
    ).getRows()[0]
    const split = varchar.filter((_, i) => Number(max[i]) >= vectorBytes)
    if (split.length === 0) return []
    for (const c of split) await con.run(`ALTER TABLE ${name} ADD COLUMN ${ident(c + NARROW_SUFFIX)} VARCHAR USING COMPRESSION uncompressed`)
    await con.run(`ALTER TABLE ${name} ADD COLUMN ${ident(NARROW_FLAG)} BOOLEAN DEFAULT FALSE`)
    const heavy = `SELECT rowid // ${VECTOR} FROM ${name} GROUP BY 1 HAVING ${split.map(wideBytes).map((w) => `${w} >= ${vectorBytes}`).join(' OR ')}`
    const narrow = split.map((c) => `coalesce(strlen(${ident(c)}) < ${bytes}, TRUE)`).join(' AND ')
    await con.run(
      `UPDATE ${name} SET ${split.map((c) => `${ident(c + NARROW_SUFFIX)} = ${ident(c)}`).join(', ')}, ${ident(NARROW_FLAG)} = TRUE ` +
        `WHERE rowid // ${VECTOR} IN (${heavy}) AND ${narrow}`,
    )
    return split
  }

  /**
   * The block-ordered copy of a new table (see `BY_BLOCK_SUFFIX`), ordered by `order` (its block
   * column first); none (false) when the table lacks one of those columns (a chunk written before
   * the column existed). Sorted and appended a few blocks at a time, about `COPY_SORT_BYTES` each
   * (estimated from the Parquet file's `parquetBytes`): one sort of the whole table spilled to disk
   * under a worker's DuckDB memory limit (160MB then, 128MB now) and took minutes per chunk.
   */
  private async copyByBlock(con: DuckDBConnection, table: string, columns: TableColumn[], order: string[], parquetBytes: number): Promise<boolean> {
    if (!order.every((o) => columns.some((c) => c.name === o))) return false
    const name = `${this.alias}.${ident(table)}`
    const copy = `${this.alias}.${ident(table + BY_BLOCK_SUFFIX)}`
    const block = ident(order[0])
    const perBlock = (await con.runAndReadAll(`SELECT ${block}, count(*) FROM ${name} GROUP BY 1 ORDER BY 1`)).getRows().map(([b, n]) => [Number(b), Number(n)])
    const rows = perBlock.reduce((sum, [, n]) => sum + n, 0)
    const batchRows = Math.max(1, Math.floor((rows * COPY_SORT_BYTES) / Math.max(1, parquetBytes * UNCOMPRESSED)))
    await con.run(`CREATE TABLE ${copy} AS SELECT * FROM ${name} LIMIT 0`)
    for (let i = 0; i < perBlock.length; ) {
      let j = i
      let n = 0
      while (j < perBlock.length && (j === i || n + perBlock[j][1] <= batchRows)) n += perBlock[j++][1]
      await con.run(`INSERT INTO ${copy} SELECT * FROM ${name} WHERE ${block} BETWEEN ${perBlock[i][0]} AND ${perBlock[j - 1][0]} ORDER BY ${order.map(ident).join(', ')}`)
      i = j
    }
    // Rows without a block number (none expected) would be missing: then no copy.
    if (Number((await con.runAndReadAll(`SELECT count(*) FROM ${copy}`)).getRows()[0][0]) === rows) return true
    await con.run(`DROP TABLE ${copy}`)
    return false
  }

  /** A table's columns in the file, in order, with their DuckDB types. */
  private async columnsOf(con: DuckDBConnection, table: string): Promise<TableColumn[]> {
    const r = await con.runAndReadAll(
      `SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ${lit(this.alias)} AND schema_name = 'main' AND table_name = ${lit(table)} ORDER BY column_index`,
    )
    return r.getRows().map(([name, type]) => ({ name: String(name), type: String(type) }))
  }

  /** Names of the tables in the file that have a block-ordered copy (one catalog query). */
  private async blockOrderedCopies(con: DuckDBConnection): Promise<Set<string>> {
    const rows = (
      await con.runAndReadAll(
        `SELECT table_name FROM duckdb_tables() WHERE database_name = ${lit(this.alias)} AND schema_name = 'main' AND suffix(table_name, ${lit(BY_BLOCK_SUFFIX)})`,
      )
    ).getRows()
    return new Set(rows.map(([t]) => String(t).slice(0, -BY_BLOCK_SUFFIX.length)))
  }

  /** Columns with a narrow copy in the file, by table name (one catalog query). */
  private async narrowColumns(con: DuckDBConnection): Promise<Map<string, string[]>> {
    const rows = (
      await con.runAndReadAll(
        `SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ${lit(this.alias)} AND schema_name = 'main' AND suffix(column_name, ${lit(NARROW_SUFFIX)}) ORDER BY table_name, column_index`,
      )
    ).getRows()
    const out = new Map<string, string[]>()
    for (const [t, c] of rows) {
      const list = out.get(String(t)) ?? []
      list.push(String(c).slice(0, -NARROW_SUFFIX.length))
      out.set(String(t), list)
    }
    return out
  }

  release(key: string): void {
    const f = this.forms.get(key)
    if (!f) return
    f.refs--
    if (f.refs === 0 && f.dropping) void this.drop(key)
  }

  /** The chunk is not served any more: drop its form (once no query reads it). */
  async drop(key: string): Promise<void> {
    const f = this.forms.get(key)
    if (!f) return
    f.dropping = true
    if (f.refs > 0) return
    const con = await this.open()
    if (!con) return
    const unlock = await this.writing.lock()
    try {
      if (this.forms.get(key) === f && f.refs === 0) await this.remove(con, f)
    } catch (e) {
      log.warn({ worker: this.opts.label, chunk: key, err: String(e) }, 'local forms: drop failed')
    } finally {
      unlock()
    }
  }

  /**
   * Drop forms no query reads, least recently used first, until `need` bytes are freed: room for
   * downloads, or with `idleSince` (only forms last read at or before it: idle for `formIdle.ms`
   * or longer, also when that is 0 and the form was read in this millisecond) for a form being built.
   */
  async free(need: number, idleSince = Infinity): Promise<void> {
    let freed = 0
    for (const f of [...this.forms.values()].filter((f) => f.refs === 0 && f.lastUsed <= idleSince).sort((a, b) => a.lastUsed - b.lastUsed)) {
      if (freed >= need) break
      freed += f.bytes
      log.debug({ worker: this.opts.label, chunk: f.key, mb: +(f.bytes / MiB).toFixed(1) }, 'local forms: form no query reads dropped for room')
      await this.drop(f.key)
    }
  }

  /** Drop the forms of chunks `keep` says are not served (what an earlier run left). */
  async prune(keep: (key: string) => boolean): Promise<void> {
    // No file, nothing to prune: do not create one (on a disk too full for forms, say).
    if (!this.opened && !existsSync(this.opts.file)) return
    await this.open()
    for (const key of [...this.forms.keys()]) if (!keep(key)) await this.drop(key)
  }

  has(key: string): boolean {
    const f = this.forms.get(key)
    return f !== undefined && !f.dropping
  }

  async close(): Promise<void> {
    const con = await this.opened
    this.opened = undefined
    if (!con) return
    const unlock = await this.writing.lock()
    try {
      await con.run(`DETACH ${this.alias}`).catch(() => undefined)
    } finally {
      con.closeSync()
      unlock()
    }
  }

  private async remove(con: DuckDBConnection, f: Form): Promise<void> {
    await inTransaction(con, async () => {
      for (const t of f.tables) {
        await con.run(`DROP TABLE IF EXISTS ${this.alias}.${ident(f.prefix + t)}`)
        await con.run(`DROP TABLE IF EXISTS ${this.alias}.${ident(f.prefix + t + BY_BLOCK_SUFFIX)}`)
      }
      await con.run(`DELETE FROM ${this.alias}.forms WHERE key = ${lit(f.key)}`)
    })
    this.forms.delete(f.key)
    this.count(-f.bytes)
    await this.checkpoint(con)
  }

  /**
   * Write the file's changes out, so `usedBytes` counts them. DuckDB refuses while another write
   * transaction (another worker's form build in this process, say) is open; those are short, so try
   * again for up to half a second before giving up (the next checkpoint catches up).
   */
  private async checkpoint(con: DuckDBConnection): Promise<void> {
    await retry(() => con.run(`CHECKPOINT ${this.alias}`), { attempts: 21, retryable: () => true, pauseMs: () => 25 }).catch(() => undefined)
  }

  private async usedBytes(con: DuckDBConnection): Promise<number> {
    const r = await con.runAndReadAll(`SELECT used_blocks * block_size FROM pragma_database_size() WHERE database_name = ${lit(this.alias)}`)
    return Number(r.getRows()[0]?.[0] ?? 0)
  }
}
