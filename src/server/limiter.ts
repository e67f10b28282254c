import { ApiError } from '../errors.js'
import { Semaphore, WaitRefused } from '../semaphore.js'

export interface LimiterOptions {
  /** Queries executed at the same time. */
  concurrency: number
  /** Queries allowed to wait for a slot; more are refused with 503. */
  queue: number
  /** A query waiting longer than this is refused with 503. */
  queueTimeoutMs: number
}

/**
 * A worker's admission of queries: the semaphore of src/semaphore.ts with a bounded queue and a
 * longest wait; its refusals are 503 answers the clients retry (499 when the client went away).
 */
export class Limiter {
  private readonly slots: Semaphore

  constructor(
    private readonly opts: LimiterOptions,
    onChange: (active: number, queued: number) => void = () => {},
  ) {
    this.slots = new Semaphore(opts.concurrency, { queue: opts.queue, waitMs: opts.queueTimeoutMs, onChange })
  }

  get stats() {
    return { ...this.slots.stats, ...this.opts }
  }

  /**
   * Wait for a slot; resolves with its release function (call it exactly once). `signal` aborts the
   * wait when the client goes away.
   */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    try {
      return await this.slots.acquire(signal)
    } catch (e) {
      if (!(e instanceof WaitRefused)) throw e
      if (e.reason === 'aborted') throw clientGone()
      throw busy(e.reason === 'queue' ? 'too many queries are running or waiting' : `no execution slot became free within ${this.opts.queueTimeoutMs} ms`)
    }
  }
}

const clientGone = () => new ApiError(499, 'client-closed', 'the client closed the connection')

function busy(message: string): ApiError {
  return new ApiError(503, 'busy', `server is too busy: ${message}`, undefined, 1)
}
