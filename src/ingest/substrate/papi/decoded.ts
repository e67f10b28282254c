import type { BlockRows } from '../../../chunks/rows.js'
import { ethereumTransact, evmLog } from '../helper-values.js'
import { substrateRows } from '../rpc/rows.js'
import type { DecodedSubstrateBlock, Json, SubstrateCall, SubstrateEvent, SubstrateExtrinsic, SubstrateHeader } from '../rpc/types.js'
import { fail, hashOf, optionalHash } from '../shape.js'
import { ss58ToHex } from '../ss58.js'
import { accountIdOf, camel, HEX, ROOT_ORIGIN, signedOrigin } from '../squid-json.js'

/*
 * A block already decoded by polkadot-api (as Ocelloids records them: `{hash, number, parent,
 * specVersion?, stateRoot?, extrinsicsRoot?, digest?, extrinsics: [{module, method, args, signed,
 * address?, signature?, hash?}], events: [{phase: {type, value?}, topics, event: {module, name,
 * value}}]}`) → the `DecodedSubstrateBlock` of the RPC source, whose rows `substrateRows` writes.
 * polkadot-api has decoded with the runtime's metadata; this maps its JSON form toward the one squid
 * typegen decodes, as far as that can be done without the metadata.
 *
 * Names: `Pallet.call_name` / `Pallet.EventName` with module, method and event name as given
 * (polkadot-api keeps the runtime's spelling: `Ethereum.transact`, `EVM.Log`, `Utility.batch_all`).
 *
 * Values (`papiValue`, for args, signature, error, origin):
 *   - enums `{type, value}` → `{__kind, value}`; `{type}` (no value) → `{__kind}`. An object is taken
 *     as an enum when its keys are `type` (a string) and optionally `value`; polkadot-api writes a
 *     struct variant `V {a, b}` and a tuple variant wrapping a struct `V(S)` alike, as `{type: "V",
 *     value: {a, b}}`, so both become `{__kind: "V", value: {a, b}}` (squid gives the struct variant as
 *     `{__kind: "V", a, b}`), except the calls below, whose fields squid spreads;
 *   - object keys snake_case → camelCase (`odd_y_parity` → `oddYParity`), as squid typegen names fields;
 *   - strings: `0x` hex lower case (AccountId20 arrives check-summed); SS58 addresses (valid checksum,
 *     32-byte payload) → the account id as `0x` hex (squid decodes AccountId32 to hex); others as
 *     given: u64 and wider stay decimal strings (`["366269","0","0","0"]` for a U256), u8–u32 stay
 *     JSON numbers, booleans stay; `undefined`/absent optionals stay absent, null stays null;
 *   - a call inside the args of the wrapper calls below (`{type: Pallet, value: {type: call_name,
 *     value: args}}`) → the RuntimeCall value `{__kind: Pallet, value: {__kind: call_name, ...args}}`.
 *     Calls in other places (scheduler, governance) keep the generic enum form.
 *
 * Blocks: number (given as a decimal string), hash, parent, roots and digest (`{logs: [hex]}`, the
 * RPC header's form; a few recordings misspell the key `disgest`, read too) as given, hex lower case;
 * `specVersion` as given; `timestamp` (ms) from the `Timestamp.set` call's `now`.
 *
 * Extrinsics: index = position; `success` from the extrinsic's `System.ExtrinsicSuccess` /
 * `ExtrinsicFailed` event (a block without one of them per extrinsic is malformed); `error` the
 * converted `dispatch_error` of `ExtrinsicFailed`; `signature` `{address, signature}` of a signed
 * extrinsic (both converted: `{__kind: "Id", value: "0x…"}` for a MultiAddress, the variant of a
 * MultiSignature kept, `{__kind: "Sr25519", value}`); `fee` = `TransactionPayment.TransactionFeePaid`
 * actualFee − tip and `tip` its tip (decimal strings), null without that event; `hash` as given.
 *
 * Calls: the extrinsic's call at `[]`, and the inner calls of `Utility.batch`/`batch_all`/
 * `force_batch` (`calls[i]` → `[…, i]`), `Utility.dispatch_as`/`as_derivative`, `Proxy.proxy`/
 * `proxy_announced`, `Multisig.as_multi`/`as_multi_threshold_1`, `Sudo.sudo`/`sudo_unchecked_weight`/
 * `sudo_as` (`call` → `[…, 0]`), recursively, in pre-order; every call has the extrinsic's success,
 * the root call of a failed extrinsic its error, inner calls none (squid's call parser would walk the
 * events for per-call results: see below). Origins as the Sidecar source gives them
 * (../sidecar/call-tree.ts): signed `{__kind: "system", value: {__kind: "Signed", value: account}}`,
 * batch items their parent's, `Root` under sudo, the `real` / `who` account under proxy / sudo_as,
 * `as_origin` under dispatch_as; null for unsigned extrinsics, under as_derivative and multisig.
 *
 * Events: index = position in the list (System.Events order), `phase` from `phase.type`
 * (`Initialization` / `ApplyExtrinsic` / `Finalization`), `extrinsicIndex` = `phase.value` of
 * ApplyExtrinsic; `topics` as given (lower case). Event→call assignment: the events of a successful
 * extrinsic have `callAddress` `[]` (the extrinsic's root call), except its closing
 * `System.ExtrinsicSuccess`, which has none (null), and the events of a failed extrinsic have none:
 * what squid's call parser gives, and the node and Sidecar sources. That is exact for blocks without
 * nested calls (Moonbeam 16083402: every extrinsic is a plain call); with batches or proxies the
 * events of inner calls still point at the root (squid walks the closing events of each wrapper to
 * place them, which would need the per-runtime event rules of the Sidecar source's parser,
 * ../sidecar/call-tree.ts; no recorded polkadot-api block needs it yet), so an event's `call`/`stack` relations give the root
 * call only, and a call's `events` relation gives the extrinsic's events for the root and none for
 * inner calls. Initialization/Finalization events have no extrinsic and no call address.
 *
 * Helper values (hex lower case; ../helper-values.ts, as the Sidecar source): `Ethereum.transact` →
 * `_ethereumTransactTo` (the `Call` action's target, or EIP-7702's `destination`; none for `Create`)
 * and `_ethereumTransactSighash` (`input.slice(0, 10)`, EIP-7702: `data`); `EVM.Log {log: {address,
 * topics, data}}` →
 * `_evmLogAddress`, `_evmLogTopics`; `Contracts.ContractEmitted` → `_contractAddress`; Gear's
 * program id.
 *
 * Not filled by such a source (null): `specName`, `implName`, `implVersion` (the recording carries
 * only `specVersion`; the chain's name is not in the block — `specVersion` alone does not tell
 * Moonbeam from another runtime, and the file name is our naming, not data); `specVersion`,
 * state/extrinsics roots and extrinsic hashes where a recording leaves them out; `validator` (no
 * author in the recording); signed extensions (nonce, era, tip of the signature: polkadot-api's block
 * gives only address and signature); extrinsic `version` is always 4; per-call success, error and
 * event assignment inside nested calls (above); struct variants of enums other than calls keep a
 * `value` (above); opaque (hex) inner calls are not decoded.
 */

