import { isAscii } from 'node:buffer'
import type http from 'node:http'
import type { WsConnection } from '@subsquid/rpc-client/lib/transport/ws.js'
import { BodyBuffers, decodeText } from '../body-buffers.js'
import { httpRequest, keptAliveAgent } from '../http-request.js'
import { log } from '../log.js'
import { exponential, retry } from '../retry.js'
import { Semaphore } from '../semaphore.js'

/*
 * The one JSON-RPC 2.0 client of the code base (EVM, Starknet and Substrate nodes), over HTTP(S)
 * (src/http-request.ts) or WebSocket (the connection of @subsquid/rpc-client: frames, ids, reconnects
 * at the next request): batching, a bound on requests in flight (src/semaphore.ts), and retries with
 * exponential back-off (src/retry.ts) for failures that are worth retrying (connection errors,
 * timeouts, HTTP 429/5xx, truncated bodies, JSON-RPC "rate limit"/"busy" errors). Anything else is
 * thrown at once with the method and parameters named.
 */

export interface RpcClientOptions {
  url: string
  /** Requests in flight at once (default 4). */
  concurrency?: number
  /** Tries per request before giving up (default 8). */
  attempts?: number
  /** First back-off delay; doubled on every retry up to `maxBackoffMs` (defaults 200 ms, 10 s). */
  backoffMs?: number
  maxBackoffMs?: number
  /** Time limit per request (default 60 s). */
  timeoutMs?: number
  /** Counters to add to (default: the client's own). */
  stats?: TransferStats
}

/** Requests, calls, retries and bytes moved by a source, for progress and measurements. */
export interface TransferStats {
  requests: number
  calls: number
  retries: number
  bytes: number
  /** Time spent decoding and parsing answers (ms). */
  parseMs: number
}

export const newTransferStats = (): TransferStats => ({ requests: 0, calls: 0, retries: 0, bytes: 0, parseMs: 0 })

export interface RpcCall {
  method: string
  params: unknown[]
}

/** The node answered with a JSON-RPC error object. */
export class RpcError extends Error {
  constructor(
    readonly method: string,
    readonly params: unknown[],
    readonly code: number,
    readonly rpcMessage: string,
    readonly data?: unknown,
  ) {
    super(`${method}(${describeParams(params)}) failed: ${rpcMessage} (code ${code})`)
  }

  /** The node does not know the method (or refuses it on this endpoint). */
  get unsupported(): boolean {
    return this.code === -32601 || /method .*(not found|not supported|does not exist|not available)|unsupported method/i.test(this.rpcMessage)
  }
}

/** Retries were exhausted. */
export class RpcUnavailable extends Error {}

/** The node's answer is not a JSON-RPC answer at all (not JSON, ids missing, wrong batch size…). */
export class RpcProtocolError extends Error {}

export function describeParams(params: unknown[]): string {
  return params.map((p) => JSON.stringify(p)).join(', ')
}

const TRANSIENT_RPC = /rate.?limit|too many requests|exceeded|timeout|timed out|busy|try again|overload|temporarily|unavailable|header not found/i

/** JSON-RPC error answers worth retrying (the same call may succeed later). */
export function isTransientRpcError(code: number, message: string): boolean {
  if (code === -32005 || code === 429) return true
  return TRANSIENT_RPC.test(message)
}

class Retryable extends Error {}

/*
 * An HTTP server that is no JSON-RPC node (a web server, a wrong port or path) answers a complete
 * body that is no JSON-RPC answer: a 4xx (other than 408 and 429) or 501/505, or an HTML page. Trying
 * it again cannot help, so it fails at once.
 */
const NEVER_RETRIED = new Set([501, 505])

function notANode(status: number, text: string): boolean {
  const permanent = (status >= 400 && status < 500 && status !== 408 && status !== 429) || NEVER_RETRIED.has(status)
  if (!permanent && !(status === 200 && /^\s*</.test(text))) return false
  try {
    const json = JSON.parse(text)
    return !(json && typeof json === 'object' && (Array.isArray(json) || 'error' in json || 'result' in json))
  } catch {
    return true
  }
}

