/**
 * Index of the first chunk whose `last` block is ≥ `block` (`chunks.length` when none), by binary
 * search: the chunks are ascending and do not overlap, and a dataset may have thousands. That chunk
 * holds the block, or the block lies in the gap before it.
 */
export function lowerBoundLast(chunks: readonly { last: number }[], block: number): number {
  let lo = 0
  let hi = chunks.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (chunks[mid].last < block) lo = mid + 1
    else hi = mid
  }
  return lo
}
