import { createHash } from 'node:crypto'
import type { BlockRows, Row } from '../../../chunks/rows.js'
import { MalformedRpcData } from '../../evm/normalize.js'

/*
 * Substrate API Sidecar `GET /blocks/{n}` answers → rows of the Substrate tables (columns of
 * src/families/substrate.ts). Sidecar has decoded the block with the runtime's metadata already, but
 * in polkadot.js' JSON form; this maps it toward what squid's `@subsquid/substrate-data` produces
 * from raw RPC data, as far as that can be done without the metadata.
 *
 * Names
 *   - Pallets: sidecar's lower-camel name with the first letter upper-cased (`balances` → `Balances`,
 *     `xcmPallet` → `XcmPallet`, `parachainSystem` → `ParachainSystem`), except the acronyms of
 *     PALLET_NAMES (`evm` → `EVM`, `evmChainId` → `EVMChainId`, …), which polkadot.js lower-cased whole.
 *   - Calls: the runtime's snake_case (`Balances.transfer_keep_alive`, `Utility.batch_all`), as squid
 *     names them; sidecar's camelCase is split before each upper-case letter and before a digit run
 *     that follows a lower-case letter (`asMultiThreshold1` → `as_multi_threshold_1`, but
 *     `ethCallV2` → `eth_call_v2`).
 *   - Events: `Pallet.EventName`, the event name as sidecar gives it (`Balances.Transfer`, `EVM.Log`).
 *
 * Values (`args` of calls and events, signature, error, origin): converted by `toSquid`:
 *   - `0x` hex strings: lower case; SS58 account strings (valid checksum, 32-byte payload): the
 *     account id as `0x` hex, as squid decodes AccountId32; other strings stay (decimal numbers stay
 *     decimal strings: sidecar gives u8…u128 all as strings and the type is unknown here, squid gives
 *     u8–u32 as JSON numbers); JSON numbers and booleans stay.
 *   - Object keys: camelCase (`other_signatories` → `otherSignatories`, `_remark` → `remark`).
 *   - Enums: a one-key object below the top level of the args is taken as an enum value
 *     `{__kind: Key, value}` (`{"id": "…"}` → `{__kind: "Id", value: "0x…"}`, `{"ok": null}` →
 *     `{__kind: "Ok"}`, `{"module": {…}}` → `{__kind: "Module", value: {…}}`, `{"legacy": {…}}` →
 *     `{__kind: "Legacy", …}`; `eip1559` → `EIP1559` etc.), except the known one-field structs of
 *     ONE_FIELD_STRUCTS (`{logs}` of a digest); a string that looks like a variant name
 *     (`/^[A-Z][A-Za-z0-9]*$/`, e.g. `"Normal"`, `"Returned"`) becomes `{__kind: "Normal"}`.
 *     Variants whose runtime names differ from sidecar's key by more than the first letter stay
 *     approximate (identity `Data::Raw11` arrives as `{raw}` → `{__kind: "Raw"}`).
 *   - A call inside args (`{method: {pallet, method}, args}`) becomes the RuntimeCall enum value
 *     `{__kind: "Balances", value: {__kind: "transfer", dest: …, value: …}}`.
 *   - Event args stay positional: sidecar gives `data` as an array without field names, so an event
 *     squid would give as `{from, to, amount}` is `["0x…", "0x…", "123"]` here.
 *
 * Blocks: number, hash, parent/state/extrinsics roots; `digest` = `{logs: [...]}` with sidecar's logs
 * as given (`{type, index, value}`, not the SCALE hex an RPC header has); `timestamp` (ms) from the
 * `Timestamp.set` call's `now`; `validator` from `authorId` (SS58 → hex, hex lower-cased).
 *
 * Extrinsics: `version` 4 (sidecar does not say; every extrinsic it decodes is v4); `signature`
 * `{address, signature, signedExtensions: {CheckMortality, CheckNonce}}` — address as converted
 * (`{__kind: "Id", value}` for MultiAddress, plain hex for AccountId20 chains and old Kusama),
 * signature the bare hex (sidecar drops the MultiSignature variant), era re-encoded in the runtime's
 * `Era` form (`{__kind: "Immortal"}` / `{__kind: "Mortal230", value: 2}`), nonce a number; `fee` =
 * actualFee − tip of `TransactionPayment.TransactionFeePaid` when the extrinsic has one (squid's
 * rule), else `info.partialFee`, as a decimal string (null when neither is there); `tip` decimal
 * string (null for unsigned); `success` from sidecar; `error` the converted DispatchError of
 * `System.ExtrinsicFailed` (null otherwise); `hash`.
 *
 * Events: onInitialize events (phase `Initialization`), then each extrinsic's events in order
 * (`ApplyExtrinsic`, `extrinsic_index`), then onFinalize (`Finalization`); `index` counts through the
 * block in that order, as System.Events lists them.
 *
 * Calls and event call addresses: the extrinsic's call at `[]`, inner calls derived from args by a
 * port of squid's CallParser (substrate-data 4.2.1 parsing/call): `Utility.batch`/`batch_all`/
 * `force_batch` (`calls[i]` → `[…, i]`), `Proxy.proxy`/`proxy_announced`, `Multisig.as_multi`/
 * `as_multi_threshold_1`, `Sudo.sudo`/`sudo_unchecked_weight`/`sudo_as`, `Utility.dispatch_as`/
 * `as_derivative` (`call` → `[…, 0]`), recursively. It walks the extrinsic's events backwards and
 * uses the closing events (`Utility.ItemCompleted`/`BatchCompleted`/`BatchInterrupted`/`ItemFailed`,
 * `Proxy.ProxyExecuted`, `Multisig.MultisigExecuted`, `Sudo.Sudid`/`SudoAsDone`,
 * `Utility.DispatchedAs`) to give each event the address of the call that emitted it and each call
 * its success, error and origin. As in squid: inner calls that did not run are absent (the calls of a
 * failed extrinsic, batch items after the interrupted one); events before the first batch item (the
 * fee withdrawal) go to item 0 when the runtime emits ItemCompleted; without ItemCompleted (old
 * runtimes, seen as: no ItemCompleted among the extrinsic's events) items are listed but their events
 * stay with the batch. As in squid, the closing `System.ExtrinsicSuccess`/`ExtrinsicFailed` and the
 * events of a failed extrinsic have no call address (null), like the node source's. An opaque (hex)
 * inner call is not decoded (no metadata), and when the events do not fit the algorithm (a missing
 * closing event) the extrinsic falls back to: every derivable inner call with the extrinsic's
 * success, every event at `[]`. Origins as squid: signed `{__kind: "system", value: {__kind:
 * "Signed", value: account}}`, `Root` under sudo, the proxied / multisig / sudo_as account for the
 * inner call, the parent's for batch items; `null` where squid has none (unsigned extrinsics,
 * as_derivative, as_multi_threshold_1, a non-`Id` address).
 *
 * Helper columns (hex lower case): `EVM.Log` → `evm_log_address`, `evm_log_topic0..3` (args `[log]`,
 * `{log}` or `{address, topics}`); `Ethereum.transact` → `ethereum_transact_to` (the `Call` action's
 * target, null for `Create`) and `ethereum_transact_sighash` (`input.slice(0, 10)`, squid's rule);
 * `Contracts.ContractEmitted` → `contract_address`; `Gear.MessageQueued` (destination) /
 * `Gear.UserMessageSent` (message.source) → `gear_program_id`; `Revive.ContractEmitted` →
 * `revive_contract`, `revive_topic0..3`. `args_size` = length of the args JSON text.
 *
 * Not filled by this source (null): `spec_name`, `spec_version`, `impl_name`, `impl_version`
 * (`/blocks` does not carry the runtime version; `/runtime/spec?at=` would); event `topics` (sidecar
 * drops EventRecord topics); event field names (see above); the MultiSignature variant; signed
 * extensions other than era and nonce; the origin of calls under as_derivative /
 * as_multi_threshold_1; calls behind `Multisig.approve_as_multi` (squid reads them from storage).
 */

