import { ApiError } from '../errors.js'

export interface LimiterOptions {
  /** Queries executed at the same time. */
  concurrency: number
  /** Queries allowed to wait for a slot; more are refused with 503. */
  queue: number
  /** A query waiting longer than this is refused with 503. */
  queueTimeoutMs: number
}

interface Waiter {
  grant: (release: () => void) => void
  timer: NodeJS.Timeout
}

/** Bounded concurrency with a bounded wait queue; refusals are 503 answers the clients retry. */
export class Limiter {
  private active = 0
  private readonly waiting: Waiter[] = []

  constructor(
    private readonly opts: LimiterOptions,
    private readonly onChange: (active: number, queued: number) => void = () => {},
  ) {}

  get stats() {
    return { active: this.active, queued: this.waiting.length, ...this.opts }
  }

  /**
   * Wait for a slot; resolves with its release function (call it exactly once). `signal` aborts the
   * wait when the client goes away.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(clientGone())
    if (this.active < this.opts.concurrency) {
      this.active++
      this.onChange(this.active, this.waiting.length)
      return Promise.resolve(this.releaser())
    }
    if (this.waiting.length >= this.opts.queue) return Promise.reject(busy('too many queries are running or waiting'))
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        grant: resolve,
        timer: setTimeout(() => {
          this.remove(waiter)
          reject(busy(`no execution slot became free within ${this.opts.queueTimeoutMs} ms`))
        }, this.opts.queueTimeoutMs),
      }
      signal?.addEventListener('abort', () => {
        if (this.remove(waiter)) reject(clientGone())
      })
      this.waiting.push(waiter)
      this.onChange(this.active, this.waiting.length)
    })
  }

  private remove(w: Waiter): boolean {
    const i = this.waiting.indexOf(w)
    if (i < 0) return false
    this.waiting.splice(i, 1)
    clearTimeout(w.timer)
    this.onChange(this.active, this.waiting.length)
    return true
  }

  private releaser(): () => void {
    let done = false
    return () => {
      if (done) return
      done = true
      const next = this.waiting.shift()
      if (next) {
        clearTimeout(next.timer)
        next.grant(this.releaser())
      } else {
        this.active--
      }
      this.onChange(this.active, this.waiting.length)
    }
  }
}

const clientGone = () => new ApiError(499, 'client-closed', 'the client closed the connection')

function busy(message: string): ApiError {
  return new ApiError(503, 'busy', `server is too busy: ${message}`, undefined, 1)
}
