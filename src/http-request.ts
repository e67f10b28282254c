import http from 'node:http'
import https from 'node:https'
import zlib from 'node:zlib'
import { BodyBuffers, decodeText } from './body-buffers.js'

/*
 * The one HTTP client of the code base, on node:http(s) with kept-alive connections: the archive
 * client's queries, the ingest's JSON-RPC and Sidecar requests, a worker's pings to its router, the
 * router's nudges and an ingest's notifications. Measured against the global fetch on loopback
 * (docs/benchmark-history.md, step 31): a request and its headers go out in one write (fetch wrote
 * headers and body apart), and a round trip costs the client about half the CPU.
 */

const agents = {
  'http:': new http.Agent({ keepAlive: true }),
  'https:': new https.Agent({ keepAlive: true }),
}

/** Kept-alive connections of one's own (e.g. at most `maxSockets` to a node), for `HttpRequestOptions.agent`. */
export function keptAliveAgent(url: string | URL, maxSockets?: number): http.Agent {
  const protocol = new URL(url).protocol
  return new (protocol === 'https:' ? https : http).Agent({ keepAlive: true, maxSockets })
}

export interface HttpAnswer {
  status: number
  statusText: string
  header(name: string): string | undefined
  /** The body as text (ASCII read as Latin-1, else UTF-8). */
  readonly text: string
  /** The body's bytes: with `HttpRequestOptions.buffers`, a view of a buffer of those. */
  readonly bytes: Buffer
}

export interface HttpRequestOptions {
  method?: 'GET' | 'POST'
  headers?: Record<string, string>
  body?: string
  timeoutMs: number
  signal?: AbortSignal
  /** Connections to use (default: the module's kept-alive agents, one per protocol). */
  agent?: http.Agent
  /**
   * Receive the body into a buffer of these, copied there as it arrives (bodies of many MB that
   * are scanned as bytes: the ingest's JSON-RPC answers). Give it back with `buffers.give` once read.
   */
  buffers?: BodyBuffers
}

/**
 * The request failed: `answered` false when no answer came at all (refused, reset, unknown host),
 * true when the answer broke off; `code` is the system's error code.
 */
export class RequestFailed extends Error {
  constructor(readonly answered: boolean, readonly code: string | undefined, cause: unknown) {
    super((cause as Error)?.message ?? String(cause), { cause })
  }
}

const REDIRECTS = new Set([301, 302, 303, 307, 308])
const MAX_REDIRECTS = 5

/**
 * One request, its answer read whole and decompressed (gzip, br, deflate). Rejects with
 * `RequestFailed` on network failures, with a `TimeoutError` after `timeoutMs` (the answer
 * included) and with the signal's reason when it aborts. Redirects are followed (at most 5).
 */
export async function httpRequest(url: string, o: HttpRequestOptions): Promise<HttpAnswer> {
  let target = url
  let method = o.method ?? 'GET'
  let body = o.body
  for (let hop = 0; ; hop++) {
    const answer = await once(target, method, body, o)
    const location = answer.header('location')
    if (!REDIRECTS.has(answer.status) || location === undefined || hop >= MAX_REDIRECTS) return answer
    target = new URL(location, target).toString()
    if (answer.status === 303 || (method === 'POST' && answer.status !== 307 && answer.status !== 308)) {
      method = 'GET'
      body = undefined
    }
  }
}

/** Where an answer's body is collected: its pieces (joined once, as text), or one growing buffer of `BodyBuffers`. */
interface Sink {
  add(piece: Buffer): void
  answer(status: number, statusText: string, headers: http.IncomingHttpHeaders): HttpAnswer
}

class Pieces implements Sink {
  private readonly parts: Buffer[] = []
  add(piece: Buffer): void {
    this.parts.push(piece)
  }
  answer(status: number, statusText: string, headers: http.IncomingHttpHeaders): HttpAnswer {
    const parts = this.parts
    let text: string | undefined
    let bytes: Buffer | undefined
    return {
      status,
      statusText,
      header: (name) => single(headers[name.toLowerCase()]),
      get text() {
        return (text ??= textOf(parts))
      },
      get bytes() {
        return (bytes ??= parts.length === 1 ? parts[0] : Buffer.concat(parts))
      },
    }
  }
}