/** The start of a body for a one-line message: tags and runs of blanks dropped. */
function excerpt(text: string): string {
  const plain = text.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim()
  if (!plain) return ''
  return `: ${plain.length > 120 ? `${plain.slice(0, 120)}…` : plain}`
}

export class RpcClient {
  readonly url: string
  private readonly concurrency: number
  private readonly attempts: number
  private readonly backoffMs: number
  private readonly maxBackoffMs: number
  private readonly timeoutMs: number
  /** HTTP(S): kept-alive connections, at most `concurrency`. */
  private readonly agent?: http.Agent
  /** WebSocket: whether the URL is one, the connection (made at the first request), and its opening while one is under way or open. */
  private readonly ws: boolean = false
  private socket?: WsConnection
  private opened?: Promise<WsConnection>
  private readonly inFlight: Semaphore
  private nextId = 1
  private readonly bodies: BodyBuffers
  /** Counters for progress and measurements. */
  readonly stats: TransferStats

  constructor(opts: RpcClientOptions) {
    this.url = opts.url
    this.stats = opts.stats ?? newTransferStats()
    this.concurrency = Math.max(1, opts.concurrency ?? 4)
    this.inFlight = new Semaphore(this.concurrency)
    this.attempts = Math.max(1, opts.attempts ?? 8)
    this.backoffMs = opts.backoffMs ?? 200
    this.maxBackoffMs = opts.maxBackoffMs ?? 10_000
    this.timeoutMs = opts.timeoutMs ?? 60_000
    const protocol = new URL(opts.url).protocol
    if (protocol === 'http:' || protocol === 'https:') this.agent = keptAliveAgent(opts.url, this.concurrency)
    else if (protocol === 'ws:' || protocol === 'wss:') this.ws = true
    else throw new Error(`--rpc must be an http(s) or ws(s) URL, got ${opts.url}`)
    this.bodies = new BodyBuffers(this.concurrency)
  }

  /**
   * A body that `batchRaw` returned is no longer needed (its bytes were written out): its buffer
   * receives the next bodies. Optional; a body not given back is garbage-collected as usual.
   */
  releaseBody(body: Buffer): void {
    this.bodies.give(body, body.length)
  }

  /** Closes the WebSocket connection and kept-alive HTTP connections (a later request opens them again). */
  close(): void {
    this.socket?.close()
    this.agent?.destroy()
  }

  async call(method: string, params: unknown[] = []): Promise<any> {
    const [r] = await this.batch([{ method, params }])
    if (r instanceof RpcError) throw r
    return r
  }

  /**
   * Send calls in one HTTP request (a JSON-RPC batch when there are several). Each result is the
   * call's `result` or an `RpcError` for a non-transient error answer; transient errors are retried.
   */
  async batch(calls: RpcCall[]): Promise<unknown[]> {
    const r = await this.exchange(calls)
    return r.answers!
  }

  /**
   * Like `batch`, but the answer's bytes are handed to `scan` first: when the body is ASCII, one
   * complete JSON value without an `"error"` member and `scan` accepts it (returns a value), no JSON
   * is parsed and no string is made of it, and `{body, scanned}` is returned; otherwise the body is
   * parsed as `batch` does (`{answers}`). `ids` are the JSON-RPC ids of the calls (unique within the
   * request), e.g. block numbers, so that a reader of the raw answers knows which call each one answers.
   */
  async batchRaw<T>(calls: RpcCall[], ids: number[], scan: (body: Buffer) => T | undefined): Promise<{ body: Buffer; scanned: T } | { answers: unknown[] }> {
    const r = await this.exchange(calls, ids, scan)
    return r.answers ? { answers: r.answers } : { body: r.body!, scanned: r.scanned as T }
  }

