import { orderedSegments } from './ordered-segments.js'
import { retry, sleep } from '../retry.js'
import { httpRequest, RequestFailed, type HttpAnswer, type HttpRequestOptions } from '../http-request.js'

/*
 * Client of the v2 archive protocol (docs/protocol.md §1): GET {base}/height,
 * GET {base}/{from}/worker, POST the query there, continue from the last returned block + 1. Each
 * step (worker lookup + POST) is retried with back-off on the conditions the SDK retries, a bounded
 * number of times.
 */

export interface BlockHeader {
  number: number
  hash: string
  parentHash?: string
  [field: string]: unknown
}

export interface Block {
  header: BlockHeader
  [kind: string]: unknown
}

/** A query without the range (the client sets `fromBlock`/`toBlock` per request). */
export type ArchiveQuery = Record<string, unknown>

export interface ClientOptions {
  /** Tries per step before the error is thrown (default 8). */
  maxAttempts?: number
  /** Pause before the n-th retry; the last value repeats (default 250 ms, 0.5 s, 1 s, 2 s, 5 s). */
  backoffMs?: number[]
  /** A `Retry-After` answer waits that long, but at most this (default 30 s). */
  maxRetryAfterMs?: number
  /** Timeout of router calls (default 10 s). */
  routerTimeoutMs?: number
  /** Timeout of one worker query, including reading the answer (default 180 s). */
  queryTimeoutMs?: number
  headers?: Record<string, string>
  /**
   * API key of an archive with access control: sent to the router (height and worker lookups) as
   * `Authorization: Bearer <key>`, never to workers (their URLs carry a ticket from the router).
   * A key in the base URL (`http://HOST/k/<key>/datasets/<name>`) works too.
   */
  apiKey?: string
  /** Called before every retry pause. */
  onRetry?: (info: { attempt: number; error: Error; pauseMs: number }) => void
}

export interface RangeOptions {
  fromBlock: number
  /** Inclusive; absent → up to the height at the start (or forever with `follow`). */
  toBlock?: number
  /** Wait for the dataset to grow instead of stopping at its current height. */
  follow?: boolean
  /** Height poll interval while following (default 2 s). */
  pollMs?: number
  /** Requests in flight at once; the range is split into segments and answers are still in order (default 1). */
  parallel?: number
  /**
   * Blocks per segment in parallel mode. Default: after a first answer, segments of twice the blocks
   * one answer covers (learned from the answers as they come).
   */
  segmentBlocks?: number
  signal?: AbortSignal
}

/** One worker answer: the blocks and the part of the range they cover. */
export interface Batch {
  /** `fromBlock` of the request. */
  from: number
  /** Last block of the answer; the next request starts at `last + 1`. */
  last: number
  blocks: Block[]
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    readonly url: string,
    readonly retryAfterMs?: number,
  ) {
    super(`${redact(url)} answered ${status}: ${body.slice(0, 500)}`)
  }
}

