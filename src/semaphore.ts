/*
 * The one concurrency limit of the code base (FIFO): RPC and Sidecar requests in flight, `mapLimit`
 * (files of a chunk uploaded or downloaded at once, chunk folders checked at once, chunks a worker
 * fetches at once), a worker's queries (src/server/limiter.ts: with a bounded queue and a longest
 * wait, refusals become 503s), and, with one permit, the locks of the query engine's heavy slices and of a worker's local-forms file.
 */

export interface WaitLimits {
  /** Holders waiting at most; one more is refused at once. */
  queue?: number
  /** A holder still waiting after this long is refused. */
  waitMs?: number
  /** Called whenever the number of holders or waiters changes. */
  onChange?: (active: number, waiting: number) => void
}

/** `acquire` gave up: the queue was full, the wait too long, or the caller's signal aborted. */
export class WaitRefused extends Error {
  constructor(readonly reason: 'queue' | 'timeout' | 'aborted', message: string) {
    super(message)
  }
}

interface Waiter {
  grant: (release: () => void) => void
  timer?: NodeJS.Timeout
}

/** Counting semaphore: at most `permits` holders at once; waiters are served in order. */
export class Semaphore {
  private held = 0
  private readonly waiting: Waiter[] = []

  constructor(
    readonly permits: number,
    private readonly limits: WaitLimits = {},
  ) {}

  /** Permits held now. */
  get active(): number {
    return this.held
  }

  /** Callers waiting for a permit. */
  get queued(): number {
    return this.waiting.length
  }

  /** Holders and waiters now. */
  get stats(): { active: number; queued: number } {
    return { active: this.held, queued: this.waiting.length }
  }

  /**
   * Resolves with the release function (call it once) when a permit is free; rejects with
   * `WaitRefused` when the wait limits refuse it or `signal` aborts while it waits.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(new WaitRefused('aborted', 'aborted before a permit was free'))
    if (this.held < this.permits) {
      this.held++
      this.changed()
      return Promise.resolve(this.releaser())
    }
    const { queue, waitMs } = this.limits
    if (queue !== undefined && this.waiting.length >= queue) return Promise.reject(new WaitRefused('queue', `${this.permits} running and ${queue} waiting already`))
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { grant: resolve }
      if (waitMs !== undefined) {
        waiter.timer = setTimeout(() => {
          if (this.remove(waiter)) reject(new WaitRefused('timeout', `no permit became free within ${waitMs} ms`))
        }, waitMs)
      }
      signal?.addEventListener('abort', () => {
        if (this.remove(waiter)) reject(new WaitRefused('aborted', 'aborted while waiting for a permit'))
      }, { once: true })
      this.waiting.push(waiter)
      this.changed()
    })
  }

  private remove(w: Waiter): boolean {
    const i = this.waiting.indexOf(w)
    if (i < 0) return false
    this.waiting.splice(i, 1)
    clearTimeout(w.timer)
    this.changed()
    return true
  }

  private changed(): void {
    this.limits.onChange?.(this.held, this.waiting.length)
  }

  private releaser(): () => void {
    let released = false
    return () => {
      if (released) return
      released = true
      const next = this.waiting.shift()
      if (next) {
        clearTimeout(next.timer)
        next.grant(this.releaser())
      } else {
        this.held--
      }
      this.changed()
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