export class SidecarShapeError extends MalformedRpcData {}

function fail(what: string): never {
  throw new SidecarShapeError(what)
}

// ---------------------------------------------------------------- names

/** Pallets whose runtime name is not sidecar's name with the first letter upper-cased. */
export const PALLET_NAMES: Record<string, string> = {
  evm: 'EVM',
  evmChainId: 'EVMChainId',
  evmBridge: 'EVMBridge',
  xcmPallet: 'XcmPallet',
}

const upperFirst = (s: string) => s.charAt(0).toUpperCase() + s.slice(1)

export function palletName(sidecar: string): string {
  return PALLET_NAMES[sidecar] ?? upperFirst(sidecar)
}

/** polkadot.js camelCase call name → the runtime's snake_case. */
export function callName(sidecar: string): string {
  if (!/[A-Z0-9]/.test(sidecar)) return sidecar
  return sidecar.replace(/([A-Z])|(?<=[a-z])(\d+)/g, (_, up: string | undefined, digits: string | undefined) => (up ? '_' + up.toLowerCase() : '_' + digits))
}

/** Enum variants whose runtime name is not the key with the first letter upper-cased. */
const VARIANT_NAMES: Record<string, string> = { eip2930: 'EIP2930', eip1559: 'EIP1559', eip7702: 'EIP7702', eip4844: 'EIP4844' }
const variantName = (key: string) => VARIANT_NAMES[key] ?? upperFirst(key)

/** Structs with one field, which would otherwise be taken for an enum value. */
const ONE_FIELD_STRUCTS = new Set(['logs'])

