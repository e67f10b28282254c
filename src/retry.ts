/*
 * The one retry loop of the code base: JSON-RPC requests (HTTP and WebSocket) and Sidecar requests,
 * blocks fetched again, S3 bodies that broke off, S3 lease reads and writes, the client's requests
 * and DuckDB checkpoints all retry through `retry`, each with its own policy (how many attempts,
 * which errors, how long to pause). Requests of the AWS SDK are retried by the SDK.
 */

export interface RetryPolicy {
  /** Attempts in all, the first one included. */
  attempts: number
  /** Pause before the `retry`-th retry (1 for the first); `error` is what failed. */
  pauseMs: (retry: number, error: unknown) => number
  /** Whether `error` is worth another attempt; asked only while attempts remain. Throwing replaces the error. */
  retryable: (error: unknown, attempt: number) => boolean | Promise<boolean>
  /** Called before each pause (logs, counters). */
  onRetry?: (error: unknown, attempt: number, pauseMs: number) => void
  /** The error thrown when the last attempt failed with a retryable error (default: that error). */
  exhausted?: (error: unknown, attempts: number) => unknown
  /** Stops the retries: the last error is thrown, or during a pause the signal's reason. */
  signal?: AbortSignal
}

/** Runs `step` (given the attempt number, from 1) until it succeeds or the policy gives up. */
export async function retry<T>(step: (attempt: number) => Promise<T>, p: RetryPolicy): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await step(attempt)
    } catch (e) {
      if (p.signal?.aborted) throw e
      if (attempt >= p.attempts) {
        if (p.exhausted && (await p.retryable(e, attempt))) throw p.exhausted(e, attempt)
        throw e
      }
      if (!(await p.retryable(e, attempt))) throw e
      const pause = p.pauseMs(attempt, e)
      p.onRetry?.(e, attempt, pause)
      await sleep(pause, p.signal)
      if (p.signal?.aborted) throw p.signal.reason ?? e
    }
  }
}

/**
 * Exponential pauses: `baseMs` × 2^(retry − 1), at most `maxMs`; with `jitter` j, each is scaled by
 * a random factor in [1 − j, 1 + j] (so that many clients do not retry in step).
 */
export const exponential = (baseMs: number, maxMs: number, jitter = 0) => (retry: number): number =>
  Math.min(maxMs, baseMs * 2 ** (retry - 1)) * (jitter ? 1 - jitter + Math.random() * 2 * jitter : 1)

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const done = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}
