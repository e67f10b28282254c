import { EvmRpcSource, type EvmSourceOptions } from './evm/source.js'
import { RpcClient, type RpcClientOptions, type TransferStats } from './rpc.js'
import type { BlockSource } from './source.js'
import { StarknetRpcSource, type StarknetSourceOptions } from './starknet/source.js'
import { createPapiDirSource, type DecodedDirOptions } from './substrate/papi/source.js'
import { SubstrateNodeSource } from './substrate/rpc/block-source.js'
import type { TransportOptions } from './substrate/rpc/transport.js'
import { createSidecarSource, type SidecarSourceOptions } from './substrate/sidecar/source.js'

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

/** The source a spec names; what it moves is counted in `stats`. */
export function createSource(spec: SourceSpec, stats: TransferStats): BlockSource {
  switch (spec.family) {
    case 'evm':
      return new EvmRpcSource(new RpcClient({ ...spec.rpc, stats }), spec.options)
    case 'starknet':
      return new StarknetRpcSource(new RpcClient({ ...spec.rpc, stats }), spec.options)
    case 'substrate':
      switch (spec.from) {
        case 'sidecar':
          return createSidecarSource(spec.options, stats)
        case 'decoded':
          return createPapiDirSource(spec.options, stats)
        case 'node':
          return new SubstrateNodeSource(spec.options)
      }
  }
}
