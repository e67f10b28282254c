import { createRequire } from 'node:module'
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { randomUUID } from 'node:crypto'
import { ApiError } from '../errors.js'
import { log } from '../log.js'
import { registry } from '../metrics.js'
import { redactSecrets } from './auth.js'
import { describeJsonError } from './json-error.js'
import { httpDuration, httpRequests } from './metrics.js'
import { guardRoutes, PUBLIC, type AccessChecks } from './route-access.js'

// `require`, not `import`: as an ES module import Node scans fastify's CommonJS files for their exports (235 against 164 ms of CPU per process)
const { fastify: Fastify, LogController } = createRequire(import.meta.url)('fastify') as typeof import('fastify')

/*
 * What the router and the worker share: a fastify instance whose every error answer is
 * `{error, message, path?}` JSON (docs/protocol.md §4), request metrics, `GET /metrics`.
 */

/** fastify's own request errors → our stable codes. */
const FASTIFY_ERRORS: Record<string, { status: number; code: string; message?: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, code: 'body-too-large' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { status: 415, code: 'unsupported-media-type', message: 'expected a JSON body (content-type: application/json)' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { status: 400, code: 'invalid-content-length' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { status: 400, code: 'invalid-json', message: 'the request body is empty; expected a JSON query' },
  FST_ERR_CTP_INVALID_JSON_BODY: { status: 400, code: 'invalid-json' },
}

export function errorBody(e: ApiError): string {
  return JSON.stringify(e.body())
}

/** Send an ApiError as JSON with its status (and Retry-After for 503/429). */
export function sendApiError(reply: FastifyReply, e: ApiError): FastifyReply {
  if (e.retryAfter !== undefined) reply.header('retry-after', String(e.retryAfter))
  return reply.code(e.status).type('application/json').send(errorBody(e))
}

/** Any thrown value → ApiError; a non-ApiError is a bug, logged and answered with 500. */
export function toApiError(e: unknown, req?: FastifyRequest): ApiError {
  if (e instanceof ApiError) return e
  const err = e as { code?: string; statusCode?: number; message?: string }
  const known = err?.code ? FASTIFY_ERRORS[err.code] : undefined
  if (known) return new ApiError(known.status, known.code, known.message ?? err.message ?? known.code)
  if (e instanceof SyntaxError && (err.statusCode === 400 || /JSON/.test(e.message))) {
    return new ApiError(400, 'invalid-json', `the request body is not valid JSON: ${e.message}`)
  }
  if (err?.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
    return new ApiError(err.statusCode, 'bad-request', redactSecrets(err.message ?? 'bad request'))
  }
  // DuckDB ran out of its memory limit with the statements of the queries running: a retryable
  // refusal, as when the query slots are full, not a failure of the worker.
  if (/Out of Memory Error/.test(String(err?.message))) {
    log.warn({ url: req && redactSecrets(req.url), err: err.message }, 'query refused: DuckDB memory limit reached')
    return new ApiError(503, 'busy', 'server is too busy: the queries running take all of DuckDB\'s memory limit (--db-memory); ask again', undefined, 1)
  }
  // The details (message, stack, file paths) go to the log only; the client gets an id to quote.
  const incident = randomUUID().slice(0, 8)
  log.error({ err: e, url: req && redactSecrets(req.url), incident }, 'internal error')
  return new ApiError(500, 'internal-error', `internal error (incident ${incident}; the server log has the details)`)
}

/** How much of an oversized body is read and thrown away so that the 413 reaches the client. */
const DRAIN_MAX_BYTES = 256 * 1024 * 1024
const DRAIN_MAX_MS = 10_000

/** Read and discard what is left of a request body, up to `maxBytes` or `maxMs`. */
function drain(req: NodeJS.ReadableStream & { complete?: boolean }, maxBytes: number, maxMs: number): Promise<void> {
  if (req.complete) return Promise.resolve()
  return new Promise((resolve) => {
    let bytes = 0
    const done = () => {
      clearTimeout(timer)
      req.removeListener('data', onData)
      req.removeListener('end', done)
      req.removeListener('error', done)
      req.removeListener('close', done)
      resolve()
    }
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > maxBytes) done()
    }
    const timer = setTimeout(done, maxMs)
    req.on('data', onData)
    req.once('end', done)
    req.once('error', done)
    req.once('close', done)
    req.resume()
  })
}

export interface HttpOptions {
  service: 'router' | 'worker'
  bodyLimit?: number
  /** Answers `GET /ready`; absent → always ready. */
  readiness?: () => Readiness
  /** Appended to the 404 of an unknown route: what the routes look like (the request's path, without query). */
  notFoundHint?: (path: string) => string | undefined
  /** The checks of the routes that are not public (route-access.ts): every route gets its check here. */
  access: AccessChecks
}

