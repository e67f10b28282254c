// autocannon ships no types; the load test and `bench load` use its programmatic API (callback form,
// `requests` with `onResponse`, `setupClient`, the `response` event).
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events'

  export interface Request {
    method?: string
    path?: string
    headers?: Record<string, string>
    body?: string | Buffer
    onResponse?: (status: number, body: string, context: Record<string, unknown>, headers: Record<string, string>) => void
  }

  export interface Options {
    url: string
    connections?: number
    duration?: number
    amount?: number
    /** Requests per second over all connections (autocannon lowers `connections` to it when smaller). */
    overallRate?: number
    timeout?: number
    pipelining?: number
    method?: string
    headers?: Record<string, string>
    body?: string
    requests?: Request[]
    excludeErrorStats?: boolean
    setupClient?: (client: any) => void
  }

  export interface Histogram {
    average: number
    mean: number
    min: number
    max: number
    p50: number
    p99: number
    total: number
  }

  export interface Result {
    duration: number
    errors: number
    timeouts: number
    non2xx: number
    statusCodeStats: Record<string, { count: number }>
    latency: Histogram
    requests: Histogram & { sent: number }
    throughput: Histogram
  }

  export interface Instance extends EventEmitter {
    stop(): void
  }

  function autocannon(opts: Options, cb: (err: Error | null, result: Result) => void): Instance
  export default autocannon
}
