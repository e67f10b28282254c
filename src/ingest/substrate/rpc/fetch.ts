import { JsonCodec } from '@subsquid/scale-codec'
import { MissingStorageValue, STORAGE, type Block as SqdBlock, type DataRequest } from '@subsquid/substrate-data'
import type { RawBlock } from '@subsquid/substrate-data/lib/interfaces/data-raw.js'
import { parseBlock } from '@subsquid/substrate-data/lib/parsing/block.js'
import { supportsFeeCalc } from '@subsquid/substrate-data/lib/parsing/fee/calc.js'
import type { Runtime } from '@subsquid/substrate-runtime'
import type { OldSpecsBundle, OldTypesBundle } from '@subsquid/substrate-runtime/lib/metadata/index.js'
import { RpcError, type RpcCall } from '../../rpc.js'
import { SYSTEM_EVENTS_KEY } from './storage-keys.js'
import { BadRpcAnswer, BlockChanged, BlockNotAvailable } from '../../source.js'
import { compareCallAddress } from '../squid-json.js'
import { substrateRuntime } from './metadata.js'
import { createTransport, type SubstrateTransport, type TransportOptions } from './transport.js'
import type {
  DecodedSubstrateBlock, Json, RawSubstrateBlock, RuntimeVersion, SubstrateCall, SubstrateEvent, SubstrateExtrinsic,
} from './types.js'

/*
 * Substrate blocks from a node's JSON-RPC (ws:// or http://), decoded with the field's own code:
 * @subsquid/substrate-runtime decodes extrinsics, calls, events and storage from the runtime's own
 * metadata, and @subsquid/substrate-data (the library behind squid's substrate-processor) builds the
 * call trees of batches, proxies, multisigs and sudo, assigns events to the calls that emitted
 * them, sets success/error per call, fees, tips, timestamps, block validators and the EVM /
 * Ethereum / Contracts / Gear helper fields. Nothing here reads SCALE by hand.
 *
 * Per block: chain_getBlockHash, chain_getBlock, state_getStorage(System.Events) and
 * state_getRuntimeVersion at the block; the block is decoded with the runtime of its *parent*
 * state (the code that executed it), whose metadata is fetched once per runtime version
 * (state_getMetadata at a block whose state has that version) and kept. A runtime upgrade inside a
 * range is therefore picked up at the first block executed by the new code.
 */

export interface SubstrateRpcOptions extends TransportOptions {
  /** Derive the block author from the digest and Session.Validators (default true). */
  validator?: boolean
  /** Extrinsic fees (default true). */
  fee?: boolean
  /** Type definitions for runtimes before metadata V14 (a squid types bundle). */
  typesBundle?: OldTypesBundle | OldSpecsBundle
  /** A transport to use instead of one made from `url`. */
  transport?: SubstrateTransport
}

export { SYSTEM_EVENTS_KEY }

export function runtimeVersionKey(v: RuntimeVersion): string {
  return `${v.specName}@${v.specVersion}/${v.implName}@${v.implVersion}`
}

/** A bounded map (oldest entries dropped first). */
class Lru<K, V> {
  private readonly map = new Map<K, V>()
  constructor(private readonly max: number) {}
  get(k: K): V | undefined {
    return this.map.get(k)
  }
  delete(k: K): void {
    this.map.delete(k)
  }
  set(k: K, v: V): void {
    this.map.delete(k)
    this.map.set(k, v)
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value as K)
  }
}

function qty(n: string | number): number {
  const v = typeof n === 'number' ? n : parseInt(n, 16)
  if (!Number.isSafeInteger(v)) throw new Error(`bad block number ${n}`)
  return v
}

/** squid's JSON form (`toJSON`: bigint → decimal string, bytes → 0x hex) as JSON text would carry it (undefined fields dropped). */
function toJson(v: unknown): Json {
  return dropUndefined(JsonCodec.encode(v))
}

function dropUndefined(v: any): Json {
  if (v === undefined) return null
  if (v === null || typeof v !== 'object') return v
  if (Array.isArray(v)) return v.map(dropUndefined)
  const out: { [key: string]: Json } = {}
  for (const k in v) if (v[k] !== undefined) out[k] = dropUndefined(v[k])
  return out
}

export class SubstrateRpcSource {
  readonly rpc: SubstrateTransport
  private readonly request: DataRequest
  private readonly typesBundle?: OldTypesBundle | OldSpecsBundle
  /** Runtimes by version key: one metadata download per runtime version (the latest few kept). */
  private readonly runtimes = new Lru<string, Promise<Runtime>>(16)
  /** Runtime version of the state at a block hash, and the parent of a block hash. */
  private readonly versionAt = new Lru<string, RuntimeVersion>(4096)
  private readonly parentOf = new Lru<string, string>(4096)
  private readonly validatorsOfSession = new Lru<string, string[]>(16)
  /** Counters for tests and progress. */
  readonly stats = { metadataFetched: 0, runtimesBuilt: 0 }