// ---------------------------------------------------------------- values

const isObject = (v: unknown): v is Record<string, unknown> => v != null && typeof v === 'object' && !Array.isArray(v)

/** polkadot-api's enum value `{type, value?}`. */
function isEnum(v: Record<string, unknown>): v is { type: string; value?: unknown } {
  if (typeof v.type !== 'string') return false
  for (const k of Object.keys(v)) if (k !== 'type' && k !== 'value') return false
  return true
}

/** A polkadot-api JSON value in squid's form, as far as it can be told without metadata (header comment). */
export function papiValue(v: unknown): Json {
  if (v === undefined || v === null) return null
  if (typeof v === 'string') {
    if (HEX.test(v)) return v.toLowerCase()
    return ss58ToHex(v) ?? v
  }
  if (typeof v === 'number' || typeof v === 'boolean') return v
  if (typeof v === 'bigint') return v.toString()
  if (Array.isArray(v)) return v.map(papiValue)
  if (!isObject(v)) return null
  if (isEnum(v)) return v.value === undefined ? { __kind: v.type } : { __kind: v.type, value: papiValue(v.value) }
  const out: Record<string, Json> = {}
  for (const [k, x] of Object.entries(v)) if (x !== undefined) out[camel(k)] = papiValue(x)
  return out
}

// ---------------------------------------------------------------- calls

/** A call as polkadot-api gives it inside args: `{type: Pallet, value: {type: call_name, value?: args}}`. */
interface RawCall {
  pallet: string
  method: string
  args: Record<string, unknown>
}

function rawCall(v: unknown): RawCall | undefined {
  if (!isObject(v) || !isEnum(v) || !isObject(v.value) || !isEnum(v.value)) return undefined
  const args = v.value.value
  if (args !== undefined && !isObject(args)) return undefined
  return { pallet: v.type, method: v.value.type, args: args ?? {} }
}

