import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { dbSettings } from '../db.js'
import { ApiError } from '../errors.js'
import { log } from '../log.js'
import { DEFAULT_BUDGETS, prepareQuery } from '../query/engine.js'
import { answerSent, fastPathStatus } from '../fast-path.js'
import type { QueryBudgets, QueryStream } from '../query/types.js'
import { accessDenied, checkTicketBlock, verifyTicket, workerToken, WORKER_TOKEN_HEADER, type Ticket } from './auth.js'
import { compressFor, compressor, negotiateEncoding, type CompressionMode } from './encoding.js'
import { createHttp, listen, observe } from './http.js'
import { Limiter, type LimiterOptions } from './limiter.js'
import { DEFAULT_WORKER_LIMITS } from './defaults.js'
import { KeyConcurrency } from './rate-limit.js'
import { workerQueriesActive, workerQueriesQueued, workerQueryBlocks, workerQueryBytes } from './metrics.js'
import { WorkerNode, type Lease, type WorkerNodeOptions } from './worker.js'
import { registerWorkerNudge } from './freshness.js'
import { peerCheck, PUBLIC } from './route-access.js'

export interface WorkerServerOptions extends Omit<WorkerNodeOptions, 'publicUrl' | 'id' | 'queryCount'>, LimiterOptions {
  /** Defaults to the public URL. */
  id?: string
  /** Defaults to the URL the server listens on. */
  publicUrl?: string
  budgets?: Partial<QueryBudgets>
  bodyLimit?: number
  /** Default `auto`: no compression for clients on this machine. */
  compression?: CompressionMode
  /**
   * The router's ticket secret: queries need a valid ticket (`?ticket=`, from the router's worker URL),
   * and pings are signed with it. Absent → queries are open (docs/serving.md, "Access control and limits").
   */
  ticketSecret?: Buffer
}


/**
 * The worker's HTTP face: `POST /datasets/:name/query` (streamed JSON, gzip/br), `GET /status`,
 * `GET /metrics`, `GET /health`, `GET /ready`. Queries run through a bounded limiter; each holds a
 * lease on the chunks it reads.
 */
export class WorkerServer {
  readonly app: FastifyInstance
  readonly limiter: Limiter
  /** Created once listening (its public URL may depend on the port). */
  node?: WorkerNode
  url = ''
  private readonly budgets: QueryBudgets
  /** Query requests answered so far, whatever their status (reported to the router for queries/s). */
  private queriesAnswered = 0
  /** Queries in progress per key (the ticket's key id), for the ticket's concurrency limit. */
  private readonly perKey = new KeyConcurrency()
  /** The verified ticket of each query request. */
  private readonly tickets = new WeakMap<FastifyRequest, Ticket>()

  constructor(private readonly opts: WorkerServerOptions) {
    this.app = createHttp({
      service: 'worker',
      bodyLimit: opts.bodyLimit ?? DEFAULT_WORKER_LIMITS.bodyLimit,
      readiness: () => this.node?.readiness() ?? { ready: false, reason: 'starting' },
      access: {
        data: (req) => this.checkTicket(req as FastifyRequest<{ Params: { name?: string }; Querystring: { ticket?: unknown } }>),
        peer: peerCheck('worker', opts.ticketSecret),
      },
    })
    this.budgets = { ...DEFAULT_BUDGETS, ...opts.budgets }
    this.limiter = new Limiter(opts, (active, queued) => {
      workerQueriesActive.set({ worker: this.id }, active)
      workerQueriesQueued.set({ worker: this.id }, queued)
    })
    this.routes()
  }

  get id(): string {
    return this.node?.opts.id ?? ''
  }

  /** Listen, then register with the router (or list storage) and fetch chunks; returns the base URL. */
  async start(host: string, port: number): Promise<string> {
    // Fail at start, not at the first heartbeat, when the storage is unusable.
    await this.opts.storage.listDatasets()
    this.url = await listen(this.app, host, port)
    const publicUrl = (this.opts.publicUrl ?? this.url).replace(/\/+$/, '')
    const secret = this.opts.ticketSecret
    this.node = new WorkerNode({
      ...this.opts,
      id: this.opts.id ?? publicUrl,
      publicUrl,
      queryCount: () => this.queriesAnswered,
      pingHeaders: secret ? () => ({ [WORKER_TOKEN_HEADER]: workerToken(secret) }) : undefined,
    })
    await this.node.start()
    const { jemalloc, page_fault_us } = fastPathStatus()
    log.info({ url: this.url, id: this.node.opts.id, router: this.opts.routerUrl ?? null, jemalloc, pageFaultUs: page_fault_us }, 'worker listening')
    return this.url
  }

  async stop(): Promise<void> {
    await this.node?.stop()
    await this.app.close()
  }

  private routes(): void {
    this.app.get('/status', PUBLIC, async () => ({ ...this.node?.status(), queries: { ...this.limiter.stats, answered: this.queriesAnswered }, tickets: !!this.opts.ticketSecret, duckdb: await dbSettings(), node: fastPathStatus() }))
    registerWorkerNudge(this.app, () => this.node?.nudge())
    // A `data` route (route-access.ts): its ticket is checked before the body is read.
    this.app.post<{ Params: { name: string } }>('/datasets/:name/query', (req, reply) => this.query(req, reply))
  }

