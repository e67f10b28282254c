import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ApiError, badRequest } from '../errors.js'
import { log } from '../log.js'
import { accessDenied, KeyStore, presentedKey, sha256, signTicket, type KeyEntry } from './auth.js'
import { createHttp, listen, prefersHtml } from './http.js'
import { peerCheck, PUBLIC } from './route-access.js'
import { routerDatasetHeight, routerWorkersAlive } from './metrics.js'
import { parseRanges, type Range } from './ranges.js'
import { defaultBurst, TokenBuckets, type RateLimit } from './rate-limit.js'
import { RouterState, type PingMessage, type RouterOptions } from './router.js'
import { renderStatusPage, type RouterStatus } from './status-page.js'
import type { ChunkStorage } from './storage.js'
import { registerRouterFreshnessRoutes, startRouterFreshness, type RouterFreshness } from './freshness.js'
import type { HeadWatchOptions } from './head-watch.js'
import { DEFAULT_HEAD_WATCH, DEFAULT_TICKET_TTL_S } from './defaults.js'

export interface RouterServerOptions extends RouterOptions {
  storage: ChunkStorage
  /** Re-list storage this often so chunks written by a running ingest appear. */
  relistMs: number
  /** How often the datasets' head files are checked (default DEFAULT_HEAD_WATCH; docs/serving.md, "Freshness"). */
  headWatch?: HeadWatchOptions
  bodyLimit?: number
  /** Access control, tickets and rate limits; everything off by default. */
  access?: RouterAccessOptions
}

/** docs/serving.md, "Access control and limits". */
export interface RouterAccessOptions {
  /** API keys (turns access control on; needs `ticketSecret`). */
  keysFile?: string
  /** How often the keys file is checked for changes (default 1000 ms). */
  keysReloadMs?: number
  /** Shared with the workers: signs tickets and authenticates pings. Without a keys file, tickets are still issued. */
  ticketSecret?: Buffer
  /** Ticket lifetime (default 60 s). */
  ticketTtlS?: number
  /** Requests/s per key (per client address without keys) to the dataset routes; 0/absent = no limit. */
  rateLimit?: number
  /** Token bucket size (default: two seconds' worth, at least 1). */
  rateBurst?: number
  /** Queries at once per key on each worker (carried in the ticket); 0/absent = no limit. */
  keyConcurrency?: number
}


/** Who asks: a key (access control on) or a client address. */
interface Caller {
  id: string
  entry?: KeyEntry
}


