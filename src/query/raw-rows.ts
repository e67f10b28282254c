import type { DuckDBDataChunk } from '@duckdb/node-api'
import bindings from '@duckdb/node-bindings'

/*
 * Reads result columns straight from DuckDB's vectors. `@duckdb/node-api`'s value conversion
 * decodes every string into a JS string; the engine only copies JSON text into the answer, so it
 * takes each VARCHAR's bytes as they are (one copy, no decoding): measured 3–4× faster for the
 * row JSON of a chunk (BENCHMARKS.md, step 10).
 */

/** Bytes of each row of a VARCHAR column (NULL → empty). */
export function varcharBytes(chunk: DuckDBDataChunk, column: number, out: Uint8Array[]): void {
  const rows = chunk.rowCount
  const data = bindings.vector_get_data(bindings.data_chunk_get_vector(chunk.chunk, column), rows * 16)
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength)
  for (let i = 0, at = 0; i < rows; i++, at += 16) {
    // duckdb_string_t: length, then up to 12 inline bytes or a 4-byte prefix and a pointer.
    const len = view.getUint32(at, true)
    out.push(
      len <= 12
        ? data.slice(at + 4, at + 4 + len)
        : bindings.get_data_from_pointer(data.buffer as ArrayBuffer, data.byteOffset + at + 8, len),
    )
  }
}

/** Values of a BIGINT column as numbers (block numbers, ordinals: far below 2^53). */
export function bigintNumbers(chunk: DuckDBDataChunk, column: number, out: number[]): void {
  const rows = chunk.rowCount
  const data = bindings.vector_get_data(bindings.data_chunk_get_vector(chunk.chunk, column), rows * 8)
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength)
  for (let i = 0; i < rows; i++) out.push(Number(view.getBigInt64(i * 8, true)))
}

/** Values of an INTEGER column. */
export function integerNumbers(chunk: DuckDBDataChunk, column: number, out: number[]): void {
  const rows = chunk.rowCount
  const data = bindings.vector_get_data(bindings.data_chunk_get_vector(chunk.chunk, column), rows * 4)
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength)
  for (let i = 0; i < rows; i++) out.push(view.getInt32(i * 4, true))
}
