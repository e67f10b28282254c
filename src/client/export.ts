import { open, rename, rm, stat, type FileHandle } from 'node:fs/promises'
import path from 'node:path'
import { DUCKDB_JSON_OBJECT_DEFAULT } from '../chunks/ndjson-bound.js'
import { connect, ident, lit } from '../db.js'
import type { Block } from './archive-client.js'

/*
 * Where `block-archive query` puts its blocks: stdout or a file, as NDJSON, one JSON array, Parquet
 * or CSV. NDJSON goes straight into the file (so an interrupted export can be resumed from its last
 * complete line); a JSON array goes to a temporary file renamed at the end; Parquet and CSV are
 * written by DuckDB from an NDJSON temporary file next to the output, so memory stays bounded
 * whatever the range.
 */

export const OUTPUT_FORMATS = ['ndjson', 'json', 'parquet', 'csv'] as const
export type OutputFormat = (typeof OUTPUT_FORMATS)[number]

const EXTENSIONS: Record<string, OutputFormat> = { ndjson: 'ndjson', jsonl: 'ndjson', json: 'json', parquet: 'parquet', csv: 'csv' }

export interface OutputSpec {
  /** Output file; undefined = stdout. */
  out?: string
  format: OutputFormat
  resume: boolean
}

/** Check `--out`/`--format`/`--resume`/`--follow` together; the format defaults to the file's extension, else NDJSON. */
export function outputSpec(o: { out?: string; format?: string; resume?: boolean; follow?: boolean }): OutputSpec {
  if (o.format !== undefined && !(OUTPUT_FORMATS as readonly string[]).includes(o.format)) {
    throw new Error(`--format must be one of ${OUTPUT_FORMATS.join(', ')}, got "${o.format}"`)
  }
  if (o.out !== undefined && o.out.trim() === '') throw new Error('--out needs a file name')
  const byExtension = o.out !== undefined ? EXTENSIONS[path.extname(o.out).slice(1).toLowerCase()] : undefined
  const format = (o.format as OutputFormat | undefined) ?? byExtension ?? 'ndjson'
  if (o.out === undefined && (format === 'parquet' || format === 'csv')) {
    throw new Error(`--format ${format} is written to a file: give --out <file> (stdout takes ndjson or json)`)
  }
  if (o.resume && o.out === undefined) throw new Error('--resume continues an export file: give --out <file>')
  if (o.resume && format !== 'ndjson') {
    throw new Error(`--resume continues NDJSON files only, not --format ${format} (a ${format} file is written whole at the end; run again without --resume)`)
  }
  if (o.follow && format !== 'ndjson') {
    throw new Error(`--follow needs --format ndjson: a ${format} output is only complete when the range ends`)
  }
  return { out: o.out, format, resume: o.resume ?? false }
}

/** Destination of the blocks, one ordered batch at a time. */
export interface BlockSink {
  write(blocks: Block[]): Promise<void>
  /** Complete the output (close the array, convert, rename into place). */
  finish(): Promise<void>
  /** After an error: close and remove temporary files; an NDJSON file keeps its complete lines. */
  discard(): Promise<void>
}

const ndjsonText = (blocks: Block[]) => {
  let text = ''
  for (const b of blocks) text += JSON.stringify(b) + '\n'
  return text
}

/** A JSON array, streamed: `[`, blocks separated by `,\n`, `]`. */
class JsonArrayText {
  private first = true
  open = () => '['
  blocks(blocks: Block[]): string {
    let text = ''
    for (const b of blocks) {
      text += (this.first ? '\n' : ',\n') + JSON.stringify(b)
      this.first = false
    }
    return text
  }
  close = () => (this.first ? ']\n' : '\n]\n')
}

/** stdout (or another stream): NDJSON or a JSON array; `onClosed` when the reader went away (EPIPE). */
export class StreamSink implements BlockSink {
  closed = false
  private readonly array?: JsonArrayText
  private opened = false

  constructor(private readonly stream: NodeJS.WriteStream, format: 'ndjson' | 'json', onClosed: () => void) {
    if (format === 'json') this.array = new JsonArrayText()
    stream.on('error', (e: NodeJS.ErrnoException) => {
      // `… | head` closes the pipe: stop quietly.
      if (e.code === 'EPIPE') {
        this.closed = true
        onClosed()
      } else throw e
    })
  }

  private async put(text: string): Promise<void> {
    if (this.closed || text === '') return
    if (this.stream.write(text)) return
    await new Promise<void>((resolve) => {
      const done = () => {
        this.stream.off('drain', done).off('close', done).off('error', done)
        resolve()
      }
      this.stream.once('drain', done).once('close', done).once('error', done)
    })
  }

  async write(blocks: Block[]): Promise<void> {
    if (this.array && !this.opened) {
      this.opened = true
      await this.put(this.array.open())
    }
    await this.put(this.array ? this.array.blocks(blocks) : ndjsonText(blocks))
  }