/** The wrapper calls whose inner calls are call-tree nodes: which arg holds them. */
const WRAPPERS: Record<string, 'call' | 'calls'> = {
  'Utility.batch': 'calls',
  'Utility.batch_all': 'calls',
  'Utility.force_batch': 'calls',
  'Utility.dispatch_as': 'call',
  'Utility.as_derivative': 'call',
  'Proxy.proxy': 'call',
  'Proxy.proxy_announced': 'call',
  'Multisig.as_multi': 'call',
  'Multisig.as_multi_threshold_1': 'call',
  'Sudo.sudo': 'call',
  'Sudo.sudo_unchecked_weight': 'call',
  'Sudo.sudo_as': 'call',
}

/** The inner calls of a wrapper call (in order), or [] for any other call. */
function innerCalls(name: string, args: Record<string, unknown>): (RawCall | undefined)[] {
  const arg = WRAPPERS[name]
  if (!arg) return []
  const v = args[arg]
  if (arg === 'calls') return Array.isArray(v) ? v.map(rawCall) : []
  return [rawCall(v)]
}

/** Args of a call in squid's form: fields camelCase, inner calls of wrappers as RuntimeCall values. */
function callArgs(name: string, args: Record<string, unknown>): Record<string, Json> {
  const arg = WRAPPERS[name]
  const out: Record<string, Json> = {}
  for (const [k, x] of Object.entries(args)) {
    if (x === undefined) continue
    if (k === arg) {
      if (arg === 'calls' && Array.isArray(x)) {
        out[camel(k)] = x.map((c) => {
          const r = rawCall(c)
          return r ? runtimeCall(r) : papiValue(c)
        })
        continue
      }
      const r = rawCall(x)
      if (r) {
        out[camel(k)] = runtimeCall(r)
        continue
      }
    }
    out[camel(k)] = papiValue(x)
  }
  return out
}

function runtimeCall(c: RawCall): Json {
  return { __kind: c.pallet, value: { __kind: c.method, ...callArgs(`${c.pallet}.${c.method}`, c.args) } }
}

/** The account id (hex) of an address: a plain account, or MultiAddress `Id`. */
const accountOf = (address: unknown): string | undefined => accountIdOf(papiValue(address))

/** The origin of the inner calls of a wrapper (undefined: the parent's). */
function innerOrigin(name: string, args: Record<string, unknown>, parent: Json): Json {
  switch (name) {
    case 'Proxy.proxy':
    case 'Proxy.proxy_announced': {
      const real = accountOf(args.real)
      return real ? signedOrigin(real) : null
    }
    case 'Sudo.sudo':
    case 'Sudo.sudo_unchecked_weight':
      return ROOT_ORIGIN
    case 'Sudo.sudo_as': {
      const who = accountOf(args.who)
      return who ? signedOrigin(who) : null
    }
    case 'Utility.dispatch_as':
      return args.as_origin === undefined ? null : papiValue(args.as_origin)
    case 'Utility.as_derivative':
    case 'Multisig.as_multi':
    case 'Multisig.as_multi_threshold_1':
      return null
    default:
      return parent // batches
  }
}

// ---------------------------------------------------------------- the block

/** `DecodedSubstrateBlock` with what a polkadot-api block may not carry left null. */
export interface PapiHeader extends Omit<SubstrateHeader, 'stateRoot' | 'extrinsicsRoot' | 'specName' | 'specVersion' | 'implName' | 'implVersion'> {
  stateRoot: string | null
  extrinsicsRoot: string | null
  specName: string | null
  specVersion: number | null
  implName: string | null
  implVersion: number | null
}
export interface PapiExtrinsic extends Omit<SubstrateExtrinsic, 'hash'> {
  hash: string | null
}
export interface PapiDecodedBlock extends Omit<DecodedSubstrateBlock, 'header' | 'extrinsics'> {
  header: PapiHeader
  extrinsics: PapiExtrinsic[]
}

function intOf(v: unknown, what: string): number {
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) fail(`${what}: expected a non-negative integer, got ${JSON.stringify(v)?.slice(0, 100)}`)
  return n
}

function decimal(v: unknown, what: string): string {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return String(v)
  if (typeof v === 'string' && /^\d+$/.test(v)) return BigInt(v).toString()
  if (typeof v === 'bigint' && v >= 0n) return v.toString()
  fail(`${what}: expected a non-negative integer, got ${JSON.stringify(v)?.slice(0, 100)}`)
}