export interface Readiness {
  ready: boolean
  /** Why not ready yet. */
  reason?: string
}

export function createHttp(opts: HttpOptions): FastifyInstance {
  const app = Fastify({
    loggerInstance: log.child({ service: opts.service }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: opts.bodyLimit ?? 8 * 1024 * 1024,
    // A URL fastify cannot decode: our JSON error, without echoing the URL's keys or tickets.
    frameworkErrors: (e, _req, reply) => {
      sendApiError(reply, toApiError(e))
    },
  })
  // Only JSON bodies are queries: without fastify's text/plain parser, other types answer 415.
  app.removeContentTypeParser('text/plain')
  // fastify's JSON parser (same __proto__/constructor checks), but a body that is not JSON is answered
  // with where it breaks (position, line, column, excerpt), not only that it does.
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    parseJson(req, body as string, (err, value) => {
      if ((err as { code?: string } | null)?.code !== 'FST_ERR_CTP_INVALID_JSON_BODY') return done(err, value)
      done(new ApiError(400, 'invalid-json', `the request body is not valid JSON: ${describeJsonError(body as string)}`), undefined)
    })
  })
  app.setErrorHandler(async (e, req, reply) => {
    const err = toApiError(e, req)
    // Answering while the client is still uploading makes it see a reset (EPIPE), not the 413, and
    // clients retry connection errors: read the rest of the body first (bounded), then close.
    if (err.status === 413) {
      await drain(req.raw, DRAIN_MAX_BYTES, DRAIN_MAX_MS)
      reply.header('connection', 'close')
    }
    sendApiError(reply, err)
  })
  app.setNotFoundHandler((req, reply) => {
    const route = redactSecrets(req.url.split('?')[0])
    const hint = opts.notFoundHint?.(route)
    sendApiError(reply, new ApiError(404, 'not-found', `no such route: ${req.method} ${route}${hint ? `; ${hint}` : ''}`))
  })
  app.addHook('onResponse', async (req, reply) => {
    observe(opts.service, req, reply.statusCode, reply.elapsedTime)
  })
  guardRoutes(app, opts.access)
  app.get('/metrics', PUBLIC, async (_req, reply) => {
    reply.type(registry.contentType)
    return registry.metrics()
  })
  // For orchestrators: /health = the process answers; /ready = it can do its job (route or serve).
  app.get('/health', PUBLIC, async () => ({ status: 'ok' }))
  app.get('/ready', PUBLIC, async (_req, reply) => {
    const r = opts.readiness?.() ?? { ready: true }
    if (r.ready) return { status: 'ready' }
    reply.code(503)
    return { status: 'starting', reason: r.reason ?? 'starting' }
  })
  return app
}

/**
 * Whether an `Accept` header prefers HTML to JSON (a browser rather than a script): the quality of
 * the most specific range matching `text/html` beats that of `application/json`. Absent, only a
 * wildcard, or malformed → false.
 */
export function prefersHtml(accept: string | undefined): boolean {
  if (!accept) return false
  const ranges = accept.split(',').map((part) => {
    const [type, ...params] = part.split(';').map((x) => x.trim().toLowerCase())
    const q = params.find((p) => p.startsWith('q='))
    const quality = q === undefined ? 1 : Number(q.slice(2))
    return { type, q: Number.isFinite(quality) ? Math.min(1, Math.max(0, quality)) : 0 }
  })
  const quality = (mediaType: string) => {
    const [major] = mediaType.split('/')
    let best = { specificity: -1, q: 0 }
    for (const r of ranges) {
      const specificity = r.type === mediaType ? 2 : r.type === `${major}/*` ? 1 : r.type === '*/*' ? 0 : -1
      if (specificity > best.specificity) best = { specificity, q: r.q }
    }
    return best.q
  }
  return quality('text/html') > quality('application/json')
}

/** Record one answered request (also called by hijacked handlers, which skip onResponse). */
export function observe(service: string, req: FastifyRequest, status: number, elapsedMs: number): void {
  const route = req.routeOptions.url ?? 'unmatched'
  httpRequests.inc({ service, route, status: String(status) })
  httpDuration.observe({ service, route }, elapsedMs / 1000)
}

/** Listen and return the base URL a client on this machine can reach. */
export async function listen(app: FastifyInstance, host: string, port: number): Promise<string> {
  await app.listen({ host, port })
  const addr = app.server.address()
  const actualPort = typeof addr === 'object' && addr ? addr.port : port
  const publicHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host
  return `http://${publicHost}:${actualPort}`
}
