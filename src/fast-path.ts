import type { DuckDBDataChunk } from '@duckdb/node-api'
import { isMainThread, resourceLimits } from 'node:worker_threads'
import { pageFaultMicros } from './page-faults.js'
import { startServingThread as startThread } from './commands/serving-thread.js'
import * as raw from './query/raw-rows.js'
import { loadStringCopy, RowTexts, SLAB_BYTES, type TextReader } from './query/row-texts.js'
import type { QueryStream } from './query/types.js'

/*
 * The serving path's speed tricks, each measured (docs/benchmark-history.md), behind one switch.
 * The rest of the code reaches them only through this module:
 *
 * - DuckDB's string layout read directly, from JS (src/query/raw-rows.ts: each VARCHAR's bytes
 *   without decoding a JS string; BIGINT/INTEGER columns as typed arrays) and from C
 *   (native/string-copy.c copies a vector's strings into slabs);
 * - answer slabs reused by later answers once an answer is on the socket (src/query/row-texts.ts;
 *   the HTTP layer says when with `answerSent`);
 * - `worker`, `serve` and `demo` running in a worker thread with a 12 MB V8 young generation
 *   (src/commands/serving-thread.ts);
 * - DuckDB's jemalloc told to return freed pages after 250 ms where a page fault is cheap (below).
 *
 * `BLOCK_ARCHIVE_PLAIN=1` turns them all off: columns are read through `@duckdb/node-api`'s values
 * (a JS string per VARCHAR, encoded again as UTF-8), rows live in their own buffers, the server
 * runs in the main thread and jemalloc keeps its defaults. The answers are the same bytes
 * (test/fast-path.test.ts); only speed and memory differ. Each trick also has its own switch
 * (docs/serving.md, "Memory"): `BLOCK_ARCHIVE_NATIVE=off`, `BLOCK_ARCHIVE_SERVE_THREAD=off`,
 * `DUCKDB_JE_MALLOC_CONF`.
 *
 * The CLI imports this module before anything that loads DuckDB (the jemalloc setting must be in
 * the environment by then), so nothing here loads DuckDB at import.
 */

const isOn = (v: string | undefined) => ['1', 'on', 'true', 'yes'].includes((v ?? '').trim().toLowerCase())
const isOff = (v: string | undefined) => ['off', '0', 'false', 'no'].includes((v ?? '').trim().toLowerCase())

/** The plain path: no speed trick (BLOCK_ARCHIVE_PLAIN=1). */
export const plainPath = isOn(process.env.BLOCK_ARCHIVE_PLAIN)

/**
 * DuckDB's jemalloc settings: how soon freed pages go back to the system. Returning them after 250
 * ms keeps a busy worker's RSS near what DuckDB uses (peak under 16 heavy clients 454–513 MB instead
 * of 515–583; docs/benchmark-history.md, step 19), and costs about 10 % of the answers where a page
 * fault is cheap. Where it is dear, every query faults its memory in again: on a VM whose fault
 * took 13 µs, the worker served 2.3–2.6× fewer MB/s and a chunk's logs+tx took 2–3× longer than
 * with jemalloc's own 10 s (BENCHMARKS.md, "Page faults and jemalloc's decay"). So the lean setting
 * is taken only where a fault costs less than `DEAR_FAULT_MICROS`.
 */
export const LEAN_MALLOC_CONF = 'dirty_decay_ms:250,muzzy_decay_ms:0'
export const KEEPING_MALLOC_CONF = 'dirty_decay_ms:10000,muzzy_decay_ms:10000'
export const DEAR_FAULT_MICROS = 3

export const mallocConfFor = (faultMicros: number): string => (faultMicros < DEAR_FAULT_MICROS ? LEAN_MALLOC_CONF : KEEPING_MALLOC_CONF)

/*
 * jemalloc reads the variable when DuckDB's library first allocates, so it is set here, in the main
 * thread, before anything loads DuckDB (about 1 ms to measure, 13 ms where faults are dear). A value
 * set by the user wins. The measured cost goes to the serving thread and `/status` through
 * BLOCK_ARCHIVE_PAGE_FAULT_US.
 */
if (!plainPath && process.env.DUCKDB_JE_MALLOC_CONF === undefined && isMainThread) {
  const micros = pageFaultMicros()
  process.env.BLOCK_ARCHIVE_PAGE_FAULT_US = micros.toFixed(2)
  process.env.DUCKDB_JE_MALLOC_CONF = mallocConfFor(micros)
}

/**
 * In the main thread, for a serving command: runs the CLI in the serving thread (see
 * src/commands/serving-thread.ts) and returns true; false when the command runs here (the plain
 * path, BLOCK_ARCHIVE_SERVE_THREAD=off, another command, `--help`, a thread already).
 */
