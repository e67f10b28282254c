import { starknetFamily } from '../../families/starknet.js'
import { jsonRpcConnection, type SourceModule } from '../source-module.js'
import type { StarknetSourceOptions } from './source.js'

/** A Starknet ingest's options (`--traces starknet`, `--state-updates`). */
export interface StarknetIngestOptions {
  /** `starknet`: also `starknet_traceBlockTransactions` (traces, message and event call addresses). */
  traces?: 'none' | 'starknet'
  /** Also `starknet_getStateUpdate` (state updates, storage diffs). */
  stateUpdates?: boolean
}

/** Starknet nodes over JSON-RPC (src/ingest/starknet/). */
export const starknetSource: SourceModule<StarknetIngestOptions, StarknetSourceOptions, 'starknet'> = {
  family: starknetFamily,
  flags: [
    { flags: '--traces <how>', description: 'Starknet: starknet (starknet_traceBlockTransactions)', env: 'BLOCK_ARCHIVE_TRACES', choices: ['none', 'starknet'], default: 'none' },
    { flags: '--state-updates', description: 'Starknet: state_updates and storage_diffs tables (starknet_getStateUpdate)', env: 'BLOCK_ARCHIVE_STATE_UPDATES', default: false },
  ],
  spec(o) {
    return { rpc: jsonRpcConnection(o), options: { traces: o.traces === 'starknet', stateUpdates: o.stateUpdates ?? false, batchSize: o.batchSize } }
  },
  async create(spec, stats) {
    const [{ StarknetRpcSource }, { RpcClient }] = await Promise.all([import('./source.js'), import('../rpc.js')])
    return new StarknetRpcSource(new RpcClient({ ...spec.rpc!, stats }), spec.options)
  },
}
