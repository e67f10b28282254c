import type { BlockRows, Row } from '../../../chunks/rows.js'
import { ethereumTransact } from '../helper-values.js'
import { fail, hashOf, optionalHash } from '../shape.js'
import { ss58ToHex } from '../ss58.js'
import { accountIdOf, hexOrNull, jsonText, signedOrigin } from '../squid-json.js'
import { extrinsicCallTree, field, type CallNode, type Ev } from './call-tree.js'
import { eventHelperColumns } from './helper-columns.js'
import { palletName, qualifiedCallName } from './names.js'
import { argsOf, decimal, eraValue, intOf, rawArg, toSquid } from './values.js'

/*
 * Substrate API Sidecar `GET /blocks/{n}` answers → rows of the Substrate tables (columns of
 * src/families/substrate.ts). Sidecar has decoded the block with the runtime's metadata already, but
 * in polkadot.js' JSON form; this maps it toward what squid's `@subsquid/substrate-data` produces
 * from raw RPC data, as far as that can be done without the metadata. The parts of the mapping:
 * names (names.ts), values (`toSquid`, values.ts), calls and the call address of events
 * (call-tree.ts), helper columns (helper-columns.ts, ../helper-values.ts).
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
 * Calls: see call-tree.ts. `Ethereum.transact` → `ethereum_transact_to` (the `Call` action's target,
 * null for `Create`) and `ethereum_transact_sighash` (`input.slice(0, 10)`, squid's rule).
 * `args_size` = length of the args JSON text.
 *
 * Not filled by this source (null): `spec_name`, `spec_version`, `impl_name`, `impl_version`
 * (`/blocks` does not carry the runtime version; `/runtime/spec?at=` would); event `topics` (sidecar
 * drops EventRecord topics); event field names (values.ts); the MultiSignature variant; signed
 * extensions other than era and nonce; the origin of calls under as_derivative /
 * as_multi_threshold_1; calls behind `Multisig.approve_as_multi` (squid reads them from storage).
 */

const textSize = (s: string | null) => (s == null ? null : s.length)

/** An event of the block, with where it stands. */
interface BlockEvent extends Ev {
  phase: 'Initialization' | 'ApplyExtrinsic' | 'Finalization'
  extrinsicIndex: number | null
}

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

/** The events of the block in System.Events order, and each extrinsic's (the same objects). */
function blockEvents(block: any, extrinsicsIn: any[]): { events: BlockEvent[]; perExtrinsic: BlockEvent[][] } {
  const events: BlockEvent[] = []
  const perExtrinsic: BlockEvent[][] = []
  const addEvents = (list: unknown, phase: BlockEvent['phase'], what: string, extrinsicIndex: number | null) => {
    const out: BlockEvent[] = []
    eventList(list, what).forEach((e, i) => {
      const ev: BlockEvent = { name: eventName(e, `${what}[${i}]`), data: e.data, phase, extrinsicIndex }
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
  return { events, perExtrinsic }
}

/** The signature of extrinsic `x` in the runtime's form and the origin of its call (null/null: unsigned). */
function signatureOf(x: any, w: string): { signature: unknown; origin: unknown } {
  if (x.signature == null) return { signature: null, origin: null }
  if (typeof x.signature !== 'object') fail(`${w}.signature: expected an object`)
  const signedExtensions: Record<string, unknown> = {}
  const era = eraValue(x.era)
  if (era != null) signedExtensions.CheckMortality = era
  const nonce = decimal(x.nonce, `${w}.nonce`)
  if (nonce != null) signedExtensions.CheckNonce = Number.isSafeInteger(Number(nonce)) ? Number(nonce) : nonce
  const address = toSquid(x.signature.signer)
  const account = accountIdOf(address)
  return {
    signature: { address, signature: toSquid(x.signature.signature), signedExtensions },
    origin: account ? signedOrigin(account) : undefined,
  }
}

/** actualFee − tip of `TransactionFeePaid` (squid's rule), else sidecar's `info.partialFee`. */
function feeOf(x: any, evs: Ev[], w: string): string | null {
  const paid = evs.find((e) => e.name === 'TransactionPayment.TransactionFeePaid')
  if (paid) {
    const actual = decimal(field(paid, 1, 'actualFee'), `${w} TransactionFeePaid.actualFee`)
    const tip = decimal(field(paid, 2, 'tip'), `${w} TransactionFeePaid.tip`) ?? '0'
    if (actual != null) return (BigInt(actual) - BigInt(tip)).toString()
  }
  return decimal(x.info?.partialFee, `${w}.info.partialFee`)
}

/** One sidecar `/blocks/{n}` answer as table rows. */
export function normalizeSidecarBlock(block: any): BlockRows {
  if (block == null || typeof block !== 'object') fail('block: expected an object')
  const number = intOf(block.number, 'block.number')
  const hash = hashOf(block.hash, 'block.hash')
  if (!Array.isArray(block.extrinsics)) fail('block.extrinsics: expected an array')
  const extrinsicsIn: any[] = block.extrinsics
  const { events, perExtrinsic } = blockEvents(block, extrinsicsIn)

  let timestamp: number | null = null
  const extrinsics: Row[] = []
  const calls: Row[] = []
  extrinsicsIn.forEach((x, i) => {
    const w = `extrinsics[${i}]`
    const name = qualifiedCallName(x.method)
    if (name === 'Timestamp.set' && timestamp == null) {
      const now = rawArg(x, 'now')
      timestamp = now == null ? null : intOf(now, `${w}.args.now`)
    }
    const evs = perExtrinsic[i]
    const failed = evs.find((e) => e.name === 'System.ExtrinsicFailed')
    const error = failed ? toSquid(field(failed, 0, 'dispatchError')) : null
    const success = typeof x.success === 'boolean' ? x.success : !failed
    const { signature, origin } = signatureOf(x, w)
    extrinsics.push({
      block_number: number,
      index: i,
      version: 4,
      signature: jsonText(signature),
      fee: feeOf(x, evs, w),
      tip: x.signature == null ? null : decimal(x.tip, `${w}.tip`),
      error: jsonText(error),
      success,
      hash: optionalHash(x.hash, `${w}.hash`),
    })

    const root: CallNode = { extrinsicIndex: i, address: [], name, raw: x, origin }
    for (const c of extrinsicCallTree(root, evs, success, error)) {
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
    Object.assign(row, eventHelperColumns(e.name, args))
    row.args_size = textSize(argsText)
    return row
  })

  const validator = block.authorId == null ? null : typeof block.authorId === 'string' ? (hexOrNull(block.authorId) ?? ss58ToHex(block.authorId)) : null
  const blockRow: Row = {
    number,
    hash,
    parent_hash: hashOf(block.parentHash, 'block.parentHash'),
    state_root: optionalHash(block.stateRoot, 'block.stateRoot'),
    extrinsics_root: optionalHash(block.extrinsicsRoot, 'block.extrinsicsRoot'),
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