  async finish(): Promise<void> {
    if (this.array) {
      if (!this.opened) await this.put(this.array.open())
      await this.put(this.array.close())
    }
  }

  async discard(): Promise<void> {}
}

async function writeAll(fh: FileHandle, buf: Buffer): Promise<void> {
  for (let off = 0; off < buf.length; ) {
    const { bytesWritten } = await fh.write(buf, off, buf.length - off, null)
    off += bytesWritten
  }
}

/** A temporary file next to `file` (same folder, so the final rename stays on one file system). */
export const tempPath = (file: string, suffix: string) => `${file}.part-${process.pid}${suffix}`

/**
 * NDJSON written straight into `file` (appended, one awaited write per batch: a kill leaves at most
 * one partial last line, which `--resume` drops), or a JSON array written into a temporary file
 * that replaces `file` at the end.
 */
export class FileSink implements BlockSink {
  /** Lines written, their total bytes and the longest (what DuckDB needs to read them back). */
  lines = 0
  bytes = 0
  longestLine = 0
  private readonly array?: JsonArrayText

  private constructor(
    private readonly fh: FileHandle,
    readonly file: string,
    private readonly tmp: string | undefined,
    format: 'ndjson' | 'json',
  ) {
    if (format === 'json') this.array = new JsonArrayText()
  }

  /** `truncateAt`: continue an NDJSON file from this byte (its last complete line); else start it anew. */
  static async create(file: string, format: 'ndjson' | 'json', truncateAt?: number): Promise<FileSink> {
    if (format === 'json') {
      const tmp = tempPath(file, '')
      const sink = new FileSink(await open(tmp, 'w'), file, tmp, format)
      await writeAll(sink.fh, Buffer.from(sink.array!.open()))
      return sink
    }
    if (truncateAt === undefined) return new FileSink(await open(file, 'w'), file, undefined, format)
    const fh = await open(file, 'r+')
    try {
      await fh.truncate(truncateAt)
    } finally {
      await fh.close()
    }
    return new FileSink(await open(file, 'a'), file, undefined, format)
  }

  async write(blocks: Block[]): Promise<void> {
    let text: string
    if (this.array) {
      text = this.array.blocks(blocks)
    } else {
      text = ''
      for (const b of blocks) {
        const line = JSON.stringify(b)
        const len = Buffer.byteLength(line)
        if (len > this.longestLine) this.longestLine = len
        text += line + '\n'
      }
    }
    const buf = Buffer.from(text)
    await writeAll(this.fh, buf)
    this.lines += blocks.length
    this.bytes += buf.length
  }

  /** Close the file (and for a JSON array, end it and rename it into place). */
  async finish(): Promise<void> {
    if (this.array) await writeAll(this.fh, Buffer.from(this.array.close()))
    await this.fh.close()
    if (this.tmp) await rename(this.tmp, this.file)
  }

  async discard(): Promise<void> {
    await this.fh.close().catch(() => {})
    if (this.tmp) await rm(this.tmp, { force: true })
  }
}

/**
 * Parquet or CSV: the blocks go to an NDJSON temporary file next to `file`; at the end DuckDB reads
 * it back (`read_json`) and writes `file` with COPY (into a temporary name, then renamed).
 */
export class TableSink implements BlockSink {
  private constructor(
    private readonly ndjson: FileSink,
    private readonly file: string,
    private readonly format: 'parquet' | 'csv',
  ) {}

  static async create(file: string, format: 'parquet' | 'csv'): Promise<TableSink> {
    return new TableSink(await FileSink.create(tempPath(file, '.ndjson'), 'ndjson'), file, format)
  }

  write(blocks: Block[]): Promise<void> {
    return this.ndjson.write(blocks)
  }

  async finish(): Promise<void> {
    await this.ndjson.finish()
    const tmp = tempPath(this.file, '')
    try {
      if (this.ndjson.lines === 0) throw new Error(`no blocks to write into ${this.file}`)
      await ndjsonToTable(this.ndjson.file, tmp, this.format, { longestLine: this.ndjson.longestLine, averageLine: this.ndjson.bytes / this.ndjson.lines })
      await rename(tmp, this.file)
    } finally {
      await rm(tmp, { force: true })
      await rm(this.ndjson.file, { force: true })
    }
  }

  async discard(): Promise<void> {
    await this.ndjson.discard()
    await rm(this.ndjson.file, { force: true })
  }
}

/*
 * JSON type detection turns strings that look like dates, times or UUIDs into those types; block data
 * has none, and a value must come back as the string it was. Such types (outside quoted field names)
 * are read as VARCHAR instead.
 */
const DETECTED = /\b(?:TIMESTAMP WITH TIME ZONE|TIME WITH TIME ZONE|TIMESTAMP_NS|TIMESTAMP_MS|TIMESTAMP_S|TIMESTAMPTZ|TIMESTAMP|TIMETZ|TIME|DATE|UUID|INTERVAL)\b/g
export function plainStrings(type: string): string {
  return type
    .split(/("(?:[^"]|"")*")/)
    .map((part, i) => (i % 2 === 1 ? part : part.replace(DETECTED, 'VARCHAR')))
    .join('')
}

