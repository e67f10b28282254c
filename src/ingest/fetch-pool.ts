import { RpcError, RpcProtocolError, RpcUnavailable, type TransferStats } from './rpc.js'
import { BadRpcAnswer, BlockChanged, BlockNotAvailable, type FetchOptions, type RowsBatch } from './source.js'

/*
 * Fetch workers (`--workers`): threads that fetch, parse and normalise batches of blocks
 * (`fetch-worker.ts`) for the ingest loop, which checks continuity and writes chunks.
 */

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
    private readonly stats: TransferStats,
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

  fetch(numbers: number[], opts?: FetchOptions): Promise<RowsBatch> {
    if (this.failed) return Promise.reject(this.failed)
    let best = 0
    for (let i = 1; i < this.workers.length; i++) if (this.workers[i].busy < this.workers[best].busy) best = i
    const id = this.nextId++
    this.workers[best].busy++
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, worker: best })
      this.workers[best].w.postMessage({ id, numbers, opts })
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
