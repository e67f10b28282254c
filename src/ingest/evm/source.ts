import { log } from '../../log.js'
import { RpcError, type RpcCall, type RpcClient } from '../rpc.js'
import { evmFamily } from '../../families/evm.js'
import { BadRpcAnswer, BlockChanged, BlockNotAvailable, MethodNotAvailable, type BlockSource, type FetchOptions, type FinalityLevel, type RowsBatch } from '../source.js'
import { fetchRows, methodOf } from './fetch.js'
import { EvmSpoolWriter, JS_BELOW_BYTES } from './spool-write.js'
import { bundleTables, type EvmBlockBundle } from './normalize.js'

export { BadRpcAnswer, BlockChanged, BlockNotAvailable, MethodNotAvailable }

/*
 * Reads everything one EVM block needs from a JSON-RPC node, in batches:
 *
 *   block       eth_getBlockByNumber(n, true)
 *   receipts    eth_getBlockReceipts(n); per transaction eth_getTransactionReceipt(hash) when the
 *               node lacks the method (`--receipts auto|transaction`) or its answer misses some
 *               transactions (Cronos)
 *   traces      trace_block(n)                                    (--traces trace_block)
 *               debug_traceBlockByNumber(n, {tracer: callTracer}) (--traces callTracer)
 *   state diffs trace_replayBlockTransactions(n, ['stateDiff'])   (--state-diffs replay)
 *               debug_traceBlockByNumber(n, {tracer: prestateTracer, diffMode}) (--state-diffs prestateTracer)
 *
 * Every answer is checked against the block (same hash, one entry per transaction, in order), so
 * data of a block that was replaced between two calls is never mixed in; malformed answers raise
 * `BadRpcAnswer` naming the block and the method. A method the node lacks (or answers an error for)
 * raises `MethodNotAvailable` naming the method, the flag that asked for it and the flags that avoid it.
 */

export type ReceiptsMode = 'auto' | 'block' | 'transaction'
export type TracesMode = 'none' | 'trace_block' | 'callTracer'
export type StateDiffsMode = 'none' | 'replay' | 'prestateTracer'
/** What to do with a transaction whose receipt the node cannot give (Cronos): stop, or store it without receipt fields. */
export type MissingReceipts = 'error' | 'null'

export interface EvmSourceOptions {
  receipts?: ReceiptsMode
  traces?: TracesMode
  stateDiffs?: StateDiffsMode
  missingReceipts?: MissingReceipts
  /** Calls per HTTP request (JSON-RPC batch); 1 disables batching. */
  batchSize?: number
  /**
   * Spool folder: blocks, transactions and logs are fetched into it as raw answers (spool-fetch.ts)
   * and normalised in SQL when the chunk closes (sql-normalize.ts). Only without traces and state
   * diffs (those go through the JS normaliser, and with them the whole block does).
   */
  spoolDir?: string
  /** Spooled chunks of at most `JS_BELOW_BYTES` of answers are normalised in JS at their close (`--normalizer auto`). */
  smallChunksInJs?: boolean
}

/** A fetched block with its identity, for continuity checks. */
export interface FetchedBlock {
  number: number
  hash: string
  parentHash: string
  bundle: EvmBlockBundle
}

/** What a block's transactions are, for matching per-transaction answers. */
export interface BlockContext {
  number: number
  hash: string
  txHashes: string[]
}

const q = (n: number) => '0x' + n.toString(16)
const lower = (v: unknown) => (typeof v === 'string' ? v.toLowerCase() : v)
const isObj = (v: unknown): v is Record<string, any> => v != null && typeof v === 'object' && !Array.isArray(v)

export class EvmRpcSource implements BlockSource {
  readonly family = evmFamily
  readonly receipts: ReceiptsMode
  readonly traces: TracesMode
  readonly stateDiffs: StateDiffsMode
  readonly missingReceipts: MissingReceipts
  readonly batchSize: number
  /** Set once the node turned out not to have eth_getBlockReceipts. */
  receiptsByTx = false
  /** Where blocks are spooled (see EvmSourceOptions.spoolDir); undefined: normalised in JS. */
  readonly spoolDir?: string
  private readonly smallChunksInJs: boolean

  constructor(readonly rpc: RpcClient, opts: EvmSourceOptions = {}) {
    this.receipts = opts.receipts ?? 'auto'
    this.traces = opts.traces ?? 'none'
    this.stateDiffs = opts.stateDiffs ?? 'none'
    this.missingReceipts = opts.missingReceipts ?? 'error'
    this.batchSize = Math.max(1, opts.batchSize ?? 20)
    this.receiptsByTx = this.receipts === 'transaction'
    if (this.traces === 'none' && this.stateDiffs === 'none') this.spoolDir = opts.spoolDir
    this.smallChunksInJs = opts.smallChunksInJs ?? false
  }

