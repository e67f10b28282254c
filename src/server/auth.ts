import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { readFileSync, statSync } from 'node:fs'
import { Counter } from 'prom-client'
import { ApiError } from '../errors.js'
import { log } from '../log.js'
import { registry } from '../metrics.js'

/*
 * Access control (off unless the router has a keys file), signed tickets and what they need
 * (docs/serving.md, "Access control and limits"):
 *
 * - API keys: the keys file lists them, one per line (`<key> [name] [rps=N] [burst=N]
 *   [concurrency=N] [revoked]`) or as JSON (`{"keys": [{key, name?, rps?, burst?, concurrency?,
 *   revoked?}]}`). It is re-read when its mtime, size or inode changes (checked every second). Keys are
 *   held by their SHA-256 only; what logs, metrics and answers show is the key's id: its `name`, else
 *   `key-` + 8 hex digits of its SHA-256.
 * - Tickets: the router appends `?ticket=<payload>.<mac>` to the worker URLs it hands out, where
 *   payload = base64url(JSON {d: dataset, f, t: fromBlock range, k: key id, e: expiry ms, c?: per-key
 *   concurrency}) and mac = base64url(HMAC-SHA256(secret, "ticket.v1." + payload)). A worker with the
 *   secret serves only queries with a valid, unexpired ticket for its dataset and fromBlock.
 * - Worker pings carry `x-worker-token: <ms>.<base64url(HMAC-SHA256(secret, "ping.v1." + ms))>` when
 *   a secret is set, so nobody without it can register a worker (and be sent clients and tickets).
 */

export const accessDenied = new Counter({
  name: 'block_archive_access_denied_total',
  help: 'Requests refused by access control or rate limits, by service and error code',
  labelNames: ['service', 'code'] as const,
  registers: [registry],
})

/** One API key as the keys file describes it (without the key itself). */
export interface KeyEntry {
  /** What logs and tickets name the key by: its name, else `key-` + 8 hex digits of its SHA-256. */
  id: string
  revoked: boolean
  /** Requests/s at the router (overrides `--rate-limit`; 0 = no limit for this key). */
  rps?: number
  burst?: number
  /** Queries at once per worker (overrides `--key-concurrency`; 0 = no limit). */
  concurrency?: number
}

const KEY_CHARS = /^[A-Za-z0-9._~-]+$/
export const MIN_KEY_LENGTH = 16
const NAME = /^[A-Za-z0-9._-]{1,64}$/

export const sha256 = (s: string | Buffer) => createHash('sha256').update(s).digest('hex')

/** The id of a key without a name. */
export function anonymousKeyId(key: string): string {
  return `key-${sha256(key).slice(0, 8)}`
}

