/*
 * The one concurrency limit of the code base (FIFO): RPC and Sidecar requests in flight, and, with
 * one permit, the locks of the query engine's heavy slices and of a worker's local-forms file. A
 * worker's admission of queries (src/server/limiter.ts) adds a bounded queue, timeouts and 503s on
 * top of the same idea.
 */

/** Counting semaphore: at most `permits` holders at once; waiters are served in order. */
export class Semaphore {
  private active = 0
  private readonly waiting: (() => void)[] = []

  constructor(private readonly permits: number) {}

  /** Resolves with the release function (call it once) when a permit is free. */
  acquire(): Promise<() => void> {
    if (this.active < this.permits) {
      this.active++
      return Promise.resolve(this.releaser())
    }
    return new Promise((resolve) => this.waiting.push(() => resolve(this.releaser())))
  }

  private releaser(): () => void {
    let released = false
    return () => {
      if (released) return
      released = true
      const next = this.waiting.shift()
      if (next) next()
      else this.active--
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
