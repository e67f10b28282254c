import { blockRowsSize, ndjsonTables, ndjsonText, type BlockRows, type RowsText } from '../../chunks/writer.js'
import { evmFamily } from '../../families/evm.js'
import { log } from '../../log.js'
import { RpcError, RpcProtocolError, RpcUnavailable } from '../rpc.js'
import { MalformedRpcData, normalizeEvmBlock } from './normalize.js'
import { BadRpcAnswer, BlockChanged, BlockNotAvailable, type EvmRpcSource, type FetchedBlock } from './source.js'

/*
 * Fetch + normalise a batch of blocks: what the ingest loop asks for, in its own thread or in a
 * fetch worker (`fetch-worker.ts`); both return the same `RowsBatch`.
 */

/** A fetched block as rows. */
export interface BlockOfRows {
  number: number
  hash: string
  parentHash: string
  rows: BlockRows
  /** Size of the rows as the chunk writer counts it (computed here, off the loop's thread). */
  bytes: number
  /** Rows of the chunk writer's NDJSON tables (traces, statediffs), already as text. */
  texts: Record<string, RowsText>
}

export interface RowsBatch {
  /** Blocks normalised before the error, if any. */
  blocks: BlockOfRows[]
  /** The batch failed: at `block` (whose continuity the loop checks first) or as a whole. */
  error?: { error: unknown; block?: { number: number; hash: string; parentHash: string } }
  /** Time spent normalising (ms). */
  normalizeMs: number
}

/** A block that changed between calls, or is briefly missing below the head, is fetched again. */
export async function fetchWithRetry(source: EvmRpcSource, nums: number[]): Promise<FetchedBlock[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await source.fetch(nums)
    } catch (e) {
      if (!(e instanceof BlockChanged || e instanceof BlockNotAvailable) || attempt >= 5) throw e
      log.warn({ blocks: `${nums[0]}-${nums[nums.length - 1]}`, attempt, err: e.message }, 'inconsistent answers, fetching the blocks again')
      await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** attempt))
    }
  }
}

/** Which RPC method a normaliser complaint is about. */
export function methodOf(message: string, s: EvmRpcSource): string {
  if (/receipt|log/i.test(message)) return s.describe().logs
  if (/stateDiff|state diff|prestate/i.test(message)) return s.describe().statediffs ?? 'state diffs'
  if (/trace|callTracer/i.test(message)) return s.describe().traces ?? 'traces'
  return 'eth_getBlockByNumber'
}

/** Fetch blocks and normalise them; a failure is returned with the blocks before it. */
export async function fetchRows(source: EvmRpcSource, nums: number[]): Promise<RowsBatch> {
  let fetched: FetchedBlock[]
  try {
    fetched = await fetchWithRetry(source, nums)
  } catch (error) {
    return { blocks: [], error: { error }, normalizeMs: 0 }
  }
  const t0 = performance.now()
  const blocks: BlockOfRows[] = []
  for (const f of fetched) {
    try {
      const rows = normalizeEvmBlock(f.bundle)
      const texts: Record<string, RowsText> = {}
      let bytes = 0
      for (const t of ndjsonTables(evmFamily)) {
        const list = rows[t]
        if (!list) continue
        texts[t] = { text: ndjsonText(list), rows: list.length }
        bytes += texts[t].text.length
        delete rows[t]
      }
      bytes += blockRowsSize(evmFamily, Object.keys(rows), rows)
      blocks.push({ number: f.number, hash: f.hash, parentHash: f.parentHash, rows, bytes, texts })
    } catch (e) {
      const error = e instanceof MalformedRpcData ? new BadRpcAnswer(f.number, methodOf(e.message, source), e.message) : e
      return { blocks, error: { error, block: { number: f.number, hash: f.hash, parentHash: f.parentHash } }, normalizeMs: performance.now() - t0 }
    }
  }
  return { blocks, normalizeMs: performance.now() - t0 }
}

// ---------------------------------------------------------------- errors across threads

const ERRORS: Record<string, new (...args: any[]) => Error> = {
  BadRpcAnswer, BlockChanged, BlockNotAvailable, RpcError, RpcProtocolError, RpcUnavailable,
}

/** An error as a plain object (class name, message, stack and own fields). */
export function errorToPlain(e: unknown): Record<string, unknown> {
  if (!(e instanceof Error)) return { kind: 'value', value: String(e) }
  const own: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(e)) {
    try {
      own[k] = structuredClone(v)
    } catch {
      own[k] = String(v)
    }
  }
  return { kind: 'error', cls: e.constructor.name, message: e.message, stack: e.stack, own }
}

/** The error again, of its class when it is one of the ingest's error classes. */
export function errorFromPlain(p: Record<string, any>): unknown {
  if (p.kind !== 'error') return new Error(String(p.value))
  const Cls = ERRORS[p.cls] ?? Error
  const e: any = Object.create(Cls.prototype)
  Object.defineProperty(e, 'message', { value: p.message, writable: true, configurable: true })
  Object.defineProperty(e, 'stack', { value: p.stack, writable: true, configurable: true })
  Object.assign(e, p.own)
  return e
}

// ---------------------------------------------------------------- worker pool

/** Fetch workers (`fetch-worker.ts`), each taking batches; a batch goes to the least busy one. */
export class FetchPool {
  private readonly workers: { w: import('node:worker_threads').Worker; busy: number }[] = []
  private readonly waiting = new Map<number, { resolve: (r: RowsBatch) => void; reject: (e: unknown) => void; worker: number }>()
  private nextId = 1
  private failed?: Error

  constructor(
    count: number,
    data: import('./fetch-worker.js').FetchWorkerData,
    WorkerClass: typeof import('node:worker_threads').Worker,
    private readonly stats: { requests: number; calls: number; retries: number; bytes: number; parseMs: number },
  ) {
    for (let i = 0; i < count; i++) {
      const w = new WorkerClass(new URL('./fetch-worker.js', import.meta.url), { workerData: data })
      w.on('message', (m: import('./fetch-worker.js').FetchWorkerReply) => {
        const p = this.waiting.get(m.id)
        if (!p) return
        this.waiting.delete(m.id)
        this.workers[p.worker].busy--
        for (const k of Object.keys(m.stats) as (keyof typeof m.stats)[]) this.stats[k] += m.stats[k]
        p.resolve({ blocks: m.blocks, normalizeMs: m.normalizeMs, error: m.error && { error: errorFromPlain(m.error.error), block: m.error.block } })
      })
      const fail = (e: Error) => {
        this.failed ??= e
        for (const [id, p] of this.waiting) if (p.worker === i) (this.waiting.delete(id), p.reject(e))
      }
      w.on('error', fail)
      w.on('exit', (code) => fail(new Error(`a fetch worker exited (code ${code})`)))
      this.workers.push({ w, busy: 0 })
    }
  }

  fetch(numbers: number[]): Promise<RowsBatch> {
    if (this.failed) return Promise.reject(this.failed)
    let best = 0
    for (let i = 1; i < this.workers.length; i++) if (this.workers[i].busy < this.workers[best].busy) best = i
    const id = this.nextId++
    this.workers[best].busy++
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, worker: best })
      this.workers[best].w.postMessage({ id, numbers })
    })
  }

  async close(): Promise<void> {
    this.failed ??= new Error('the fetch workers were stopped')
    await Promise.all(this.workers.map(({ w }) => {
      w.removeAllListeners('exit')
      return w.terminate()
    }))
  }
}
