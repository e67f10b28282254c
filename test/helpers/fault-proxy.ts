import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

/*
 * A fault-injecting HTTP proxy for tests: put it between the archive and a server (s3rver, a replay
 * JSON-RPC node) by pointing the archive at `proxy.url` (AWS_ENDPOINT_URL, --rpc). Requests pass
 * through unchanged (the Host header too, so S3 signatures stay valid) unless a rule matches; a
 * matching rule answers instead, for its first `times` matches or with a `probability` (seeded, so
 * a run can be repeated):
 *
 * - `status`: an error status without asking upstream, with an S3 XML error body (500
 *   InternalError, 503 SlowDown/ServiceUnavailable, …) or a JSON-RPC-ish text body;
 * - `stall`: never answers (the client's timeout has to give up; the socket is destroyed at `close`);
 * - `stall-body`: upstream's status, headers and the first `bytes` bytes of the body, then nothing more;
 * - `cut`: upstream's status, headers and the first `bytes` bytes of the body, then the connection is destroyed;
 * - `short`: upstream's headers (with its Content-Length) and all but the last `bytes` bytes, then a
 *   clean end and close: fewer bytes than Content-Length;
 * - `truncate`: a complete HTTP answer whose body is upstream's cut after `bytes` bytes (Content-Length fits the cut body);
 * - `drop`: forwarded (upstream acts on it: an upload is stored), then the connection is destroyed without an answer;
 * - `replace`: forwarded, and upstream's body replaced by `rewrite(body)` (Content-Length adjusted).
 *
 * Every request is recorded in `log` with the rule that hit it, if any.
 */

export type Fault = 'status' | 'stall' | 'stall-body' | 'cut' | 'short' | 'truncate' | 'drop' | 'replace'

export interface FaultRule {
  /** Name in `log` and `hits` (default: the fault). */
  name?: string
  /** HTTP method(s) the rule applies to (default: any). */
  method?: string | string[]
  /** Tested on the request path with its query (`/bucket/key?x-id=PutObject`). */
  path?: RegExp
  /** Tested on the request body as text (e.g. a JSON-RPC method name). */
  body?: RegExp
  fault: Fault
  /** `status`: the status answered (default 503). */
  status?: number
  /** `cut`, `stall-body`, `truncate`: bytes of the body sent; `short`: bytes left out (default half of the body). */
  bytes?: number
  /** `replace`: the new body. */
  rewrite?: (body: Buffer) => Buffer | string
  /** Apply to the first N matching requests only (default: every one). */
  times?: number
  /** Apply to each matching request with this probability (default 1). */
  probability?: number
  /**
   * `cut`: called once the part of the body is sent, before the connection is destroyed (e.g. to
   * kill the server whose answer it is, so that it dies in the middle of an answer).
   */
  then?: () => void
}

export interface ProxyLogEntry {
  method: string
  path: string
  /** The rule that answered, or undefined when passed through. */
  fault?: string
  /** Status sent to the client (undefined when none was sent). */
  status?: number
}

const S3_CODES: Record<number, string> = { 500: 'InternalError', 503: 'SlowDown', 502: 'BadGateway', 504: 'GatewayTimeout', 403: 'AccessDenied', 404: 'NoSuchKey' }

/** mulberry32: a small seeded PRNG. */
export function prng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

export class FaultProxy {
  url = ''
  /** Matching requests each rule has answered (by name). */
  readonly hits = new Map<string, number>()
  readonly log: ProxyLogEntry[] = []
  private rules: { rule: FaultRule; matched: number }[] = []
  private server?: Server
  private readonly sockets = new Set<Socket>()
  private readonly random: () => number
  private upstream: URL

  constructor(upstream: string, opts: { seed?: number } = {}) {
    this.upstream = new URL(upstream)
    this.random = prng(opts.seed ?? 1)
  }

  /** Pass requests on to another server from now on (one that told its port once it listened). */
  setUpstream(upstream: string): void {
    this.upstream = new URL(upstream)
  }

  /** Replace the rules (their match counters start at 0). */
  setRules(rules: FaultRule[]): void {
    this.rules = rules.map((rule) => ({ rule, matched: 0 }))
  }

  /** No faults: pass everything through. */
  clear(): void {
    this.setRules([])
  }

  hitCount(name?: string): number {
    if (name !== undefined) return this.hits.get(name) ?? 0
    return [...this.hits.values()].reduce((a, b) => a + b, 0)
  }

