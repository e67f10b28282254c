import { ApiError } from '../errors.js'
import { Semaphore } from '../semaphore.js'

export interface LimiterOptions {
  /** Queries executed at the same time. */
  concurrency: number
  /** Queries allowed to wait for a slot; more are refused with 503. */
  queue: number
  /** A query waiting longer than this is refused with 503. */
  queueTimeoutMs: number
}

/**
 * A worker's admission of queries: the slots are a `Semaphore`, with a bounded wait on top. A query
 * finding the queue full, or waiting longer than `queueTimeoutMs`, is refused with a 503 the clients
 * retry; one whose client went away leaves the queue (499).
 */
export class Limiter {
  private readonly slots: Semaphore

  constructor(
    private readonly opts: LimiterOptions,
    private readonly onChange: (active: number, queued: number) => void = () => {},
  ) {
    this.slots = new Semaphore(opts.concurrency)
  }

  get stats() {
    return { active: this.slots.active, queued: this.slots.queued, ...this.opts }
  }

  /**
   * Wait for a slot; resolves with its release function (call it exactly once). `signal` aborts the
   * wait when the client goes away.
   */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) throw clientGone()
    if (this.slots.active < this.slots.permits) return this.granted(await this.slots.acquire())
    if (this.slots.queued >= this.opts.queue) throw busy('too many queries are running or waiting')
    const stop = new AbortController()
    const timer = setTimeout(() => stop.abort(busy(`no execution slot became free within ${this.opts.queueTimeoutMs} ms`)), this.opts.queueTimeoutMs)
    const gone = () => stop.abort(clientGone())
    signal?.addEventListener('abort', gone, { once: true })
    const waiting = this.slots.acquire(stop.signal)
    this.changed()
    try {
      return this.granted(await waiting)
    } catch (e) {
      this.changed()
      throw e
    } finally {
      clearTimeout(timer)
      signal?.removeEventListener('abort', gone)
    }
  }

  private granted(release: () => void): () => void {
    this.changed()
    return () => {
      release()
      this.changed()
    }
  }

  private changed(): void {
    this.onChange(this.slots.active, this.slots.queued)
  }
}

const clientGone = () => new ApiError(499, 'client-closed', 'the client closed the connection')

function busy(message: string): ApiError {
  return new ApiError(503, 'busy', `server is too busy: ${message}`, undefined, 1)
}