/** A URL for messages: an API key in its path and a ticket in its query replaced by `…`. */
function redact(url: string): string {
  return url.replace(/\/k\/[^/?#]+/g, '/k/…').replace(/([?&]ticket=)[^&#]*/g, '$1…')
}

/** The server broke the protocol (empty answer, blocks out of range or order); not retried. */
export class ProtocolError extends Error {}

/**
 * The server could not be reached at all (refused, unknown host, reset), or its answer broke off
 * (`answered`); `code` is the system's.
 */
export class ConnectionError extends Error {
  constructor(readonly url: string, readonly code: string | undefined, cause: unknown, readonly answered = false) {
    super(`${answered ? 'the answer of' : 'cannot reach'} ${redact(url)}${answered ? ' broke off' : ''}: ${describeCode(code) ?? (cause as Error)?.message ?? String(cause)}`, { cause })
  }
}

const CODES: Record<string, string> = {
  ECONNREFUSED: 'connection refused (nothing listens there)',
  ENOTFOUND: 'unknown host',
  EAI_AGAIN: 'the host name could not be resolved (yet)',
  ECONNRESET: 'the connection was reset',
  EHOSTUNREACH: 'host unreachable',
  ETIMEDOUT: 'the connection timed out',
}

function describeCode(code: string | undefined): string | undefined {
  return code ? `${CODES[code] ?? 'network error'} (${code})` : undefined
}

/** Errors that mean "wrong address" when nothing was ever reached: not worth retrying at start-up. */
const WRONG_ADDRESS = new Set(['ECONNREFUSED', 'ENOTFOUND'])

/** An HTTP request, with a network failure turned into a ConnectionError that names its cause. */
async function requestOrExplain(url: string, o: HttpRequestOptions): Promise<HttpAnswer> {
  try {
    return await httpRequest(url, o)
  } catch (e) {
    if (e instanceof RequestFailed) throw new ConnectionError(url, e.code, e.cause, e.answered)
    throw e
  }
}

const RETRYABLE_STATUS = new Set([429, 502, 503, 504, 521, 522, 523, 524])

export function isRetryable(e: unknown): boolean {
  if (e instanceof HttpError) return RETRYABLE_STATUS.has(e.status) || e.retryAfterMs !== undefined
  if (e instanceof ProtocolError) return false
  if (e instanceof ConnectionError) return true
  const name = (e as Error)?.name
  // Timeouts are TimeoutError (AbortError where a caller's fetch timed out).
  return name === 'TimeoutError' || name === 'AbortError'
}

/** A dataset's base URL must be an http(s) URL; anything else gets what one looks like. */
function checkBaseUrl(baseUrl: string): void {
  let url: URL | undefined
  try {
    url = new URL(baseUrl)
  } catch {}
  if (url?.protocol !== 'http:' && url?.protocol !== 'https:') {
    throw new TypeError(`"${baseUrl}" is not a dataset base URL: it looks like http://HOST:PORT/datasets/<name>, e.g. http://127.0.0.1:8080/datasets/ethereum (serve prints each dataset's)`)
  }
}

export class ArchiveClient {
  readonly baseUrl: string
  private readonly opts: Required<Omit<ClientOptions, 'onRetry' | 'headers' | 'apiKey'>> & Pick<ClientOptions, 'onRetry' | 'headers' | 'apiKey'>

  constructor(baseUrl: string, opts: ClientOptions = {}) {
    checkBaseUrl(baseUrl)
    this.baseUrl = baseUrl.replace(/\/+$/, '')
    this.opts = {
      maxAttempts: 8,
      backoffMs: [250, 500, 1000, 2000, 5000],
      maxRetryAfterMs: 30_000,
      routerTimeoutMs: 10_000,
      queryTimeoutMs: 180_000,
      ...opts,
    }
  }

  async getHeight(signal?: AbortSignal): Promise<number> {
    return this.retry(async () => {
      const text = await this.get(`${this.baseUrl}/height`, signal)
      const h = Number(text.trim())
      if (!Number.isSafeInteger(h) || h < -1) throw new ProtocolError(`height is not an integer: ${JSON.stringify(text)}`)
      return h
    }, signal)
  }

  /**
   * One step of the range loop: ask the router for a worker and run the query there (retried).
   * With `aboveHeight: 'throw'`, a router answer that the block is above the height is thrown at
   * once instead of waited out.
   */
  async query(query: ArchiveQuery & { fromBlock: number; toBlock?: number }, signal?: AbortSignal, aboveHeight: 'wait' | 'throw' = 'wait'): Promise<Block[]> {
    return JSON.parse(await this.queryText(query, signal, aboveHeight))
  }

  /** `query`'s answer as its JSON text. */
  private async queryText(query: ArchiveQuery & { fromBlock: number; toBlock?: number }, signal?: AbortSignal, aboveHeight: 'wait' | 'throw' = 'wait'): Promise<string> {
    return this.retry(async () => {
      const worker = (await this.get(`${this.baseUrl}/${query.fromBlock}/worker`, signal)).trim()
      return this.post(worker, query, signal)
    }, signal, aboveHeight === 'throw' ? isAboveHeight : undefined)
  }

  /** The blocks of `[fromBlock, toBlock]` that the query selects, in order, each exactly once. */
  async *blocks(query: ArchiveQuery, range: RangeOptions): AsyncGenerator<Block> {
    for await (const answer of this.answerStream(query, range)) yield* blocksOf(answer)
  }

  /** The same, one worker answer at a time. */
  async *batches(query: ArchiveQuery, range: RangeOptions): AsyncGenerator<Batch> {
    for await (const answer of this.answerStream(query, range)) yield parsed(answer)
  }

  /** The worker answers of the range, in order, each parsed or as its text. */
  private async *answerStream(query: ArchiveQuery, range: RangeOptions): AsyncGenerator<Answer> {
    if (!Number.isSafeInteger(range.fromBlock) || range.fromBlock < 0) throw new RangeError('fromBlock must be an integer ≥ 0')
    if (range.toBlock !== undefined && !(Number.isSafeInteger(range.toBlock) && range.toBlock >= range.fromBlock)) {
      throw new RangeError('toBlock must be an integer ≥ fromBlock')
    }
    const parallel = range.parallel ?? 1
    if (parallel > 1 && !range.follow) {
      yield* this.parallelAnswers(query, range, parallel)
    } else {
      yield* this.answers(query, range.fromBlock, range.toBlock, range)
    }
  }

  /** Where a range without `follow` ends: `toBlock` capped at the current height. */
  async rangeEnd(range: RangeOptions): Promise<{ end: number; height: number }> {
    const height = await this.getHeight(range.signal)
    return { end: Math.min(range.toBlock ?? Infinity, height), height }
  }

  /**
   * The range loop. Answers are handed on unparsed, parsed when the reader takes them; the loop
   * goes on from the last block the reader found. With `readAhead`, the next request goes out at
   * once (the segments of a parallel range buffer answers this way): the last block number is read
   * from the end of the text (the answer is parsed at once where it cannot be), and checked when
   * the reader parses the answer.
   *
   * `knownHeight`: a height just read (the segments of a parallel range need not ask again). With a
   * `toBlock` and without `follow`, the height is read only once the range reaches past it (the
   * router answers that the block is above the height): a range below the height takes one round
   * trip less per range (docs/benchmark-history.md, step 31).
   */
  private async *answers(query: ArchiveQuery, from: number, to: number | undefined, range: RangeOptions, knownHeight?: number, readAhead = false): AsyncGenerator<Answer> {
    let beg = from
    const lazy = knownHeight === undefined && to !== undefined && !range.follow
    let height = knownHeight ?? (lazy ? Infinity : await this.getHeight(range.signal))
    let end = range.follow ? (to ?? Infinity) : Math.min(to ?? Infinity, height)
    while (beg <= end) {
      while (beg > height) {
        // Only reachable when following: wait for the dataset to grow.
        await sleep(range.pollMs ?? 2000, range.signal)
        range.signal?.throwIfAborted()
        height = await this.getHeight(range.signal)
      }
      const toBlock = Number.isFinite(end) ? end : undefined
      let text: string
      try {
        text = await this.queryText({ ...query, fromBlock: beg, ...(toBlock === undefined ? {} : { toBlock }) }, range.signal, lazy ? 'throw' : 'wait')
      } catch (e) {
        // The rest of the range lies in a gap of a sparse dataset (docs/protocol.md §3.5): nothing more to get.
        if (toBlock !== undefined && isNoBlocksInRange(e)) return
        if (lazy && isAboveHeight(e)) {
          height = await this.getHeight(range.signal)
          end = Math.min(end, height)
          continue
        }
        throw e
      }
      const answer: Answer = { from: beg, to: toBlock, text }
      if (readAhead) {
        answer.last = lastBlockOfText(text)
        if (answer.last === undefined) parse(answer)
      }
      yield answer
      // Read on (the reader has parsed the answer, which sets `last`).
      beg = (answer.last ?? parsed(answer).last) + 1
    }
  }

  /**
   * A first answer alone, then the rest of the range in short segments run `parallel` at once,
   * their answers handed out in range order (`ordered-segments.ts`).
   */
  private async *parallelAnswers(query: ArchiveQuery, range: RangeOptions, parallel: number): AsyncGenerator<Answer> {
    const { end, height } = await this.rangeEnd(range)
    let from = range.fromBlock
    if (end < from) return
    let span = range.segmentBlocks ?? 1
    if (range.segmentBlocks === undefined) {
      // The first answer, alone, shows how many blocks one answer covers. Segments shorter than two
      // such answers would make several requests read the same chunks (measured on short ranges:
      // 2 in flight slower than 1), and a range that one answer covers is not split at all.
      const probe = this.answers(query, from, end, { ...range, follow: false }, height)
      const first = await probe.next()
      await probe.return(undefined)
      if (first.done) return
      yield first.value
      const last = first.value.last ?? parsed(first.value).last
      if (last >= end) return
      span = last - from + 1
      from = last + 1
    }
    yield* orderedSegments({
      from,
      end,
      parallel,
      segmentBlocks: range.segmentBlocks,
      span,
      run: (a, b) => this.answers(query, a, b, { ...range, follow: false }, height, true),
    })
  }

  /** Some server answered this client: from then on, a refused connection is a restart worth waiting for. */
  private reached = false

  /** `final`: errors not retried whatever their status. */
  private async retry<T>(step: () => Promise<T>, signal?: AbortSignal, final?: (e: unknown) => boolean): Promise<T> {
    return retry(async () => {
      const r = await step()
      this.reached = true
      return r
    }, {
      attempts: this.opts.maxAttempts,
      signal,
      // Nothing has answered yet and nothing listens there: a wrong URL, not worth 20 s of retries.
      retryable: (e) => isRetryable(e) && !final?.(e) && !(!this.reached && e instanceof ConnectionError && e.code && WRONG_ADDRESS.has(e.code)),
      pauseMs: (attempt, e) => {
        const backoff = this.opts.backoffMs[Math.min(attempt - 1, this.opts.backoffMs.length - 1)]
        const retryAfter = e instanceof HttpError ? e.retryAfterMs : undefined
        return retryAfter !== undefined ? Math.min(Math.max(retryAfter, backoff), this.opts.maxRetryAfterMs) : backoff
      },
      onRetry: (e, attempt, pauseMs) => this.opts.onRetry?.({ attempt, error: e as Error, pauseMs }),
    })
  }

  private async get(url: string, signal?: AbortSignal): Promise<string> {
    const headers = this.opts.apiKey ? { ...this.opts.headers, authorization: `Bearer ${this.opts.apiKey}` } : this.opts.headers
    const res = await requestOrExplain(url, { headers, timeoutMs: this.opts.routerTimeoutMs, signal })
    if (!ok(res)) throw httpError(res, url)
    return res.text
  }

  private async post(url: string, body: unknown, signal?: AbortSignal): Promise<string> {
    const res = await requestOrExplain(url, {
      method: 'POST',
      headers: { ...this.opts.headers, 'content-type': 'application/json', 'accept-encoding': 'gzip, br' },
      body: JSON.stringify(body),
      timeoutMs: this.opts.queryTimeoutMs,
      signal,
    })
    if (!ok(res)) throw httpError(res, url)
    const type = res.header('content-type')
    if (!/^application\/json\b/.test(type ?? '')) {
      throw new ProtocolError(`${url} answered with content-type ${type ?? null}, expected application/json`)
    }
    return res.text
  }
}

function isNoBlocksInRange(e: unknown): boolean {
  return errorCode(e, 400) === 'no-blocks-in-range'
}

/** The router's answer for a block above the dataset's height. */
function isAboveHeight(e: unknown): boolean {
  return errorCode(e, 503) === 'block-not-available'
}

function errorCode(e: unknown, status: number): string | undefined {
  if (!(e instanceof HttpError) || e.status !== status) return undefined
  try {
    return JSON.parse(e.body).error
  } catch {
    return undefined
  }
}

/** A worker answer: parsed (`blocks`), or its text not parsed yet; `last` once known. */
interface Answer {
  from: number
  /** `toBlock` of the request. */
  to: number | undefined
  text?: string
  last?: number
  blocks?: Block[]
}

/** The answer parsed and checked; a `last` read from its text before must be its last block. */
function parsed(answer: Answer): Batch {
  if (!answer.blocks) parse(answer)
  return { from: answer.from, last: answer.last!, blocks: answer.blocks! }
}

/** Parses and checks the answer's text: sets `blocks` and `last` (a `last` read before must match). */
function parse(answer: Answer): void {
  const blocks: unknown = JSON.parse(answer.text!)
  checkAnswer(blocks, answer.from, answer.to)
  settleLast(answer, blocks[blocks.length - 1].header.number)
  answer.blocks = blocks
  answer.text = undefined
}

/** Sets the answer's last block, parsed: a number read from the end of its text before must be the same. */
function settleLast(answer: Answer, last: number): void {
  if (answer.last !== undefined && answer.last !== last) {
    throw new ProtocolError(`the answer for fromBlock ${answer.from} ends at block ${last}, not at ${answer.last} as its text's end read`)
  }
  answer.last = last
}

const LAST_HEADER = '{"header":{"number":'
const FIRST_BLOCK = '[{"header":{"number":'
const NEXT_BLOCK = '},{"header":{"number":'

/**
 * The answer's blocks, each parsed when the reader takes it. A reader that lets each block go
 * before taking the next leaves V8 only short-lived objects: parsing a 21 MB answer block by block
 * took 31 instead of 58 CPU ms (docs/benchmark-history.md, step 39). The text is cut where a block
 * ends and the next begins `{"header":{"number":` (as this archive writes answers); those characters
 * can also occur inside a block's values (a nested object with these keys), but then the piece before
 * the cut is not a whole JSON value and fails to parse, so the rest of the answer is parsed whole from
 * the last true cut. Blocks are checked as `checkAnswer` checks them, one by one.
 */
function* blocksOf(answer: Answer): Generator<Block> {
  const text = answer.text
  if (text === undefined || !text.startsWith(FIRST_BLOCK)) {
    yield* parsed(answer).blocks
    return
  }
  let prev = answer.from - 1
  const check = (b: unknown): Block => {
    prev = checkBlock(b, prev, answer.from, answer.to)
    return b as Block
  }
  for (let at = 1; ;) {
    const cut = text.indexOf(NEXT_BLOCK, at)
    let block: unknown
    try {
      block = JSON.parse(text.slice(at, cut < 0 ? text.length - 1 : cut + 1))
    } catch {
      const rest: unknown = JSON.parse('[' + text.slice(at))
      if (!Array.isArray(rest)) throw new ProtocolError('the answer is not a JSON array')
      for (const b of rest) yield check(b)
      break
    }
    yield check(block)
    if (cut < 0) break
    at = cut + 2
  }
  settleLast(answer, prev)
}

/**
 * The number of the answer's last block, read from the end of its text when the last block begins
 * `{"header":{"number":N` (as this archive writes it; these characters cannot occur inside a JSON
 * string, where quotes are escaped); undefined otherwise. Parsing checks it.
 */
export function lastBlockOfText(text: string): number | undefined {
  const at = text.lastIndexOf(LAST_HEADER)
  if (at < 0) return undefined
  const m = /^(\d{1,16})[,}]/.exec(text.slice(at + LAST_HEADER.length, at + LAST_HEADER.length + 18))
  const n = m ? Number(m[1]) : NaN
  return Number.isSafeInteger(n) ? n : undefined
}

/** The checks the SDK makes on an answer (docs/protocol.md §1), plus order and range. */
export function checkAnswer(blocks: unknown, from: number, to: number | undefined): asserts blocks is Block[] {
  if (!Array.isArray(blocks)) throw new ProtocolError('the answer is not a JSON array')
  if (blocks.length === 0) throw new ProtocolError(`empty answer for fromBlock ${from}: boundary blocks are expected`)
  let prev = from - 1
  for (const b of blocks) prev = checkBlock(b, prev, from, to)
}

/** One block of an answer after block `prev`: its number, checked. */
function checkBlock(b: any, prev: number, from: number, to: number | undefined): number {
  const n = b?.header?.number
  if (!Number.isSafeInteger(n)) throw new ProtocolError('a block without an integer header.number')
  if (n <= prev) throw new ProtocolError(`block ${n} is not above ${prev} (answer for fromBlock ${from})`)
  if (to !== undefined && n > to) throw new ProtocolError(`block ${n} is above toBlock ${to}`)
  return n
}

function ok(res: HttpAnswer): boolean {
  return res.status >= 200 && res.status < 300
}

function httpError(res: HttpAnswer, url: string): HttpError {
  const ra = res.header('retry-after')
  let retryAfterMs: number | undefined
  if (ra !== undefined) {
    const secs = Number(ra)
    retryAfterMs = Number.isFinite(secs) ? secs * 1000 : Math.max(0, Date.parse(ra) - Date.now()) || 0
  }
  return new HttpError(res.status, res.text, url, retryAfterMs)
}
