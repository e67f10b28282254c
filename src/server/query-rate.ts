/**
 * A worker's queries per second, from the running total of queries it reports in its pings: the
 * difference between two reports over the time between them. Reports closer together than
 * `minIntervalMs` (a worker pings again at once after fetching chunks) are skipped, so the rate is
 * not measured over a few milliseconds.
 */
export class QueryRate {
  private sample?: { total: number; at: number }
  /** null until two reports far enough apart. */
  perSecond: number | null = null

  constructor(private readonly minIntervalMs: number) {}

  /** `total` undefined: the worker does not report queries (an older version). */
  report(total: number | undefined, now: number): void {
    const prev = this.sample
    if (total === undefined || !prev || total < prev.total) {
      // First report, or none, or the worker restarted (its total went down): start over.
      this.sample = total === undefined ? undefined : { total, at: now }
      this.perSecond = null
      return
    }
    if (now - prev.at < this.minIntervalMs) return
    this.perSecond = (total - prev.total) / ((now - prev.at) / 1000)
    this.sample = { total, at: now }
  }
}
