import { substrateFamily } from '../../../families/substrate.js'
import { fetchAndNormalize, type BlockSource, type FinalityLevel, type RowsBatch } from '../../source.js'
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

  /** `chain_getFinalizedHead` (GRANDPA finality); Substrate has no "safe" head. */
  async finalizedHead(level: FinalityLevel): Promise<number | undefined> {
    return level === 'finalized' ? this.node.finalizedHead() : undefined
  }

  blockHashes(numbers: number[]): Promise<(string | undefined)[]> {
    return this.node.blockHashes(numbers)
  }

  fetchRows(numbers: number[]): Promise<RowsBatch> {
    return fetchAndNormalize(numbers, (n) => this.node.fetchBlocks(n), {
      family: substrateFamily,
      rows: substrateRows,
      method: () => 'chain_getBlock',
      identity: (b) => ({ hash: b.header.hash.toLowerCase(), parentHash: b.header.parentHash.toLowerCase() }),
    })
  }

  close(): Promise<void> {
    return this.node.close()
  }
}
