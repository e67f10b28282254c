/*
 * Timing helpers. Machines running these are shared and noisy, so benchmarks compare things
 * measured side by side in the same run (interleaved where it matters) and report medians.
 */

export interface Timing {
  runs: number
  median: number
  p10: number
  p90: number
  min: number
}

export function summarize(samples: number[]): Timing {
  const s = [...samples].sort((a, b) => a - b)
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * (s.length - 1) + 0.5))]
  return { runs: s.length, median: at(0.5), p10: at(0.1), p90: at(0.9), min: s[0] }
}

/** Run `fn` `warmup` times untimed, then `runs` times timed (ms). */
export async function time(fn: () => Promise<unknown> | unknown, runs: number, warmup = 1): Promise<Timing> {
  for (let i = 0; i < warmup; i++) await fn()
  const samples: number[] = []
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now()
    await fn()
    samples.push(performance.now() - t0)
  }
  return summarize(samples)
}

/** Wall-clock milliseconds. */
export const wallClock = () => performance.now()
/**
 * The process's CPU milliseconds (user + system): on a machine shared with other jobs the wall time
 * of one DuckDB thread moves with the load, its CPU time much less.
 */
export const cpuClock = () => {
  const c = process.cpuUsage()
  return (c.user + c.system) / 1000
}

/**
 * Time several variants interleaved (a, b, c, c, b, a, …) so that a burst of load from other
 * processes hits all of them alike, by `clock` (default wall time). Returns one Timing per variant, in order.
 */
export async function timeInterleaved(fns: (() => Promise<unknown> | unknown)[], runs: number, warmup = 1, clock = wallClock): Promise<Timing[]> {
  for (let i = 0; i < warmup; i++) for (const fn of fns) await fn()
  const samples: number[][] = fns.map(() => [])
  for (let i = 0; i < runs; i++) {
    // alternate the order so that neither variant always runs right after the other
    const order = fns.map((_, j) => j)
    if (i % 2) order.reverse()
    for (const j of order) {
      const t0 = clock()
      await fns[j]()
      samples[j].push(clock() - t0)
    }
  }
  return samples.map(summarize)
}

/** CPU time (user+system, ms) and wall time of `fn`. */
export async function cpuAndWall<T>(fn: () => Promise<T>): Promise<{ result: T; cpuMs: number; wallMs: number }> {
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const result = await fn()
  const wallMs = performance.now() - t0
  const c = process.cpuUsage(c0)
  return { result, cpuMs: (c.user + c.system) / 1000, wallMs }
}

export const ms = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2))
export const mb = (bytes: number) => (bytes / 1e6).toFixed(1)
export const rate = (count: number, msElapsed: number) => (count / (msElapsed / 1000))
export const fmtRate = (count: number, msElapsed: number) => {
  const r = rate(count, msElapsed)
  return r >= 100 ? Math.round(r).toLocaleString('en-US') : r.toFixed(1)
}