  /** With a ticket secret, a data request needs a valid ticket for its dataset (kept for the query's block and key checks). */
  private checkTicket(req: FastifyRequest<{ Params: { name?: string }; Querystring: { ticket?: unknown } }>): void {
    const secret = this.opts.ticketSecret
    if (!secret) return
    try {
      this.tickets.set(req, verifyTicket(secret, req.query.ticket, req.params.name ?? ''))
    } catch (e) {
      if (e instanceof ApiError) accessDenied.inc({ service: 'worker', code: e.code })
      this.queriesAnswered++
      throw e
    }
  }

  private async query(req: FastifyRequest<{ Params: { name: string } }>, reply: FastifyReply): Promise<void> {
    const dataset = req.params.name
    const started = performance.now()
    const gone = new AbortController()
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) gone.abort()
    })
    let lease: Lease | undefined
    let release: (() => void) | undefined
    let releaseKey: (() => void) | undefined
    let streaming = false
    try {
      const ticket = this.tickets.get(req)
      if (ticket) {
        try {
          checkTicketBlock(ticket, (req.body as { fromBlock?: unknown } | undefined)?.fromBlock)
          releaseKey = this.perKey.acquire(ticket.key, ticket.concurrency)
        } catch (e) {
          if (e instanceof ApiError) accessDenied.inc({ service: 'worker', code: e.code })
          throw e
        }
      }
      if (!this.node) throw new ApiError(503, 'starting', 'the worker is starting', undefined, 1)
      lease = this.node.lease(dataset)
      if (!lease) throw new ApiError(404, 'unknown-dataset', `unknown dataset "${dataset}"`)
      release = await this.limiter.acquire(gone.signal)
      const stream = await prepareQuery(lease.view, req.body, this.budgets)
      const pieces = stream.body[Symbol.asyncIterator]()
      // Pull the first piece before answering, so an error there still gets a proper status.
      const first = await pieces.next()
      // A second piece is pulled before answering too: when there is none, the whole answer is
      // known and goes out in one write with its length and `x-num-read-chunks` as a header
      // (no chunked encoding, no stream pipeline: ~0.3 ms less per small answer,
      // docs/benchmark-history.md step 27).
      const second = first.done ? first : await pieces.next()
      if (gone.signal.aborted) {
        await pieces.return?.()
        reply.hijack()
        reply.raw.destroy()
        return
      }
      reply.hijack()
      streaming = true
      const res = reply.raw
      const compress = compressFor(this.opts.compression ?? 'auto', req.socket.remoteAddress, req.headers)
      const encoding = compress ? negotiateEncoding(req.headers['accept-encoding']) : 'identity'
      const json = { 'content-type': 'application/json', vary: 'accept-encoding' }
      if (second.done && encoding === 'identity') {
        const whole = first.done ? Buffer.alloc(0) : first.value
        res.writeHead(200, { ...json, 'content-length': whole.length, 'x-num-read-chunks': String(stream.stats.chunksRead) })
        // Once the last byte is with the socket, the answer's row memory can serve the next ones.
        res.end(whole, () => answerSent(stream))
        this.answered(req, dataset, stream.stats, started, gone.signal.aborted)
        return
      }
      res.writeHead(200, {
        ...json,
        trailer: 'x-num-read-chunks',
        ...(encoding === 'identity' ? {} : { 'content-encoding': encoding }),
      })
      async function* body() {
        try {
          if (!first.done) yield first.value
          if (!second.done) yield second.value
          for (let r = second.done ? second : await pieces.next(); !r.done; r = await pieces.next()) yield r.value
          res.addTrailers({ 'x-num-read-chunks': String(stream.stats.chunksRead) })
        } finally {
          await pieces.return?.()
        }
      }
      const zip = compressor(encoding)
      try {
        // If the client goes away, pipeline destroys the source, which ends the engine's iterator.
        if (zip) await pipeline(Readable.from(body()), zip, res)
        else await pipeline(Readable.from(body()), res)
        answerSent(stream)
      } catch (e) {
        if (gone.signal.aborted) log.info({ dataset, blocks: stream.stats.blocks }, 'worker: client went away mid-stream')
        else log.error({ err: e, dataset }, 'worker: query failed mid-stream; connection closed')
      } finally {
        await pieces.return?.()
      }
      this.answered(req, dataset, stream.stats, started, gone.signal.aborted)
    } catch (e) {
      // Before the first byte: the error handler answers with the error's status and JSON body.
      if (!streaming) throw e
      log.error({ err: e, dataset }, 'worker: query failed mid-stream; connection closed')
      reply.raw.destroy()
    } finally {
      release?.()
      releaseKey?.()
      lease?.release()
      this.queriesAnswered++
    }
  }

  /** Metrics of an answered query. */
  private answered(req: FastifyRequest, dataset: string, stats: QueryStream['stats'], started: number, aborted: boolean): void {
    const labels = { worker: this.id, dataset }
    workerQueryBlocks.inc(labels, stats.blocks)
    workerQueryBytes.inc(labels, stats.bytes)
    observe('worker', req, aborted ? 499 : 200, performance.now() - started)
  }
}

/** Convenience: start a worker server in this process. */
export async function startWorker(opts: WorkerServerOptions, host = '127.0.0.1', port = 0): Promise<WorkerServer> {
  const w = new WorkerServer(opts)
  await w.start(host, port)
  return w
}