const NESTED = /^(?:STRUCT|MAP|UNION)\(|\]$|^JSON$/

/** Target bytes of one Parquet row group (DuckDB keeps about one per thread in memory while writing). */
const ROW_GROUP_BYTES = 64 << 20

/**
 * Convert an NDJSON file of blocks into Parquet or CSV with DuckDB. One row per block, in file order:
 * the header's fields become columns (`number`, `hash`, …; `header_<name>` if an item list has that
 * name), each item list (`transactions`, `logs`, …) one column: a list of structs in Parquet, its JSON
 * text in CSV (as is every other nested value there).
 */
export async function ndjsonToTable(src: string, dest: string, format: 'parquet' | 'csv', sizes: { longestLine: number; averageLine: number }): Promise<void> {
  const con = await connect()
  try {
    const maxObject = Math.max(DUCKDB_JSON_OBJECT_DEFAULT, sizes.longestLine + 1024)
    const read = `read_json(${lit(src)}, format = 'newline_delimited', maximum_object_size = ${maxObject}`
    // Detect the schema over every line (a list empty in the first blocks gets its type from later ones).
    const detected = (await con.runAndReadAll(`DESCRIBE SELECT * FROM ${read}, sample_size = -1)`)).getRowObjects()
    const columns = detected.map((r) => ({ name: String(r.column_name), type: plainStrings(String(r.column_type)) }))
    const source = `${read}, columns = {${columns.map((c) => `${lit(c.name)}: ${lit(c.type)}`).join(', ')}})`
    const value = (expr: string, type: string) => (format === 'csv' && NESTED.test(type) ? `to_json(${expr})` : expr)
    const select: string[] = []
    const names = new Set(columns.map((c) => c.name))
    for (const c of columns) {
      if (c.name === 'header' && c.type.startsWith('STRUCT(')) {
        const fields = (await con.runAndReadAll(`DESCRIBE SELECT unnest(header) FROM ${source}`)).getRowObjects()
        for (const f of fields) {
          const name = String(f.column_name)
          const alias = names.has(name) ? `header_${name}` : name
          select.push(`${value(`struct_extract(header, ${lit(name)})`, String(f.column_type))} AS ${ident(alias)}`)
        }
      } else {
        select.push(`${value(ident(c.name), c.type)} AS ${ident(c.name)}`)
      }
    }
    const options =
      format === 'parquet'
        ? `FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE ${Math.min(122_880, Math.max(2048, Math.floor(ROW_GROUP_BYTES / Math.max(1, sizes.averageLine))))}`
        : 'FORMAT csv, HEADER true'
    await con.run(`COPY (SELECT ${select.join(', ')} FROM ${source}) TO ${lit(dest)} (${options})`)
  } finally {
    con.closeSync()
  }
}

/** Where an interrupted NDJSON export continues. */
export interface ResumePoint {
  /** Number of the last complete block in the file; undefined if it holds no complete line. */
  last?: number
  /** Bytes up to and including the last newline: the file is cut there before appending. */
  keep: number
  /** Bytes of a partial last line (dropped). */
  partial: number
}

const TAIL_STEP = 64 * 1024

/** Position of the last `\n` before byte `end`, or -1. */
async function lastNewline(fh: FileHandle, end: number): Promise<number> {
  const buf = Buffer.alloc(TAIL_STEP)
  while (end > 0) {
    const start = Math.max(0, end - TAIL_STEP)
    const { bytesRead } = await fh.read(buf, 0, end - start, start)
    const i = buf.subarray(0, bytesRead).lastIndexOf(0x0a)
    if (i >= 0) return start + i
    end = start
  }
  return -1
}

/**
 * Read the tail of an NDJSON export: the last complete line's block number and where that line ends
 * (a trailing partial line, left by a kill, is not counted). Undefined if the file does not exist.
 */
export async function resumePoint(file: string): Promise<ResumePoint | undefined> {
  const size = await stat(file).then(
    (s) => s.size,
    (e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') return undefined
      throw e
    },
  )
  if (size === undefined) return undefined
  const fh = await open(file, 'r')
  try {
    const nl = await lastNewline(fh, size)
    if (nl < 0) return { keep: 0, partial: size }
    const prev = await lastNewline(fh, nl)
    const line = Buffer.alloc(nl - prev - 1)
    await fh.read(line, 0, line.length, prev + 1)
    let last: unknown
    try {
      last = JSON.parse(line.toString('utf8'))?.header?.number
    } catch {
      last = undefined
    }
    if (!Number.isSafeInteger(last)) {
      throw new Error(`${file} does not end with a block of an NDJSON export (its last complete line has no header.number); cannot resume it`)
    }
    return { last: last as number, keep: nl + 1, partial: size - nl - 1 }
  } finally {
    await fh.close()
  }
}
