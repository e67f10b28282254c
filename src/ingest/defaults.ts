import { availableParallelism } from 'node:os'

/* Defaults of the ingest, apart from its loop so that the CLI shows them without loading it. */

/** Fetch workers when not given: one per core beyond the first (the loop, the Appender and DuckDB use it), 1–4. */
export function defaultWorkers(): number {
  return Math.min(4, Math.max(1, availableParallelism() - 1))
}

export const DEFAULT_MAX_REORG_DEPTH = 300

/**
 * Default block bound of a chunk; the byte bound (256 MiB of rows) closes mainnet-sized chunks long
 * before it (≈ 345 blocks). Chains with little data per block would otherwise get many small chunks,
 * and a query pays ≈ 15–20 ms per chunk it reads: the anvil comparison (5,002 blocks) answered in
 * 131–140 ms from 1,000-block chunks and in 99–109 ms from one chunk
 * (docs/benchmark-history.md, step 20).
 */
export const DEFAULT_CHUNK_BLOCKS = 10_000

/**
 * Head polling while waiting for blocks: a block waits half of it on average before the ingest sees
 * it, which is most of what a following ingest adds to a block's way to the router (docs/ingest.md,
 * "Freshness"); one `eth_blockNumber` per poll.
 */
export const DEFAULT_POLL_MS = 250
