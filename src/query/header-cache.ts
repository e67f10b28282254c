/*
 * Header JSON of chunk boundary blocks, kept in memory per (chunk folder, block, selected header
 * fields). A query that the chunk summaries rule out for a run of chunks returns only the first and
 * last block of its range, and an answer that ends after a whole chunk returns that chunk's last
 * block bare: with these texts at hand such chunks cost no statement at all (a header read costs
 * 1–5 ms, most of a no-match answer). Chunks are immutable, so a text never goes stale.
 */

/** Bound on the texts kept (a full EVM header is about 1 KB). */
const MAX_BYTES = 8 * 1024 * 1024

const texts = new Map<string, Uint8Array>()
let bytes = 0

const keyOf = (dir: string, block: number, fields: string) => `${dir}\0${block}\0${fields}`

export function cachedHeader(dir: string, block: number, fields: string): Uint8Array | undefined {
  return texts.get(keyOf(dir, block, fields))
}

export function keepHeader(dir: string, block: number, fields: string, json: Uint8Array): void {
  const key = keyOf(dir, block, fields)
  if (texts.has(key) || json.length > MAX_BYTES / 64) return
  // A copy: the text may be a view into a large buffer of DuckDB rows.
  texts.set(key, json.slice())
  bytes += json.length
  // Oldest first (Map keeps insertion order).
  for (const [k, v] of texts) {
    if (bytes <= MAX_BYTES) break
    texts.delete(k)
    bytes -= v.length
  }
}