  constructor(opts: SubstrateRpcOptions) {
    this.rpc = opts.transport ?? createTransport(opts)
    this.typesBundle = opts.typesBundle
    this.request = {
      blockTimestamp: true,
      blockValidator: opts.validator ?? true,
      events: true,
      extrinsics: { hash: true, fee: opts.fee ?? true },
    }
  }

  async close(): Promise<void> {
    await this.rpc.close()
  }

  /** Number of the latest finalized block. */
  async finalizedHead(): Promise<number> {
    const hash = await this.rpc.call('chain_getFinalizedHead')
    const header = await this.rpc.call('chain_getHeader', [hash])
    if (!header) throw new BadRpcAnswer(-1, 'chain_getHeader', `no header for the finalized head ${hash}`)
    return qty(header.number)
  }

  /** Number of the node's best block. */
  async head(): Promise<number> {
    const header = await this.rpc.call('chain_getHeader', [])
    if (!header) throw new BadRpcAnswer(-1, 'chain_getHeader', 'no header for the best block')
    return qty(header.number)
  }

  /** Fetch and decode blocks, in the given order. */
  async fetchBlocks(numbers: number[]): Promise<DecodedSubstrateBlock[]> {
    return this.decode(await this.fetchRaw(numbers))
  }

  /** The canonical hashes of blocks (lower case; undefined for a block the node does not have). */
  async blockHashes(numbers: number[]): Promise<(string | undefined)[]> {
    const hashes = await this.batch(numbers.map((n) => ({ method: 'chain_getBlockHash', params: [n] })))
    return hashes.map((h, i) => {
      if (h == null) return undefined
      if (typeof h !== 'string') throw new BadRpcAnswer(numbers[i], 'chain_getBlockHash', JSON.stringify(h))
      return h.toLowerCase()
    })
  }

  /** The raw answers for blocks, in the given order. */
  async fetchRaw(numbers: number[]): Promise<RawSubstrateBlock[]> {
    if (numbers.length === 0) return []
    const hashes = await this.batch(numbers.map((n) => ({ method: 'chain_getBlockHash', params: [n] })))
    hashes.forEach((h, i) => {
      if (h == null) throw new BlockNotAvailable(numbers[i], 'chain_getBlockHash')
      if (typeof h !== 'string') throw new BadRpcAnswer(numbers[i], 'chain_getBlockHash', JSON.stringify(h))
    })
    const answers = await this.batch(hashes.flatMap((h) => [
      { method: 'chain_getBlock', params: [h] },
      { method: 'state_getStorage', params: [SYSTEM_EVENTS_KEY, h] },
      { method: 'state_getRuntimeVersion', params: [h] },
    ]))
    return numbers.map((number, i) => {
      const hash = hashes[i] as string
      const [signed, events, version] = answers.slice(3 * i, 3 * i + 3) as [any, any, any]
      if (signed == null) throw new BlockChanged(`block ${number}: chain_getBlock(${hash}) returned nothing (reorganised away?)`)
      const block = signed.block
      if (!block?.header || !Array.isArray(block.extrinsics)) throw new BadRpcAnswer(number, 'chain_getBlock', 'no header or extrinsics')
      if (qty(block.header.number) !== number) throw new BadRpcAnswer(number, 'chain_getBlock', `header number is ${block.header.number}`)
      if (events != null && typeof events !== 'string') throw new BadRpcAnswer(number, 'state_getStorage', JSON.stringify(events).slice(0, 200))
      if (!version?.specName) throw new BadRpcAnswer(number, 'state_getRuntimeVersion', JSON.stringify(version))
      this.parentOf.set(hash, number === 0 ? hash : block.header.parentHash)
      this.versionAt.set(hash, version)
      return { number, hash, block, events: events ?? null, runtimeVersion: version }
    })
  }

  /** Decode raw blocks (any order; blocks of one batch share the lookups of runtimes and storage). */
  async decode(raws: RawSubstrateBlock[]): Promise<DecodedSubstrateBlock[]> {
    const blocks: RawBlock[] = raws.map((r) => ({
      height: r.number,
      hash: r.hash,
      block: { block: r.block },
      events: r.events,
      runtimeVersion: { transactionVersion: 0, stateVersion: 0, apis: [], ...r.runtimeVersion },
    }))
    for (const r of raws) {
      this.parentOf.set(r.hash, r.number === 0 ? r.hash : r.block.header.parentHash)
      this.versionAt.set(r.hash, r.runtimeVersion)
    }
    await this.setRuntimes(blocks)
    if (this.request.blockValidator) await this.setValidators(blocks)
    if (this.request.extrinsics?.fee) await this.setFeeMultipliers(blocks)
    const out: DecodedSubstrateBlock[] = []
    for (const b of blocks) out.push(toDecoded(await this.parseOne(b)))
    return out
  }

