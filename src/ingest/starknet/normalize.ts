import type { BlockRows, Row } from '../../chunks/rows.js'
import { normalizeHex } from '../../families/declaration.js'
import { MalformedRpcData } from '../evm/normalize.js'

/*
 * Starknet JSON-RPC answers → table rows (columns of src/families/starknet.ts).
 *
 * Every felt is normalised by `feltOf`: lower case, no leading zeros after `0x`, `0x0` for zero; the
 * same inside list columns (calldata, keys, …) and inside the JSON text columns (resource bounds,
 * actual fee, state-diff lists). Lists are JS arrays; `X_size` columns hold the length of the JSON
 * text of the normalised value (null when the value is null). Nonces become decimal strings
 * (UBIGINT), block numbers, timestamps and indexes JS numbers.
 *
 * Accepted shapes: RPC 0.4–0.10 `starknet_getBlockWithReceipts` (`transactions: [{transaction, receipt}]`;
 * a bare transaction object without receipt is accepted too, its receipt columns stay null; the
 * transaction hash may be on the receipt only, as RPC 0.8 answers of some nodes have it), bare-felt
 * `actual_fee` of old RPC versions (unit WEI), `starknet_traceBlockTransactions` and
 * `starknet_getStateUpdate` results.
 *
 * Trace numbering: the roots of a transaction trace that are present are numbered in execution
 * order validate, execute | constructor | function (L1 handler), fee_transfer: root k (its position
 * among the present roots) has trace address [k], its calls[i] [k, i], and so on. Nested calls
 * inherit the root's invocation_type. A reverted `execute_invocation` (`{revert_reason}`) is one row
 * with only the revert reason (plus trace and invocation type).
 *
 * Events and messages ↔ trace tree: the `order` of an event (message) inside a trace root counts
 * from 0 in each root, and the receipt lists the roots' events in the root order above, so the
 * receipt index of an event is (events of the earlier roots) + order. The trace address is only set
 * when the receipt entry at that index has the same keys and data (to_address and payload for
 * messages); otherwise it stays [] (as when no trace is given).
 */

export interface StarknetBlockBundle {
  /** `starknet_getBlockWithReceipts` result */
  block: any
  /** `starknet_traceBlockTransactions` result: `[{transaction_hash, trace_root}]` */
  traces?: any[]
  /** `starknet_getStateUpdate` result */
  stateUpdate?: any
}

function fail(what: string): never {
  throw new MalformedRpcData(what)
}

const FELT = /^0[xX][0-9a-fA-F]+$/

/** Normalised felt (`'0x00AB'` → `'0xab'`, `'0X0'` → `'0x0'`), null for null/undefined. */
export function feltOf(v: unknown, what = 'felt'): string | null {
  if (v == null) return null
  if (typeof v !== 'string' || !FELT.test(v)) fail(`${what}: expected a 0x-prefixed hex felt, got ${JSON.stringify(v)?.slice(0, 100)}`)
  const felt = normalizeHex(v, 'felt')
  if (felt.length > 66) fail(`${what}: ${v.slice(0, 100)} is longer than 256 bits`)
  return felt
}

const feltReq = (v: unknown, what: string): string => feltOf(v, what) ?? fail(`${what} is missing`)

/** A list of felts (null when absent). */
function felts(v: unknown, what: string): string[] | null {
  if (v == null) return null
  if (!Array.isArray(v)) fail(`${what}: expected an array, got ${JSON.stringify(v).slice(0, 100)}`)
  return v.map((x, i) => feltReq(x, `${what}[${i}]`))
}

const sizeOf = (v: unknown): number | null => (v == null ? null : JSON.stringify(v).length)
const textSize = (s: string | null): number | null => (s == null ? null : s.length)

/** Every string inside a JSON value (object keys aside) normalised as a felt. */
function feltsDeep(v: unknown, what: string): unknown {
  if (typeof v === 'string') return feltReq(v, what)
  if (Array.isArray(v)) return v.map((x, i) => feltsDeep(x, `${what}[${i}]`))
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, feltsDeep(x, `${what}.${k}`)]))
  return v
}

/** Non-negative integer given as JSON number, decimal string or felt. */
function intOf(v: unknown, what: string): number | null {
  if (v == null) return null
  let n: number
  if (typeof v === 'number') n = v
  else if (typeof v === 'string' && /^\d+$/.test(v)) n = Number(v)
  else n = Number(BigInt(feltReq(v, what)))
  if (!Number.isSafeInteger(n) || n < 0) fail(`${what}: ${JSON.stringify(v)} is not a non-negative safe integer`)
  return n
}

