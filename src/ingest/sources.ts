import type { EvmSourceOptions } from './evm/source.js'
import { RpcClient, type RpcClientOptions, type TransferStats } from './rpc.js'
import type { BlockSource } from './source.js'
import type { StarknetSourceOptions } from './starknet/source.js'
import type { DecodedDirOptions } from './substrate/papi/source.js'
import type { TransportOptions } from './substrate/rpc/transport.js'
import type { SidecarSourceOptions } from './substrate/sidecar/source.js'

/**
 * Which family's source an ingest reads, with its options and where it connects: plain data, so that
 * fetch workers can build their own.
 */
export type SourceSpec =
  | { family: 'evm'; options: EvmSourceOptions; rpc: RpcClientOptions }
  | { family: 'starknet'; options: StarknetSourceOptions; rpc: RpcClientOptions }
  | { family: 'substrate'; options: SidecarSourceOptions; from: 'sidecar' }
  | { family: 'substrate'; options: TransportOptions; from: 'node' }
  | { family: 'substrate'; options: DecodedDirOptions; from: 'decoded' }

/**
 * The source a spec names; what it moves is counted in `stats`. Only that family's modules are loaded
 * (a fetch worker's heap, which every full garbage collection marks, stays small: an EVM worker's
 * 11.4 MB with every family loaded, 5.6 MB with its own).
 */
export async function createSource(spec: SourceSpec, stats: TransferStats): Promise<BlockSource> {
  switch (spec.family) {
    case 'evm': {
      const { EvmRpcSource } = await import('./evm/source.js')
      return new EvmRpcSource(new RpcClient({ ...spec.rpc, stats }), spec.options)
    }
    case 'starknet': {
      const { StarknetRpcSource } = await import('./starknet/source.js')
      return new StarknetRpcSource(new RpcClient({ ...spec.rpc, stats }), spec.options)
    }
    case 'substrate':
      switch (spec.from) {
        case 'sidecar':
          return (await import('./substrate/sidecar/source.js')).createSidecarSource(spec.options, stats)
        case 'decoded':
          return (await import('./substrate/papi/source.js')).createPapiDirSource(spec.options, stats)
        case 'node':
          return new (await import('./substrate/rpc/block-source.js')).SubstrateNodeSource(spec.options)
      }
  }
}
