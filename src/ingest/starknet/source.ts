import { starknetFamily } from '../../families/starknet.js'
import { RpcError, type RpcCall, type RpcClient } from '../rpc.js'
import { BadRpcAnswer, BlockChanged, BlockNotAvailable, fetchAndNormalize, type BlockSource, type FinalityLevel, type RowsBatch } from '../source.js'
import { highestAccepted } from './finality.js'
import { feltOf, normalizeStarknetBlock, type StarknetBlockBundle } from './normalize.js'

/*
 * Reads Starknet blocks from a JSON-RPC node (spec 0.6–0.10), in batches:
 *
 *   block, transactions, receipts, events, L2→L1 messages   starknet_getBlockWithReceipts
 *   traces (and the call address of events and messages)   starknet_traceBlockTransactions  (--traces starknet)
 *   state updates, storage diffs                           starknet_getStateUpdate          (--state-updates)
 *
 * Every answer is checked against the block: the state update must name the same block hash and
 * every trace a transaction of the block, so data of a block replaced between two calls is never
 * mixed in.
 */

export interface StarknetSourceOptions {
  traces?: boolean
  stateUpdates?: boolean
  /** Calls per HTTP request (JSON-RPC batch); 1 disables batching. */
  batchSize?: number
}

/** Starknet's "block not found" error code (JSON-RPC spec, all versions). */
const BLOCK_NOT_FOUND = 24

export class StarknetRpcSource implements BlockSource {
  readonly family = starknetFamily
  readonly traces: boolean
  readonly stateUpdates: boolean
  readonly batchSize: number
  /** False once the node turned out not to know the `l1_accepted` block tag (RPC before 0.9). */
  private l1Tag = true
  /** The highest block seen ACCEPTED_ON_L1 (-1: none yet): where the next status search starts. */
  private l1Known = -1

  constructor(readonly rpc: RpcClient, opts: StarknetSourceOptions = {}) {
    this.traces = opts.traces ?? false
    this.stateUpdates = opts.stateUpdates ?? false
    this.batchSize = Math.max(1, opts.batchSize ?? 20)
  }

  tables(): string[] {
    return ['blocks', 'transactions', 'events', 'messages', ...(this.traces ? ['traces'] : []), ...(this.stateUpdates ? ['state_updates', 'storage_diffs'] : [])]
  }

  describe(): Record<string, string> {
    const s: Record<string, string> = {
      blocks: 'starknet_getBlockWithReceipts',
      transactions: 'starknet_getBlockWithReceipts',
      events: 'starknet_getBlockWithReceipts' + (this.traces ? ' + starknet_traceBlockTransactions' : ''),
      messages: 'starknet_getBlockWithReceipts' + (this.traces ? ' + starknet_traceBlockTransactions' : ''),
    }
    if (this.traces) s.traces = 'starknet_traceBlockTransactions'
    if (this.stateUpdates) s.state_updates = s.storage_diffs = 'starknet_getStateUpdate'
    return s
  }

  async head(): Promise<number> {
    const h = await this.rpc.call('starknet_blockNumber')
    if (!Number.isSafeInteger(h) || h < 0) throw new BadRpcAnswer(-1, 'starknet_blockNumber', `expected a block number, got ${JSON.stringify(h)}`)
    return h
  }

  /**
   * The finalized head: the highest block ACCEPTED_ON_L1. From the `l1_accepted` block tag, or, on a
   * node without it, by the blocks' status (a binary search between the highest block known accepted
   * on L1 and the latest block, at most STATUS_SEARCH_BOUND blocks back). Starknet has no "safe" head.
   */
  async finalizedHead(level: FinalityLevel): Promise<number | undefined> {
    if (level !== 'finalized') return undefined
    if (this.l1Tag) {
      const [b] = await this.rpc.batch([{ method: 'starknet_getBlockWithTxHashes', params: ['l1_accepted'] }]) as any[]
      if (!(b instanceof RpcError)) {
        if (!Number.isSafeInteger(b?.block_number)) throw new BadRpcAnswer(-1, 'starknet_getBlockWithTxHashes("l1_accepted")', `expected a block with a number, got ${JSON.stringify(b?.block_number)}`)
        return (this.l1Known = b.block_number)
      }
      this.l1Tag = false
    }
    const latest = await this.head()
    const found = await highestAccepted(this.l1Known, latest, (n) => this.statusOf(n))
    if (found != null) this.l1Known = found
    return found
  }