/** Felt → decimal string for an UBIGINT column. */
function u64Of(v: unknown, what: string): string | null {
  const f = feltOf(v, what)
  if (f == null) return null
  const n = BigInt(f)
  if (n >= 1n << 64n) fail(`${what}: ${f} does not fit in 64 bits`)
  return n.toString()
}

function str(v: unknown, what: string): string | null {
  if (v == null) return null
  if (typeof v !== 'string') fail(`${what}: expected a string, got ${JSON.stringify(v).slice(0, 100)}`)
  return v
}

// ---------------------------------------------------------------- blocks

function blockRow(b: any, number: number, hash: string): Row {
  const price = (p: any, unit: 'price_in_fri' | 'price_in_wei', what: string) =>
    p && typeof p === 'object' ? feltOf(p[unit], `block.${what}.${unit}`) : null
  return {
    number,
    hash,
    parent_hash: feltOf(b.parent_hash, 'block.parent_hash'),
    status: str(b.status, 'block.status'),
    new_root: feltOf(b.new_root, 'block.new_root'),
    timestamp: intOf(b.timestamp, 'block.timestamp'),
    sequencer_address: feltOf(b.sequencer_address, 'block.sequencer_address'),
    starknet_version: str(b.starknet_version, 'block.starknet_version'),
    l1_gas_price_in_fri: price(b.l1_gas_price, 'price_in_fri', 'l1_gas_price'),
    l1_gas_price_in_wei: price(b.l1_gas_price, 'price_in_wei', 'l1_gas_price'),
    l1_data_gas_price_in_fri: price(b.l1_data_gas_price, 'price_in_fri', 'l1_data_gas_price'),
    l1_data_gas_price_in_wei: price(b.l1_data_gas_price, 'price_in_wei', 'l1_data_gas_price'),
    l2_gas_price_in_fri: price(b.l2_gas_price, 'price_in_fri', 'l2_gas_price'),
    l2_gas_price_in_wei: price(b.l2_gas_price, 'price_in_wei', 'l2_gas_price'),
    l1_da_mode: str(b.l1_da_mode, 'block.l1_da_mode'),
  }
}

// ---------------------------------------------------------------- transactions

const GAS_KINDS: [string, string][] = [
  ['l1_gas', 'l1Gas'],
  ['l2_gas', 'l2Gas'],
  ['l1_data_gas', 'l1DataGas'],
]

function resourceBounds(rb: unknown, what: string): string | null {
  if (rb == null) return null
  if (typeof rb !== 'object') fail(`${what}: expected an object`)
  const out: Record<string, string | null> = {}
  for (const [kind, camel] of GAS_KINDS) {
    const b = (rb as any)[kind]
    if (b == null) continue
    out[`${camel}MaxAmount`] = feltOf(b.max_amount, `${what}.${kind}.max_amount`)
    out[`${camel}MaxPricePerUnit`] = feltOf(b.max_price_per_unit, `${what}.${kind}.max_price_per_unit`)
  }
  return JSON.stringify(out)
}

function actualFee(fee: unknown, what: string): string | null {
  if (fee == null) return null
  if (typeof fee === 'string') return JSON.stringify({ amount: feltReq(fee, what), unit: 'WEI' })
  if (typeof fee !== 'object') fail(`${what}: expected an object or a felt`)
  const f = fee as any
  return JSON.stringify({ amount: feltReq(f.amount, `${what}.amount`), unit: str(f.unit, `${what}.unit`) ?? 'WEI' })
}

