import type { HeadWatchOptions } from './head-watch.js'
import type { LimiterOptions } from './limiter.js'

/* Defaults of the router and the workers, apart from the servers so that the CLI shows them without loading those. */

export const DEFAULT_ROUTER_OPTIONS = {
  replication: 2,
  heartbeatMs: 2000,
  missedHeartbeats: 3,
  relistMs: 5000,
}

export const DEFAULT_TICKET_TTL_S = 60

/**
 * A worker builds a chunk's local form once queries have read the chunk from its Parquet files this
 * many times (0: every chunk it holds, as soon as it holds it). Building one costs seconds of CPU and
 * several times the chunk's bytes, more than reading the chunk once from Parquet: over a whole chain
 * only the chunks read again (the hot ones) are worth it.
 */
export const DEFAULT_FORMS_AFTER_READS = 2

/** Average consecutive chunks assigned together (1: each chunk on its own). */
export const DEFAULT_GROUP_CHUNKS = 8

export const DEFAULT_HEAD_WATCH: HeadWatchOptions = { folderMs: 100, s3Ms: 250 }

export const DEFAULT_WORKER_LIMITS: LimiterOptions & { bodyLimit: number } = {
  concurrency: 2,
  queue: 8,
  queueTimeoutMs: 10_000,
  bodyLimit: 8 * 1024 * 1024,
}