  /** A block's `status` (ACCEPTED_ON_L1, ACCEPTED_ON_L2, …); undefined for a block the node does not have. */
  async statusOf(n: number): Promise<string | undefined> {
    const [b] = await this.callMany('starknet_getBlockWithTxHashes', [n]) as any[]
    if (b instanceof RpcError) {
      if (b.code === BLOCK_NOT_FOUND) return undefined
      throw b
    }
    if (typeof b?.status !== 'string') throw new BadRpcAnswer(n, 'starknet_getBlockWithTxHashes', `expected a status, got ${JSON.stringify(b?.status)}`)
    return b.status
  }

  async blockHashes(numbers: number[]): Promise<(string | undefined)[]> {
    const answers = await this.callMany('starknet_getBlockWithTxHashes', numbers)
    return answers.map((b: any, i) => {
      if (b instanceof RpcError) {
        if (b.code === BLOCK_NOT_FOUND) return undefined
        throw b
      }
      if (b == null || b.block_hash == null) return undefined // pending
      if (b.block_number !== numbers[i]) throw new BadRpcAnswer(numbers[i], 'starknet_getBlockWithTxHashes', `answered block ${JSON.stringify(b.block_number)}`)
      return feltOf(b.block_hash) ?? undefined
    })
  }

  async fetch(numbers: number[]): Promise<StarknetBlockBundle[]> {
    const blocks = await this.callMany('starknet_getBlockWithReceipts', numbers)
    const bundles = numbers.map((n, i): StarknetBlockBundle => {
      const b = blocks[i] as any
      if (b instanceof RpcError) {
        if (b.code === BLOCK_NOT_FOUND) throw new BlockNotAvailable(n, 'starknet_getBlockWithReceipts')
        throw b
      }
      // A pending block has no hash or number yet.
      if (b == null || b.block_hash == null) throw new BlockNotAvailable(n, 'starknet_getBlockWithReceipts')
      if (b.block_number !== n) throw new BadRpcAnswer(n, 'starknet_getBlockWithReceipts', `answered block ${JSON.stringify(b.block_number)}`)
      return { block: b }
    })
    const parts: Promise<void>[] = []
    if (this.traces) {
      parts.push(this.callMany('starknet_traceBlockTransactions', numbers).then((answers) => answers.forEach((a, i) => {
        if (a instanceof RpcError) throw a
        if (!Array.isArray(a)) throw new BadRpcAnswer(numbers[i], 'starknet_traceBlockTransactions', 'expected an array of traces')
        bundles[i].traces = a
      })))
    }
    if (this.stateUpdates) {
      parts.push(this.callMany('starknet_getStateUpdate', numbers).then((answers) => answers.forEach((a: any, i) => {
        if (a instanceof RpcError) throw a
        if (a == null || typeof a !== 'object') throw new BadRpcAnswer(numbers[i], 'starknet_getStateUpdate', 'expected a state update object')
        const hash = safeFelt(a.block_hash)
        if (hash !== safeFelt(bundles[i].block.block_hash)) {
          throw new BlockChanged(`block ${numbers[i]}: starknet_getStateUpdate answered for block ${a.block_hash}, not ${bundles[i].block.block_hash}`)
        }
        bundles[i].stateUpdate = a
      })))
    }
    await Promise.all(parts)
    return bundles
  }

  fetchRows(numbers: number[]): Promise<RowsBatch> {
    return fetchAndNormalize(numbers, (n) => this.fetch(n), {
      family: starknetFamily,
      rows: normalizeStarknetBlock,
      method: methodOf,
      identity: (b) => ({ hash: safeFelt(b.block.block_hash) ?? '', parentHash: safeFelt(b.block.parent_hash) ?? '' }),
    })
  }

  private async callMany(method: string, numbers: number[]): Promise<unknown[]> {
    const calls: RpcCall[] = numbers.map((n) => ({ method, params: [{ block_number: n }] }))
    const groups: RpcCall[][] = []
    for (let i = 0; i < calls.length; i += this.batchSize) groups.push(calls.slice(i, i + this.batchSize))
    return (await Promise.all(groups.map((g) => this.rpc.batch(g)))).flat()
  }
}

function safeFelt(v: unknown): string | undefined {
  try {
    return feltOf(v) ?? undefined
  } catch {
    return undefined
  }
}

function methodOf(message: string): string {
  if (/trace/i.test(message)) return 'starknet_traceBlockTransactions'
  if (/state|storage|nonce|class/i.test(message)) return 'starknet_getStateUpdate'
  return 'starknet_getBlockWithReceipts'
}
