import { evmFamily } from '../../families/evm.js'
import { jsonRpcConnection, type SourceModule } from '../source-module.js'
import type { EvmSourceOptions, MissingReceipts, ReceiptsMode, StateDiffsMode, TracesMode } from './source.js'

/** An EVM ingest's options (`--receipts`, `--traces`, `--state-diffs`, `--missing-receipts`, `--normalizer`). */
export interface EvmIngestOptions {
  /** How receipts are fetched (default `auto`). */
  receipts?: ReceiptsMode
  /** The traces table and the method filling it (default `none`). */
  traces?: TracesMode
  /** The statediffs table and the method filling it (default `none`). */
  stateDiffs?: StateDiffsMode
  /** A transaction without receipt: stop (`error`, default) or store it without receipt fields. */
  missingReceipts?: MissingReceipts
  /**
   * Blocks, transactions and logs: `auto` (default) spools the raw RPC answers to disk and normalises
   * them when the chunk closes, in DuckDB, or in JS for a small chunk (at most 4 MiB of answers);
   * `sql` always in DuckDB; `js` normalises each block in JS as it arrives (the way traces and state
   * diffs always go; with them, the whole block does).
   */
  normalizer?: 'auto' | 'sql' | 'js'
}

/** EVM nodes over JSON-RPC (src/ingest/evm/). */
export const evmSource: SourceModule<EvmIngestOptions, EvmSourceOptions, 'evm'> = {
  family: evmFamily,
  flags: [
    { flags: '--receipts <how>', description: 'auto: eth_getBlockReceipts, eth_getTransactionReceipt per transaction if the node lacks it; block: eth_getBlockReceipts only; transaction: per transaction', env: 'BLOCK_ARCHIVE_RECEIPTS', choices: ['auto', 'block', 'transaction'], default: 'auto', ignoredElsewhere: true },
    { flags: '--traces <how>', description: 'traces table: none; EVM: trace_block (parity/erigon/reth/nethermind) or callTracer (debug_traceBlockByNumber, geth)', env: 'BLOCK_ARCHIVE_TRACES', choices: ['none', 'trace_block', 'callTracer'], default: 'none' },
    { flags: '--state-diffs <how>', description: 'statediffs table: none, replay (trace_replayBlockTransactions stateDiff) or prestateTracer (debug_traceBlockByNumber diffMode)', env: 'BLOCK_ARCHIVE_STATE_DIFFS', choices: ['none', 'replay', 'prestateTracer'], default: 'none' },
    { flags: '--missing-receipts <what>', description: 'a transaction the node has no receipt for (early Cronos): error stops, null stores it without receipt fields and logs', env: 'BLOCK_ARCHIVE_MISSING_RECEIPTS', choices: ['error', 'null'], default: 'error', ignoredElsewhere: true },
    { flags: '--normalizer <how>', description: 'EVM blocks, transactions and logs: auto spools the raw RPC answers to disk and normalises them when the chunk closes, in DuckDB, or in JS for a chunk of at most 4 MiB of answers; sql always in DuckDB; js normalises each block in the fetch workers (traces and state diffs always go that way, and with them the whole block)', env: 'BLOCK_ARCHIVE_NORMALIZER', choices: ['auto', 'sql', 'js'], default: 'auto', ignoredElsewhere: true },
  ],
  spec(o) {
    const traces = o.traces ?? 'none'
    const stateDiffs = o.stateDiffs ?? 'none'
    const normalizer = o.normalizer ?? 'auto'
    return {
      rpc: jsonRpcConnection(o),
      options: { receipts: o.receipts, traces, stateDiffs, missingReceipts: o.missingReceipts, batchSize: o.batchSize, smallChunksInJs: normalizer === 'auto' },
      // raw answers spooled to disk and normalised at the chunk's close; traces and state diffs are normalised in JS, and with them the whole block
      spool: normalizer !== 'js' && traces === 'none' && stateDiffs === 'none',
    }
  },
  async create(spec, stats) {
    const [{ EvmRpcSource }, { RpcClient }] = await Promise.all([import('./source.js'), import('../rpc.js')])
    return new EvmRpcSource(new RpcClient({ ...spec.rpc!, stats }), { ...spec.options, spoolDir: spec.spoolDir })
  },
}
