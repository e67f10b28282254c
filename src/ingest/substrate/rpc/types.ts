/*
 * A Substrate block as the RPC source hands it on: plain JSON (no bigint, no Uint8Array), in the
 * form of the SQD archive's Substrate data. Names are `Pallet.call_name` / `Pallet.EventName` as
 * the runtime's metadata spells them; args are the JSON form that squid typegen decodes (integers
 * above 2^53 and all u64/u128 values as decimal strings, bytes and account ids as 0x hex, enums
 * as `{__kind, value}`), i.e. @subsquid/substrate-runtime's decoding passed through `toJSON`.
 */

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json }

/** What `state_getRuntimeVersion` answers (the parts we keep). */
export interface RuntimeVersion {
  specName: string
  specVersion: number
  implName: string
  implVersion: number
  transactionVersion?: number
  stateVersion?: number
  apis?: [string, number][]
}

/** The raw answers for one block: what is fetched before anything is decoded. */
export interface RawSubstrateBlock {
  number: number
  hash: string
  /** `chain_getBlock(hash).block`: the header and the SCALE hex of each extrinsic. */
  block: {
    header: { number: string; parentHash: string; stateRoot: string; extrinsicsRoot: string; digest: { logs: string[] } }
    extrinsics: string[]
  }
  /** `state_getStorage(System.Events, hash)`: SCALE hex, or null when the storage is empty. */
  events: string | null
  /** `state_getRuntimeVersion(hash)`: the runtime in the state after this block. */
  runtimeVersion: RuntimeVersion
}

export interface SubstrateHeader {
  number: number
  hash: string
  parentHash: string
  stateRoot: string
  extrinsicsRoot: string
  digest: { logs: string[] }
  specName: string
  specVersion: number
  implName: string
  implVersion: number
  /** Unix ms from `Timestamp.set` in the block. */
  timestamp?: number
  /** Account id (0x) of the block author, from the digest's pre-runtime slot and `Session.Validators`. */
  validator?: string
}

export interface SubstrateExtrinsic {
  index: number
  version: number
  /** `{address, signature, signedExtensions}` of a signed extrinsic. */
  signature?: Json
  /** Decimal string: from `TransactionPayment.TransactionFeePaid` (or the fee formula of old runtimes). */
  fee?: string
  tip?: string
  success: boolean
  error?: Json
  /** 0x blake2-256 of the extrinsic's bytes. */
  hash: string
}

export interface SubstrateCall {
  extrinsicIndex: number
  /** Position in the extrinsic's call tree: `[]` for the root, `[i]` for its i-th sub-call, `[i, j]`… */
  address: number[]
  name: string
  args: Json
  origin?: Json
  success: boolean
  error?: Json
  /** Ethereum.transact: the `to` address and the first 4 bytes of the input. */
  _ethereumTransactTo?: string
  _ethereumTransactSighash?: string
}

export interface SubstrateEvent {
  /** Position in the block's event list. */
  index: number
  name: string
  args: Json
  phase: 'Initialization' | 'ApplyExtrinsic' | 'Finalization'
  extrinsicIndex?: number
  /** Address of the call that emitted the event (within extrinsic `extrinsicIndex`). */
  callAddress?: number[]
  topics: string[]
  /** EVM.Log: the contract address and the log topics. */
  _evmLogAddress?: string
  _evmLogTopics?: string[]
  /** Contracts.ContractEmitted: the emitting contract. */
  _contractAddress?: string
  /** Gear.MessageQueued / Gear.UserMessageSent: the program id. */
  _gearProgramId?: string
}

export interface DecodedSubstrateBlock {
  header: SubstrateHeader
  extrinsics: SubstrateExtrinsic[]
  /** Every call of every extrinsic, ordered by extrinsic index and then address (pre-order). */
  calls: SubstrateCall[]
  events: SubstrateEvent[]
}