  async start(): Promise<string> {
    this.server = createServer((req, res) => void this.handle(req, res).catch(() => res.destroy()))
    this.server.on('connection', (s) => {
      this.sockets.add(s)
      s.once('close', () => this.sockets.delete(s))
    })
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve))
    const a = this.server.address() as AddressInfo
    this.url = `http://127.0.0.1:${a.port}`
    return this.url
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy()
    if (this.server) await new Promise<void>((resolve) => this.server!.close(() => resolve()))
    this.server = undefined
  }

  private pick(method: string, path: string, body: Buffer): FaultRule | undefined {
    for (const r of this.rules) {
      const { rule } = r
      const methods = rule.method === undefined ? undefined : Array.isArray(rule.method) ? rule.method : [rule.method]
      if (methods && !methods.includes(method)) continue
      if (rule.path && !rule.path.test(path)) continue
      if (rule.body && !rule.body.test(body.toString('latin1'))) continue
      if (rule.times !== undefined && r.matched >= rule.times) continue
      if (rule.probability !== undefined && this.random() >= rule.probability) continue
      r.matched++
      const name = rule.name ?? rule.fault
      this.hits.set(name, (this.hits.get(name) ?? 0) + 1)
      return rule
    }
    return undefined
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    for await (const c of req) chunks.push(c as Buffer)
    const body = Buffer.concat(chunks)
    const method = req.method ?? 'GET'
    const path = req.url ?? '/'
    const rule = this.pick(method, path, body)
    const entry: ProxyLogEntry = { method, path, fault: rule ? (rule.name ?? rule.fault) : undefined }
    this.log.push(entry)
    if (rule?.fault === 'status') {
      const status = rule.status ?? 503
      const code = S3_CODES[status] ?? 'InternalError'
      const text = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>injected fault: ${code}</Message><RequestId>fault-proxy</RequestId></Error>`
      entry.status = status
      res.writeHead(status, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(text) }).end(text)
      return
    }
    if (rule?.fault === 'stall') return // the socket is destroyed by the client's timeout or at close()

    const up = await this.forward(method, path, req.headers, body).catch((e: Error) => e)
    if (up instanceof Error) {
      entry.status = 502
      res.writeHead(502, { 'content-type': 'text/plain' }).end(`fault proxy: upstream failed: ${up.message}`)
      return
    }
    const headers = { ...up.headers }
    delete headers['transfer-encoding']
    if (!rule) {
      entry.status = up.status
      res.writeHead(up.status, { ...headers, 'content-length': String(up.body.length) }).end(up.body)
      return
    }
    const half = Math.floor(up.body.length / 2)
    switch (rule.fault) {
      case 'drop':
        req.socket.destroy()
        return
      case 'cut': {
        entry.status = up.status
        res.writeHead(up.status, { ...headers, 'content-length': String(up.body.length) })
        res.write(up.body.subarray(0, Math.min(rule.bytes ?? half, up.body.length - 1)), () => {
          rule.then?.()
          setTimeout(() => req.socket.destroy(), 20)
        })
        return
      }
      case 'stall-body':
        entry.status = up.status
        res.writeHead(up.status, { ...headers, 'content-length': String(up.body.length) })
        res.write(up.body.subarray(0, Math.min(rule.bytes ?? half, up.body.length - 1)))
        return
      case 'short': {
        entry.status = up.status
        const left = Math.max(1, Math.min(rule.bytes ?? up.body.length - half, up.body.length))
        res.writeHead(up.status, { ...headers, 'content-length': String(up.body.length), connection: 'close' })
        res.end(up.body.subarray(0, up.body.length - left))
        return
      }
      case 'truncate': {
        entry.status = up.status
        const cut = up.body.subarray(0, Math.min(rule.bytes ?? half, up.body.length))
        res.writeHead(up.status, { ...headers, 'content-length': String(cut.length) }).end(cut)
        return
      }
      case 'replace': {
        entry.status = up.status
        const b = rule.rewrite ? rule.rewrite(up.body) : up.body
        const buf = typeof b === 'string' ? Buffer.from(b) : b
        res.writeHead(up.status, { ...headers, 'content-length': String(buf.length) }).end(buf)
        return
      }
    }
  }

  private forward(method: string, path: string, headers: IncomingHttpHeaders, body: Buffer): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
    return new Promise((resolve, reject) => {
      const h = { ...headers }
      delete h.connection
      delete h.expect // the body is here already
      const req = httpRequest({ host: this.upstream.hostname, port: this.upstream.port, method, path, headers: h }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => resolve({ status: res.statusCode ?? 502, headers: res.headers, body: Buffer.concat(chunks) }))
      })
      req.on('error', reject)
      req.end(body)
    })
  }
}

/** S3 request paths (path-style): `/bucket/key…`; a pattern for the objects of chunk files named `file`. */
export const chunkFile = (file: string) => new RegExp(`/\\d{10}/\\d{10}-\\d{10}-\\w+/${file.replace('.', '\\.')}(\\?|$)`)
/** ListObjectsV2 requests (`GET /bucket?list-type=2…`). */
export const LIST = /^\/[^/?]+\/?\?(.*&)?list-type=2/
