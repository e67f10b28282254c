import http from 'node:http'
import https from 'node:https'
import zlib from 'node:zlib'
import { BodyBuffers, decodeText } from '../body-buffers.js'

/*
 * The client's HTTP requests, on node:http(s) with kept-alive connections. Measured against the
 * global fetch on loopback (docs/benchmark-history.md, step 31): a request and its headers go out in
 * one write (fetch wrote headers and body apart), and a round trip costs the client about half the CPU.
 */

const agents = {
  'http:': new http.Agent({ keepAlive: true }),
  'https:': new https.Agent({ keepAlive: true }),
}

export interface HttpAnswer {
  status: number
  header(name: string): string | undefined
  text: string
}

export interface HttpRequestOptions {
  method?: 'GET' | 'POST'
  headers?: Record<string, string>
  body?: string
  timeoutMs: number
  signal?: AbortSignal
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

function once(url: string, method: string, body: string | undefined, o: HttpRequestOptions): Promise<HttpAnswer> {
  return new Promise<HttpAnswer>((resolve, reject) => {
    if (o.signal?.aborted) return reject(o.signal.reason)
    const parsed = new URL(url)
    const agent = agents[parsed.protocol as keyof typeof agents]
    if (!agent) return reject(new TypeError(`unsupported protocol in ${url}`))
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
      const parts: Buffer[] = []
      res.on('error', (e) => fail(new RequestFailed(true, (e as NodeJS.ErrnoException).code, e)))
      res.on('close', () => {
        if (!res.complete) fail(new RequestFailed(true, 'ECONNRESET', new Error('the connection closed before the whole answer came')))
      })
      decoder?.on('error', (e) => fail(new RequestFailed(true, (e as NodeJS.ErrnoException).code, e)))
      source.on('data', (d: Buffer) => parts.push(d))
      source.on('end', () => {
        if (settled) return
        settled = true
        cleanup()
        const text = textOf(parts)
        resolve({ status: res.statusCode ?? 0, header: (name) => single(res.headers[name.toLowerCase()]), text })
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
