import { stat } from 'node:fs/promises'

/** DuckDB's own default for `read_json`'s `maximum_object_size`: the least any reader here asks for. */
export const DUCKDB_JSON_OBJECT_DEFAULT = 16 * 1024 * 1024

/**
 * `maximum_object_size` for DuckDB's `read_json` over NDJSON files: no line is longer than its file,
 * so the largest file's size, and at least DuckDB's default (16 MiB). DuckDB sizes its read buffer by
 * this setting, and an allocation above `allocator_bulk_deallocation_flush_threshold` (512 MiB) makes
 * it hand every freed page back to the system: a fixed 1 GiB cost 2–4 ms of CPU per read of even a
 * small file, and the pages faulted in again after it (docs/benchmark-history.md, step 46).
 */
export async function ndjsonObjectBound(files: string[]): Promise<number> {
  const sizes = await Promise.all(files.map(async (f) => (await stat(f)).size))
  return Math.max(DUCKDB_JSON_OBJECT_DEFAULT, ...sizes)
}