  spoolWriter(): EvmSpoolWriter | undefined {
    return this.spoolDir ? new EvmSpoolWriter((message) => methodOf(message, this), this.smallChunksInJs ? JS_BELOW_BYTES : 0) : undefined
  }

  tables(): string[] {
    return bundleTables({ block: null, traces: this.traces !== 'none' ? [] : undefined, stateDiffs: this.stateDiffs !== 'none' ? [] : undefined })
  }

  fetchRows(numbers: number[], opts?: FetchOptions): Promise<RowsBatch> {
    return fetchRows(this, numbers, opts)
  }

  /** Which RPC method fills each table (recorded in the chunk's meta.json). */
  describe(): Record<string, string> {
    const s: Record<string, string> = {
      blocks: 'eth_getBlockByNumber',
      transactions: 'eth_getBlockByNumber + ' + (this.receiptsByTx ? 'eth_getTransactionReceipt' : 'eth_getBlockReceipts'),
      logs: this.receiptsByTx ? 'eth_getTransactionReceipt' : 'eth_getBlockReceipts',
    }
    if (this.traces === 'trace_block') s.traces = 'trace_block'
    if (this.traces === 'callTracer') s.traces = 'debug_traceBlockByNumber callTracer'
    if (this.stateDiffs === 'replay') s.statediffs = 'trace_replayBlockTransactions stateDiff'
    if (this.stateDiffs === 'prestateTracer') s.statediffs = 'debug_traceBlockByNumber prestateTracer diffMode'
    return s
  }

  async head(): Promise<number> {
    const h = await this.rpc.call('eth_blockNumber')
    if (typeof h !== 'string' || !/^0x[0-9a-f]+$/i.test(h)) throw new BadRpcAnswer(-1, 'eth_blockNumber', `expected a hex quantity, got ${JSON.stringify(h)}`)
    return parseInt(h, 16)
  }

  /** The `finalized` / `safe` block tag; a node that answers an error or null for it does not tell that head. */
  async finalizedHead(level: FinalityLevel): Promise<number | undefined> {
    const [b] = await this.rpc.batch([{ method: 'eth_getBlockByNumber', params: [level, false] }]) as any[]
    if (b instanceof RpcError || b == null) return undefined
    const n = typeof b.number === 'string' && /^0x[0-9a-f]+$/i.test(b.number) ? parseInt(b.number, 16) : NaN
    if (!Number.isSafeInteger(n)) throw new BadRpcAnswer(-1, `eth_getBlockByNumber("${level}")`, `expected a block with a hex number, got ${JSON.stringify(b.number)}`)
    return n
  }

  async blockHashes(numbers: number[]): Promise<(string | undefined)[]> {
    const answers = await this.callMany('eth_getBlockByNumber', numbers, (n) => [q(n), false])
    return answers.map((b: any, i) => {
      if (b instanceof RpcError) throw b
      if (b == null) return undefined
      checkBlockIdentity(numbers[i], b)
      return b.hash.toLowerCase()
    })
  }

  /** Fetch blocks (in the given order) with everything the options ask for; `answered`: the blocks' answers, when already fetched. */
  async fetch(numbers: number[], answered?: unknown[]): Promise<FetchedBlock[]> {
    const blocks = answered ?? await this.callMany('eth_getBlockByNumber', numbers, (n) => [q(n), true])
    const fetched: FetchedBlock[] = numbers.map((n, i) => {
      const b = blocks[i] as any
      if (b instanceof RpcError) throw b
      if (b == null) throw new BlockNotAvailable(n, 'eth_getBlockByNumber')
      checkBlock(n, b)
      return { number: n, hash: b.hash.toLowerCase(), parentHash: b.parentHash.toLowerCase(), bundle: { block: b } }
    })
    const ctx = fetched.map((f) => ({ number: f.number, hash: f.hash, txHashes: (f.bundle.block.transactions as any[]).map((t) => lower(t.hash) as string) }))
    const parts: Promise<void>[] = [
      this.fetchReceipts(ctx).then((r) => r.forEach((x, i) => (fetched[i].bundle.receipts = x))),
    ]
    if (this.traces === 'trace_block') parts.push(this.fetchParityTraces(ctx).then((r) => r.forEach((x, i) => (fetched[i].bundle.traces = x))))
    if (this.traces === 'callTracer') parts.push(this.fetchCallTraces(ctx).then((r) => r.forEach((x, i) => (fetched[i].bundle.callTraces = x))))
    if (this.stateDiffs === 'replay') parts.push(this.fetchReplayDiffs(ctx).then((r) => r.forEach((x, i) => (fetched[i].bundle.stateDiffs = x))))
    if (this.stateDiffs === 'prestateTracer') parts.push(this.fetchPrestateDiffs(ctx).then((r) => r.forEach((x, i) => (fetched[i].bundle.prestateDiffs = x))))
    await Promise.all(parts)
    return fetched
  }