/** Parse a keys file; answers SHA-256 of the key → entry. Errors name the line, never the key. */
export function parseKeys(text: string): Map<string, KeyEntry> {
  const raw: { key: unknown; name?: unknown; rps?: unknown; burst?: unknown; concurrency?: unknown; revoked?: unknown; where: string }[] = []
  const trimmed = text.trimStart()
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    let doc: unknown
    try {
      doc = JSON.parse(text)
    } catch (e) {
      // Not the parser's message: it may quote a piece of the file (a key).
      const at = /position (\d+)/.exec((e as Error).message)?.[1]
      throw new Error(`the keys file is not valid JSON${at ? ` (at character ${at})` : ''}`)
    }
    const list = Array.isArray(doc) ? doc : (doc as { keys?: unknown })?.keys
    if (!Array.isArray(list)) throw new Error('a JSON keys file is {"keys": [{"key": "…", …}, …]} or an array of such entries')
    list.forEach((e, i) => {
      if (!e || typeof e !== 'object' || Array.isArray(e)) throw new Error(`keys[${i}] must be an object`)
      const unknown = Object.keys(e).filter((k) => !['key', 'name', 'rps', 'burst', 'concurrency', 'revoked'].includes(k))
      if (unknown.length) throw new Error(`keys[${i}]: unknown member ${JSON.stringify(unknown[0])} (key, name, rps, burst, concurrency, revoked)`)
      raw.push({ ...(e as object), where: `keys[${i}]` } as (typeof raw)[number])
    })
  } else {
    text.split(/\r?\n/).forEach((line, i) => {
      const words = line.replace(/#.*/, '').trim().split(/\s+/).filter(Boolean)
      if (!words.length) return
      const entry: (typeof raw)[number] = { key: words[0], where: `line ${i + 1}` }
      for (const w of words.slice(1)) {
        const eq = w.indexOf('=')
        if (w === 'revoked') entry.revoked = true
        else if (eq > 0) {
          const [k, v] = [w.slice(0, eq), w.slice(eq + 1)]
          if (!['rps', 'burst', 'concurrency'].includes(k)) throw new Error(`line ${i + 1}: unknown option "${k}" (rps=, burst=, concurrency=, revoked)`)
          if (!/^\d+(\.\d+)?$/.test(v)) throw new Error(`line ${i + 1}: ${k} must be a number, got "${v}"`)
          ;(entry as Record<string, unknown>)[k] = Number(v)
        } else if (entry.name === undefined) entry.name = w
        else throw new Error(`line ${i + 1}: unexpected "${w}" after the name (options are rps=N burst=N concurrency=N revoked)`)
      }
      raw.push(entry)
    })
  }
  const out = new Map<string, KeyEntry>()
  const where = new Map<string, string>()
  const ids = new Map<string, string>()
  for (const e of raw) {
    if (typeof e.key !== 'string' || e.key.length < MIN_KEY_LENGTH || !KEY_CHARS.test(e.key)) {
      throw new Error(`${e.where}: a key must be at least ${MIN_KEY_LENGTH} characters of A-Z a-z 0-9 . _ ~ - (e.g. \`openssl rand -hex 24\`)`)
    }
    if (e.name !== undefined && (typeof e.name !== 'string' || !NAME.test(e.name))) throw new Error(`${e.where}: a name is 1-64 characters of A-Z a-z 0-9 . _ -`)
    const num = (k: 'rps' | 'burst' | 'concurrency', integer: boolean, min: number) => {
      const v = e[k]
      if (v === undefined) return undefined
      if (typeof v !== 'number' || !Number.isFinite(v) || v < min || (integer && !Number.isInteger(v))) {
        throw new Error(`${e.where}: ${k} must be ${integer ? 'an integer' : 'a number'} ≥ ${min}`)
      }
      return v
    }
    if (e.revoked !== undefined && typeof e.revoked !== 'boolean') throw new Error(`${e.where}: revoked must be true or false`)
    const hash = sha256(e.key)
    if (where.has(hash)) throw new Error(`${e.where}: the same key as ${where.get(hash)}`)
    const id = (e.name as string | undefined) ?? anonymousKeyId(e.key)
    if (ids.has(id)) throw new Error(`${e.where}: the name "${id}" is also used at ${ids.get(id)}`)
    where.set(hash, e.where)
    ids.set(id, e.where)
    out.set(hash, {
      id,
      revoked: e.revoked === true,
      rps: num('rps', false, 0),
      burst: num('burst', true, 1),
      concurrency: num('concurrency', true, 0),
    })
  }
  return out
}

/** The keys file, re-read when it changes (mtime, size or inode, checked every `reloadMs`). */
export class KeyStore {
  private keys: Map<string, KeyEntry>
  private stamp: string
  /** Stamp of the empty file seen by the last check, and when it was first seen so. */
  private emptyStamp?: string
  private emptySince = 0
  private timer?: NodeJS.Timeout

  /** Reads the file now: a missing or invalid file throws (the server does not start). */
  constructor(
    readonly file: string,
    private readonly reloadMs = 1000,
    /** How long a file must stay empty before it replaces the keys (a rewrite truncates it first). */
    private readonly emptySettleMs = 1000,
  ) {
    this.stamp = this.fileStamp()
    this.keys = parseKeys(readFileSync(file, 'utf8'))
    this.announce('access: keys loaded')
  }

  get size(): { keys: number; revoked: number } {
    const all = [...this.keys.values()]
    return { keys: all.filter((k) => !k.revoked).length, revoked: all.filter((k) => k.revoked).length }
  }

  lookup(key: string): KeyEntry | undefined {
    return this.keys.get(sha256(key))
  }

