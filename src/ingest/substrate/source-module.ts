import path from 'node:path'
import { substrateFamily } from '../../families/substrate.js'
import type { SourceModule } from '../source-module.js'
import type { DecodedDirOptions } from './papi/source.js'
import type { TransportOptions } from './rpc/transport.js'
import type { SidecarSourceOptions } from './sidecar/source.js'

/** Where a Substrate ingest reads: the node (`--rpc`) or, instead, a Sidecar or a folder of decoded blocks. */
export interface SubstrateIngestOptions {
  /** Read decoded blocks from this Substrate API Sidecar. */
  sidecar?: string
  /** Read blocks decoded by polkadot-api from JSON files in this folder. */
  decodedDir?: string
}

/** A Substrate source spec's options: which of the three it reads, and that one's options. */
export type SubstrateSpecOptions =
  | { from: 'node'; node: TransportOptions }
  | { from: 'sidecar'; sidecar: SidecarSourceOptions }
  | { from: 'decoded'; decoded: DecodedDirOptions }

/** Substrate: the node (src/ingest/substrate/rpc/), a Sidecar (sidecar/) or decoded dumps (papi/). */
export const substrateSource: SourceModule<SubstrateIngestOptions, SubstrateSpecOptions, 'substrate'> = {
  family: substrateFamily,
  flags: [
    { flags: '--sidecar <url>', description: 'substrate: read decoded blocks from a Substrate API Sidecar instead of the node (GET /blocks/{n}); see docs/ingest.md for what it cannot fill', env: 'BLOCK_ARCHIVE_SIDECAR' },
    { flags: '--decoded-dir <folder>', description: 'substrate: read blocks decoded by polkadot-api, as JSON files (<anything>.json[.gz], one block each, numbered by their content) from this folder instead of the node; see docs/ingest.md for what it cannot fill', env: 'BLOCK_ARCHIVE_DECODED_DIR' },
  ],
  spec(o) {
    if ([o.rpc, o.sidecar, o.decodedDir].filter((x) => x).length > 1) {
      throw new Error('give one of the node (--rpc), a Sidecar (--sidecar) or a folder of decoded blocks (--decoded-dir), not several')
    }
    if (o.sidecar) return { options: { from: 'sidecar', sidecar: { url: o.sidecar, batchSize: o.batchSize, timeoutMs: o.timeoutMs } } }
    if (o.decodedDir) return { options: { from: 'decoded', decoded: { dir: path.resolve(o.decodedDir) } } }
    if (!o.rpc) throw new Error('a Substrate ingest needs the node (--rpc ws://…|http://…), a Sidecar (--sidecar) or a folder of blocks decoded by polkadot-api (--decoded-dir)')
    return { options: { from: 'node', node: { url: o.rpc, batchSize: o.batchSize, timeoutMs: o.timeoutMs, attempts: o.attempts, concurrency: o.concurrency } } }
  },
  async create(spec, stats) {
    const s = spec.options
    switch (s.from) {
      case 'sidecar':
        return (await import('./sidecar/source.js')).createSidecarSource(s.sidecar, stats)
      case 'decoded':
        return (await import('./papi/source.js')).createPapiDirSource(s.decoded, stats)
      case 'node':
        return new (await import('./rpc/block-source.js')).SubstrateNodeSource(s.node)
    }
  },
}