  /**
   * Receipts of each block, one per transaction in order (null where `missingReceipts` is 'null' and
   * the node has none). `answered`: the `eth_getBlockReceipts` answers, when already fetched.
   */
  async fetchReceipts(blocks: BlockContext[], answered?: unknown[]): Promise<(any | null)[][]> {
    let lists: (any[] | null)[] = blocks.map(() => null)
    if (!this.receiptsByTx) {
      const answers = answered ?? await this.callMany('eth_getBlockReceipts', blocks, (b) => [q(b.number)])
      const unsupported = answers.find((a): a is RpcError => a instanceof RpcError)
      if (unsupported) {
        if (!(unsupported.unsupported && this.receipts === 'auto')) {
          const i = answers.indexOf(unsupported)
          throw cannotAnswer(blocks[i].number, `--receipts ${this.receipts}`, unsupported)
        }
        log.warn({ error: unsupported.rpcMessage }, 'the node has no eth_getBlockReceipts; using eth_getTransactionReceipt per transaction')
        this.receiptsByTx = true
      } else {
        lists = answers.map((a, i) => {
          const b = blocks[i]
          if (a == null) return [] // some nodes answer null instead of an empty list; treated as "all missing"
          if (!Array.isArray(a)) throw new BadRpcAnswer(b.number, 'eth_getBlockReceipts', `expected an array, got ${JSON.stringify(a).slice(0, 100)}`)
          return a
        })
      }
    }
    // line receipts up with transactions; collect the missing ones
    const out: (any | null)[][] = []
    const missing: { block: number; tx: number; hash: string }[] = []
    blocks.forEach((b, bi) => {
      const byHash = new Map<string, any>()
      for (const r of lists[bi] ?? []) {
        if (!isObj(r)) throw new BadRpcAnswer(b.number, 'eth_getBlockReceipts', 'a receipt is not an object')
        if (lower(r.blockHash) !== b.hash) {
          throw new BlockChanged(`block ${b.number}: eth_getBlockReceipts returned receipts of block ${r.blockHash}, not ${b.hash}`)
        }
        byHash.set(lower(r.transactionHash) as string, r)
      }
      if (lists[bi] && byHash.size > b.txHashes.length) {
        throw new BadRpcAnswer(b.number, 'eth_getBlockReceipts', `${byHash.size} receipts for ${b.txHashes.length} transactions`)
      }
      const row = b.txHashes.map((h, ti) => {
        const r = byHash.get(h)
        if (!r) missing.push({ block: bi, tx: ti, hash: h })
        return r ?? null
      })
      out.push(row)
    })
    if (missing.length) {
      const answers = await this.callMany('eth_getTransactionReceipt', missing, (m) => [m.hash])
      missing.forEach((m, i) => {
        const b = blocks[m.block]
        const r = answers[i]
        if (r instanceof RpcError) throw this.receipts === 'transaction' ? cannotAnswer(b.number, '--receipts transaction', r) : r
        if (r != null && !isObj(r)) throw new BadRpcAnswer(b.number, 'eth_getTransactionReceipt', `receipt of ${m.hash} is not an object`)
        // Cronos: the node's tx index may point at another block holding the same transaction
        if (r && lower(r.blockHash) === b.hash && lower(r.transactionHash) === m.hash) {
          out[m.block][m.tx] = r
          return
        }
        const why = r ? `the node returned the receipt from block ${lower(r.blockNumber) ?? '?'} (${r.blockHash})` : 'the node has no receipt for it'
        if (this.missingReceipts === 'error') {
          throw new BadRpcAnswer(b.number, this.receiptsByTx ? 'eth_getTransactionReceipt' : 'eth_getBlockReceipts',
            `no receipt for transaction ${m.tx} (${m.hash}): ${why}; pass --missing-receipts null to store such transactions without receipt fields`)
        }
        log.warn({ block: b.number, transaction: m.hash }, `transaction without a receipt (${why}); stored with null receipt fields`)
      })
    }
    return out
  }

