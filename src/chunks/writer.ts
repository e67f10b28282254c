import { createWriteStream, type WriteStream } from 'node:fs'
import { mkdir, rename, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { connect, ident, lit } from '../db.js'
import type { FamilyDecl, TableDecl } from '../families/declaration.js'
import { chunkPath, shortHash, type ChunkMeta, type ChunkRef, parseChunkPath } from './layout.js'

/** A row of one table: column name → value (JSON-serialisable; arrays for list columns). */
export type Row = Record<string, unknown>

/** One block's rows, per table name. The block table has exactly one row. */
export type BlockRows = Record<string, Row[]>

export interface WriteOptions {
  /** Rows per Parquet row group (blocks table uses a fifth of it). */
  rowGroupSize?: number
  compressionLevel?: number
  /** Extra members of meta.json (e.g. which RPC methods filled each table). */
  extraMeta?: Record<string, unknown>
}

/**
 * Builds one chunk: rows are appended as NDJSON to temp files as blocks arrive (memory stays flat),
 * then `finish` converts each table to a sorted zstd Parquet file with DuckDB and renames the whole
 * folder into place, so a reader never sees a partial chunk.
 */
export class ChunkBuilder {
  private readonly tmpDir: string
  private readonly streams = new Map<string, WriteStream>()
  private readonly rowCounts = new Map<string, number>()
  private ready: Promise<void>
  bytes = 0
  blockCount = 0
  first = -1
  last = -1
  lastHash = ''
  firstParentHash = ''

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
  }

  async addBlock(number: number, hash: string, parentHash: string, rows: BlockRows): Promise<void> {
    await this.ready
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
    for (const table of this.tables) {
      const list = rows[table]
      if (!list || list.length === 0) continue
      let s = this.streams.get(table)
      if (!s) {
        s = createWriteStream(path.join(this.tmpDir, `${table}.ndjson`))
        this.streams.set(table, s)
      }
      let text = ''
      for (const r of list) text += JSON.stringify(r) + '\n'
      this.bytes += text.length
      this.rowCounts.set(table, (this.rowCounts.get(table) ?? 0) + list.length)
      if (!s.write(text)) await new Promise<void>((resolve) => s!.once('drain', () => resolve()))
    }
  }

  /** Write the Parquet files and move the chunk into `{top}/{first}-{last}-{hash}`. */
  async finish(top: number): Promise<ChunkRef> {
    if (this.blockCount === 0) throw new Error('cannot write an empty chunk')
    await this.ready
    for (const s of this.streams.values()) await new Promise<void>((resolve, reject) => s.end((e?: Error | null) => (e ? reject(e) : resolve())))
    const con = await connect()
    try {
      for (const name of this.tables) {
        const table = this.family.tables.find((t) => t.name === name)
        if (!table) throw new Error(`family ${this.family.name} has no table ${name}`)
        await this.writeTable(con, table)
      }
    } finally {
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
      tables: this.tables,
      rows: Object.fromEntries(this.tables.map((t) => [t, this.rowCounts.get(t) ?? 0])),
    }
    await writeFile(path.join(this.tmpDir, 'meta.json'), JSON.stringify(meta, null, 2))
    const rel = chunkPath(top, this.first, this.last, shortHash(this.lastHash))
    const dest = path.join(this.root, rel)
    await mkdir(path.dirname(dest), { recursive: true })
    await rename(this.tmpDir, dest)
    return parseChunkPath(rel)!
  }

  async abort(): Promise<void> {
    for (const s of this.streams.values()) s.destroy()
    await rm(this.tmpDir, { recursive: true, force: true })
  }

  private async writeTable(con: Awaited<ReturnType<typeof connect>>, table: TableDecl): Promise<void> {
    const src = path.join(this.tmpDir, `${table.name}.ndjson`)
    const out = path.join(this.tmpDir, `${table.name}.parquet`)
    const columns = table.columns.map((c) => `${ident(c.name)} ${c.type}`).join(', ')
    const tmp = ident(`w_${table.name}_${randomBytes(3).toString('hex')}`)
    await con.run(`CREATE TEMP TABLE ${tmp} (${columns})`)
    try {
      if (this.rowCounts.get(table.name)) {
        const spec = table.columns.map((c) => `${lit(c.name)}: ${lit(c.type)}`).join(', ')
        await con.run(
          `INSERT INTO ${tmp} SELECT * FROM read_json(${lit(src)}, format = 'newline_delimited', ` +
            `columns = {${spec}}, maximum_object_size = 268435456)`,
        )
      }
      const groupSize = this.opts.rowGroupSize ?? 10_000
      const rowGroup = table.name === 'blocks' ? Math.max(1000, Math.floor(groupSize / 5)) : groupSize
      const order = table.sortBy.map((c) => `${ident(c)} NULLS FIRST`).join(', ')
      await con.run(
        `COPY (SELECT * FROM ${tmp} ORDER BY ${order}) TO ${lit(out)} ` +
          `(FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL ${this.opts.compressionLevel ?? 3}, ROW_GROUP_SIZE ${rowGroup})`,
      )
    } finally {
      await con.run(`DROP TABLE ${tmp}`)
    }
    await rm(src, { force: true })
  }
}