const PHASES = new Set(['Initialization', 'ApplyExtrinsic', 'Finalization'])

/** Helper values of an event (converted args). */
function eventHelpers(name: string, args: Json): Partial<SubstrateEvent> {
  if (!isObject(args)) return {}
  switch (name) {
    case 'EVM.Log': {
      const log = evmLog(args)
      const out: Partial<SubstrateEvent> = {}
      if (typeof log?.address === 'string') out._evmLogAddress = log.address
      if (Array.isArray(log?.topics)) out._evmLogTopics = log.topics.filter((t): t is string => typeof t === 'string')
      return out
    }
    case 'Contracts.ContractEmitted':
      return typeof args.contract === 'string' ? { _contractAddress: args.contract } : {}
    case 'Gear.MessageQueued':
      return typeof args.destination === 'string' ? { _gearProgramId: args.destination } : {}
    case 'Gear.UserMessageSent': {
      const source = isObject(args.message) ? args.message.source : undefined
      return typeof source === 'string' ? { _gearProgramId: source } : {}
    }
  }
  return {}
}

/** Does this JSON look like a polkadot-api decoded block (and not, e.g., an Ethereum RPC block)? */
export function isPapiBlock(v: unknown): boolean {
  return isObject(v) && Array.isArray(v.extrinsics) && Array.isArray(v.events) && v.number != null && typeof v.hash === 'string' &&
    v.extrinsics.every((x) => isObject(x) && typeof x.module === 'string' && typeof x.method === 'string')
}

/** The block number of a polkadot-api block. */
export function papiBlockNumber(b: any): number {
  return intOf(b?.number, 'block.number')
}

