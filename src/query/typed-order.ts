/*
 * Ordering rows held in typed arrays without a comparator: each row packs into one number, and the
 * typed array's own sort orders them (the keyed plan, keyed-plan.ts).
 */

/** The row numbers `r` ascending, and the index (rank) each had in `r`. */
export function sortedWithRanks(r: Float64Array): { sorted: Float64Array; ranks: Int32Array } {
  // Sorted as one number per row: row number and rank.
  let scale = 1
  while (scale < r.length) scale *= 2
  const keys = new Float64Array(r.length)
  for (let i = 0; i < r.length; i++) keys[i] = r[i] * scale + i
  keys.sort()
  const sorted = new Float64Array(r.length)
  const ranks = new Int32Array(r.length)
  for (let i = 0; i < r.length; i++) {
    sorted[i] = Math.floor(keys[i] / scale)
    ranks[i] = keys[i] - sorted[i] * scale
  }
  return { sorted, ranks }
}

/**
 * Where each row goes when ordered by kind, block and key: each row packs into
 * ((k + 1)·blocks + b − from)·2^32 + key, sorted as a typed array.
 */
export function orderInJs(k: Int32Array, b: Float64Array, key: Float64Array, from: number, to: number, kinds: number): Int32Array {
  const n = k.length
  const blocks = to - from + 1
  const packed = new Float64Array(n)
  for (let i = 0; i < n; i++) {
    if (!(key[i] >= 0 && key[i] < 2 ** 32) || k[i] < -1 || k[i] >= kinds || b[i] < from || b[i] > to) {
      throw new Error(`row (kind ${k[i]}, block ${b[i]}, key ${key[i]}) is outside the packed order`)
    }
    packed[i] = ((k[i] + 1) * blocks + b[i] - from) * 2 ** 32 + key[i]
  }
  const sorted = packed.slice().sort()
  const position = new Int32Array(n)
  const taken = new Uint8Array(n)
  for (let i = 0; i < n; i++) {
    let at = lowerBound(sorted, packed[i])
    while (taken[at]) at++ // equal keys (not expected: the selection is a UNION) keep a place each
    taken[at] = 1
    position[i] = at
  }
  return position
}

/** `values` with row i moved to `position[i]`. */
export function permute<T extends Int32Array | Float64Array>(values: T, position: Int32Array): T {
  const out = (values instanceof Int32Array ? new Int32Array(values.length) : new Float64Array(values.length)) as T
  for (let i = 0; i < values.length; i++) out[position[i]] = values[i]
  return out
}

/** The arrays one after the other. */
export function concatTyped<T extends Float64Array | Int32Array>(parts: T[], make: (n: number) => T): T {
  if (parts.length === 1) return parts[0]
  const out = make(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

/** First index of the ascending `values` from `start` on whose value is at least `value`. */
export function lowerBound(values: ArrayLike<number>, value: number, start = 0): number {
  let lo = start
  let hi = values.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (values[mid] < value) lo = mid + 1
    else hi = mid
  }
  return lo
}

/** Consecutive runs of row numbers (ascending), `[first, last]` each. */
export function rowRanges(sorted: ArrayLike<number>): [number, number][] {
  const out: [number, number][] = []
  for (let i = 0; i < sorted.length; i++) {
    const r = sorted[i]
    const last = out[out.length - 1]
    if (last && r <= last[1] + 1) last[1] = Math.max(last[1], r)
    else out.push([r, r])
  }
  return out
}
