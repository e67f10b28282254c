import { readFileSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import zlib from 'node:zlib'

/** A raw HTTP answer: nothing decoded behind the test's back. */
export interface RawAnswer {
  status: number
  headers: http.IncomingHttpHeaders
  trailers: NodeJS.Dict<string>
  /** The body as sent (still compressed if it was). */
  raw: Buffer
  /** The body after undoing `content-encoding`, as text. */
  text: string
}

export interface RawRequest {
  method?: string
  headers?: Record<string, string>
  body?: string | Buffer
  /** A slow reader: stop reading for this long after the first bytes (the server's writes back up). */
  pauseMs?: number
}

export function request(url: string, opts: RawRequest = {}): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? 'GET', headers: opts.headers, agent: false }, (res) => {
      const parts: Buffer[] = []
      res.on('data', (d: Buffer) => {
        if (parts.length === 0 && opts.pauseMs) {
          res.pause()
          setTimeout(() => res.resume(), opts.pauseMs)
        }
        parts.push(d)
      })
      res.on('error', reject)
      res.on('end', () => {
        const raw = Buffer.concat(parts)
        resolve({ status: res.statusCode!, headers: res.headers, trailers: res.trailers, raw, text: decode(raw, res.headers['content-encoding']) })
      })
    })
    req.on('error', reject)
    req.end(opts.body)
  })
}

export function decode(raw: Buffer, encoding: string | undefined): string {
  switch (encoding) {
    case 'gzip':
      return zlib.gunzipSync(raw).toString('utf8')
    case 'br':
      return zlib.brotliDecompressSync(raw).toString('utf8')
    case undefined:
    case 'identity':
      return raw.toString('utf8')
    default:
      throw new Error(`unexpected content-encoding ${encoding}`)
  }
}

/** POST a JSON query (or any body) with `content-type: application/json` unless told otherwise. */
export function postJson(url: string, body: unknown, headers: Record<string, string> = {}, pauseMs?: number): Promise<RawAnswer> {
  return request(url, {
    method: 'POST',
    pauseMs,
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
}

/**
 * POST a query, read the first bytes of the answer, then drop the connection. Resolves with the
 * number of bytes received before hanging up.
 */
export function postAndHangUp(url: string, body: unknown, afterBytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, agent: false }, (res) => {
      let got = 0
      res.on('data', (d: Buffer) => {
        got += d.length
        if (got >= afterBytes) {
          req.destroy()
          resolve(got)
        }
      })
      res.on('end', () => resolve(got))
      res.on('error', () => {})
    })
    req.on('error', (e) => (req.destroyed ? undefined : reject(e)))
    req.end(JSON.stringify(body))
  })
}

/**
 * A TCP port free on 127.0.0.1 right now, for a server the test starts later on a known port.
 * Picked below the kernel's ephemeral range: the suite's servers listening on port 0 and every
 * outgoing connection take their ports from that range, so none of them can take this port before
 * the test's server binds it (a port `listen(0)` had just freed once went to another test's worker:
 * EADDRINUSE). Random, so that test files running at once rarely pick the same one; checked by
 * binding it. Falls back to a port of the ephemeral range where the range cannot be read.
 */
export async function freePort(): Promise<number> {
  const low = ephemeralLow()
  const floor = 10_000
  for (let attempt = 0; low !== undefined && low > floor + 1000 && attempt < 50; attempt++) {
    const port = floor + Math.floor(Math.random() * (low - floor))
    if (await canBind(port)) return port
  }
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port
      s.close(() => resolve(port))
    })
    s.once('error', reject)
  })
}

/** The first port of the kernel's ephemeral range (Linux), or undefined. */
function ephemeralLow(): number | undefined {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0])
    return Number.isInteger(low) && low > 0 ? low : undefined
  } catch {
    return undefined
  }
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer()
    s.once('error', () => resolve(false))
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
  })
}

/** The whole text of an answer body the engine streams in process (`prepareQuery(…).body`). */
export async function streamText(body: AsyncIterable<Uint8Array>): Promise<string> {
  const parts: Buffer[] = []
  for await (const piece of body) parts.push(Buffer.from(piece))
  return Buffer.concat(parts).toString('utf8')
}