  private async exchange(calls: RpcCall[], ids?: number[], scan?: (body: Buffer) => unknown): Promise<{ answers?: unknown[]; body?: Buffer; scanned?: unknown }> {
    if (calls.length === 0) return { answers: [] }
    const release = await this.inFlight.acquire()
    try {
      return await retry(() => this.send(calls, ids ?? calls.map(() => this.nextId++), scan), {
        attempts: this.attempts,
        pauseMs: exponential(this.backoffMs, this.maxBackoffMs, 0.25),
        retryable: (e) => e instanceof Retryable,
        onRetry: (e, attempt, delayMs) => {
          this.stats.retries++
          log.warn({ url: this.url, call: what(calls), attempt, delayMs: Math.round(delayMs), err: (e as Error).message }, 'RPC request failed, retrying')
        },
        exhausted: (e, attempt) => new RpcUnavailable(`${what(calls)} at ${this.url} failed ${attempt} times; last error: ${(e as Error).message}`),
      })
    } finally {
      release()
    }
  }

  private send(calls: RpcCall[], ids: number[], scan?: (body: Buffer) => unknown): Promise<{ answers?: unknown[]; body?: Buffer; scanned?: unknown }> {
    this.stats.requests++
    this.stats.calls += calls.length
    // one WebSocket carries every request: ids given by a caller (block numbers) could repeat there
    return this.ws ? this.sendFrame(calls, calls.map(() => this.nextId++)) : this.post(calls, ids, scan)
  }

  private async post(calls: RpcCall[], ids: number[], scan?: (body: Buffer) => unknown): Promise<{ answers?: unknown[]; body?: Buffer; scanned?: unknown }> {
    const body = calls.length === 1 ? request(calls[0], ids[0]) : calls.map((c, i) => request(c, ids[i]))
    let raw: Buffer
    let status: number
    let statusText: string
    try {
      const answer = await httpRequest(this.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
        timeoutMs: this.timeoutMs,
        agent: this.agent,
        // the body's pieces are copied into one buffer as they arrive (from `bodies`: see BodyBuffers)
        buffers: this.bodies,
      })
      ;({ status, statusText, bytes: raw } = answer)
    } catch (e: any) {
      throw new Retryable(e?.name === 'TimeoutError' ? `timed out after ${this.timeoutMs} ms` : (e?.cause?.message ?? e?.message ?? String(e)))
    }
    // JSON from nodes is ASCII nearly always: its length in characters is its length in bytes
    const ascii = isAscii(raw)
    const text = () => decodeText(raw, ascii)
    if (notANode(status, text())) {
      throw new RpcProtocolError(`${this.url} is not a JSON-RPC node: HTTP ${status}${statusText ? ` ${statusText}` : ''}${excerpt(text())}`)
    }
    if (status === 429 || status >= 500) throw new Retryable(`HTTP ${status}: ${text().slice(0, 200)}`)
    if (scan && ascii && status === 200 && looksComplete(raw, calls.length > 1) && !hasErrorMember(raw)) {
      // scanned in place: a string of the body would be one more copy of it, and garbage to collect
      const scanned = scan(raw)
      if (scanned !== undefined) {
        this.stats.bytes += raw.length
        return { body: raw, scanned }
      }
    }
    const decoded = text()
    this.releaseBody(raw)
    this.stats.bytes += decoded.length
    return { answers: this.decode(decoded, status, calls, ids) }
  }

  private decode(text: string, status: number, calls: RpcCall[], ids: number[]): unknown[] {
    let json: any
    const t0 = performance.now()
    try {
      json = JSON.parse(text)
      this.stats.parseMs += performance.now() - t0
    } catch {
      // a cut-off body is a transport failure; an HTML error page with 200 is not worth retrying forever either
      throw new Retryable(`HTTP ${status}: the answer is not JSON: ${text.slice(0, 200)}`)
    }
    if (status >= 400 && !(json && (json.error || Array.isArray(json)))) {
      throw new RpcProtocolError(`${what(calls)} at ${this.url}: HTTP ${status}: ${text.slice(0, 300)}`)
    }
    if (calls.length > 1 && !Array.isArray(json)) {
      // some nodes answer a whole batch with one error object (e.g. batches disabled or too large)
      if (json?.error && isTransientRpcError(json.error.code, String(json.error.message))) throw new Retryable(String(json.error.message))
      throw new RpcProtocolError(
        `${what(calls)} at ${this.url}: the node did not answer the batch with an array` +
          (json?.error ? ` (${json.error.message}); try --batch-size 1` : ''),
      )
    }
    return this.answersOf(Array.isArray(json) ? json : [json], calls, ids)
  }

  /** Each call's result, or an `RpcError` for an error answer that is not transient. */
  private answersOf(answers: any[], calls: RpcCall[], ids: number[]): unknown[] {
    const byId = new Map<unknown, any>()
    for (const a of answers) byId.set(a?.id, a)
    return calls.map((c, i) => {
      const a = byId.get(ids[i]) ?? (answers.length === 1 && calls.length === 1 ? answers[0] : undefined)
      if (!a || typeof a !== 'object') {
        throw new RpcProtocolError(`${c.method}(${describeParams(c.params)}) at ${this.url}: no answer with id ${ids[i]} in the reply`)
      }
      if (a.error) {
        const code = Number(a.error.code)
        const message = String(a.error.message ?? JSON.stringify(a.error))
        if (isTransientRpcError(code, message)) throw new Retryable(`${c.method}: ${message} (code ${code})`)
        return new RpcError(c.method, c.params, code, message, a.error.data)
      }
      if (!('result' in a)) throw new RpcProtocolError(`${c.method}(${describeParams(c.params)}) at ${this.url}: answer has neither result nor error`)
      return a.result
    })
  }

  /** One exchange over the WebSocket, opened first when it is not open (the first request, or after it broke). */
  private async sendFrame(calls: RpcCall[], ids: number[]): Promise<{ answers: unknown[] }> {
    let replies: unknown[]
    let socket: WsConnection
    try {
      socket = await this.open()
    } catch (e) {
      // the socket library tells no reason ("Socket error")
      throw new Retryable(`cannot open a WebSocket connection (refused, unreachable, or no WebSocket endpoint): ${(e as Error)?.message ?? e}`)
    }
    try {
      replies = calls.length === 1
        ? [await socket.call(request(calls[0], ids[0]), this.timeoutMs)]
        : await socket.batchCall(calls.map((c, i) => request(c, ids[i])), this.timeoutMs)
    } catch (e) {
      // broken or timed-out connections, frames that are no JSON: the socket is closed and opened again at the next try
      throw new Retryable((e as Error)?.message ?? String(e))
    }
    return { answers: this.answersOf(replies, calls, ids) }
  }

  private open(): Promise<WsConnection> {
    this.opened ??= (async () => {
      // loaded here: a process reading a node over HTTP does not load the WebSocket library
      const { WsConnection } = await import('@subsquid/rpc-client/lib/transport/ws.js')
      this.socket ??= new WsConnection({ url: this.url, onReset: () => (this.opened = undefined) })
      await this.socket.connect()
      return this.socket
    })().catch((e) => {
      this.opened = undefined
      throw e
    })
    return this.opened
  }
}

