import type { DuckDBDataChunk } from '@duckdb/node-api'
import { createRequire } from 'node:module'

/*
 * Reads result columns straight from DuckDB's vectors. `@duckdb/node-api`'s value conversion
 * decodes every string into a JS string; the engine only copies JSON text into the answer, so it
 * takes each VARCHAR's bytes as they are (one copy, no decoding; docs/benchmark-history.md, step 10).
 * Part of the fast path: the engine reads columns through src/fast-path.ts.
 */

type Bindings = typeof import('@duckdb/node-bindings')
let loaded: Bindings | undefined
/**
 * `@duckdb/node-bindings`, loaded at first use: the CLI imports this module (through
 * src/fast-path.ts) before DuckDB's allocator options are set, so it must not load DuckDB itself.
 */
export const bindings = (): Bindings => (loaded ??= createRequire(import.meta.url)('@duckdb/node-bindings') as Bindings)

/**
 * Bytes of each row of a VARCHAR column (NULL → empty). The strings of a result chunk lie mostly
 * back to back in DuckDB's string heap (measured: 42,640 rows in about 200 runs), so each run is
 * copied out with one call and the rows are views into it; a native call per row cost about 2 µs.
 */
export function varcharBytes(chunk: DuckDBDataChunk, column: number, out: Uint8Array[]): void {
  const { strings, validity, rows } = varcharVector(chunk, column)
  // A short string's view would hold the vector's whole string_t array: copied instead.
  eachRowText(strings, validity, rows, 0, (buf, start, end) => out.push(start === end ? EMPTY : buf === strings ? buf.slice(start, end) : buf.subarray(start, end)))
}

/** Where each row of a VARCHAR column lies: `row(buffer, start, end)` in order (NULL → empty; see `eachRowText`). */
export function eachVarchar(chunk: DuckDBDataChunk, column: number, row: (buf: Uint8Array, start: number, end: number) => void): void {
  const { strings, validity, rows } = varcharVector(chunk, column)
  eachRowText(strings, validity, rows, 0, row)
}

/** A VARCHAR column's `duckdb_string_t` array (16 bytes a row) and validity mask (null: every row valid). */
export function varcharVector(chunk: DuckDBDataChunk, column: number): { strings: Uint8Array; validity: Uint8Array | null; rows: number } {
  const rows = chunk.rowCount
  const vector = bindings().data_chunk_get_vector(chunk.chunk, column)
  return { strings: bindings().vector_get_data(vector, rows * 16), validity: bindings().vector_get_validity(vector, Math.ceil(rows / 64) * 8), rows }
}

/**
 * Where each row `first`… of a VARCHAR vector lies, given its `duckdb_string_t` array (`strings`,
 * 16 bytes a row) and validity mask: `row(buffer, start, end)` in order (NULL → empty). Each run of
 * heap strings that lie back to back is copied out with one call into a buffer of its own; a short
 * string (≤ 12 bytes) lies in `strings` itself.
 */
export function eachRowText(strings: Uint8Array, validity: Uint8Array | null, rows: number, first: number, row: (buf: Uint8Array, start: number, end: number) => void): void {
  const view = new DataView(strings.buffer, strings.byteOffset, strings.byteLength)
  // Validity: one bit per row (absent when every row is valid); a NULL row's string_t is garbage.
  const valid = (i: number) => !validity || ((validity[i >> 3] >> (i & 7)) & 1) === 1
  // duckdb_string_t: u32 length, then up to 12 inline bytes, or a 4-byte prefix and a pointer.
  const length = (i: number) => view.getUint32(i * 16, true)
  // x86-64 and arm64 pointers stay below 2^48: exact as doubles.
  const pointer = (i: number) => view.getUint32(i * 16 + 8, true) + view.getUint32(i * 16 + 12, true) * 2 ** 32
  let i = first
  while (i < rows) {
    if (!valid(i)) {
      row(EMPTY, 0, 0)
      i++
      continue
    }
    const len = length(i)
    if (len <= 12) {
      row(strings, i * 16 + 4, i * 16 + 4 + len)
      i++
      continue
    }
    // The run of heap strings that follow each other from row i on.
    const start = pointer(i)
    let end = start + len
    let j = i + 1
    while (j < rows && valid(j)) {
      const l = length(j)
      if (l <= 12 || pointer(j) !== end) break
      end += l
      j++
    }
    const run = bindings().get_data_from_pointer(strings.buffer as ArrayBuffer, strings.byteOffset + i * 16 + 8, end - start)
    for (let at = 0; i < j; i++) {
      const l = length(i)
      row(run, at, at + l)
      at += l
    }
  }
}

const EMPTY = new Uint8Array(0)

/**
 * A BIGINT column without NULLs (values far below 2^53) as a typed array: no JS array to grow. Read
 * as two 32-bit halves: `getBigInt64` allocates a BigInt per value (≈ 240 KB per logs+tx answer).
 */
export function bigintColumn(chunk: DuckDBDataChunk, column: number): Float64Array {
  const rows = chunk.rowCount
  const data = bindings().vector_get_data(bindings().data_chunk_get_vector(chunk.chunk, column), rows * 8)
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength)
  const out = new Float64Array(rows)
  for (let i = 0; i < rows; i++) out[i] = view.getUint32(i * 8, true) + view.getInt32(i * 8 + 4, true) * 4294967296
  return out
}

/** An INTEGER column without NULLs as a typed array (a copy: DuckDB's vector goes with its chunk). */
export function integerColumn(chunk: DuckDBDataChunk, column: number): Int32Array {
  const rows = chunk.rowCount
  const data = bindings().vector_get_data(bindings().data_chunk_get_vector(chunk.chunk, column), rows * 4)
  const out = new Int32Array(rows)
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength)
  for (let i = 0; i < rows; i++) out[i] = view.getInt32(i * 4, true)
  return out
}
