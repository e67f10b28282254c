import { evmFamily } from '../../families/evm.js'
import { fetchAndNormalize, type RowsBatch } from '../source.js'
import { normalizeEvmBlock } from './normalize.js'
import type { EvmRpcSource, FetchedBlock } from './source.js'

/* Fetch + normalise a batch of EVM blocks (in the loop's thread or in a fetch worker). */

/** Which RPC method a normaliser complaint is about. */
export function methodOf(message: string, s: EvmRpcSource): string {
  if (/receipt|log/i.test(message)) return s.describe().logs
  if (/stateDiff|state diff|prestate/i.test(message)) return s.describe().statediffs ?? 'state diffs'
  if (/trace|callTracer/i.test(message)) return s.describe().traces ?? 'traces'
  return 'eth_getBlockByNumber'
}

/** Fetch blocks and normalise them; a failure is returned with the blocks before it. */
export function fetchRows(source: EvmRpcSource, nums: number[]): Promise<RowsBatch> {
  return fetchAndNormalize(nums, (n) => source.fetch(n), {
    family: evmFamily,
    rows: (f: FetchedBlock) => normalizeEvmBlock(f.bundle),
    method: (message) => methodOf(message, source),
    identity: (f) => ({ hash: f.hash, parentHash: f.parentHash }),
    head: () => source.head(),
  })
}
