import { Counter, Gauge } from 'prom-client'
import { registry } from '../metrics.js'

/* Metrics of a worker's chunk cache (labelled by worker: several may run in one process). */

export const downloadBytes = new Counter({
  name: 'block_archive_worker_download_bytes_total',
  help: 'Bytes of chunk files downloaded from storage into the cache',
  labelNames: ['worker'] as const,
  registers: [registry],
})

export const downloadSeconds = new Counter({
  name: 'block_archive_worker_download_seconds_total',
  help: 'Time spent downloading chunks (per chunk, from the first request to the verified folder)',
  labelNames: ['worker'] as const,
  registers: [registry],
})

export const cacheBytes = new Gauge({
  name: 'block_archive_worker_cache_bytes',
  help: 'Bytes of chunks in the cache',
  labelNames: ['worker'] as const,
  registers: [registry],
})

export const cacheEvictions = new Counter({
  name: 'block_archive_worker_cache_evictions_total',
  help: 'Chunks deleted from the cache: no longer assigned, or to make room',
  labelNames: ['worker', 'reason'] as const,
  registers: [registry],
})

export const cacheCorrupt = new Counter({
  name: 'block_archive_worker_cache_corrupt_total',
  help: 'Cached chunk files found changed on disk (the chunk is not served and is downloaded again)',
  labelNames: ['worker'] as const,
  registers: [registry],
})

export const localFormBytes = new Gauge({
  name: 'block_archive_worker_local_form_bytes',
  help: "Bytes of the worker's local forms (chunks copied into its DuckDB file)",
  labelNames: ['worker'] as const,
  registers: [registry],
})

export const localFormBuilds = new Counter({
  name: 'block_archive_worker_local_form_builds_total',
  help: 'Chunks copied from Parquet into the local form',
  labelNames: ['worker'] as const,
  registers: [registry],
})

export const localFormSeconds = new Counter({
  name: 'block_archive_worker_local_form_seconds_total',
  help: 'Time spent copying chunks into the local form',
  labelNames: ['worker'] as const,
  registers: [registry],
})

/** Requests to storage (S3 calls; a folder's directory reads, stats and file reads), so a listing's cost can be counted. */
export const storageRequests = new Counter({
  name: 'block_archive_storage_requests_total',
  help: 'Requests to storage: S3 calls by operation (list, get, put, …), and for folders directory reads, stats and meta.json reads',
  labelNames: ['storage', 'op'] as const,
  registers: [registry],
})