  start(): void {
    this.timer ??= setInterval(() => this.reloadIfChanged(), this.reloadMs).unref()
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer)
    this.timer = undefined
  }

  /** Re-read the file if it changed; an unreadable or invalid file is logged and the keys kept. */
  reloadIfChanged(): boolean {
    let stamp: string
    try {
      stamp = this.fileStamp()
    } catch (e) {
      if (this.stamp !== 'missing') log.error({ file: this.file, err: (e as Error).message }, 'access: cannot read the keys file; keeping the keys loaded before')
      this.stamp = 'missing'
      return false
    }
    if (stamp === this.stamp) return false
    this.stamp = stamp
    try {
      const text = readFileSync(this.file, 'utf8')
      // A file rewritten in place is empty for a moment (truncated, then written; under load the
      // writer can stall in between for longer than a check interval): an empty file replaces the
      // loaded keys only once it has stayed unchanged for `emptySettleMs`.
      if (text.trim() === '' && this.keys.size > 0) {
        if (this.emptyStamp !== stamp) {
          this.emptyStamp = stamp
          this.emptySince = Date.now()
        }
        if (Date.now() - this.emptySince < this.emptySettleMs) {
          this.stamp = 'empty'
          return false
        }
      }
      this.keys = parseKeys(text)
    } catch (e) {
      log.error({ file: this.file, err: (e as Error).message }, 'access: the keys file is invalid; keeping the keys loaded before')
      return false
    }
    this.announce('access: keys reloaded')
    return true
  }

  private fileStamp(): string {
    const s = statSync(this.file)
    return `${s.mtimeMs}:${s.size}:${s.ino}`
  }

  private announce(msg: string): void {
    const { keys, revoked } = this.size
    log.info({ file: this.file, keys, revoked }, msg)
    if (keys === 0) log.warn({ file: this.file }, 'access: the keys file holds no usable key; every dataset request will be refused')
  }
}

// ---------------------------------------------------------------- the shared secret

export const MIN_SECRET_BYTES = 16

/** The ticket secret from a file (trailing whitespace dropped) or the value of an environment variable. */
export function loadTicketSecret(opts: { file?: string; value?: string }): Buffer | undefined {
  let text: string | undefined
  let from: string
  if (opts.file) {
    text = readFileSync(opts.file, 'utf8')
    from = opts.file
  } else {
    text = opts.value
    from = 'BLOCK_ARCHIVE_TICKET_SECRET'
  }
  if (text === undefined || text === '') return undefined
  const secret = Buffer.from(text.replace(/\s+$/, ''), 'utf8')
  if (secret.length < MIN_SECRET_BYTES) throw new Error(`the ticket secret (${from}) must be at least ${MIN_SECRET_BYTES} bytes, e.g. \`openssl rand -hex 32\``)
  return secret
}

export function randomSecret(): Buffer {
  return randomBytes(32)
}

const b64 = (b: Buffer | string) => Buffer.from(b).toString('base64url')
const B64URL = /^[A-Za-z0-9_-]+$/

function mac(secret: Buffer, domain: string, data: string): Buffer {
  return createHmac('sha256', secret).update(`${domain}.v1.${data}`).digest()
}

/** Constant-time: does `given` (base64url) equal the MAC? */
function macMatches(expected: Buffer, given: string): boolean {
  if (!B64URL.test(given)) return false
  const g = Buffer.from(given, 'base64url')
  return g.length === expected.length && timingSafeEqual(g, expected)
}

// ---------------------------------------------------------------- tickets

export interface Ticket {
  dataset: string
  /** fromBlock must be in [from, to]. */
  from: number
  to: number
  /** Key id (or `ip:<address>` without access control): the per-key concurrency counts by it. */
  key: string
  /** Expiry, ms since the epoch. */
  expires: number
  /** Queries at once for this key on one worker; absent = no limit. */
  concurrency?: number
}

export function signTicket(secret: Buffer, t: Ticket): string {
  const payload = b64(JSON.stringify({ d: t.dataset, f: t.from, t: t.to, k: t.key, e: t.expires, ...(t.concurrency ? { c: t.concurrency } : {}) }))
  return `${payload}.${b64(mac(secret, 'ticket', payload))}`
}

const invalid = (message: string) => new ApiError(403, 'invalid-ticket', message)

/**
 * The claims of a ticket for `dataset`, or a 403 ApiError: `invalid-ticket` (absent, malformed,
 * forged, for another dataset) or `ticket-expired` (with `Retry-After: 0`: the SQD SDK and our client
 * retry any answer with Retry-After, and the retry asks the router for a fresh ticket).
 */
