/*
 * Starknet's finality is a block status: ACCEPTED_ON_L2 once the sequencer built it, ACCEPTED_ON_L1
 * once its state update is proven on Ethereum. Blocks reach L1 in order, so the statuses along the
 * chain are L1 up to some block and L2 above it; a node without the `l1_accepted` block tag is
 * searched for that boundary.
 */

export const ACCEPTED_ON_L1 = 'ACCEPTED_ON_L1'

/** How far below the latest block the boundary is looked for (mainnet blocks reach L1 within hours). */
export const STATUS_SEARCH_BOUND = 200_000

/**
 * The highest block ACCEPTED_ON_L1 at or below `latest`, undefined if there is none within
 * `bound` blocks. `known`: a block already seen accepted on L1 (-1: none), the search starts
 * there. Asks for about 2·log2(distance) statuses: steps back doubling until an L1 block, then
 * halves the interval.
 */
export async function highestAccepted(known: number, latest: number, statusOf: (n: number) => Promise<string | undefined>, bound = STATUS_SEARCH_BOUND): Promise<number | undefined> {
  const onL1 = async (n: number) => (await statusOf(n)) === ACCEPTED_ON_L1
  if (await onL1(latest)) return latest
  let hi = latest // not on L1
  let lo = known >= 0 && known < latest ? known : -1 // on L1
  if (lo < 0) {
    const floor = Math.max(0, latest - bound)
    for (let step = 1; ; step *= 2) {
      const n = Math.max(floor, latest - step)
      if (await onL1(n)) {
        lo = n
        break
      }
      hi = n
      if (n === floor) return undefined
    }
  }
  while (hi - lo > 1) {
    const mid = lo + Math.floor((hi - lo) / 2)
    if (await onL1(mid)) lo = mid
    else hi = mid
  }
  return lo
}