  async fetchParityTraces(blocks: BlockContext[]): Promise<any[][]> {
    const answers = await this.callMany('trace_block', blocks, (b) => [q(b.number)])
    return answers.map((a, i) => {
      const b = blocks[i]
      if (a instanceof RpcError) {
        if (b.number === 0) return [] // the genesis block is not traceable on most nodes
        throw cannotAnswer(b.number, '--traces trace_block', a)
      }
      if (a == null && b.number === 0) return []
      if (!Array.isArray(a)) throw new BadRpcAnswer(b.number, 'trace_block', `expected an array, got ${JSON.stringify(a)?.slice(0, 100)}`)
      for (const t of a) {
        if (!isObj(t) || typeof t.type !== 'string') throw new BadRpcAnswer(b.number, 'trace_block', `a trace is not an object with a type: ${JSON.stringify(t)?.slice(0, 100)}`)
        if (t.blockHash != null && lower(t.blockHash) !== b.hash) throw new BlockChanged(`block ${b.number}: trace_block returned traces of block ${t.blockHash}, not ${b.hash}`)
        if (t.transactionPosition != null && !(Number.isInteger(t.transactionPosition) && t.transactionPosition < b.txHashes.length)) {
          throw new BadRpcAnswer(b.number, 'trace_block', `transactionPosition ${t.transactionPosition} outside the block's ${b.txHashes.length} transactions`)
        }
        if (t.transactionHash != null && t.transactionPosition != null && lower(t.transactionHash) !== b.txHashes[t.transactionPosition]) {
          throw new BlockChanged(`block ${b.number}: trace_block trace of ${t.transactionHash} at position ${t.transactionPosition}, where the block has ${b.txHashes[t.transactionPosition]}`)
        }
      }
      return a
    })
  }

  async fetchCallTraces(blocks: BlockContext[]): Promise<any[][]> {
    const method = 'debug_traceBlockByNumber'
    const answers = await this.callMany(method, blocks, (b) => [q(b.number), { tracer: 'callTracer' }])
    return answers.map((a, i) => perTransaction(blocks[i], `${method} callTracer`, a, (e) => isObj(e.result) && typeof e.result.type === 'string'))
  }

  async fetchReplayDiffs(blocks: BlockContext[]): Promise<any[][]> {
    const method = 'trace_replayBlockTransactions'
    const answers = await this.callMany(method, blocks, (b) => [q(b.number), ['stateDiff']])
    return answers.map((a, i) => perTransaction(blocks[i], method, a, (e) => e.stateDiff === null || isObj(e.stateDiff), 'transactionHash'))
  }

  async fetchPrestateDiffs(blocks: BlockContext[]): Promise<any[][]> {
    const method = 'debug_traceBlockByNumber'
    const answers = await this.callMany(method, blocks, (b) => [q(b.number), { tracer: 'prestateTracer', tracerConfig: { diffMode: true } }])
    return answers.map((a, i) => perTransaction(blocks[i], `${method} prestateTracer`, a, (e) => isObj(e.result) && (isObj(e.result.pre) || isObj(e.result.post))))
  }

  /** One call per item, `batchSize` calls per HTTP request, requests sent concurrently (the client bounds them). */
  private async callMany<T>(method: string, items: T[], params: (x: T) => unknown[]): Promise<unknown[]> {
    const calls: RpcCall[] = items.map((x) => ({ method, params: params(x) }))
    const groups: RpcCall[][] = []
    for (let i = 0; i < calls.length; i += this.batchSize) groups.push(calls.slice(i, i + this.batchSize))
    return (await Promise.all(groups.map((g) => this.rpc.batch(g)))).flat()
  }
}

/** Number, hash and parent hash of an `eth_getBlockByNumber` answer. */
function checkBlockIdentity(n: number, b: any): void {
  const bad = (m: string) => new BadRpcAnswer(n, 'eth_getBlockByNumber', m)
  if (!isObj(b)) throw bad(`expected a block object, got ${JSON.stringify(b).slice(0, 100)}`)
  const num = typeof b.number === 'string' && /^0x[0-9a-f]+$/i.test(b.number) ? parseInt(b.number, 16) : NaN
  if (num !== n) throw bad(`asked for block ${n}, got number ${JSON.stringify(b.number)}`)
  for (const k of ['hash', 'parentHash']) {
    if (typeof b[k] !== 'string' || !/^0x[0-9a-f]{64}$/i.test(b[k])) throw bad(`${k} is ${JSON.stringify(b[k])}, not a 32-byte hex string`)
  }
}

