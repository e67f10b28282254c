/** Inclusive block ranges `[first, last]`, as exchanged in router pings (docs/serving.md). */
export type Range = [first: number, last: number]

/** Merge chunk ranges that touch (`b.first == a.last + 1`) into ascending disjoint ranges. */
export function mergeRanges(items: Iterable<{ first: number; last: number }>): Range[] {
  const sorted = [...items].map((c): Range => [c.first, c.last]).sort((a, b) => a[0] - b[0])
  const out: Range[] = []
  for (const r of sorted) {
    const prev = out[out.length - 1]
    if (prev && r[0] <= prev[1] + 1) prev[1] = Math.max(prev[1], r[1])
    else out.push([r[0], r[1]])
  }
  return out
}

/** Whether `[first, last]` lies inside one of the ascending disjoint `ranges`. */
export function rangesContain(ranges: readonly Range[], first: number, last: number): boolean {
  let lo = 0
  let hi = ranges.length - 1
  while (lo <= hi) {
    const mid = (lo + hi) >> 1
    const [a, b] = ranges[mid]
    if (b < first) lo = mid + 1
    else if (a > first) hi = mid - 1
    else return last <= b
  }
  return false
}

/** Validate a JSON value as a list of ranges; returns an error message or the merged ranges. */
export function parseRanges(value: unknown): Range[] | string {
  if (!Array.isArray(value)) return 'expected an array of [first, last] pairs'
  for (const r of value) {
    if (!Array.isArray(r) || r.length !== 2 || !r.every((n) => Number.isSafeInteger(n) && n >= 0) || r[0] > r[1]) {
      return `invalid range ${JSON.stringify(r)}: expected [first, last] with 0 <= first <= last`
    }
  }
  return mergeRanges(value.map(([first, last]: number[]) => ({ first, last })))
}

/** Blocks in ascending disjoint `a` but not in `b`, as ascending disjoint ranges. */
export function subtractRanges(a: readonly Range[], b: readonly Range[]): Range[] {
  const out: Range[] = []
  let j = 0
  for (const [first, last] of a) {
    let from = first
    while (j < b.length && b[j][1] < from) j++
    let k = j
    while (k < b.length && b[k][0] <= last && from <= last) {
      if (b[k][0] > from) out.push([from, b[k][0] - 1])
      from = Math.max(from, b[k][1] + 1)
      k++
    }
    if (from <= last) out.push([from, last])
  }
  return out
}

/** Blocks in either of two lists of ranges, merged. */
export function unionRanges(a: readonly Range[], b: readonly Range[]): Range[] {
  return mergeRanges([...a, ...b].map(([first, last]) => ({ first, last })))
}
