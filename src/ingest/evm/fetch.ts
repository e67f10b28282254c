import { evmFamily } from '../../families/evm.js'
import { BadRpcAnswer, blockOfRows, fetchWithRetry, type BlockOfRows, type RowsBatch } from '../source.js'
import { MalformedRpcData, normalizeEvmBlock } from './normalize.js'
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
export async function fetchRows(source: EvmRpcSource, nums: number[]): Promise<RowsBatch> {
  let fetched: FetchedBlock[]
  try {
    fetched = await fetchWithRetry((n) => source.fetch(n), nums)
  } catch (error) {
    return { blocks: [], error: { error }, normalizeMs: 0 }
  }
  const t0 = performance.now()
  const blocks: BlockOfRows[] = []
  for (const f of fetched) {
    try {
      blocks.push(blockOfRows(evmFamily, f, normalizeEvmBlock(f.bundle)))
    } catch (e) {
      const error = e instanceof MalformedRpcData ? new BadRpcAnswer(f.number, methodOf(e.message, source), e.message) : e
      return { blocks, error: { error, block: { number: f.number, hash: f.hash, parentHash: f.parentHash } }, normalizeMs: performance.now() - t0 }
    }
  }
  return { blocks, normalizeMs: performance.now() - t0 }
}