/** snake_case / camelCase field name → camelCase (squid's `toCamelCase` for the names that occur). */
export function camel(key: string): string {
  return key.replace(/^_+/, '').replace(/_+([A-Za-z0-9])/g, (_, c: string) => c.toUpperCase())
}

// ---------------------------------------------------------------- values

const HEX = /^0x[0-9a-fA-F]*$/
const VARIANT = /^[A-Z][A-Za-z0-9]*$/
const B58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
const B58_RE = /^[1-9A-HJ-NP-Za-km-z]{46,50}$/
const B58_INDEX = new Map([...B58].map((c, i) => [c, i]))
const SS58_PRE = Buffer.from('SS58PRE')

function base58(s: string): Buffer {
  let n = 0n
  for (const c of s) n = n * 58n + BigInt(B58_INDEX.get(c)!)
  let hex = n.toString(16)
  if (hex.length % 2) hex = '0' + hex
  const body = n === 0n ? Buffer.alloc(0) : Buffer.from(hex, 'hex')
  let zeros = 0
  while (zeros < s.length && s[zeros] === '1') zeros++
  return Buffer.concat([Buffer.alloc(zeros), body])
}

/** The 32-byte account id of an SS58 address as `0x` hex, or null when `s` is not one. */
export function ss58ToHex(s: string): string | null {
  if (!B58_RE.test(s)) return null
  const bytes = base58(s)
  const prefix = bytes[0] & 0x40 ? 2 : 1
  if (bytes.length !== prefix + 32 + 2) return null
  const sum = createHash('blake2b512').update(SS58_PRE).update(bytes.subarray(0, bytes.length - 2)).digest()
  if (sum[0] !== bytes[bytes.length - 2] || sum[1] !== bytes[bytes.length - 1]) return null
  return '0x' + bytes.subarray(prefix, prefix + 32).toString('hex')
}

/** A sidecar call object (`{method: {pallet, method}, args}`, maybe with `callIndex`). */
function isSidecarCall(v: any): boolean {
  return v != null && typeof v === 'object' && !Array.isArray(v) && v.method != null && typeof v.method === 'object' &&
    typeof v.method.pallet === 'string' && typeof v.method.method === 'string' && 'args' in v
}

/** A sidecar value in squid's form, as far as it can be told without metadata (header comment). */
export function toSquid(v: unknown, top = false): unknown {
  if (v == null) return null
  if (typeof v === 'string') {
    if (HEX.test(v)) return v.toLowerCase()
    const account = ss58ToHex(v)
    if (account) return account
    if (VARIANT.test(v)) return { __kind: v }
    return v
  }
  if (typeof v !== 'object') return v
  if (Array.isArray(v)) return v.map((x) => toSquid(x))
  const o = v as Record<string, unknown>
  if (isSidecarCall(o)) return callValue(o as any)
  const keys = Object.keys(o)
  if (!top && keys.length === 1 && !ONE_FIELD_STRUCTS.has(keys[0])) {
    const value = o[keys[0]]
    return value === null ? { __kind: variantName(keys[0]) } : { __kind: variantName(keys[0]), value: toSquid(value) }
  }
  const out: Record<string, unknown> = {}
  for (const k of keys) out[camel(k)] = toSquid(o[k])
  return out
}

/** Args of a call (a struct of the call's fields). */
function argsOf(args: unknown): Record<string, unknown> {
  if (args == null) return {}
  if (typeof args !== 'object' || Array.isArray(args)) fail(`call args: expected an object, got ${JSON.stringify(args).slice(0, 100)}`)
  return toSquid(args, true) as Record<string, unknown>
}

function callValue(c: { method: { pallet: string; method: string }; args: unknown }) {
  return { __kind: palletName(c.method.pallet), value: { __kind: callName(c.method.method), ...argsOf(c.args) } }
}

/** Account id (hex) of an address as sidecar gives it: `{id}`, a plain SS58 / hex account. */
function accountOf(address: unknown): string | undefined {
  const a = toSquid(address) as any
  if (typeof a === 'string' && HEX.test(a)) return a
  if (a && typeof a === 'object' && (a.__kind === 'Id' || a.__kind === 'AccountId') && typeof a.value === 'string') return a.value
  return undefined
}

const signedOrigin = (account: string) => ({ __kind: 'system', value: { __kind: 'Signed', value: account } })
const ROOT_ORIGIN = { __kind: 'system', value: { __kind: 'Root' } }

function hexOrNull(v: unknown): string | null {
  return typeof v === 'string' && HEX.test(v) ? v.toLowerCase() : null
}

function decimal(v: unknown, what: string): string | null {
  if (v == null) return null
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return String(v)
  if (typeof v === 'string' && /^\d+$/.test(v)) return BigInt(v).toString()
  if (typeof v === 'string' && /^0x[0-9a-fA-F]+$/.test(v)) return BigInt(v).toString()
  fail(`${what}: expected a non-negative integer, got ${JSON.stringify(v).slice(0, 100)}`)
}

