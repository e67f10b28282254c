/*
 * The performance targets (BENCHMARKS.md, "Targets"): each benchmark that measures one prints a
 * `TARGET {json}` line; `bench all` collects them and ends with one table of every target, its
 * figure in this run, the baseline measured in the same run and whether it is met.
 */

export interface TargetFigure {
  /** Target number (BENCHMARKS.md). */
  n: number
  measure: string
  /** The figure now, formatted, and as a number for the check. */
  now: string
  value: number
  /** The same measure on the baseline in this run (e.g. the engine over Parquet), formatted. */
  baseline?: string
  baselineValue?: number
  /** The goal, formatted, and how the value is checked against it. */
  goal: string
  atMost?: number
  atLeast?: number
}

export const TARGET_PREFIX = 'TARGET '

export function reportTarget(t: TargetFigure): void {
  console.log(TARGET_PREFIX + JSON.stringify(t))
}

export function targetMet(t: TargetFigure): boolean {
  return (t.atMost === undefined || t.value <= t.atMost) && (t.atLeast === undefined || t.value >= t.atLeast)
}

/** Rows of the summary table. */
export function targetRows(ts: TargetFigure[]): string[][] {
  return [...ts].sort((a, b) => a.n - b.n).map((t) => {
    const ratio = t.baselineValue ? `${(t.value / t.baselineValue).toFixed(2)}×` : ''
    return [String(t.n), t.measure, t.baseline ?? '', t.now, ratio, t.goal, targetMet(t) ? '✓' : '✗']
  })
}

export const TARGET_COLUMNS = ['#', 'measure', 'baseline (same run)', 'now', 'now / baseline', 'target', 'met']
