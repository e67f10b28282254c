/*
 * The one concurrency limit of the code base (FIFO): RPC and Sidecar requests in flight, `mapLimit`
 * (files of a chunk uploaded or downloaded at once, chunk folders checked at once, chunks a worker
 * fetches at once) and, with one permit, the locks of the query engine's heavy slices and of a
 * worker's local-forms file. A worker's admission of queries (src/server/limiter.ts) adds a bounded
 * queue, timeouts and 503s on top of it.
 */

interface Waiter {
  grant: (release: () => void) => void
  /** Removes the abort listener of a waiter that got its permit. */
  done?: () => void
}

/** Counting semaphore: at most `permits` holders at once; waiters are served in order. */
export class Semaphore {
  private held = 0
  private readonly waiting: Waiter[] = []

  constructor(readonly permits: number) {}

  /** Permits held now. */
  get active(): number {
    return this.held
  }

  /** Callers waiting for a permit. */
  get queued(): number {
    return this.waiting.length
  }

  /**
   * Resolves with the release function (call it once) when a permit is free. `signal` gives up
   * waiting: the promise rejects with the signal's reason and the caller leaves the queue.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason)
    if (this.held < this.permits) {
      this.held++
      return Promise.resolve(this.releaser())
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { grant: resolve }
      if (signal) {
        const abort = () => {
          const i = this.waiting.indexOf(waiter)
          if (i < 0) return
          this.waiting.splice(i, 1)
          reject(signal.reason)
        }
        signal.addEventListener('abort', abort, { once: true })
        waiter.done = () => signal.removeEventListener('abort', abort)
      }
      this.waiting.push(waiter)
    })
  }

  private releaser(): () => void {
    let released = false
    return () => {
      if (released) return
      released = true
      const next = this.waiting.shift()
      if (next) {
        next.done?.()
        next.grant(this.releaser())
      } else {
        this.held--
      }
    }
  }
}

/** A FIFO lock: a semaphore of one permit. */
export class Mutex extends Semaphore {
  constructor() {
    super(1)
  }

  /** Resolves with the unlock function once every earlier holder has unlocked. */
  lock(): Promise<() => void> {
    return this.acquire()
  }
}

/**
 * `f` over `items` with at most `limit` calls running at once; results in order. After a call
 * fails no further call starts, and the first error is thrown once the calls under way have ended
 * (so that nothing still runs, e.g. writes into a folder the caller deletes next).
 */
export async function mapLimit<T, R>(items: readonly T[], limit: number, f: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const slots = new Semaphore(Math.max(1, Math.min(limit, items.length)))
  const out = new Array<R>(items.length)
  let failed: { error: unknown } | undefined
  for (let i = 0; i < items.length && !failed; i++) {
    const release = await slots.acquire()
    if (failed) {
      release()
      break
    }
    call(f, items[i], i).then(
      (r) => void (out[i] = r),
      (error) => void (failed ??= { error }),
    ).finally(release)
  }
  // Every permit back: every call has ended.
  await Promise.all(Array.from({ length: slots.permits }, () => slots.acquire()))
  if (failed) throw failed.error
  return out
}

/** `f(item, index)` as a promise, also when `f` throws before returning one. */
async function call<T, R>(f: (item: T, index: number) => Promise<R>, item: T, index: number): Promise<R> {
  return f(item, index)
}