export function verifyTicket(secret: Buffer, ticket: unknown, dataset: string, now = Date.now()): Ticket {
  if (ticket === undefined || ticket === '') throw invalid('this worker needs a ticket: ask the router for a worker (GET …/<block>/worker) and use the URL it answers')
  if (typeof ticket !== 'string') throw invalid('give one ticket')
  const dot = ticket.indexOf('.')
  const payload = ticket.slice(0, dot)
  if (dot <= 0 || !B64URL.test(payload) || !macMatches(mac(secret, 'ticket', payload), ticket.slice(dot + 1))) {
    throw invalid('the ticket is not valid (malformed, altered, or signed with another secret)')
  }
  let p: { d?: unknown; f?: unknown; t?: unknown; k?: unknown; e?: unknown; c?: unknown }
  try {
    p = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'))
  } catch {
    throw invalid('the ticket is not valid (unreadable payload)')
  }
  const int = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v)
  if (!p || typeof p.d !== 'string' || !int(p.f) || !int(p.t) || typeof p.k !== 'string' || !int(p.e) || (p.c !== undefined && !int(p.c))) {
    throw invalid('the ticket is not valid (unexpected payload)')
  }
  if (p.d !== dataset) throw invalid(`the ticket is for another dataset, not "${dataset}"`)
  if ((p.e as number) <= now) {
    throw new ApiError(403, 'ticket-expired', 'the ticket has expired: ask the router for a worker again', undefined, 0)
  }
  return { dataset: p.d, from: p.f as number, to: p.t as number, key: p.k, expires: p.e as number, concurrency: p.c as number | undefined }
}

/** fromBlock (when it is an integer; the query validation reports anything else) must be in the ticket's range. */
export function checkTicketBlock(t: Ticket, fromBlock: unknown): void {
  if (typeof fromBlock !== 'number' || !Number.isSafeInteger(fromBlock)) return
  if (fromBlock < t.from || fromBlock > t.to) {
    throw invalid(`the ticket is for fromBlock ${t.from === t.to ? t.from : `${t.from}–${t.to}`}, not ${fromBlock}: ask the router for a worker for block ${fromBlock}`)
  }
}

// ---------------------------------------------------------------- worker pings

export const WORKER_TOKEN_HEADER = 'x-worker-token'
/** How far a ping token's time may be from the router's clock. */
const PING_SKEW_MS = 5 * 60_000

export function workerToken(secret: Buffer, now = Date.now()): string {
  return `${now}.${b64(mac(secret, 'ping', String(now)))}`
}

export function checkWorkerToken(secret: Buffer, token: unknown, now = Date.now()): void {
  if (typeof token !== 'string' || token === '') {
    throw new ApiError(401, 'worker-token-required', `this router needs worker pings signed with the ticket secret (${WORKER_TOKEN_HEADER}): start the worker with --ticket-secret-file or BLOCK_ARCHIVE_TICKET_SECRET`)
  }
  const [ts, sig] = token.split('.', 2)
  const ok = /^\d{1,16}$/.test(ts) && sig !== undefined && macMatches(mac(secret, 'ping', ts), sig)
  if (!ok) throw new ApiError(403, 'invalid-worker-token', 'the worker token is not valid: router and worker must share the same ticket secret')
  if (Math.abs(Number(ts) - now) > PING_SKEW_MS) throw new ApiError(403, 'invalid-worker-token', 'the worker token is too old or from the future: check the clocks of router and worker')
}

// ---------------------------------------------------------------- what never goes into a log

/** A URL or message with path keys (`/k/<key>/`) and tickets replaced by `…`. */
export function redactSecrets(s: string): string {
  return s.replace(/\/k\/[^/?#\s'"]+/g, '/k/…').replace(/([?&]ticket=)[^&#\s'"]*/g, '$1…')
}

/** The key a request presents: in the path (`/k/<key>/…`), else `Authorization: Bearer <key>`, else Basic (user or password). */
export function presentedKey(pathKey: string | undefined, authorization: string | undefined): string | undefined {
  if (pathKey) return pathKey
  if (!authorization) return undefined
  const m = /^(\w+)\s+(\S+)\s*$/.exec(authorization)
  if (!m) return undefined
  const scheme = m[1].toLowerCase()
  if (scheme === 'bearer') return m[2]
  if (scheme === 'basic') {
    // What the SQD SDK sends for a gateway URL with credentials (`http://<key>@host/…`).
    const text = Buffer.from(m[2], 'base64').toString('utf8')
    const colon = text.indexOf(':')
    const [user, pass] = colon < 0 ? [text, ''] : [text.slice(0, colon), text.slice(colon + 1)]
    return pass || user || undefined
  }
  return undefined
}