function transactionRow(blockNumber: number, index: number, tx: any, receipt: any | null, hash: string | null): Row {
  const w = `transactions[${index}]`
  const list = (k: string) => felts(tx[k], `${w}.transaction.${k}`)
  const calldata = list('calldata')
  const signature = list('signature')
  const constructorCalldata = list('constructor_calldata')
  const paymasterData = list('paymaster_data')
  const accountDeploymentData = list('account_deployment_data')
  const f = (k: string) => feltOf(tx[k], `${w}.transaction.${k}`)
  const r = receipt ?? {}
  return {
    block_number: blockNumber,
    transaction_index: index,
    transaction_hash: hash,
    contract_address: feltOf(tx.contract_address ?? r.contract_address, `${w}.contract_address`),
    entry_point_selector: f('entry_point_selector'),
    calldata,
    max_fee: f('max_fee'),
    type: str(tx.type ?? r.type, `${w}.transaction.type`),
    sender_address: f('sender_address'),
    version: f('version'),
    signature,
    nonce: u64Of(tx.nonce, `${w}.transaction.nonce`),
    class_hash: f('class_hash'),
    compiled_class_hash: f('compiled_class_hash'),
    contract_address_salt: f('contract_address_salt'),
    constructor_calldata: constructorCalldata,
    resource_bounds: resourceBounds(tx.resource_bounds, `${w}.transaction.resource_bounds`),
    tip: f('tip'),
    paymaster_data: paymasterData,
    account_deployment_data: accountDeploymentData,
    nonce_data_availability_mode: str(tx.nonce_data_availability_mode, `${w}.transaction.nonce_data_availability_mode`),
    fee_data_availability_mode: str(tx.fee_data_availability_mode, `${w}.transaction.fee_data_availability_mode`),
    message_hash: feltOf(r.message_hash, `${w}.receipt.message_hash`),
    actual_fee: actualFee(r.actual_fee, `${w}.receipt.actual_fee`),
    finality_status: str(r.finality_status, `${w}.receipt.finality_status`),
    execution_status: str(r.execution_status, `${w}.receipt.execution_status`),
    revert_reason: str(r.revert_reason, `${w}.receipt.revert_reason`),
    calldata_size: sizeOf(calldata),
    signature_size: sizeOf(signature),
    constructor_calldata_size: sizeOf(constructorCalldata),
    paymaster_data_size: sizeOf(paymasterData),
    account_deployment_data_size: sizeOf(accountDeploymentData),
  }
}

// ---------------------------------------------------------------- traces

const ROOTS: [string, string][] = [
  ['validate_invocation', 'validate'],
  ['execute_invocation', 'execute'],
  ['constructor_invocation', 'constructor'],
  ['function_invocation', 'function'],
  ['fee_transfer_invocation', 'fee_transfer'],
]

/** Where the events and messages of one transaction's trace tree sit: receipt index → trace address. */
interface TracePlaces {
  events: Map<number, { address: number[]; keys: string[]; data: string[] }>
  messages: Map<number, { address: number[]; contract: string | null; to: string | null; payload: string[] }>
}

function traceRows(blockNumber: number, txIndex: number, root: any, w: string, places: TracePlaces, out: Row[]): void {
  if (!root || typeof root !== 'object') fail(`${w}.trace_root: expected an object`)
  const traceType = str(root.type, `${w}.trace_root.type`)
  let k = 0
  let eventBase = 0
  let messageBase = 0
  for (const [key, invocationType] of ROOTS) {
    const inv = root[key]
    if (inv == null) continue
    if (typeof inv !== 'object') fail(`${w}.trace_root.${key}: expected an object`)
    if (inv.contract_address == null && inv.revert_reason != null) {
      out.push({
        block_number: blockNumber,
        transaction_index: txIndex,
        trace_address: [k],
        trace_type: traceType,
        invocation_type: invocationType,
        caller_address: null,
        contract_address: null,
        call_type: null,
        class_hash: null,
        entry_point_selector: null,
        entry_point_type: null,
        revert_reason: str(inv.revert_reason, `${w}.trace_root.${key}.revert_reason`),
        calldata: null,
        result: null,
        calldata_size: null,
        result_size: null,
      })
    } else {
      const counts = { events: 0, messages: 0 }
      walkCall(inv, [k], `${w}.trace_root.${key}`, { blockNumber, txIndex, traceType, invocationType, eventBase, messageBase, counts, places, out })
      eventBase += counts.events
      messageBase += counts.messages
    }
    k++
  }
}

interface WalkContext {
  blockNumber: number
  txIndex: number
  traceType: string | null
  invocationType: string
  /** receipt index of the root's first event (message) */
  eventBase: number
  messageBase: number
  counts: { events: number; messages: number }
  places: TracePlaces
  out: Row[]
}