function request(c: RpcCall, id: number) {
  return { jsonrpc: '2.0' as const, id, method: c.method, params: c.params }
}

/**
 * Whether a body ends as a complete answer does: a batch's array (`…}]`), a single answer's object
 * (`…}`). A body cut short inside a value ends otherwise nearly always; it is then parsed, which
 * fails and is retried.
 */
function looksComplete(body: Buffer, batch: boolean): boolean {
  let end = body.length - 1
  while (end > 0 && body[end] <= 32) end--
  if (batch) return body[end] === 93 /* ] */ && body[end - 1] === 125 /* } */
  return body[end] === 125
}

const RROR = Buffer.from('rror"')

/** Whether the body has an `"error"` member (searched from its `r`: the search looks for a pattern's first character, and quotes are everywhere in JSON). */
function hasErrorMember(body: Buffer): boolean {
  for (let at = body.indexOf(RROR); at >= 0; at = body.indexOf(RROR, at + 5)) if (body[at - 2] === 34 /* " */ && body[at - 1] === 101 /* e */) return true
  return false
}

function what(calls: RpcCall[]): string {
  if (calls.length === 1) return `${calls[0].method}(${describeParams(calls[0].params)})`
  const methods = [...new Set(calls.map((c) => c.method))].join(', ')
  return `batch of ${calls.length} calls (${methods})`
}
