import type { FastifyInstance } from 'fastify'
import { badRequest } from '../errors.js'
import { log } from '../log.js'
import { createHttp, listen, prefersHtml } from './http.js'
import { routerDatasetHeight, routerWorkersAlive } from './metrics.js'
import { parseRanges, type Range } from './ranges.js'
import { RouterState, type PingMessage, type RouterOptions } from './router.js'
import { renderStatusPage, type RouterStatus } from './status-page.js'
import type { ChunkStorage } from './storage.js'

export interface RouterServerOptions extends RouterOptions {
  storage: ChunkStorage
  /** Re-list storage this often so chunks written by a running ingest appear. */
  relistMs: number
  bodyLimit?: number
}

export const DEFAULT_ROUTER_OPTIONS = {
  replication: 2,
  heartbeatMs: 2000,
  missedHeartbeats: 3,
  relistMs: 5000,
}

/**
 * The router's HTTP face (DECISIONS §20–22, REFERENCE §10):
 * `GET /datasets/:name/height`, `GET /datasets/:name/:block/worker`, `POST /ping`, `GET /status`, `GET /metrics`,
 * `GET /health`, `GET /ready`, and `GET /`: the dataset listing, or the status page for a browser.
 */
export class RouterServer {
  readonly state: RouterState
  readonly app: FastifyInstance
  private timers: NodeJS.Timeout[] = []
  /** Ready once storage has been listed: before that it knows no dataset. */
  private listed = false
  url = ''

  constructor(private readonly opts: RouterServerOptions) {
    this.state = new RouterState(opts.storage, opts)
    this.app = createHttp({
      service: 'router',
      bodyLimit: opts.bodyLimit,
      readiness: () => (this.listed ? { ready: true } : { ready: false, reason: 'storage not listed yet' }),
    })
    this.routes()
  }

  /** List storage, start the periodic jobs and listen; returns the router's base URL. */
  async start(host: string, port: number): Promise<string> {
    await this.state.relist(true)
    this.listed = true
    this.every(this.opts.relistMs, () => this.state.relist())
    // Check liveness at a fraction of the heartbeat so dead workers lose their chunks promptly.
    this.every(Math.max(50, Math.floor(this.opts.heartbeatMs / 2)), async () => this.state.tick())
    this.url = await listen(this.app, host, port)
    log.info({ url: this.url, storage: this.opts.storage.location }, 'router listening')
    return this.url
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearTimeout(t)
    this.timers = []
    await this.app.close()
  }

  datasetUrl(name: string): string {
    return `${this.url}/datasets/${encodeURIComponent(name)}`
  }

  /** Run `job` every `ms`, never overlapping with itself. */
  private every(ms: number, job: () => Promise<void>): void {
    const slot = this.timers.length
    const run = async () => {
      try {
        await job()
      } catch (e) {
        log.error({ err: e }, 'router: periodic job failed')
      }
      this.timers[slot] = setTimeout(run, ms).unref()
    }
    this.timers[slot] = setTimeout(run, ms).unref()
  }

  /** The state's status with every field the status page reads. */
  status(): RouterStatus {
    const s = this.state.status()
    return { ...s, datasets: s.datasets.map((d) => ({ ...d, problems: problemsOf(d) })) }
  }

  private routes(): void {
    const app = this.app
    const state = this.state

    app.get<{ Params: { name: string } }>('/datasets/:name/height', async (req, reply) => {
      const h = state.height(req.params.name)
      reply.type('text/plain; charset=utf-8')
      return String(h)
    })

    app.get<{ Params: { name: string; block: string } }>('/datasets/:name/:block/worker', async (req, reply) => {
      const { name, block } = req.params
      if (!/^\d+$/.test(block) || !Number.isSafeInteger(Number(block))) {
        throw badRequest('invalid-block', `block must be a non-negative integer, got "${block}"`, 'block')
      }
      const url = state.route(name, Number(block))
      reply.type('text/plain; charset=utf-8')
      return url
    })

    // What a newcomer (or a script) asks first: which datasets are here, and their base URLs as seen by the client.
    const listing = async (req: { protocol: string; headers: Record<string, unknown> }) => ({
      datasets: state.status().datasets.map((d) => ({
        name: d.name,
        family: d.family,
        height: d.height,
        baseUrl: `${req.protocol}://${String(req.headers.host ?? '')}/datasets/${encodeURIComponent(d.name)}`,
      })),
    })
    // Browsers get the status page; scripts (no Accept, */*, application/json) the listing.
    app.get<{ Querystring: { refresh?: string } }>('/', async (req, reply) => {
      reply.header('vary', 'accept')
      if (!prefersHtml(req.headers.accept)) return listing(req)
      reply.type('text/html; charset=utf-8')
      return renderStatusPage(this.status(), { refreshSeconds: refreshSeconds(req.query.refresh), generatedAt: new Date() })
    })
    app.get('/datasets', listing)

    app.post('/ping', async (req) => state.ping(parsePing(req.body)))

    app.get('/status', async () => this.status())

    app.addHook('onRequest', async (req) => {
      if (req.url === '/metrics') {
        routerWorkersAlive.set(state.liveWorkers().length)
        for (const name of state.datasetNames()) routerDatasetHeight.set({ dataset: name }, state.height(name))
      }
    })
  }
}

function parsePing(body: unknown): PingMessage {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw badRequest('invalid-ping', 'ping must be a JSON object')
  const b = body as Record<string, unknown>
  if (typeof b.worker_id !== 'string' || !b.worker_id) throw badRequest('invalid-ping', 'worker_id must be a non-empty string', 'worker_id')
  if (typeof b.worker_url !== 'string' || !/^https?:\/\/[^/]+/.test(b.worker_url)) {
    throw badRequest('invalid-ping', 'worker_url must be an http(s) URL', 'worker_url')
  }
  const state: Record<string, Range[]> = {}
  const raw = b.state ?? {}
  if (typeof raw !== 'object' || Array.isArray(raw)) throw badRequest('invalid-ping', 'state must be an object of dataset → ranges', 'state')
  for (const [name, value] of Object.entries(raw as Record<string, unknown>)) {
    const ranges = parseRanges(value)
    if (typeof ranges === 'string') throw badRequest('invalid-ping', ranges, `state.${name}`)
    state[name] = ranges
  }
  const queries = b.queries ?? undefined
  if (queries !== undefined && (typeof queries !== 'number' || !Number.isFinite(queries) || queries < 0)) {
    throw badRequest('invalid-ping', 'queries must be a non-negative number', 'queries')
  }
  return { worker_id: b.worker_id, worker_url: b.worker_url.replace(/\/+$/, ''), state, queries }
}

/** `?refresh=<seconds>` of the status page: 0 turns reloading off; default 5, at most an hour. */
function refreshSeconds(value: unknown): number {
  const n = typeof value === 'string' && /^\d{1,4}$/.test(value) ? Number(value) : 5
  return Math.min(n, 3600)
}

/** A dataset's `problems` when the state reports them (strings only), else none. */
function problemsOf(d: object): string[] {
  const problems = (d as { problems?: unknown }).problems
  return Array.isArray(problems) ? problems.filter((p): p is string => typeof p === 'string') : []
}