/** A polkadot-api decoded block → the RPC source's decoded block (header comment). */
export function decodePapiBlock(b: any): PapiDecodedBlock {
  if (!isObject(b)) fail('block: expected an object')
  if (!Array.isArray(b.extrinsics)) fail('block.extrinsics: expected an array')
  if (!Array.isArray(b.events)) fail('block.events: expected an array')
  const number = intOf(b.number, 'block.number')
  const extrinsicsIn: any[] = b.extrinsics

  // events
  const events: SubstrateEvent[] = []
  const perExtrinsic: { name: string; args: Json; event: SubstrateEvent }[][] = extrinsicsIn.map(() => [])
  b.events.forEach((e: any, index: number) => {
    const w = `events[${index}]`
    if (!isObject(e) || !isObject(e.event) || typeof e.event.module !== 'string' || typeof e.event.name !== 'string') fail(`${w}: expected {phase, topics, event: {module, name, value}}`)
    const phase = isObject(e.phase) ? e.phase.type : undefined
    if (typeof phase !== 'string' || !PHASES.has(phase)) fail(`${w}.phase: expected Initialization, ApplyExtrinsic or Finalization, got ${JSON.stringify(e.phase)}`)
    const name = `${e.event.module}.${e.event.name}`
    const args = papiValue(e.event.value)
    const ev: SubstrateEvent = { index, name, args, phase: phase as SubstrateEvent['phase'], topics: [] }
    if (e.topics != null) {
      if (!Array.isArray(e.topics)) fail(`${w}.topics: expected an array`)
      ev.topics = e.topics.map((t: unknown, i: number) => hashOf(t, `${w}.topics[${i}]`))
    }
    if (phase === 'ApplyExtrinsic') {
      const x = intOf((e.phase as any).value, `${w}.phase.value`)
      if (x >= extrinsicsIn.length) fail(`${w}: extrinsic ${x} of ${extrinsicsIn.length}`)
      ev.extrinsicIndex = x
      perExtrinsic[x].push({ name, args, event: ev })
    }
    Object.assign(ev, eventHelpers(name, args))
    events.push(ev)
  })

  // extrinsics and calls
  let timestamp: number | undefined
  const extrinsics: PapiExtrinsic[] = []
  const calls: SubstrateCall[] = []
  extrinsicsIn.forEach((x: any, index: number) => {
    const w = `extrinsics[${index}]`
    if (!isObject(x) || typeof x.module !== 'string' || typeof x.method !== 'string') fail(`${w}: expected {module, method, args}`)
    if (x.args != null && !isObject(x.args)) fail(`${w}.args: expected an object`)
    const rawArgs: Record<string, unknown> = x.args ?? {}
    const name = `${x.module}.${x.method}`
    if (name === 'Timestamp.set' && timestamp === undefined && rawArgs.now != null) timestamp = Number(decimal(rawArgs.now, `${w}.args.now`))
    const evs = perExtrinsic[index]
    const done = evs.find((e) => e.name === 'System.ExtrinsicSuccess' || e.name === 'System.ExtrinsicFailed')
    if (!done) fail(`${w}: no System.ExtrinsicSuccess or System.ExtrinsicFailed event`)
    const success = done.name === 'System.ExtrinsicSuccess'
    // event → call: the root call, except the closing event and a failed extrinsic's events (squid's rule)
    if (success) for (const e of evs) if (e !== done) e.event.callAddress = []
    const error = success ? undefined : (isObject(done.args) ? (done.args.dispatchError ?? null) : done.args)

    let signature: Json | undefined
    let origin: Json = null
    if (x.signed) {
      signature = { address: papiValue(x.address), signature: papiValue(x.signature) }
      const account = accountOf(x.address)
      if (account) origin = signedOrigin(account)
    }
    const extrinsic: PapiExtrinsic = { index, version: 4, success, hash: optionalHash(x.hash, `${w}.hash`) }
    if (signature !== undefined) extrinsic.signature = signature
    if (error !== undefined) extrinsic.error = error
    const paid = evs.find((e) => e.name === 'TransactionPayment.TransactionFeePaid')
    if (paid && isObject(paid.args)) {
      const actual = decimal(paid.args.actualFee, `${w} TransactionFeePaid.actual_fee`)
      const tip = paid.args.tip == null ? '0' : decimal(paid.args.tip, `${w} TransactionFeePaid.tip`)
      extrinsic.fee = (BigInt(actual) - BigInt(tip)).toString()
      extrinsic.tip = tip
    }
    extrinsics.push(extrinsic)

    // the call tree, pre-order
    const visit = (c: RawCall, address: number[], callOrigin: Json) => {
      const callName = `${c.pallet}.${c.method}`
      const args = callArgs(callName, c.args)
      const call: SubstrateCall = { extrinsicIndex: index, address, name: callName, args, success }
      if (callOrigin != null) call.origin = callOrigin
      if (!success && address.length === 0) call.error = error
      if (callName === 'Ethereum.transact') {
        const eth = ethereumTransact(args)
        if (eth.to != null) call._ethereumTransactTo = eth.to
        if (eth.sighash != null) call._ethereumTransactSighash = eth.sighash
      }
      calls.push(call)
      const inner = innerOrigin(callName, c.args, callOrigin)
      innerCalls(callName, c.args).forEach((sub, i) => {
        if (sub) visit(sub, [...address, i], inner)
      })
    }
    visit({ pallet: x.module, method: x.method, args: rawArgs }, [], origin)
  })

  const digest = b.digest ?? b.disgest
  const header: PapiHeader = {
    number,
    hash: hashOf(b.hash, 'block.hash'),
    parentHash: hashOf(b.parent, 'block.parent'),
    stateRoot: optionalHash(b.stateRoot, 'block.stateRoot'),
    extrinsicsRoot: optionalHash(b.extrinsicsRoot, 'block.extrinsicsRoot'),
    digest: { logs: isObject(digest) && Array.isArray(digest.logs) ? digest.logs.map((l, i) => hashOf(l, `block.digest.logs[${i}]`)) : [] },
    specName: null,
    specVersion: b.specVersion == null ? null : intOf(b.specVersion, 'block.specVersion'),
    implName: null,
    implVersion: null,
  }
  if (timestamp !== undefined) header.timestamp = timestamp
  return { header, extrinsics, calls, events }
}

/** A decoded polkadot-api block as table rows: `substrateRows`, with the values it could not carry null. */
export function papiRows(d: PapiDecodedBlock): BlockRows {
  const h = d.header
  const full: DecodedSubstrateBlock = {
    ...d,
    header: { ...h, stateRoot: h.stateRoot ?? '', extrinsicsRoot: h.extrinsicsRoot ?? '', specName: h.specName ?? '', specVersion: h.specVersion ?? 0, implName: h.implName ?? '', implVersion: h.implVersion ?? 0 },
    extrinsics: d.extrinsics.map((x) => ({ ...x, hash: x.hash ?? '' })),
  }
  const rows = substrateRows(full)
  const block = rows.blocks[0]
  block.state_root = h.stateRoot
  block.extrinsics_root = h.extrinsicsRoot
  block.spec_name = h.specName
  block.spec_version = h.specVersion
  block.impl_name = h.implName
  block.impl_version = h.implVersion
  rows.extrinsics.forEach((r, i) => {
    r.hash = d.extrinsics[i].hash
  })
  return rows
}
