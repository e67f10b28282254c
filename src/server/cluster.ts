import type { QueryBudgets } from '../query/types.js'
import { RouterServer, type RouterAccessOptions } from './router-http.js'
import { DEFAULT_ROUTER_OPTIONS, DEFAULT_WORKER_LIMITS } from './defaults.js'
import type { CompressionMode } from './encoding.js'
import type { ChunkStorage } from './storage.js'
import type { HeadWatchOptions } from './head-watch.js'
import { WorkerServer } from './worker-http.js'

export interface ClusterOptions {
  /** What the router lists (and the workers use, unless `workerStorage` is given). */
  storage: ChunkStorage
  /** Each worker's own storage (its own cache folder, for datasets in object storage). */
  workerStorage?: (index: number) => ChunkStorage
  host?: string
  /** Router port (0 = any free port). Workers always take free ports. */
  port?: number
  workers?: number
  replication?: number
  heartbeatMs?: number
  missedHeartbeats?: number
  relistMs?: number
  /** How often head files are checked (default DEFAULT_HEAD_WATCH). */
  headWatch?: HeadWatchOptions
  /** Average consecutive chunks assigned together (router default: 8). */
  groupChunks?: number
  budgets?: Partial<QueryBudgets>
  bodyLimit?: number
  concurrency?: number
  queue?: number
  queueTimeoutMs?: number
  compression?: CompressionMode
  /** Access control and limits (off by default); the workers get `access.ticketSecret` too. */
  access?: RouterAccessOptions
}

export interface Cluster {
  router: RouterServer
  workers: WorkerServer[]
  /** name → client base URL */
  datasets: Map<string, string>
  stop(): Promise<void>
}

/** A router and N workers in this process, all over the same storage (what `serve` runs). */
export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const host = opts.host ?? '127.0.0.1'
  const heartbeatMs = opts.heartbeatMs ?? DEFAULT_ROUTER_OPTIONS.heartbeatMs
  const router = new RouterServer({
    storage: opts.storage,
    replication: opts.replication ?? DEFAULT_ROUTER_OPTIONS.replication,
    heartbeatMs,
    missedHeartbeats: opts.missedHeartbeats ?? DEFAULT_ROUTER_OPTIONS.missedHeartbeats,
    relistMs: opts.relistMs ?? DEFAULT_ROUTER_OPTIONS.relistMs,
    headWatch: opts.headWatch,
    groupChunks: opts.groupChunks,
    expectedWorkers: opts.workers ?? 2,
    access: opts.access,
  })
  const routerUrl = await router.start(host, opts.port ?? 0)
  const workers: WorkerServer[] = []
  try {
    for (let i = 0; i < (opts.workers ?? 2); i++) {
      const w = new WorkerServer({
        // Stable across restarts (unlike the port): a restarted cluster gets the same assignment.
        id: `worker-${i}`,
        storage: opts.workerStorage?.(i) ?? opts.storage,
        routerUrl,
        heartbeatMs,
        dropGraceMs: heartbeatMs * 2,
        budgets: opts.budgets,
        bodyLimit: opts.bodyLimit,
        concurrency: opts.concurrency ?? DEFAULT_WORKER_LIMITS.concurrency,
        queue: opts.queue ?? DEFAULT_WORKER_LIMITS.queue,
        queueTimeoutMs: opts.queueTimeoutMs ?? DEFAULT_WORKER_LIMITS.queueTimeoutMs,
        compression: opts.compression,
        ticketSecret: opts.access?.ticketSecret,
      })
      workers.push(w)
      await w.start(host, 0)
    }
  } catch (e) {
    await Promise.allSettled([...workers.map((w) => w.stop()), router.stop()])
    throw e
  }
  const datasets = new Map(router.state.datasetNames().map((n) => [n, router.datasetUrl(n)]))
  return {
    router,
    workers,
    datasets,
    async stop() {
      await Promise.allSettled(workers.map((w) => w.stop()))
      await router.stop()
    },
  }
}