function intOf(v: unknown, what: string): number {
  const d = decimal(v, what)
  const n = d == null ? NaN : Number(d)
  if (!Number.isSafeInteger(n)) fail(`${what}: expected a block number, got ${JSON.stringify(v)}`)
  return n
}

const textSize = (s: string | null) => (s == null ? null : s.length)
const jsonText = (v: unknown) => (v === undefined || v === null ? null : JSON.stringify(v))

/** The runtime's `Era` value for sidecar's era: `{immortalEra}` or `{mortalEra: [period, phase]}`. */
export function eraValue(era: any): unknown {
  if (era == null || typeof era !== 'object') return null
  if ('immortalEra' in era) return { __kind: 'Immortal' }
  const m = era.mortalEra
  if (!Array.isArray(m) || m.length !== 2) return null
  const period = Number(m[0])
  const phase = Number(m[1])
  if (!Number.isSafeInteger(period) || !Number.isSafeInteger(phase) || period < 4) return null
  let tz = 0
  while (((period >> tz) & 1) === 0 && tz < 31) tz++
  const quantize = Math.max(period >> 12, 1)
  const encoded = Math.min(15, Math.max(1, tz - 1)) | (Math.floor(phase / quantize) << 4)
  return { __kind: `Mortal${encoded & 0xff}`, value: encoded >> 8 }
}

// ---------------------------------------------------------------- events and call trees

/** An event of the block while its call address is worked out. */
interface Ev {
  name: string
  /** sidecar's `data` */
  data: unknown
  /** undefined: not assigned (yet) */
  callAddress?: number[] | null
}

interface CallNode {
  extrinsicIndex: number
  address: number[]
  name: string
  /** sidecar's call object (`{method, args}`) */
  raw: any
  origin?: unknown
  success?: boolean
  error?: unknown
}

/** The events do not fit the call tree (e.g. a closing event is missing). */
class Unparseable extends Error {}

interface CallResult {
  ok: boolean
  error?: unknown
}

type Boundary<T> = (e: Ev) => T | undefined | null | false

/** Field `i` (positional data) or `name` (named data) of an event. */
function field(e: Ev, i: number, name: string): unknown {
  const d = e.data as any
  if (Array.isArray(d)) return d[i]
  if (d && typeof d === 'object') return d[name] ?? d[camel(name)] ?? d[name.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase())]
  return i === 0 ? d : undefined
}

/** A Result as sidecar gives it (`{ok}` / `{err}`, or a bare bool in old runtimes). */
function resultOf(v: unknown): CallResult {
  if (typeof v === 'boolean') return { ok: v }
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>
    if ('ok' in o || 'Ok' in o) return { ok: true }
    if ('err' in o || 'Err' in o) return { ok: false, error: toSquid(o.err ?? o.Err) }
  }
  throw new Unparseable(`unexpected result ${JSON.stringify(v)?.slice(0, 100)}`)
}

/** An arg of a sidecar call by its camelCase name (sidecar gives snake_case in old runtimes). */
function rawArg(raw: any, name: string): unknown {
  const args = raw?.args
  if (!args || typeof args !== 'object') return undefined
  for (const k of Object.keys(args)) if (camel(k) === name) return args[k]
  return undefined
}

const ITEM_COMPLETED: Boundary<boolean> = (e) => e.name === 'Utility.ItemCompleted'

/**
 * squid's CallParser for one extrinsic (substrate-data 4.2.1 parsing/call/*.ts), over the
 * extrinsic's own events.
 */
class CallTreeParser {
  readonly calls: CallNode[] = []
  private pos: number
  private address?: number[]
  private boundary?: Boundary<unknown>

  constructor(private readonly events: Ev[], private readonly hasItemCompleted: boolean, private readonly strict: boolean) {
    this.pos = events.length - 1
  }

  parse(root: CallNode): void {
    const last = this.next()
    switch (last.name) {
      case 'System.ExtrinsicSuccess':
        this.visitCall(root)
        break
      case 'System.ExtrinsicFailed':
        this.visitFailedCall(root, toSquid(field(last, 0, 'dispatchError')))
        this.takeEvents()
        break
      default:
        throw new Unparseable(`the extrinsic's last event is ${last.name}`)
    }
  }

  /** Fallback: every derivable inner call, all with the extrinsic's success. */
  unwrapAll(root: CallNode, success: boolean, error: unknown): void {
    if (success) this.unwrap(root, true)
    else this.visitFailedCall(root, error)
  }

  private subcall(parent: CallNode, raw: unknown, index: number, origin: unknown): CallNode | undefined {
    if (!isSidecarCall(raw)) {
      if (this.strict) throw new Unparseable(`${parent.name}: inner call ${index} is not decoded`)
      return undefined
    }
    const r = raw as any
    return {
      extrinsicIndex: parent.extrinsicIndex,
      address: [...parent.address, index],
      name: `${palletName(r.method.pallet)}.${callName(r.method.method)}`,
      raw: r,
      origin: origin ?? undefined,
    }
  }

