import { evmFamily } from '../../families/evm.js'
import { fetchAndNormalize, fetchWithRetry, type FetchOptions, type RowsBatch } from '../source.js'
import { normalizeEvmBlock } from './normalize.js'
import type { EvmRpcSource, FetchedBlock } from './source.js'
import { fetchSpooled } from './spool-fetch.js'

/* Fetch + normalise a batch of EVM blocks (in the loop's thread or in a fetch worker). */

/** Which RPC method a normaliser complaint is about. */
export function methodOf(message: string, s: EvmRpcSource): string {
  if (/receipt|log/i.test(message)) return s.describe().logs
  if (/stateDiff|state diff|prestate/i.test(message)) return s.describe().statediffs ?? 'state diffs'
  if (/trace|callTracer/i.test(message)) return s.describe().traces ?? 'traces'
  return 'eth_getBlockByNumber'
}

/** Fetch blocks and normalise them (or spool them); a failure is returned with the blocks before it. */
export function fetchRows(source: EvmRpcSource, nums: number[], opts?: FetchOptions): Promise<RowsBatch> {
  const dir = opts?.inline ? undefined : source.spoolDir
  if (dir) return fetchIntoSpool(source, nums, dir)
  return fetchAndNormalize(nums, (n) => source.fetch(n), {
    family: evmFamily,
    rows: (f: FetchedBlock) => normalizeEvmBlock(f.bundle),
    method: (message) => methodOf(message, source),
    identity: (f) => ({ hash: f.hash, parentHash: f.parentHash }),
    head: () => source.head(),
  })
}

/** Fetch blocks into the spool folder: no rows yet (the chunk writer makes them), a failure fails the whole batch. */
async function fetchIntoSpool(source: EvmRpcSource, nums: number[], dir: string): Promise<RowsBatch> {
  try {
    const spooled = await fetchWithRetry((n) => fetchSpooled(source, n, dir), nums, () => source.head())
    const blocks = spooled.map((b) => ({
      number: b.number, hash: b.hash, parentHash: b.parentHash, rows: {}, bytes: b.bytes, texts: {},
      spool: { files: b.files, checked: b.checkHex, rows: { blocks: 1, transactions: b.transactions, logs: b.logs } },
    }))
    return { blocks, normalizeMs: 0 }
  } catch (error) {
    return { blocks: [], error: { error }, normalizeMs: 0 }
  }
}
