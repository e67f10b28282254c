import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Histogram } from 'prom-client'
import { registry } from '../metrics.js'

/* Metrics of compaction (src/compact/compactor.ts), labelled by dataset. */

export const compactionMerges = new Counter({
  name: 'block_archive_compaction_merges_total',
  help: 'Merged chunks written by compaction',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export const compactionChunksMerged = new Counter({
  name: 'block_archive_compaction_chunks_merged_total',
  help: 'Chunks merged into the merged chunks written',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export const compactionMergeSeconds = new Histogram({
  name: 'block_archive_compaction_merge_seconds',
  help: 'Time to write and publish one merged chunk (reading the chunks merged, DuckDB, upload)',
  labelNames: ['dataset'] as const,
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  registers: [registry],
})

export const compactionRemoved = new Counter({
  name: 'block_archive_compaction_chunks_removed_total',
  help: 'Superseded chunks deleted after the grace period',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export const compactionFailures = new Counter({
  name: 'block_archive_compaction_failures_total',
  help: 'Compaction passes that failed (retried at the next pass)',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export const compactionOpenChunks = new Gauge({
  name: 'block_archive_compaction_open_chunks',
  help: 'Chunks compaction may still merge (the fresh tail), after the latest pass',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export const compactionSuperseded = new Gauge({
  name: 'block_archive_compaction_superseded_chunks',
  help: 'Chunks superseded by a merged chunk and not deleted yet, after the latest pass',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

/** `--metrics-port` of the ingest and compact commands: GET /metrics on 127.0.0.1 (or `host`). */
export async function serveMetrics(port: number, host = '127.0.0.1'): Promise<Server> {
  const server = createServer(async (req, res) => {
    if (req.method === 'GET' && req.url === '/metrics') {
      res.writeHead(200, { 'content-type': registry.contentType })
      res.end(await registry.metrics())
      return
    }
    res.writeHead(404, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ error: 'not-found', message: 'only GET /metrics is served here' }))
  })
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, host, () => resolve()))
  server.unref()
  return server
}
