/**
 * Index of the first chunk in `[from, to)` whose `last` block is ≥ `block` (`to` when none; by
 * default the whole list), by binary search: the chunks are ascending and do not overlap, and a
 * dataset may have thousands. That chunk holds the block, or the block lies in the gap before it.
 */
export function lowerBoundLast(chunks: readonly { last: number }[], block: number, from = 0, to = chunks.length): number {
  let lo = from
  let hi = to
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (chunks[mid].last < block) lo = mid + 1
    else hi = mid
  }
  return lo
}