  /** The wrapped call (`call`, or `proposal` of old sudo) at [..., 0]; origin undefined: the parent's. */
  private getSubcall(call: CallNode, origin?: unknown, argName = 'call'): CallNode | undefined {
    return this.subcall(call, rawArg(call.raw, argName), 0, origin === undefined ? call.origin : origin)
  }

  private getSubcalls(call: CallNode): CallNode[] {
    const list = rawArg(call.raw, 'calls')
    if (!Array.isArray(list)) {
      if (this.strict) throw new Unparseable(`${call.name}: no calls`)
      return []
    }
    return list.map((x, i) => this.subcall(call, x, i, call.origin)).filter((x): x is CallNode => x != null)
  }

  private sudoSubcall(call: CallNode, origin: unknown): CallNode | undefined {
    const argName = rawArg(call.raw, 'call') !== undefined ? 'call' : 'proposal'
    return this.getSubcall(call, origin, argName)
  }

  private visitCall(call: CallNode): void {
    call.success = true
    this.calls.push(call)
    const parent = this.address
    this.address = call.address
    switch (call.name) {
      case 'Multisig.as_multi':
        this.visitAsMulti(call)
        break
      case 'Multisig.as_multi_threshold_1':
      case 'Utility.as_derivative':
      case 'Utility.as_sub':
      case 'Utility.as_limited_sub': {
        const sub = this.getSubcall(call, null)
        if (sub) this.visitCall(sub)
        break
      }
      case 'Utility.batch':
        this.visitBatch(call)
        break
      case 'Utility.batch_all':
        this.get((e) => e.name === 'Utility.BatchCompleted')
        this.visitBatchItems(this.getSubcalls(call))
        break
      case 'Utility.force_batch':
        this.visitForceBatch(call)
        break
      case 'Utility.dispatch_as': {
        const sub = this.getSubcall(call, toSquid(rawArg(call.raw, 'asOrigin')))
        if (sub) this.visitSubcall(sub, (e) => (e.name === 'Utility.DispatchedAs' ? resultOf(field(e, 0, 'result')) : undefined))
        break
      }
      case 'Proxy.proxy':
      case 'Proxy.proxy_announced': {
        const real = accountOf(rawArg(call.raw, 'real'))
        const sub = this.getSubcall(call, real ? signedOrigin(real) : null)
        if (sub) this.visitSubcall(sub, (e) => (e.name === 'Proxy.ProxyExecuted' ? resultOf(field(e, 0, 'result')) : undefined))
        break
      }
      case 'Sudo.sudo':
      case 'Sudo.sudo_unchecked_weight':
      case 'Sudo.sudo_as': {
        let origin: unknown = ROOT_ORIGIN
        if (call.name === 'Sudo.sudo_as') {
          const who = accountOf(rawArg(call.raw, 'who'))
          origin = who ? signedOrigin(who) : null
        }
        const sub = this.sudoSubcall(call, origin)
        if (sub) this.visitSubcall(sub, (e) => (e.name === 'Sudo.Sudid' || e.name === 'Sudo.SudoAsDone' ? resultOf(field(e, 0, 'sudoResult')) : undefined))
        break
      }
    }
    this.takeEvents()
    this.address = parent
  }

  private visitAsMulti(call: CallNode): void {
    const executed: Boundary<{ result: CallResult; multisig: unknown }> = (e) =>
      e.name === 'Multisig.MultisigExecuted' ? { result: resultOf(field(e, 4, 'result')), multisig: field(e, 2, 'multisig') } : undefined
    if (!this.isPresent(executed)) return
    const { result, multisig } = this.get(executed)
    const account = accountOf(multisig)
    const sub = this.getSubcall(call, account ? signedOrigin(account) : null)
    if (!sub) return
    if (result.ok) this.visitCall(sub)
    else this.visitFailedCall(sub, result.error)
  }

  private visitBatch(call: CallNode): void {
    const items = this.getSubcalls(call)
    const result = this.get<{ ok: boolean; failed?: number; error?: unknown }>((e) => {
      if (e.name === 'Utility.BatchCompleted') return { ok: true }
      if (e.name === 'Utility.BatchInterrupted') return { ok: false, failed: Number(field(e, 0, 'index')), error: toSquid(field(e, 1, 'error')) }
    })
    if (result.ok) return this.visitBatchItems(items)
    const failed = result.failed!
    if (!Number.isSafeInteger(failed) || failed < 0 || failed >= items.length) throw new Unparseable(`BatchInterrupted at item ${failed} of ${items.length}`)
    this.visitFailedCall(items[failed], result.error)
    this.visitBatchItems(items.slice(0, failed))
  }