  /** The runtime (with metadata) in the state after block `hash`. */
  async runtimeAt(hash: string, version?: RuntimeVersion): Promise<Runtime> {
    const v = version ?? this.versionAt.get(hash) ?? await this.rpc.call('state_getRuntimeVersion', [hash])
    this.versionAt.set(hash, v)
    const key = runtimeVersionKey(v)
    let runtime = this.runtimes.get(key)
    if (!runtime) {
      runtime = (async () => {
        const metadata = await this.rpc.call('state_getMetadata', [hash])
        if (typeof metadata !== 'string') throw new BadRpcAnswer(-1, 'state_getMetadata', `no metadata at ${hash}`)
        this.stats.metadataFetched++
        const rt = substrateRuntime(v, metadata, this.typesBundle, { call: (m, p) => this.rpc.call(m, p), batchCall: (c) => this.batch(c.map((x) => ({ method: x.method, params: x.params ?? [] }))) })
        this.stats.runtimesBuilt++
        return rt
      })()
      this.runtimes.set(key, runtime)
      runtime.catch(() => this.runtimes.delete(key))
    }
    return runtime
  }

  /** A batch whose error answers are thrown (with the method and parameters named). */
  private async batch(calls: RpcCall[]): Promise<any[]> {
    const results = await this.rpc.batch(calls)
    for (const r of results) if (r instanceof RpcError) throw r
    return results
  }

  /**
   * `runtime`: the runtime of the parent's state (it executed the block); `runtimeOfPrevBlock`: that
   * of the grandparent's state (used by the fee formula of old runtimes). Hashes and versions of
   * parents outside the batch are fetched (and remembered for the next batch).
   */
  private async setRuntimes(blocks: RawBlock[]): Promise<void> {
    const parentOf = (b: RawBlock) => (b.height === 0 ? b.hash : b.block.block.header.parentHash)
    // parents' parents we do not know yet
    const unknownParents = [...new Set(blocks.map(parentOf).filter((h) => this.parentOf.get(h) === undefined))]
    if (unknownParents.length) {
      const headers = await this.batch(unknownParents.map((h) => ({ method: 'chain_getHeader', params: [h] })))
      headers.forEach((hdr, i) => {
        if (!hdr) throw new BlockChanged(`chain_getHeader(${unknownParents[i]}) returned nothing`)
        this.parentOf.set(unknownParents[i], qty(hdr.number) === 0 ? unknownParents[i] : hdr.parentHash)
      })
    }
    const needVersion = new Set<string>()
    for (const b of blocks) {
      const p = parentOf(b)
      const gp = this.parentOf.get(p)!
      for (const h of [p, gp]) if (this.versionAt.get(h) === undefined) needVersion.add(h)
    }
    const list = [...needVersion]
    if (list.length) {
      const versions = await this.batch(list.map((h) => ({ method: 'state_getRuntimeVersion', params: [h] })))
      versions.forEach((v, i) => {
        if (!v?.specName) throw new BadRpcAnswer(-1, 'state_getRuntimeVersion', `${list[i]}: ${JSON.stringify(v)}`)
        this.versionAt.set(list[i], v)
      })
    }
    for (const b of blocks) {
      const p = parentOf(b)
      b.runtime = await this.runtimeAt(p)
      b.runtimeOfPrevBlock = await this.runtimeAt(this.parentOf.get(p)!)
    }
  }

  /** Session.Validators at each block (read once per session index), for the block author. */
  private async setValidators(blocks: RawBlock[]): Promise<void> {
    const withSession = blocks.filter((b) => STORAGE.validators.check(b) && STORAGE.sessionIndex.check(b))
    if (withSession.length === 0) return
    const sessions = await this.batch(withSession.map((b) => ({ method: 'state_getStorage', params: [STORAGE.sessionIndex.key(), b.hash] })))
    const missing = new Map<string, RawBlock>()
    withSession.forEach((b, i) => {
      b.session = STORAGE.sessionIndex.decode(b, sessions[i])
      const key = `${b.runtime!.specName}:${b.session}`
      if (this.validatorsOfSession.get(key) === undefined && !missing.has(key)) missing.set(key, b)
    })
    if (missing.size) {
      const entries = [...missing]
      const values = await this.batch(entries.map(([, b]) => ({ method: 'state_getStorage', params: [STORAGE.validators.key(), b.hash] })))
      entries.forEach(([key, b], i) => this.validatorsOfSession.set(key, STORAGE.validators.decode(b, values[i])))
    }
    for (const b of withSession) b.validators = this.validatorsOfSession.get(`${b.runtime!.specName}:${b.session}`)
  }

