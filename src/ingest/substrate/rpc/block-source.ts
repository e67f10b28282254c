import { substrateFamily } from '../../../families/substrate.js'
import { blockOfRows, fetchWithRetry, type BlockOfRows, type BlockSource, type RowsBatch } from '../../source.js'
import { SubstrateRpcSource } from './fetch.js'
import { substrateRows } from './rows.js'
import type { TransportOptions } from './transport.js'

/** A Substrate node's JSON-RPC (ws:// or http://) as the ingest loop's block source. */
export class SubstrateNodeSource implements BlockSource {
  readonly family = substrateFamily
  private readonly node: SubstrateRpcSource

  constructor(options: TransportOptions) {
    this.node = new SubstrateRpcSource(options)
  }

  tables(): string[] {
    return ['blocks', 'extrinsics', 'calls', 'events']
  }

  describe(): Record<string, string> {
    const all = 'chain_getBlock + state_getStorage(System.Events), decoded with the runtime metadata (state_getMetadata)'
    return { blocks: all, extrinsics: all, calls: all, events: all }
  }

  head(): Promise<number> {
    return this.node.head()
  }

  async fetchRows(numbers: number[]): Promise<RowsBatch> {
    let decoded
    try {
      decoded = await fetchWithRetry((n) => this.node.fetchBlocks(n), numbers)
    } catch (error) {
      return { blocks: [], error: { error }, normalizeMs: 0 }
    }
    const t0 = performance.now()
    const blocks: BlockOfRows[] = decoded.map((b) =>
      blockOfRows(substrateFamily, { number: b.header.number, hash: b.header.hash.toLowerCase(), parentHash: b.header.parentHash.toLowerCase() }, substrateRows(b)),
    )
    return { blocks, normalizeMs: performance.now() - t0 }
  }

  close(): Promise<void> {
    return this.node.close()
  }
}