  private visitBatchItems(items: CallNode[]): void {
    if (items.length === 0) return
    if (this.hasItemCompleted) {
      for (let i = items.length - 1; i >= 0; i--) {
        this.get(ITEM_COMPLETED)
        if (i > 0) this.withBoundary(ITEM_COMPLETED, () => this.visitCall(items[i]))
        else this.visitCall(items[i])
      }
    } else {
      for (const item of items) this.unwrap(item, true)
    }
  }

  private visitForceBatch(call: CallNode): void {
    this.get((e) => e.name === 'Utility.BatchCompleted' || e.name === 'Utility.BatchCompletedWithErrors')
    const items = this.getSubcalls(call)
    const itemEnd: Boundary<CallResult> = (e) => {
      if (e.name === 'Utility.ItemCompleted') return { ok: true }
      if (e.name === 'Utility.ItemFailed') return { ok: false, error: toSquid(field(e, 0, 'error')) }
    }
    for (let i = items.length - 1; i >= 0; i--) {
      const result = this.get(itemEnd)
      if (result.ok) {
        if (i > 0) this.withBoundary(itemEnd, () => this.visitCall(items[i]))
        else this.visitCall(items[i])
      } else {
        this.visitFailedCall(items[i], result.error)
      }
    }
  }

  private visitSubcall(call: CallNode, boundary: Boundary<CallResult>): void {
    const result = this.get(boundary)
    if (result.ok) this.visitCall(call)
    else this.visitFailedCall(call, result.error)
  }

  private visitFailedCall(call: CallNode, error: unknown): void {
    call.success = false
    call.error = error
    this.calls.push(call)
  }

  private unwrap(call: CallNode, success: boolean): void {
    this.calls.push(call)
    call.success = success
    const parent = this.address
    this.address = call.address
    const sub = (s: CallNode | undefined) => s && this.unwrap(s, success)
    switch (call.name) {
      case 'Utility.batch':
      case 'Utility.batch_all':
      case 'Utility.force_batch':
        for (const s of this.getSubcalls(call)) this.unwrap(s, success)
        break
      case 'Utility.dispatch_as':
        sub(this.getSubcall(call, toSquid(rawArg(call.raw, 'asOrigin'))))
        break
      case 'Utility.as_derivative':
      case 'Utility.as_sub':
      case 'Utility.as_limited_sub':
      case 'Multisig.as_multi':
      case 'Multisig.as_multi_threshold_1':
        sub(this.getSubcall(call, null))
        break
      case 'Proxy.proxy':
      case 'Proxy.proxy_announced': {
        const real = accountOf(rawArg(call.raw, 'real'))
        sub(this.getSubcall(call, real ? signedOrigin(real) : null))
        break
      }
      case 'Sudo.sudo':
      case 'Sudo.sudo_unchecked_weight':
        sub(this.sudoSubcall(call, ROOT_ORIGIN))
        break
      case 'Sudo.sudo_as': {
        const who = accountOf(rawArg(call.raw, 'who'))
        sub(this.sudoSubcall(call, who ? signedOrigin(who) : null))
        break
      }
    }
    this.address = parent
  }

  private withBoundary<T>(boundary: Boundary<unknown>, cb: () => T): T {
    const current = this.boundary
    this.boundary = boundary
    try {
      return cb()
    } finally {
      this.boundary = current
    }
  }

  private get<T>(boundary: Boundary<T>): T {
    for (;;) {
      const e = this.next()
      e.callAddress = this.address
      const match = boundary(e)
      if (match) return match
    }
  }

  private isPresent(boundary: Boundary<unknown>): boolean {
    const pos = this.pos
    try {
      let e: Ev | undefined
      while ((e = this.maybeNext())) {
        if (this.boundary?.(e)) return false
        if (boundary(e)) return true
      }
      return false
    } finally {
      this.pos = pos
    }
  }

  private takeEvents(): void {
    let e: Ev | undefined
    while ((e = this.maybeNext())) {
      if (this.boundary?.(e)) {
        this.pos += 1
        return
      }
      e.callAddress = this.address
    }
  }

  private next(): Ev {
    const e = this.maybeNext()
    if (!e) throw new Unparseable('missing required event')
    return e
  }

  private maybeNext(): Ev | undefined {
    return this.pos >= 0 ? this.events[this.pos--] : undefined
  }
}

/** Lexicographic order of call addresses (a parent before its children). */
function compareAddress(a: number[], b: number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i]
  return a.length - b.length
}

// ---------------------------------------------------------------- helper columns

function ethereumTransact(args: any): { to: string | null; sighash: string | null } {
  const tx = args?.transaction
  if (!tx || typeof tx !== 'object') return { to: null, sighash: null }
  let action: any
  let input: unknown
  if (typeof tx.__kind === 'string') {
    const v = tx.value ?? {}
    if (tx.__kind === 'EIP7702') {
      action = v.destination
      input = v.data
    } else {
      action = v.action
      input = v.input
    }
  } else {
    action = tx.action
    input = tx.input
  }
  return {
    to: action?.__kind === 'Call' ? hexOrNull(action.value) : null,
    sighash: typeof input === 'string' && HEX.test(input) ? input.slice(0, 10).toLowerCase() : null,
  }
}

