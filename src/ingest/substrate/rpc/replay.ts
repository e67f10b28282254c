import { readFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { defaultFixturesDir } from '../../recorded.js'
import { SYSTEM_EVENTS_KEY } from './storage-keys.js'
import type { RuntimeVersion } from './types.js'
import type { RecordedSubstrateChain } from '../../recorded-chains.js'

/*
 * A recorded Substrate chain served as a node's JSON-RPC (HTTP, batches too), for `replay-rpc`: the
 * raw SCALE blocks of fixtures/substrate/ocelloids-sdk (captured from live networks) with their
 * System.Events and their runtime's metadata, answered the way a node answers the methods the node
 * source uses (`chain_getBlockHash`, `chain_getBlock`, `chain_getHeader`, `chain_getFinalizedHead`,
 * `state_getStorage` of System.Events, `state_getRuntimeVersion`, `state_getMetadata`). Other storage
 * answers null; other methods -32601. The parent of a recorded block that was not recorded itself
 * has a header naming only its number (the source asks for it to find the runtime that executed the
 * block); every state has the recording's runtime version and metadata.
 */

/** Recorded chains: their recordings (`derived/<name>.rpc.json.gz`) and runtime version. */
const CHAINS: Record<RecordedSubstrateChain, { recordings: readonly string[]; version: RuntimeVersion }> = {
  'rococo-contracts': { recordings: ['contracts2841323'], version: { specName: 'contracts-rococo', specVersion: 9420, implName: 'contracts-rococo', implVersion: 0 } },
  // 16037760 ran an older spec; the only metadata recorded is spec 1000001's, which decodes it.
  polkadot: { recordings: ['polkadot16037760', 'polkadot18977445'], version: { specName: 'polkadot', specVersion: 1000001, implName: 'parity-polkadot', implVersion: 0 } },
  rococo: { recordings: ['rococo8695536', 'rococo8695659'], version: { specName: 'rococo', specVersion: 1006001, implName: 'parity-rococo-v2.0', implVersion: 0 } },
}

export { RECORDED_SUBSTRATE_CHAINS, type RecordedSubstrateChain } from '../../recorded-chains.js'

interface RpcHeader {
  parentHash: string
  number: string
  stateRoot: string
  extrinsicsRoot: string
  digest: { logs: string[] }
}

export interface RecordedSubstrateBlock {
  number: number
  hash: string
  header: RpcHeader
  /** Each extrinsic's SCALE bytes (length-prefixed), as chain_getBlock gives them. */
  extrinsics: string[]
  /** System.Events storage value. */
  events: string
}

export interface RecordedSubstrate {
  chain: string
  version: RuntimeVersion
  metadata: string
  blocks: RecordedSubstrateBlock[]
}

const gunzipJson = (file: string) => gunzipSync(readFileSync(file)).toString('utf8')

export function loadRecordedSubstrate(chain: RecordedSubstrateChain): RecordedSubstrate {
  const { recordings, version } = CHAINS[chain]
  let metadata = ''
  const blocks: RecordedSubstrateBlock[] = []
  for (const name of recordings) {
    const r = JSON.parse(gunzipJson(path.join(defaultFixturesDir(), 'substrate/ocelloids-sdk', 'derived', `${name}.rpc.json.gz`)))
    // The metadata file is a TypeScript module holding the hex string.
    metadata = /'(0x[0-9a-f]+)'/.exec(gunzipJson(path.join(defaultFixturesDir(), 'substrate/ocelloids-sdk', r.metadata)))![1]
    blocks.push(...r.blocks)
  }
  blocks.sort((a, b) => a.number - b.number)
  return { chain, version: { ...version }, metadata, blocks }
}

export class SubstrateReplayServer {
  private server?: Server
  private readonly byHash = new Map<string, RecordedSubstrateBlock>()
  private readonly byNumber = new Map<number, RecordedSubstrateBlock>()
  /** Parents that were not recorded: hash → the header that names their number. */
  private readonly parents = new Map<string, RpcHeader>()

  constructor(private readonly recorded: RecordedSubstrate, private readonly opts: { host?: string; port?: number } = {}) {
    for (const b of recorded.blocks) {
      this.byHash.set(b.hash, b)
      this.byNumber.set(b.number, b)
    }
    for (const b of recorded.blocks) {
      if (this.byHash.has(b.header.parentHash)) continue
      const number = '0x' + (b.number - 1).toString(16)
      this.parents.set(b.header.parentHash, { ...b.header, number, parentHash: '0x' + '00'.repeat(32), digest: { logs: [] } })
    }
  }

  numbers(): number[] {
    return [...this.byNumber.keys()]
  }

  private get last(): RecordedSubstrateBlock {
    return this.recorded.blocks[this.recorded.blocks.length - 1]
  }

  private answer(method: string, params: any[]): { result: unknown } | { error: { code: number; message: string } } {
    const header = (hash: string) => this.byHash.get(hash)?.header ?? this.parents.get(hash) ?? null
    switch (method) {
      case 'chain_getBlockHash':
        return { result: this.byNumber.get(Number(params[0]))?.hash ?? null }
      case 'chain_getBlock': {
        const b = this.byHash.get(params[0])
        return { result: b ? { block: { header: b.header, extrinsics: b.extrinsics }, justifications: null } : null }
      }
      case 'chain_getHeader':
        return { result: params[0] == null ? this.last.header : header(params[0]) }
      case 'chain_getFinalizedHead':
        return { result: this.last.hash }
      case 'state_getStorage':
        return { result: params[0] === SYSTEM_EVENTS_KEY ? this.byHash.get(params[1])?.events ?? null : null }
      // Every state, recorded or not (the source also asks for the grandparent's), has the recording's runtime.
      case 'state_getRuntimeVersion':
        return { result: { ...this.recorded.version, transactionVersion: 0, stateVersion: 0, apis: [] } }
      case 'state_getMetadata':
        return { result: this.recorded.metadata }
      default:
        return { error: { code: -32601, message: `Method not found: ${method}` } }
    }
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      let body: any
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }))
        return
      }
      const one = (call: any) => ({ jsonrpc: '2.0', id: call?.id ?? null, ...this.answer(String(call?.method), Array.isArray(call?.params) ? call.params : []) })
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(Array.isArray(body) ? body.map(one) : one(body)))
    })
  }

  async start(): Promise<string> {
    const server = createServer((req, res) => this.handle(req, res))
    this.server = server
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(this.opts.port ?? 9933, this.opts.host ?? '127.0.0.1', () => resolve())
    })
    const a = server.address() as AddressInfo
    return `http://${a.address}:${a.port}`
  }

  close(): Promise<void> {
    return new Promise((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()))
  }
}
