import { Counter, Gauge, Histogram } from 'prom-client'
import { registry } from '../metrics.js'
import { connect, dbStarted } from '../db.js'

/*
 * Metrics of the HTTP layer. Router and workers may run in one process (`serve`), so everything a
 * worker reports carries a `worker` label and request metrics a `service` label.
 */

export const httpRequests = new Counter({
  name: 'block_archive_http_requests_total',
  help: 'HTTP requests answered, by service, route and status',
  labelNames: ['service', 'route', 'status'] as const,
  registers: [registry],
})

export const httpDuration = new Histogram({
  name: 'block_archive_http_request_duration_seconds',
  help: 'Time from request to the end of the answer (for queries: the last byte streamed)',
  labelNames: ['service', 'route'] as const,
  buckets: [0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
  registers: [registry],
})

export const routerWorkersAlive = new Gauge({
  name: 'block_archive_router_workers_alive',
  help: 'Workers that pinged the router within the heartbeat timeout',
  registers: [registry],
})

export const routerRelists = new Counter({
  name: 'block_archive_router_relists_total',
  help: 'Listings of storage by the router (block_archive_storage_requests_total per relisting: their quotient)',
  registers: [registry],
})

export const routerRelistDuration = new Histogram({
  name: 'block_archive_router_relist_duration_seconds',
  help: 'Time of one listing of storage by the router, its bookkeeping included (the event loop is busy for part of it)',
  buckets: [0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
  registers: [registry],
})

export const routerDatasetHeight = new Gauge({
  name: 'block_archive_router_dataset_height',
  help: 'Height the router announces per dataset (-1 when empty)',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export const workerQueriesActive = new Gauge({
  name: 'block_archive_worker_queries_active',
  help: 'Queries being executed',
  labelNames: ['worker'] as const,
  registers: [registry],
})

export const workerQueriesQueued = new Gauge({
  name: 'block_archive_worker_queries_queued',
  help: 'Queries waiting for an execution slot',
  labelNames: ['worker'] as const,
  registers: [registry],
})

export const workerQueryBlocks = new Counter({
  name: 'block_archive_worker_query_blocks_total',
  help: 'Blocks returned by queries',
  labelNames: ['worker', 'dataset'] as const,
  registers: [registry],
})

export const workerQueryBytes = new Counter({
  name: 'block_archive_worker_query_bytes_total',
  help: 'Uncompressed JSON bytes returned by queries',
  labelNames: ['worker', 'dataset'] as const,
  registers: [registry],
})

export const workerChunksHeld = new Gauge({
  name: 'block_archive_worker_chunks_held',
  help: 'Chunks available on this worker',
  labelNames: ['worker', 'dataset'] as const,
  registers: [registry],
})

export const duckdbMemory = new Gauge({
  name: 'block_archive_duckdb_memory_bytes',
  help: "Memory held by DuckDB's buffer manager in this process (query intermediates, sorts, temp tables)",
  registers: [registry],
  async collect() {
    if (!dbStarted()) return this.set(0)
    const con = await connect()
    try {
      const r = await con.runAndReadAll('SELECT sum(memory_usage_bytes) FROM duckdb_memory()')
      this.set(Number(r.getRows()[0]?.[0] ?? 0))
    } finally {
      con.closeSync()
    }
  },
})
