import { substrateFamily } from '../../../families/substrate.js'
import { log } from '../../../log.js'
import { exponential, retry } from '../../../retry.js'
import { Semaphore } from '../../../semaphore.js'
import { httpRequest, type HttpAnswer } from '../../../http-request.js'
import { newTransferStats, RpcUnavailable, type TransferStats } from '../../rpc.js'
import { BadRpcAnswer, BlockNotAvailable, fetchAndNormalize, type BlockSource, type FinalityLevel, type RowsBatch } from '../../source.js'
import { normalizeSidecarBlock } from './normalize.js'

/*
 * Reads decoded Substrate blocks from a Substrate API Sidecar (REST, not JSON-RPC):
 *
 *   head             GET {url}/blocks/head/header   (the finalized head; `number`)
 *   every table      GET {url}/blocks/{n}
 *
 * and normalises them with `normalizeSidecarBlock` (what such a source cannot fill is listed
 * there). A 404, or a 400 saying the block does not exist (yet), is `BlockNotAvailable`; a body that
 * is not JSON or not a block of that number is `BadRpcAnswer`. Connection errors, timeouts, 429 and
 * 5xx are retried with exponential back-off, then `RpcUnavailable`.
 */

export interface SidecarSourceOptions {
  /** Sidecar base URL, e.g. http://127.0.0.1:8080 */
  url: string
  /** Blocks per `fetchRows` batch (the loop's batch size); at most 8 requests of a batch are in flight. */
  batchSize?: number
  /** Time limit per HTTP request (default 60 s). */
  timeoutMs?: number
}

/** Attempts per request, and the exponential back-off between them. */
const ATTEMPTS = 6
const BACKOFF_MS = 200
const MAX_BACKOFF_MS = 10_000

/** A request worth asking again (a timeout, a refused connection, HTTP 429 or 5xx). */
class SidecarRetry extends Error {}
const IN_FLIGHT = 8
/** 400 answers that mean "no such block (yet)" (sidecar's messages for numbers above the head). */
const NOT_FOUND = /not found|larger than|no block|unknown block|cannot find|could not find|does not exist/i

export class SidecarSource implements BlockSource {
  readonly family = substrateFamily
  readonly url: string
  readonly batchSize: number
  readonly timeoutMs: number
  private readonly inFlight = new Semaphore(IN_FLIGHT)

  constructor(opts: SidecarSourceOptions, readonly stats: TransferStats = newTransferStats()) {
    this.url = opts.url.replace(/\/+$/, '')
    this.batchSize = Math.max(1, opts.batchSize ?? 20)
    this.timeoutMs = opts.timeoutMs ?? 60_000
  }

  tables(): string[] {
    return ['blocks', 'extrinsics', 'calls', 'events']
  }

  describe(): Record<string, string> {
    const m = 'substrate-api-sidecar GET /blocks/{n}'
    return { blocks: m, extrinsics: m, calls: m, events: m }
  }

  async head(): Promise<number> {
    const h = await this.get('/blocks/head/header', -1)
    const n = typeof h?.number === 'string' && /^\d+$/.test(h.number) ? Number(h.number) : h?.number
    if (!Number.isSafeInteger(n) || n < 0) throw new BadRpcAnswer(-1, 'GET /blocks/head/header', `expected a block number, got ${JSON.stringify(h?.number)}`)
    return n
  }

  /** Sidecar's head is its node's finalized head already. */
  async finalizedHead(level: FinalityLevel): Promise<number | undefined> {
    return level === 'finalized' ? this.head() : undefined
  }

  /** The sidecar answer of block n (checked to be block n). */
  async fetchBlock(n: number): Promise<any> {
    const b = await this.get(`/blocks/${n}`, n)
    if (b == null || typeof b !== 'object' || Array.isArray(b)) throw new BadRpcAnswer(n, 'GET /blocks/{n}', 'expected a block object')
    if (String(b.number) !== String(n)) throw new BadRpcAnswer(n, 'GET /blocks/{n}', `answered block ${JSON.stringify(b.number)}`)
    return b
  }

  fetchRows(numbers: number[]): Promise<RowsBatch> {
    return fetchAndNormalize(numbers, (nums) => Promise.all(nums.map((n) => this.fetchBlock(n))), {
      family: substrateFamily,
      rows: normalizeSidecarBlock,
      method: () => 'GET /blocks/{n}',
      identity: (b: any) => ({ hash: String(b.hash ?? '').toLowerCase(), parentHash: String(b.parentHash ?? '').toLowerCase() }),
    })
  }

  /** GET a JSON answer, retrying what is worth retrying. */
  private async get(route: string, block: number): Promise<any> {
    const method = `GET ${block >= 0 ? route.replace(/\d+$/, '{n}') : route}`
    const release = await this.inFlight.acquire()
    try {
      return await retry(async () => {
        let res: HttpAnswer
        let text: string
        try {
          res = await httpRequest(this.url + route, { timeoutMs: this.timeoutMs, headers: { accept: 'application/json' } })
          text = res.text
        } catch (e) {
          throw new SidecarRetry((e as Error).name === 'TimeoutError' ? `timed out after ${this.timeoutMs} ms` : String((e as Error).message ?? e))
        }
        this.stats.requests++
        this.stats.calls++
        this.stats.bytes += text.length
        if (res.status >= 200 && res.status < 300) {
          const t0 = performance.now()
          try {
            return JSON.parse(text)
          } catch {
            throw new BadRpcAnswer(block, method, `the answer is not JSON: ${text.slice(0, 100)}`)
          } finally {
            this.stats.parseMs += performance.now() - t0
          }
        }
        if (res.status === 404 || (res.status === 400 && NOT_FOUND.test(text))) throw new BlockNotAvailable(block, method)
        if (res.status !== 429 && res.status < 500) throw new BadRpcAnswer(block, method, `HTTP ${res.status}: ${text.slice(0, 200)}`)
        throw new SidecarRetry(`HTTP ${res.status}`)
      }, {
        attempts: ATTEMPTS,
        pauseMs: exponential(BACKOFF_MS, MAX_BACKOFF_MS),
        retryable: (e) => e instanceof SidecarRetry,
        onRetry: (e, attempt) => {
          this.stats.retries++
          log.warn({ url: this.url + route, attempt, err: (e as Error).message }, 'sidecar request failed, retrying')
        },
        exhausted: (e, attempt) => new RpcUnavailable(`${method} at ${this.url} failed ${attempt} times, last: ${(e as Error).message}`),
      })
    } finally {
      release()
    }
  }
}

/** The source a Substrate ingest with `--sidecar` reads (source-module.ts); pass the loop's `rpc.stats` to count requests there. */
export function createSidecarSource(options: SidecarSourceOptions, stats?: TransferStats): SidecarSource {
  return new SidecarSource(options, stats)
}
