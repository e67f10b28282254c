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

/** Average consecutive chunks assigned together (1: each chunk on its own). */
export const DEFAULT_GROUP_CHUNKS = 8

export const DEFAULT_HEAD_WATCH: HeadWatchOptions = { folderMs: 100, s3Ms: 250 }

export const DEFAULT_WORKER_LIMITS: LimiterOptions & { bodyLimit: number } = {
  concurrency: 2,
  queue: 8,
  queueTimeoutMs: 10_000,
  bodyLimit: 8 * 1024 * 1024,
}