export function checkBlock(n: number, b: any): void {
  const bad = (m: string) => new BadRpcAnswer(n, 'eth_getBlockByNumber', m)
  checkBlockIdentity(n, b)
  if (!Array.isArray(b.transactions)) throw bad('transactions is not an array')
  b.transactions.forEach((t: unknown, i: number) => {
    if (!isObj(t)) throw bad(`transaction ${i} is not an object (the node ignored the full-transactions flag)`)
    if (typeof t.hash !== 'string') throw bad(`transaction ${i} has no hash`)
    const idx = typeof t.transactionIndex === 'string' ? parseInt(t.transactionIndex, 16) : t.transactionIndex
    if (idx !== i) throw bad(`transaction ${i} has transactionIndex ${JSON.stringify(t.transactionIndex)}`)
    if (t.blockHash != null && lower(t.blockHash) !== lower(b.hash)) throw bad(`transaction ${i} says it is in block ${t.blockHash}`)
  })
}

/** Answers with one entry per transaction (debug tracers, replay): check count, and hashes when given. */
function perTransaction(b: BlockContext, method: string, a: unknown, ok: (e: any) => boolean, hashKey = 'txHash'): any[] {
  if (a instanceof RpcError) {
    if (b.number === 0 && b.txHashes.length === 0) return []
    throw cannotAnswer(b.number, FLAG_OF[method], a)
  }
  if (a == null && b.txHashes.length === 0) return []
  if (!Array.isArray(a)) throw new BadRpcAnswer(b.number, method, `expected an array, got ${JSON.stringify(a)?.slice(0, 100)}`)
  if (a.length !== b.txHashes.length) throw new BadRpcAnswer(b.number, method, `${a.length} entries for ${b.txHashes.length} transactions`)
  a.forEach((e, i) => {
    if (!isObj(e)) throw new BadRpcAnswer(b.number, method, `entry ${i} is not an object`)
    if (e.error != null && e.result == null) throw new BadRpcAnswer(b.number, method, `transaction ${i} (${b.txHashes[i]}) could not be traced: ${JSON.stringify(e.error)}`)
    if (!ok(e)) throw new BadRpcAnswer(b.number, method, `entry ${i} has an unexpected shape: ${JSON.stringify(e).slice(0, 120)}`)
    const h = e[hashKey]
    if (h != null && lower(h) !== b.txHashes[i]) throw new BlockChanged(`block ${b.number}: ${method} entry ${i} is for ${h}, the block has ${b.txHashes[i]}`)
  })
  return a
}

/** The flag that makes the ingest call each optional method (as `perTransaction` names them). */
const FLAG_OF: Record<string, Flag> = {
  'debug_traceBlockByNumber callTracer': '--traces callTracer',
  trace_replayBlockTransactions: '--state-diffs replay',
  'debug_traceBlockByNumber prestateTracer': '--state-diffs prestateTracer',
}

/** What to pass instead of a flag whose method the node cannot answer. */
const INSTEAD = {
  '--traces trace_block': '--traces callTracer (debug_traceBlockByNumber, geth) or --traces none (no traces table)',
  '--traces callTracer': '--traces trace_block (erigon, reth, nethermind) or --traces none (no traces table)',
  '--state-diffs replay': '--state-diffs prestateTracer (debug_traceBlockByNumber, geth) or --state-diffs none (no statediffs table)',
  '--state-diffs prestateTracer': '--state-diffs replay (trace_replayBlockTransactions) or --state-diffs none (no statediffs table)',
  '--receipts block': '--receipts auto or --receipts transaction (eth_getTransactionReceipt per transaction)',
  '--receipts auto': '--receipts transaction (eth_getTransactionReceipt per transaction)',
  '--receipts transaction': '--receipts block (eth_getBlockReceipts)',
} as const
type Flag = keyof typeof INSTEAD

/** An error answer to a method `flag` asked for: one line naming the method, the flag and what to pass instead. */
export function cannotAnswer(block: number, flag: Flag, e: RpcError): MethodNotAvailable {
  const answer = `${e.rpcMessage} (code ${e.code})`
  if (e.unsupported) return new MethodNotAvailable(`the node does not support ${e.method}, which ${flag} asks for (block ${block}: ${answer}); pass ${INSTEAD[flag]}`)
  return new MethodNotAvailable(`block ${block}: ${e.method}, which ${flag} asks for, failed: ${answer}; if the node cannot answer it for this block, pass ${INSTEAD[flag]}`)
}