  /** TransactionPayment.NextFeeMultiplier of the parent, for runtimes without TransactionFeePaid events. */
  private async setFeeMultipliers(blocks: RawBlock[]): Promise<void> {
    const need = blocks.filter((b) => !b.runtime!.hasEvent('TransactionPayment.TransactionFeePaid') && supportsFeeCalc(b.runtime!))
    if (need.length === 0) return
    const values = await this.batch(need.map((b) => ({
      method: 'state_getStorage',
      params: [STORAGE.nextFeeMultiplier.key(), b.height === 0 ? b.hash : b.block.block.header.parentHash],
    })))
    need.forEach((b, i) => (b.feeMultiplier = STORAGE.nextFeeMultiplier.decode(b, values[i])))
  }

  /** substrate-data's block parser; storage it asks for (Multisig.Calls of the parent) is fetched. */
  private async parseOne(b: RawBlock): Promise<SqdBlock> {
    for (let attempt = 0; ; attempt++) {
      try {
        return parseBlock(b, this.request)
      } catch (e) {
        if (e instanceof MissingStorageValue && attempt < 100) {
          const value = await this.rpc.call('state_getStorage', [e.key, b.block.block.header.parentHash])
          ;(b.storage ??= {})[e.key] = value ?? null
          continue
        }
        const err = e instanceof Error ? e : new Error(String(e))
        err.message = `block ${b.height} (${b.hash}): decoding failed: ${err.message}`
        throw err
      }
    }
  }
}

function toDecoded(block: SqdBlock): DecodedSubstrateBlock {
  const h = block.header
  const header: DecodedSubstrateBlock['header'] = {
    number: h.height,
    hash: h.hash,
    parentHash: h.parentHash,
    stateRoot: h.stateRoot,
    extrinsicsRoot: h.extrinsicsRoot,
    digest: { logs: [...h.digest.logs] },
    specName: h.specName,
    specVersion: h.specVersion,
    implName: h.implName,
    implVersion: h.implVersion,
  }
  if (h.timestamp != null) header.timestamp = h.timestamp
  if (h.validator != null) header.validator = h.validator

  const extrinsics: SubstrateExtrinsic[] = (block.extrinsics ?? []).map((e) => {
    const x: SubstrateExtrinsic = { index: e.index, version: e.version, success: e.success ?? false, hash: e.hash! }
    if (e.signature != null) x.signature = toJson(e.signature)
    if (e.fee != null) x.fee = e.fee.toString()
    if (e.tip != null) x.tip = e.tip.toString()
    else if (x.signature != null) {
      // squid reads the tip of ChargeTransactionPayment only; asset hubs sign ChargeAssetTxPayment {tip, assetId}
      const ext = (x.signature as any).signedExtensions
      const tip = ext?.chargeAssetTxPayment?.tip ?? ext?.chargeAssetConversionTxPayment?.tip
      if (typeof tip === 'string' || typeof tip === 'number') x.tip = String(tip)
    }
    if (e.error != null) x.error = toJson(e.error)
    return x
  })

  const calls: SubstrateCall[] = (block.calls ?? []).map((c) => {
    const x: SubstrateCall = { extrinsicIndex: c.extrinsicIndex, address: [...c.address], name: c.name, args: c.args === undefined ? null : toJson(c.args), success: c.success ?? false }
    if (c.origin != null) x.origin = toJson(c.origin)
    if (c.error != null) x.error = toJson(c.error)
    if (c._ethereumTransactTo != null) x._ethereumTransactTo = c._ethereumTransactTo
    if (c._ethereumTransactSighash != null) x._ethereumTransactSighash = c._ethereumTransactSighash
    return x
  })
  calls.sort((a, b) => a.extrinsicIndex - b.extrinsicIndex || compareCallAddress(a.address, b.address))

  const events: SubstrateEvent[] = (block.events ?? []).map((e) => {
    const x: SubstrateEvent = { index: e.index, name: e.name, args: e.args === undefined ? null : toJson(e.args), phase: e.phase, topics: [...e.topics] }
    if (e.extrinsicIndex != null) x.extrinsicIndex = e.extrinsicIndex
    if (e.callAddress != null) x.callAddress = [...e.callAddress]
    if (e._evmLogAddress != null) x._evmLogAddress = e._evmLogAddress
    if (e._evmLogTopics != null) x._evmLogTopics = [...e._evmLogTopics]
    if (e._contractAddress != null) x._contractAddress = e._contractAddress
    if (e._gearProgramId != null) x._gearProgramId = e._gearProgramId
    return x
  })
  return { header, extrinsics, calls, events }
}
