import { EvmRpcSource, type EvmSourceOptions } from './evm/source.js'
import type { RpcClient } from './rpc.js'
import type { BlockSource } from './source.js'
import { StarknetRpcSource, type StarknetSourceOptions } from './starknet/source.js'
import { createPapiDirSource, type DecodedDirOptions } from './substrate/papi/source.js'
import { SubstrateNodeSource } from './substrate/rpc/block-source.js'
import type { TransportOptions } from './substrate/rpc/transport.js'
import { createSidecarSource, type SidecarSourceOptions } from './substrate/sidecar/source.js'

/** Which family's source an ingest reads, with its options: plain data, so that fetch workers can build their own. */
export type SourceSpec =
  | { family: 'evm'; options: EvmSourceOptions }
  | { family: 'starknet'; options: StarknetSourceOptions }
  | { family: 'substrate'; options: SidecarSourceOptions; from: 'sidecar' }
  | { family: 'substrate'; options: TransportOptions; from: 'node' }
  | { family: 'substrate'; options: DecodedDirOptions; from: 'decoded' }

export function createSource(spec: SourceSpec, rpc: RpcClient): BlockSource {
  switch (spec.family) {
    case 'evm':
      return new EvmRpcSource(rpc, spec.options)
    case 'starknet':
      return new StarknetRpcSource(rpc, spec.options)
    case 'substrate':
      switch (spec.from) {
        case 'sidecar':
          return createSidecarSource(spec.options, rpc.stats)
        case 'decoded':
          return createPapiDirSource(spec.options, rpc.stats)
        case 'node':
          return new SubstrateNodeSource(spec.options)
      }
  }
}
