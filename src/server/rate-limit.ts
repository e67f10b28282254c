import { ApiError } from '../errors.js'

/*
 * Per-client limits (docs/serving.md, "Access control and limits"): a token bucket of requests/s per
 * key (or client address) at the router, and queries at once per key at each worker. Both refuse with
 * 429 `rate-limited` and `Retry-After`, which the SQD SDK and our client retry.
 */

export interface RateLimit {
  /** Tokens added per second; 0 = no limit. */
  rps: number
  /** Bucket size: requests allowed at once after a quiet period. */
  burst: number
}

/** The burst a rate gets when none is given: two seconds' worth, at least 1. */
export function defaultBurst(rps: number): number {
  return Math.max(1, Math.ceil(rps * 2))
}

interface Bucket {
  tokens: number
  at: number
  rps: number
  burst: number
}

/** Token buckets by client id; a bucket that has refilled is forgotten (the same as a new one). */
export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>()
  private lastSweep = 0

  constructor(private readonly sweepMs = 60_000) {}

  get size(): number {
    return this.buckets.size
  }

  /** Take one token: 0 when granted, else the seconds (≥ 1) until one is available. */
  take(id: string, limit: RateLimit, now = Date.now()): number {
    if (!(limit.rps > 0)) return 0
    if (now - this.lastSweep > this.sweepMs) this.sweep(now)
    let b = this.buckets.get(id)
    if (!b) {
      b = { tokens: limit.burst, at: now, rps: limit.rps, burst: limit.burst }
      this.buckets.set(id, b)
    }
    b.rps = limit.rps
    b.burst = limit.burst
    b.tokens = Math.min(limit.burst, b.tokens + ((now - b.at) / 1000) * limit.rps)
    b.at = now
    if (b.tokens >= 1) {
      b.tokens -= 1
      return 0
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / limit.rps))
  }

  /** Drop buckets idle long enough to be full again (bounded memory with many client addresses). */
  private sweep(now: number): void {
    this.lastSweep = now
    for (const [id, b] of this.buckets) {
      if (b.tokens + ((now - b.at) / 1000) * b.rps >= b.burst && now - b.at > 1000) this.buckets.delete(id)
    }
  }
}

/** Queries in progress per key at one worker. */
export class KeyConcurrency {
  private readonly active = new Map<string, number>()

  count(id: string): number {
    return this.active.get(id) ?? 0
  }

  /** A slot for `id` if it has fewer than `limit` (undefined/0 = no limit); the release function, else a 429. */
  acquire(id: string, limit: number | undefined): () => void {
    const n = this.count(id)
    if (limit && n >= limit) {
      throw new ApiError(429, 'rate-limited', `too many queries at once for this key on this worker (limit ${limit}); retry when one has finished`, undefined, 1)
    }
    this.active.set(id, n + 1)
    let done = false
    return () => {
      if (done) return
      done = true
      const left = this.count(id) - 1
      if (left > 0) this.active.set(id, left)
      else this.active.delete(id)
    }
  }
}