function walkCall(call: any, address: number[], cw: string, c: WalkContext): void {
  if (!call || typeof call !== 'object') fail(`${cw}: expected an object`)
  const calldata = felts(call.calldata, `${cw}.calldata`)
  const result = felts(call.result, `${cw}.result`)
  const contract = feltOf(call.contract_address, `${cw}.contract_address`)
  c.out.push({
    block_number: c.blockNumber,
    transaction_index: c.txIndex,
    trace_address: address,
    trace_type: c.traceType,
    invocation_type: c.invocationType,
    caller_address: feltOf(call.caller_address, `${cw}.caller_address`),
    contract_address: contract,
    call_type: str(call.call_type, `${cw}.call_type`),
    class_hash: feltOf(call.class_hash, `${cw}.class_hash`),
    entry_point_selector: feltOf(call.entry_point_selector, `${cw}.entry_point_selector`),
    entry_point_type: str(call.entry_point_type, `${cw}.entry_point_type`),
    revert_reason: str(call.revert_reason, `${cw}.revert_reason`),
    calldata,
    result,
    calldata_size: sizeOf(calldata),
    result_size: sizeOf(result),
  })
  if (call.events != null && !Array.isArray(call.events)) fail(`${cw}.events: expected an array`)
  for (const [i, e] of (call.events ?? []).entries()) {
    c.counts.events++
    const order = intOf(e?.order, `${cw}.events[${i}].order`)
    if (order == null) continue
    c.places.events.set(c.eventBase + order, {
      address,
      keys: felts(e.keys, `${cw}.events[${i}].keys`) ?? [],
      data: felts(e.data, `${cw}.events[${i}].data`) ?? [],
    })
  }
  if (call.messages != null && !Array.isArray(call.messages)) fail(`${cw}.messages: expected an array`)
  for (const [i, m] of (call.messages ?? []).entries()) {
    c.counts.messages++
    const order = intOf(m?.order, `${cw}.messages[${i}].order`)
    if (order == null) continue
    c.places.messages.set(c.messageBase + order, {
      address,
      contract,
      to: feltOf(m.to_address, `${cw}.messages[${i}].to_address`),
      payload: felts(m.payload, `${cw}.messages[${i}].payload`) ?? [],
    })
  }
  if (call.calls != null && !Array.isArray(call.calls)) fail(`${cw}.calls: expected an array`)
  for (const [i, sub] of (call.calls ?? []).entries()) walkCall(sub, [...address, i], `${cw}.calls[${i}]`, c)
}

const sameList = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i])

// ---------------------------------------------------------------- state updates

const STATE_LISTS = [
  'deprecated_declared_classes',
  'declared_classes',
  'deployed_contracts',
  'replaced_classes',
  'nonces',
  'migrated_compiled_classes',
] as const

function stateUpdateRows(blockNumber: number, su: any, blockHash: string, rows: BlockRows): void {
  if (!su || typeof su !== 'object') fail('stateUpdate: expected an object')
  const suHash = feltOf(su.block_hash, 'stateUpdate.block_hash')
  if (suHash != null && suHash !== blockHash) fail(`stateUpdate.block_hash ${suHash} is not the block's hash ${blockHash}`)
  const diff = su.state_diff ?? fail('stateUpdate.state_diff is missing')
  if (typeof diff !== 'object') fail('stateUpdate.state_diff: expected an object')
  const row: Row = {
    block_number: blockNumber,
    new_root: feltOf(su.new_root, 'stateUpdate.new_root'),
    old_root: feltOf(su.old_root, 'stateUpdate.old_root'),
  }
  for (const name of STATE_LISTS) {
    const v = diff[name]
    if (v != null && !Array.isArray(v)) fail(`stateUpdate.state_diff.${name}: expected an array`)
    const text = v == null ? null : JSON.stringify(feltsDeep(v, `stateUpdate.state_diff.${name}`))
    row[name] = text
    row[`${name}_size`] = textSize(text)
  }
  rows.state_updates = [row]
  const storage: Row[] = []
  const diffs = diff.storage_diffs ?? []
  if (!Array.isArray(diffs)) fail('stateUpdate.state_diff.storage_diffs: expected an array')
  for (const [i, d] of diffs.entries()) {
    const w = `stateUpdate.state_diff.storage_diffs[${i}]`
    const address = feltReq(d?.address, `${w}.address`)
    const entries = d.storage_entries ?? []
    if (!Array.isArray(entries)) fail(`${w}.storage_entries: expected an array`)
    for (const [j, e] of entries.entries()) {
      storage.push({
        block_number: blockNumber,
        address,
        key: feltReq(e?.key, `${w}.storage_entries[${j}].key`),
        value: feltOf(e.value, `${w}.storage_entries[${j}].value`),
      })
    }
  }
  rows.storage_diffs = storage
}

// ---------------------------------------------------------------- the block