/**
 * The router's HTTP face (docs/protocol.md §1, §4; pings and status: docs/serving.md):
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
  /** Present when access control is on. */
  readonly keys?: KeyStore
  private readonly buckets = new TokenBuckets()
  /** The caller of each data request, as authenticated before its handler runs. */
  private readonly callers = new WeakMap<FastifyRequest, Caller>()
  private freshness?: RouterFreshness
  /** Listing jobs (periodic listing, head files) run one at a time. */
  private listing: Promise<void> = Promise.resolve()

  constructor(private readonly opts: RouterServerOptions) {
    const access = opts.access ?? {}
    if (access.keysFile && !access.ticketSecret) {
      throw new Error('access control (--keys-file) needs the ticket secret shared with the workers: --ticket-secret-file or BLOCK_ARCHIVE_TICKET_SECRET')
    }
    if (access.keysFile) this.keys = new KeyStore(access.keysFile, access.keysReloadMs)
    this.state = new RouterState(opts.storage, opts)
    this.app = createHttp({
      service: 'router',
      bodyLimit: opts.bodyLimit,
      readiness: () => (this.listed ? { ready: true } : { ready: false, reason: 'storage not listed yet' }),
      notFoundHint: (route) => this.routeHint(route),
      access: {
        data: (req, reply) => {
          const caller = this.authenticate(req as FastifyRequest<{ Params: { key?: string } }>, reply)
          this.admit(caller)
          this.callers.set(req, caller)
        },
        peer: peerCheck('router', opts.access?.ticketSecret),
      },
    })
    this.routes()
  }

  /** List storage, start the periodic jobs and listen; returns the router's base URL. */
  async start(host: string, port: number): Promise<string> {
    await this.state.relist(true)
    this.listed = true
    this.keys?.start()
    this.every(this.opts.relistMs, () =>
      this.serial(async () => {
        const t0 = performance.now()
        await this.state.relist()
        log.debug({ ms: Math.round(performance.now() - t0) }, 'router: storage listed')
      }),
    )
    this.freshness = startRouterFreshness({ state: this.state, watch: this.opts.headWatch ?? DEFAULT_HEAD_WATCH, secret: this.opts.access?.ticketSecret, serial: (job) => this.serial(job) })
    // Check liveness at a fraction of the heartbeat so dead workers lose their chunks promptly.
    this.every(Math.max(50, Math.floor(this.opts.heartbeatMs / 2)), async () => this.state.tick())
    this.url = await listen(this.app, host, port)
    log.info({ url: this.url, storage: this.opts.storage.location }, 'router listening')
    return this.url
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearTimeout(t)
    this.timers = []
    this.freshness?.stop()
    this.keys?.stop()
    await this.app.close()
  }

  datasetUrl(name: string): string {
    return `${this.url}/datasets/${encodeURIComponent(name)}`
  }

  /** Run listing jobs one after the other. */
  private serial(job: () => Promise<void>): Promise<void> {
    const run = this.listing.then(job)
    this.listing = run.catch(() => undefined)
    return run
  }

  /** A dataset's base URL is `/datasets/<name>`: said in the 404 of other paths, with the datasets there are. */
  private routeHint(route: string): string {
    const names = this.state.datasetNames()
    const first = route.split('/')[1] ?? ''
    const meant = names.some((n) => encodeURIComponent(n) === first) ? `did you mean /datasets${route}? ` : ''
    const listed = names.length ? `datasets: ${names.slice(0, 20).join(', ')}${names.length > 20 ? ', …' : ''}` : 'no datasets yet'
    return `${meant}a dataset's base URL is http://HOST:PORT/datasets/<name> (GET …/height, GET …/<block>/worker; GET /datasets lists them); ${listed}`
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

  /** What access control is on, in numbers (never a key). */
  accessStatus() {
    const a = this.opts.access ?? {}
    return {
      apiKeys: this.keys ? this.keys.size : null,
      tickets: !!a.ticketSecret,
      ticketTtlS: a.ticketSecret ? (a.ticketTtlS ?? DEFAULT_TICKET_TTL_S) : null,
      rateLimit: a.rateLimit ? { rps: a.rateLimit, burst: a.rateBurst ?? defaultBurst(a.rateLimit), per: this.keys ? 'key' : 'address' } : null,
      keyConcurrency: a.keyConcurrency || null,
    }
  }

  /** Who asks: with access control, the key presented (401 none, 403 unknown or revoked); else the client address. */
  private authenticate(req: FastifyRequest<{ Params: { key?: string } }>, reply: FastifyReply): Caller {
    if (!this.keys) return { id: `ip:${req.ip}` }
    const key = presentedKey(req.params.key, req.headers.authorization)
    if (!key) {
      reply.header('www-authenticate', 'Bearer realm="block-archive"')
      throw denied(401, 'api-key-required', 'this archive needs an API key: send "Authorization: Bearer <key>", or use the base URL http://HOST/k/<key>/datasets/<name>')
    }
    const entry = this.keys.lookup(key)
    if (!entry) {
      log.debug({ keyHash: sha256(key).slice(0, 8) }, 'access: unknown API key')
      throw denied(403, 'invalid-api-key', 'this API key is not valid')
    }
    if (entry.revoked) {
      log.debug({ key: entry.id }, 'access: revoked API key')
      throw denied(403, 'revoked-api-key', 'this API key has been revoked')
    }
    return { id: entry.id, entry }
  }

  /** One request of the caller's rate: 429 with Retry-After when its bucket is empty. */
  private admit(caller: Caller): void {
    const limit = this.rateLimitOf(caller)
    const wait = this.buckets.take(caller.id, limit)
    if (wait) {
      const who = caller.entry ? 'with this API key' : 'from this address'
      throw denied(429, 'rate-limited', `too many requests ${who}: at most ${limit.rps}/s (bursts of ${limit.burst}); retry in ${wait} s`, wait)
    }
  }

  private rateLimitOf(caller: Caller): RateLimit {
    const a = this.opts.access ?? {}
    const own = caller.entry?.rps
    if (own !== undefined) return { rps: own, burst: caller.entry?.burst ?? defaultBurst(own) }
    const rps = a.rateLimit ?? 0
    return { rps, burst: caller.entry?.burst ?? a.rateBurst ?? defaultBurst(rps) }
  }

  /** A worker URL with a ticket for `block` (when the router has a secret). */
  private withTicket(url: string, caller: Caller, dataset: string, block: number): string {
    const a = this.opts.access ?? {}
    if (!a.ticketSecret) return url
    const ticket = signTicket(a.ticketSecret, {
      dataset,
      from: block,
      to: Math.max(block, this.state.chunkEnd(dataset, block) ?? block),
      key: caller.id,
      expires: Date.now() + (a.ticketTtlS ?? DEFAULT_TICKET_TTL_S) * 1000,
      concurrency: (caller.entry?.concurrency ?? a.keyConcurrency) || undefined,
    })
    return `${url}?ticket=${ticket}`
  }

  /** The state's status with every field the status page reads. */
  status(): RouterStatus {
    const s = this.state.status()
    return { ...s, datasets: s.datasets.map((d) => ({ ...d, problems: problemsOf(d) })) }
  }

  private routes(): void {
    const app = this.app
    const state = this.state

    // The dataset routes, also under `/k/<key>` for clients that can only set a base URL (the SDK's
    // setGateway): `http://HOST/k/<key>/datasets/<name>`. Without access control the key is ignored.
    // They are `data` routes (route-access.ts): authenticated and rate-limited before their handler runs.
    for (const prefix of ['', '/k/:key']) {
      app.get<{ Params: { name: string; key?: string } }>(`${prefix}/datasets/:name/height`, async (req, reply) => {
        const h = state.height(req.params.name)
        reply.type('text/plain; charset=utf-8')
        return String(h)
      })

      app.get<{ Params: { name: string; block: string; key?: string } }>(`${prefix}/datasets/:name/:block/worker`, async (req, reply) => {
        const caller = this.callers.get(req)!
        const { name, block } = req.params
        if (!/^\d+$/.test(block) || !Number.isSafeInteger(Number(block))) {
          throw badRequest('invalid-block', `block must be a non-negative integer, got "${block}"`, 'block')
        }
        const url = this.withTicket(state.route(name, Number(block)), caller, name, Number(block))
        reply.type('text/plain; charset=utf-8')
        return url
      })
    }

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
    app.get<{ Querystring: { refresh?: string } }>('/', PUBLIC, async (req, reply) => {
      reply.header('vary', 'accept')
      if (!prefersHtml(req.headers.accept)) return listing(req)
      reply.type('text/html; charset=utf-8')
      return renderStatusPage(this.status(), { refreshSeconds: refreshSeconds(req.query.refresh), generatedAt: new Date() })
    })
    app.get('/datasets', PUBLIC, listing)

    app.post('/ping', { config: { access: 'peer' } }, async (req) => state.ping(parsePing(req.body)))

    app.get('/status', PUBLIC, async () => ({ ...this.status(), access: this.accessStatus() }))
    registerRouterFreshnessRoutes(app, state, () => this.freshness)

    app.addHook('onRequest', async (req) => {
      if (req.url === '/metrics') {
        routerWorkersAlive.set(state.liveWorkers().length)
        for (const name of state.datasetNames()) routerDatasetHeight.set({ dataset: name }, state.height(name))
      }
    })
  }
}