export function startServingThread(cliUrl: URL, argv: string[]): boolean {
  return !plainPath && !isOff(process.env.BLOCK_ARCHIVE_SERVE_THREAD) && startThread(cliUrl, argv)
}

// ---- Reading DuckDB result columns ----

const EMPTY = new Uint8Array(0)

/** A VARCHAR value's UTF-8 bytes (NULL → empty), through node-api's values. */
const utf8 = (v: unknown): Uint8Array => (v === null || v === undefined ? EMPTY : Buffer.from(v as string))

const plainTexts: TextReader = (chunk, column, row) => {
  for (const v of chunk.getColumnValues(column)) {
    const bytes = utf8(v)
    row(bytes, 0, bytes.length)
  }
}

/** Bytes of each row of a VARCHAR column (NULL → empty), appended to `out`. */
export const varcharBytes: (chunk: DuckDBDataChunk, column: number, out: Uint8Array[]) => void = plainPath
  ? (chunk, column, out) => {
      for (const v of chunk.getColumnValues(column)) out.push(utf8(v))
    }
  : raw.varcharBytes

/** A BIGINT column without NULLs (values far below 2^53) as a typed array. */
export const bigintColumn: (chunk: DuckDBDataChunk, column: number) => Float64Array = plainPath
  ? (chunk, column) => Float64Array.from(chunk.getColumnValues(column), (v) => Number(v))
  : raw.bigintColumn

/** An INTEGER column without NULLs as a typed array. */
export const integerColumn: (chunk: DuckDBDataChunk, column: number) => Int32Array = plainPath
  ? (chunk, column) => Int32Array.from(chunk.getColumnValues(column), (v) => Number(v))
  : raw.integerColumn

/** Values of a BIGINT column without NULLs, appended to `out`. */
export function bigintNumbers(chunk: DuckDBDataChunk, column: number, out: number[]): void {
  for (const v of bigintColumn(chunk, column)) out.push(v)
}

/** Values of an INTEGER column without NULLs, appended to `out`. */
export function integerNumbers(chunk: DuckDBDataChunk, column: number, out: number[]): void {
  for (const v of integerColumn(chunk, column)) out.push(v)
}

// ---- An answer's row texts ----

/** Whether answers' rows are copied into reused slabs (the native copy is built, and neither the plain path nor BLOCK_ARCHIVE_NATIVE=off). */
export const slabsEnabled = !plainPath && !isOff(process.env.BLOCK_ARCHIVE_NATIVE) && loadStringCopy()

/** The row texts of a new answer (src/query/row-texts.ts). */
export function answerTexts(): RowTexts {
  return new RowTexts(slabsEnabled ? SLAB_BYTES : 0, plainPath ? plainTexts : raw.eachVarchar)
}

/** The row texts of each answer whose slabs go back to the pool when it is sent. */
const answers = new WeakMap<QueryStream, RowTexts>()

/** `stream` is the answer written into `texts`: returns it. */
export function answerOf(stream: QueryStream, texts: RowTexts): QueryStream {
  if (slabsEnabled) answers.set(stream, texts)
  return stream
}

/**
 * The reader is done with every piece of the answer (they are on the socket): the memory under
 * them may serve later answers. A reader that keeps pieces, or stops on an error, does not call it.
 */
export function answerSent(stream: QueryStream): void {
  answers.get(stream)?.recycle()
}

/**
 * The reader no longer reads the answer's first `pieces` pieces (a reader that lets each piece
 * go): the memory only they held serves the rest of the answer, so an answer read this way needs a
 * few slabs however long it is.
 */
export function piecesSent(stream: QueryStream, pieces: number): void {
  answers.get(stream)?.released(pieces)
}

/** For the worker's `/status`: where its JS runs (the serving thread's young generation and the old generation it starts with), which tricks are on, DuckDB's jemalloc settings and the page fault cost they were chosen by (null: set by the user). */
export function fastPathStatus(): {
  thread: 'serving' | 'main'
  young_generation_mb: number | null
  initial_old_space_mb: number | null
  native_row_copy: boolean
  plain_path: boolean
  jemalloc: string | null
  page_fault_us: number | null
} {
  const oldSpace = Number(process.env.BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB) || null
  const thread = isMainThread
    ? { thread: 'main' as const, young_generation_mb: null, initial_old_space_mb: null }
    : { thread: 'serving' as const, young_generation_mb: resourceLimits.maxYoungGenerationSizeMb ?? null, initial_old_space_mb: oldSpace }
  const fault = process.env.BLOCK_ARCHIVE_PAGE_FAULT_US
  return {
    ...thread,
    native_row_copy: slabsEnabled,
    plain_path: plainPath,
    jemalloc: process.env.DUCKDB_JE_MALLOC_CONF ?? null,
    page_fault_us: fault === undefined || fault === '' ? null : Number(fault),
  }
}