export function normalizeStarknetBlock(b: StarknetBlockBundle): BlockRows {
  const block = b?.block
  if (!block || typeof block !== 'object') fail('block: expected an object')
  if (block.block_number == null) fail('block.block_number is missing')
  const number = intOf(block.block_number, 'block.block_number')!
  const hash = feltReq(block.block_hash, 'block.block_hash')
  if (!Array.isArray(block.transactions)) fail('block.transactions: expected an array')

  const transactions: Row[] = []
  const events: Row[] = []
  const messages: Row[] = []
  const receipts: any[] = []
  const indexByHash = new Map<string, number>()
  for (const [i, item] of (block.transactions as any[]).entries()) {
    if (!item || typeof item !== 'object') fail(`block.transactions[${i}]: expected an object`)
    const withReceipt = 'transaction' in item || 'receipt' in item
    const tx = withReceipt ? item.transaction : item
    const receipt = withReceipt ? item.receipt ?? null : null
    if (!tx || typeof tx !== 'object') fail(`block.transactions[${i}].transaction: expected an object`)
    if (receipt != null && typeof receipt !== 'object') fail(`block.transactions[${i}].receipt: expected an object`)
    const txHash = feltOf(tx.transaction_hash, `block.transactions[${i}].transaction.transaction_hash`)
    const rHash = feltOf(receipt?.transaction_hash, `block.transactions[${i}].receipt.transaction_hash`)
    if (txHash != null && rHash != null && txHash !== rHash) {
      fail(`block.transactions[${i}].receipt.transaction_hash ${rHash} differs from the transaction's ${txHash}`)
    }
    const txh = txHash ?? rHash
    if (txh != null) indexByHash.set(txh, i)
    transactions.push(transactionRow(number, i, tx, receipt, txh))
    receipts.push(receipt)
  }

  const places: (TracePlaces | undefined)[] = []
  let traces: Row[] | undefined
  if (b.traces != null) {
    if (!Array.isArray(b.traces)) fail('traces: expected an array (starknet_traceBlockTransactions result)')
    traces = []
    for (const [j, t] of b.traces.entries()) {
      const w = `traces[${j}]`
      const h = feltReq(t?.transaction_hash, `${w}.transaction_hash`)
      const txIndex = indexByHash.get(h)
      if (txIndex == null) fail(`${w}.transaction_hash ${h} is not a transaction of block ${number}`)
      const p: TracePlaces = { events: new Map(), messages: new Map() }
      places[txIndex] = p
      traceRows(number, txIndex, t.trace_root, w, p, traces)
    }
  }

  for (const [i, receipt] of receipts.entries()) {
    if (receipt == null) continue
    const w = `block.transactions[${i}].receipt`
    const p = places[i]
    const evs = receipt.events ?? []
    if (!Array.isArray(evs)) fail(`${w}.events: expected an array`)
    for (const [j, e] of evs.entries()) {
      const keys = felts(e?.keys, `${w}.events[${j}].keys`) ?? []
      const data = felts(e.data, `${w}.events[${j}].data`) ?? []
      const place = p?.events.get(j)
      events.push({
        block_number: number,
        transaction_index: i,
        event_index: j,
        trace_address: place && sameList(place.keys, keys) && sameList(place.data, data) ? place.address : [],
        from_address: feltOf(e.from_address, `${w}.events[${j}].from_address`),
        key0: keys[0] ?? null,
        key1: keys[1] ?? null,
        key2: keys[2] ?? null,
        key3: keys[3] ?? null,
        keys,
        data,
        keys_size: sizeOf(keys),
        data_size: sizeOf(data),
      })
    }
    const msgs = receipt.messages_sent ?? []
    if (!Array.isArray(msgs)) fail(`${w}.messages_sent: expected an array`)
    for (const [j, m] of msgs.entries()) {
      const payload = felts(m?.payload, `${w}.messages_sent[${j}].payload`) ?? []
      const to = feltOf(m.to_address, `${w}.messages_sent[${j}].to_address`)
      const cand = p?.messages.get(j)
      const place = cand && cand.to === to && sameList(cand.payload, payload) ? cand : undefined
      messages.push({
        block_number: number,
        transaction_index: i,
        trace_address: place ? place.address : [],
        order: j,
        from_address: feltOf(m.from_address, `${w}.messages_sent[${j}].from_address`) ?? place?.contract ?? null,
        to_address: to,
        payload,
        payload_size: sizeOf(payload),
      })
    }
  }

  const rows: BlockRows = { blocks: [blockRow(block, number, hash)], transactions, events, messages }
  if (traces) rows.traces = traces
  if (b.stateUpdate != null) stateUpdateRows(number, b.stateUpdate, hash, rows)
  return rows
}
