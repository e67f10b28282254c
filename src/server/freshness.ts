import type { FastifyInstance } from 'fastify'
import { headChunks } from '../chunks/head-file.js'
import type { ChunkRef } from '../chunks/layout.js'
import { log } from '../log.js'
import { workerToken, WORKER_TOKEN_HEADER } from './auth.js'
import { PUBLIC } from './route-access.js'
import { routerLagBlocks, routerLagSeconds } from './head-lag.js'
import { HeadWatch, type HeadWatchOptions } from './head-watch.js'
import { httpRequest } from '../http-request.js'
import type { RouterState } from './router.js'

/*
 * How a new chunk reaches the clients without waiting for periodic jobs (docs/serving.md,
 * "Freshness"):
 *   1. the ingest writes the dataset's head.json after publishing the chunk (and may POST the
 *      router's /notify);
 *   2. the router, watching head.json (head-watch.ts), appends the chunks it names to its list
 *      and assigns them;
 *   3. it POSTs /heartbeat to the workers assigned them, which ping at once, get their new
 *      assignment, fetch the chunk and ping again holding it: the router's height moves.
 * Each step is harmless to repeat; the periodic listing and heartbeats remain the fallback.
 */

/** Worker route the router POSTs to when the worker's assignment grew. */
export const NUDGE_PATH = '/heartbeat'

export interface RouterFreshness {
  watch: HeadWatch
  stop(): void
}

/**
 * Router side: watch the datasets' head files, take `POST /notify` from ingests, tell workers of new
 * chunks, and keep the lag gauges. `serial` runs listing jobs one at a time (the periodic listing
 * and the head file's chunks must not overwrite each other's list).
 */
export function startRouterFreshness(o: {
  state: RouterState
  watch: HeadWatchOptions
  secret?: Buffer
  serial: (job: () => Promise<void>) => Promise<void>
}): RouterFreshness {
  const { state } = o
  state.onNewChunks = (urls) => nudgeWorkers(urls, o.secret)
  const watch = new HeadWatch(
    () => state.locations(),
    (dataset, head) =>
      o.serial(async () => {
        state.noteHead(dataset, head)
        if (!(await state.appendChunks(dataset, headChunks(head)))) await state.relist(false, dataset)
      }),
    o.watch,
  )
  watch.start()
  return { watch, stop: () => watch.stop() }
}

/** Routes of the router: `POST /notify` (an ingest published a chunk) and the lag gauges at `GET /metrics`. */
export function registerRouterFreshnessRoutes(app: FastifyInstance, state: RouterState, freshness: () => RouterFreshness | undefined): void {
  // Public: it only makes the router read head files sooner.
  app.post('/notify', PUBLIC, async (_req, reply) => {
    const f = freshness()
    if (f) void f.watch.check(true)
    reply.code(202)
    return { ok: true }
  })
  app.addHook('onRequest', async (req) => {
    if (req.url !== '/metrics') return
    routerLagBlocks.reset()
    routerLagSeconds.reset()
    for (const name of state.datasetNames()) {
      const lag = state.lag(name)
      if (!lag) continue
      routerLagBlocks.set({ dataset: name }, lag.blocks)
      routerLagSeconds.set({ dataset: name }, lag.seconds)
    }
  })
}

/**
 * A worker's listing extended with the router's newest chunks (from a ping answer) when they
 * continue it: they must include the listing's last chunk, so nothing between is skipped.
 * Undefined when they do not.
 */
export function extendListing(listing: ChunkRef[], recent: ChunkRef[] | undefined): ChunkRef[] | undefined {
  const last = listing.at(-1)
  if (!last || !recent?.length) return undefined
  const i = recent.findIndex((c) => c.path === last.path)
  if (i < 0) return undefined
  return [...listing, ...recent.slice(i + 1)]
}

/** Ask workers to heartbeat now (fire and forget: a worker that misses it pings at its next beat anyway). */
export function nudgeWorkers(urls: string[], secret?: Buffer): void {
  for (const url of urls) {
    httpRequest(url + NUDGE_PATH, {
      method: 'POST',
      headers: secret ? { [WORKER_TOKEN_HEADER]: workerToken(secret) } : {},
      timeoutMs: 5000,
    })
      .catch((e) => log.debug({ worker: url, err: e instanceof Error ? e.message : String(e) }, 'router: cannot tell the worker to ping'))
  }
}

/**
 * Worker side: `POST /heartbeat` makes the worker ping its router now (coalesced with a ping under
 * way). A `peer` route: with a ticket secret it must carry the router's token (as pings do the worker's).
 */
export function registerWorkerNudge(app: FastifyInstance, nudge: () => void): void {
  app.post(NUDGE_PATH, { config: { access: 'peer' } }, async (_req, reply) => {
    nudge()
    reply.code(202)
    return { ok: true }
  })
}