/** `{address, topics}` of an EVM.Log event's (converted) args. */
function evmLog(args: any): { address: unknown; topics: unknown } | null {
  let log = Array.isArray(args) ? args[0] : args
  if (log && typeof log === 'object' && 'log' in log) log = log.log
  if (!log || typeof log !== 'object') return null
  return { address: log.address, topics: log.topics }
}

function eventHelpers(name: string, args: any): Row {
  const out: Row = {}
  const arg = (i: number, key: string) => (Array.isArray(args) ? args[i] : args?.[key])
  switch (name) {
    case 'EVM.Log': {
      const log = evmLog(args)
      if (!log) break
      out.evm_log_address = hexOrNull(log.address)
      const topics = Array.isArray(log.topics) ? log.topics : []
      for (let i = 0; i < 4; i++) out[`evm_log_topic${i}`] = hexOrNull(topics[i])
      break
    }
    case 'Contracts.ContractEmitted':
      out.contract_address = hexOrNull(arg(0, 'contract'))
      break
    case 'Gear.MessageQueued':
      out.gear_program_id = hexOrNull(arg(2, 'destination'))
      break
    case 'Gear.UserMessageSent':
      out.gear_program_id = hexOrNull((arg(0, 'message') as any)?.source)
      break
    case 'Revive.ContractEmitted': {
      out.revive_contract = hexOrNull(arg(0, 'contract'))
      const topics = arg(2, 'topics')
      for (let i = 0; i < 4; i++) out[`revive_topic${i}`] = hexOrNull(Array.isArray(topics) ? topics[i] : null)
      break
    }
  }
  return out
}

const EVENT_HELPERS = ['evm_log_address', 'evm_log_topic0', 'evm_log_topic1', 'evm_log_topic2', 'evm_log_topic3', 'contract_address',
  'gear_program_id', 'revive_contract', 'revive_topic0', 'revive_topic1', 'revive_topic2', 'revive_topic3']

// ---------------------------------------------------------------- the block

function eventName(e: any, what: string): string {
  const m = e?.method
  if (!m || typeof m.pallet !== 'string' || typeof m.method !== 'string') fail(`${what}.method: expected {pallet, method}`)
  return `${palletName(m.pallet)}.${m.method}`
}

function eventList(v: unknown, what: string): any[] {
  if (v == null) return []
  if (!Array.isArray(v)) fail(`${what}: expected an array`)
  return v
}

function hashOf(v: unknown, what: string): string {
  if (typeof v !== 'string' || !HEX.test(v)) fail(`${what}: expected a 0x hex string, got ${JSON.stringify(v)?.slice(0, 100)}`)
  return v.toLowerCase()
}