function denied(status: number, code: string, message: string, retryAfter?: number): ApiError {
  accessDenied.inc({ service: 'router', code })
  return new ApiError(status, code, message, undefined, retryAfter)
}

function parsePing(body: unknown): PingMessage {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw badRequest('invalid-ping', 'ping must be a JSON object')
  const b = body as Record<string, unknown>
  if (typeof b.worker_id !== 'string' || !b.worker_id) throw badRequest('invalid-ping', 'worker_id must be a non-empty string', 'worker_id')
  if (typeof b.worker_url !== 'string' || !/^https?:\/\/[^/]+/.test(b.worker_url)) {
    throw badRequest('invalid-ping', 'worker_url must be an http(s) URL', 'worker_url')
  }
  const queries = b.queries ?? undefined
  if (queries !== undefined && (typeof queries !== 'number' || !Number.isFinite(queries) || queries < 0)) {
    throw badRequest('invalid-ping', 'queries must be a non-negative number', 'queries')
  }
  const desiredVersion = b.desired_version ?? undefined
  if (desiredVersion !== undefined && typeof desiredVersion !== 'string') throw badRequest('invalid-ping', 'desired_version must be a string', 'desired_version')
  const ping: PingMessage = { worker_id: b.worker_id, worker_url: b.worker_url.replace(/\/+$/, ''), queries, desired_version: desiredVersion }
  if (b.delta !== undefined) {
    if (b.state !== undefined) throw badRequest('invalid-ping', 'a ping has either state or delta, not both', 'delta')
    const d = b.delta as Record<string, unknown> | null
    if (!d || typeof d !== 'object' || Array.isArray(d) || typeof d.base !== 'string') throw badRequest('invalid-ping', 'delta must be an object with base (a state_version), added and removed', 'delta')
    ping.delta = { base: d.base, added: parseState(d.added ?? {}, 'delta.added'), removed: parseState(d.removed ?? {}, 'delta.removed') }
  } else {
    ping.state = parseState(b.state ?? {}, 'state')
  }
  return ping
}

/** dataset → ranges, checked. */
function parseState(raw: unknown, field: string): Record<string, Range[]> {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw badRequest('invalid-ping', `${field} must be an object of dataset → ranges`, field)
  const state: Record<string, Range[]> = {}
  for (const [name, value] of Object.entries(raw as Record<string, unknown>)) {
    const ranges = parseRanges(value)
    if (typeof ranges === 'string') throw badRequest('invalid-ping', ranges, `${field}.${name}`)
    state[name] = ranges
  }
  return state
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