class Buffered implements Sink {
  private body: Buffer
  private size = 0
  constructor(private readonly buffers: BodyBuffers, announced: number) {
    this.body = buffers.take(Number.isSafeInteger(announced) && announced >= 0 ? announced : 0)
  }
  add(piece: Buffer): void {
    if (this.size + piece.length > this.body.length) {
      const larger = this.buffers.take(Math.max(2 * this.body.length, this.size + piece.length))
      this.body.copy(larger, 0, 0, this.size)
      this.body = larger
    }
    this.size += piece.copy(this.body, this.size)
  }
  answer(status: number, statusText: string, headers: http.IncomingHttpHeaders): HttpAnswer {
    const bytes = this.body.subarray(0, this.size)
    let text: string | undefined
    return {
      status,
      statusText,
      header: (name) => single(headers[name.toLowerCase()]),
      get text() {
        return (text ??= decodeText(bytes))
      },
      bytes,
    }
  }
}

function once(url: string, method: string, body: string | undefined, o: HttpRequestOptions): Promise<HttpAnswer> {
  return new Promise<HttpAnswer>((resolve, reject) => {
    if (o.signal?.aborted) return reject(o.signal.reason)
    const parsed = new URL(url)
    const agent = o.agent ?? agents[parsed.protocol as keyof typeof agents]
    if (!agent || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) return reject(new TypeError(`unsupported protocol in ${url}`))
    const headers: Record<string, string | number> = { ...o.headers }
    if (body !== undefined) headers['content-length'] = Buffer.byteLength(body)
    let settled = false
    let answered = false
    const fail = (e: unknown) => {
      if (settled) return
      settled = true
      cleanup()
      req.destroy()
      reject(e)
    }
    const req = (parsed.protocol === 'https:' ? https : http).request(parsed, { method, headers, agent }, (res) => {
      answered = true
      const encoding = res.headers['content-encoding']
      const decoder = encoding === 'gzip' ? zlib.createGunzip() : encoding === 'br' ? zlib.createBrotliDecompress() : encoding === 'deflate' ? zlib.createInflate() : undefined
      const source = decoder ? res.pipe(decoder) : res
      const sink: Sink = o.buffers ? new Buffered(o.buffers, decoder ? 0 : Number(res.headers['content-length'])) : new Pieces()
      res.on('error', (e) => fail(new RequestFailed(true, (e as NodeJS.ErrnoException).code, e)))
      res.on('close', () => {
        if (!res.complete) fail(new RequestFailed(true, 'ECONNRESET', new Error('the connection closed before the whole answer came')))
      })
      decoder?.on('error', (e) => fail(new RequestFailed(true, (e as NodeJS.ErrnoException).code, e)))
      source.on('data', (d: Buffer) => sink.add(d))
      source.on('end', () => {
        if (settled) return
        settled = true
        cleanup()
        resolve(sink.answer(res.statusCode ?? 0, res.statusMessage ?? '', res.headers))
      })
    })
    req.on('error', (e) => fail(new RequestFailed(answered, (e as NodeJS.ErrnoException).code, e)))
    const timer = setTimeout(() => fail(new DOMException(`no answer from ${url} within ${o.timeoutMs} ms`, 'TimeoutError')), o.timeoutMs)
    const onAbort = () => fail(o.signal!.reason)
    o.signal?.addEventListener('abort', onAbort, { once: true })
    const cleanup = () => {
      clearTimeout(timer)
      o.signal?.removeEventListener('abort', onAbort)
    }
    req.end(body)
  })
}

function single(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(', ') : v
}

/**
 * The text of an answer's bytes. A big answer's parts are joined in a kept buffer instead of fresh
 * memory (at most 2, of at most 32 MB each, dropped 5 s after the last use), and ASCII text is read
 * without UTF-8 decoding: a full sync of 1.35 GB of answers took the client 4.21–4.35 instead of
 * 4.73–4.93 CPU s (docs/benchmark-history.md, step 39).
 */
export function textOf(parts: Buffer[]): string {
  if (parts.length === 0) return ''
  if (parts.length === 1) return decodeText(parts[0])
  let n = 0
  for (const p of parts) n += p.length
  if (n < KEPT_FROM) return decodeText(Buffer.concat(parts, n))
  const joined = kept.take(n)
  let at = 0
  for (const p of parts) {
    joined.set(p, at)
    at += p.length
  }
  try {
    return decodeText(joined.subarray(0, n))
  } finally {
    kept.give(joined, n)
  }
}

/** Answers from this size on are joined in kept buffers. */
const KEPT_FROM = 1 << 20
const kept = new BodyBuffers(2, { largest: 32 << 20, idleMs: 5000 })
