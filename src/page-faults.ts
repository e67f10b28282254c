/**
 * What the machine charges for memory touched for the first time, per 4 KiB page, in µs: writing a
 * fresh buffer of `bytes` (a mapping of its own, so every page faults) less writing it again; the
 * lowest of `passes`. A few tenths of a µs on bare metal and most virtual machines; tens of times
 * that on some (13 µs on the 2-core VM of BENCHMARKS.md, "Page faults and jemalloc's decay").
 */
export function pageFaultMicros(bytes = 2 * 2 ** 20, passes = 2): number {
  let best = Infinity
  for (let i = 0; i < passes; i++) {
    const b = Buffer.allocUnsafeSlow(bytes)
    let t = performance.now()
    b.fill(1)
    const first = performance.now() - t
    t = performance.now()
    b.fill(2)
    best = Math.min(best, ((first - (performance.now() - t)) * 1000) / (bytes / 4096))
  }
  return Math.max(0, best)
}