/** One sidecar `/blocks/{n}` answer as table rows. */
export function normalizeSidecarBlock(block: any): BlockRows {
  if (block == null || typeof block !== 'object') fail('block: expected an object')
  const number = intOf(block.number, 'block.number')
  const hash = hashOf(block.hash, 'block.hash')
  if (!Array.isArray(block.extrinsics)) fail('block.extrinsics: expected an array')
  const extrinsicsIn: any[] = block.extrinsics

  // events in block order
  interface EvRow extends Ev {
    phase: 'Initialization' | 'ApplyExtrinsic' | 'Finalization'
    extrinsicIndex: number | null
  }
  const events: EvRow[] = []
  const perExtrinsic: EvRow[][] = []
  const addEvents = (list: unknown, phase: EvRow['phase'], what: string, extrinsicIndex: number | null) => {
    const out: EvRow[] = []
    eventList(list, what).forEach((e, i) => {
      const ev: EvRow = { name: eventName(e, `${what}[${i}]`), data: e.data, phase, extrinsicIndex }
      if (phase !== 'ApplyExtrinsic') ev.callAddress = null
      out.push(ev)
    })
    events.push(...out)
    return out
  }
  addEvents(block.onInitialize?.events, 'Initialization', 'onInitialize.events', null)
  extrinsicsIn.forEach((x, i) => {
    if (x == null || typeof x !== 'object') fail(`extrinsics[${i}]: expected an object`)
    eventName(x, `extrinsics[${i}]`)
    perExtrinsic.push(addEvents(x.events, 'ApplyExtrinsic', `extrinsics[${i}].events`, i))
  })
  addEvents(block.onFinalize?.events, 'Finalization', 'onFinalize.events', null)

  let timestamp: number | null = null
  const extrinsics: Row[] = []
  const calls: Row[] = []
  extrinsicsIn.forEach((x, i) => {
    const w = `extrinsics[${i}]`
    const name = `${palletName(x.method.pallet)}.${callName(x.method.method)}`
    if (name === 'Timestamp.set' && timestamp == null) {
      const now = rawArg(x, 'now')
      timestamp = now == null ? null : intOf(now, `${w}.args.now`)
    }
    const evs = perExtrinsic[i]
    const failed = evs.find((e) => e.name === 'System.ExtrinsicFailed')
    const error = failed ? toSquid(field(failed, 0, 'dispatchError')) : null
    const success = typeof x.success === 'boolean' ? x.success : !failed

    // signature, fee, tip
    let signature: unknown = null
    let origin: unknown = null
    if (x.signature != null) {
      if (typeof x.signature !== 'object') fail(`${w}.signature: expected an object`)
      const signedExtensions: Record<string, unknown> = {}
      const era = eraValue(x.era)
      if (era != null) signedExtensions.CheckMortality = era
      const nonce = decimal(x.nonce, `${w}.nonce`)
      if (nonce != null) signedExtensions.CheckNonce = Number.isSafeInteger(Number(nonce)) ? Number(nonce) : nonce
      signature = { address: toSquid(x.signature.signer), signature: toSquid(x.signature.signature), signedExtensions }
      const account = accountOf(x.signature.signer)
      origin = account ? signedOrigin(account) : undefined
    }
    let fee: string | null = null
    const paid = evs.find((e) => e.name === 'TransactionPayment.TransactionFeePaid')
    if (paid) {
      const actual = decimal(field(paid, 1, 'actualFee'), `${w} TransactionFeePaid.actualFee`)
      const tip = decimal(field(paid, 2, 'tip'), `${w} TransactionFeePaid.tip`) ?? '0'
      if (actual != null) fee = (BigInt(actual) - BigInt(tip)).toString()
    }
    if (fee == null) fee = decimal(x.info?.partialFee, `${w}.info.partialFee`)
    extrinsics.push({
      block_number: number,
      index: i,
      version: 4,
      signature: jsonText(signature),
      fee,
      tip: x.signature == null ? null : decimal(x.tip, `${w}.tip`),
      error: jsonText(error),
      success,
      hash: x.hash == null ? null : hashOf(x.hash, `${w}.hash`),
    })

    // call tree
    const root: CallNode = { extrinsicIndex: i, address: [], name, raw: x, origin }
    const hasItemCompleted = evs.some((e) => e.name === 'Utility.ItemCompleted')
    let tree: CallNode[]
    try {
      const p = new CallTreeParser(evs, hasItemCompleted, true)
      p.parse({ ...root })
      tree = p.calls
    } catch (e) {
      if (!(e instanceof Unparseable)) throw e
      // The events do not fit the parser: every event goes to the extrinsic's own call.
      const p = new CallTreeParser(evs, hasItemCompleted, false)
      p.unwrapAll({ ...root }, success, error)
      tree = p.calls
      for (const ev of evs) ev.callAddress = []
    }
    tree.sort((a, b) => compareAddress(a.address, b.address))
    for (const c of tree) {
      const args = argsOf(c.raw.args)
      const argsText = JSON.stringify(args)
      const eth = c.name === 'Ethereum.transact' ? ethereumTransact(args) : { to: null, sighash: null }
      calls.push({
        block_number: number,
        extrinsic_index: i,
        address: c.address,
        name: c.name,
        args: argsText,
        origin: jsonText(c.origin),
        error: jsonText(c.error),
        success: c.success ?? success,
        ethereum_transact_to: eth.to,
        ethereum_transact_sighash: eth.sighash,
        args_size: argsText.length,
      })
    }
  })

  const eventRows: Row[] = events.map((e, index) => {
    const args = toSquid(e.data ?? null, !Array.isArray(e.data))
    const argsText = args == null ? null : JSON.stringify(args)
    const row: Row = {
      block_number: number,
      index,
      name: e.name,
      args: argsText,
      phase: e.phase,
      extrinsic_index: e.extrinsicIndex,
      call_address: e.callAddress ?? null,
      topics: null,
    }
    for (const k of EVENT_HELPERS) row[k] = null
    Object.assign(row, eventHelpers(e.name, args))
    row.args_size = textSize(argsText)
    return row
  })

  const validator = block.authorId == null ? null : typeof block.authorId === 'string' ? (hexOrNull(block.authorId) ?? ss58ToHex(block.authorId)) : null
  const blockRow: Row = {
    number,
    hash,
    parent_hash: hashOf(block.parentHash, 'block.parentHash'),
    state_root: block.stateRoot == null ? null : hashOf(block.stateRoot, 'block.stateRoot'),
    extrinsics_root: block.extrinsicsRoot == null ? null : hashOf(block.extrinsicsRoot, 'block.extrinsicsRoot'),
    digest: JSON.stringify({ logs: Array.isArray(block.logs) ? block.logs : [] }),
    spec_name: null,
    spec_version: null,
    impl_name: null,
    impl_version: null,
    timestamp,
    validator,
  }
  return { blocks: [blockRow], extrinsics, calls, events: eventRows }
}
