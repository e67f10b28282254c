import { MalformedRpcData } from '../evm/normalize.js'

/*
 * Feeder-gateway `get_state_update?includeBlock=true` answer ({block, state_update}) → the JSON-RPC
 * shapes the normaliser takes: a `starknet_getBlockWithReceipts` result and a
 * `starknet_getStateUpdate` result. Values are copied as the gateway wrote them (felts are
 * normalised later by normalizeStarknetBlock).
 *
 * Mapping:
 * - block: parent_block_hash → parent_hash, state_root → new_root; l1_gas_price / l1_data_gas_price
 *   / l2_gas_price copied when present (an old answer with only `gas_price` gives
 *   l1_gas_price.price_in_wei).
 * - transactions: INVOKE_FUNCTION → INVOKE; v3 `resource_bounds` {L1_GAS, L2_GAS, L1_DATA_GAS} →
 *   {l1_gas, l2_gas, l1_data_gas}; data-availability modes 0/1 → 'L1'/'L2'. DEPLOY and
 *   DEPLOY_ACCOUNT carry the deployed address (`contract_address`, or `sender_address` in v3
 *   DEPLOY_ACCOUNT) on the tx: it moves to the receipt's `contract_address`, as in RPC.
 * - receipts are matched to transactions by hash: actual_fee felt → {amount, unit} with unit FRI for
 *   v3 transactions and WEI for older ones; l2_to_l1_messages → messages_sent; revert_error →
 *   revert_reason; execution_status copied (absent in answers older than v0.12.1, which had no
 *   reverts: then SUCCEEDED); finality_status = the block status when it is ACCEPTED_ON_L2 /
 *   ACCEPTED_ON_L1 (the gateway has no per-transaction finality), else null.
 * - state diff: storage_diffs {address: [{key, value}]} → [{address, storage_entries}];
 *   nonces {address: nonce} → [{contract_address, nonce}]; old_declared_contracts →
 *   deprecated_declared_classes; replaced_classes [{address, class_hash}] →
 *   [{contract_address, class_hash}]; declared_classes, deployed_contracts and
 *   migrated_compiled_classes copied.
 *
 * RPC fields a feeder answer cannot fill (absent, or null where noted):
 * - receipt.message_hash of L1_HANDLER transactions: null. It is the L1 keccak256 of the
 *   `l1_to_l2_consumed_message` (from, to, nonce, selector, payload), but the project has no keccak
 *   implementation; the consumed message itself is not an RPC receipt field and is dropped.
 * - receipt.execution_resources (the gateway's n_steps / builtin counters have another shape),
 *   block commitments and counts (transaction_commitment, event_commitment, state_diff_length, …:
 *   not RPC block-header fields the archive stores), the block's l2_gas_price and
 *   l1_data_gas_price before the gateway reported them (stay absent).
 * - receipt.finality_status for blocks that are neither ACCEPTED_ON_L2 nor ACCEPTED_ON_L1: null.
 */

function fail(what: string): never {
  throw new MalformedRpcData(what)
}

const DA_MODE: Record<string, string> = { '0': 'L1', '1': 'L2', L1: 'L1', L2: 'L2' }
const FINALITY = new Set(['ACCEPTED_ON_L2', 'ACCEPTED_ON_L1'])

function isV3(version: unknown): boolean {
  if (typeof version !== 'string' || !/^0x[0-9a-f]+$/i.test(version)) return false
  // query versions (2^128 + v) count as their plain version
  return (BigInt(version) & ((1n << 128n) - 1n)) >= 3n
}

function resourceBounds(rb: any): any {
  if (rb == null || typeof rb !== 'object') return rb
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(rb)) out[k.toLowerCase()] = v
  return out
}

function daMode(v: unknown): unknown {
  return v == null ? v : DA_MODE[String(v)] ?? v
}

function convertTransaction(t: any, i: number): { tx: any; deployed: unknown } {
  if (!t || typeof t !== 'object') fail(`block.transactions[${i}]: expected an object`)
  const tx: any = { ...t }
  if (tx.type === 'INVOKE_FUNCTION') tx.type = 'INVOKE'
  let deployed: unknown = undefined
  if (tx.type === 'DEPLOY' || tx.type === 'DEPLOY_ACCOUNT') {
    deployed = tx.contract_address ?? tx.sender_address
    delete tx.contract_address
    if (tx.type === 'DEPLOY_ACCOUNT') delete tx.sender_address
  }
  if (tx.resource_bounds != null) tx.resource_bounds = resourceBounds(tx.resource_bounds)
  if ('nonce_data_availability_mode' in tx) tx.nonce_data_availability_mode = daMode(tx.nonce_data_availability_mode)
  if ('fee_data_availability_mode' in tx) tx.fee_data_availability_mode = daMode(tx.fee_data_availability_mode)
  return { tx, deployed }
}

function convertReceipt(r: any, tx: any, deployed: unknown, finality: string | null): any {
  const receipt: any = {
    type: tx.type,
    transaction_hash: r.transaction_hash,
    actual_fee: r.actual_fee == null ? null
      : typeof r.actual_fee === 'object' ? r.actual_fee
      : { amount: r.actual_fee, unit: isV3(tx.version) ? 'FRI' : 'WEI' },
    execution_status: r.execution_status ?? 'SUCCEEDED',
    finality_status: finality,
    messages_sent: (r.l2_to_l1_messages ?? []).map((m: any) => ({ from_address: m.from_address, to_address: m.to_address, payload: m.payload })),
    events: (r.events ?? []).map((e: any) => ({ from_address: e.from_address, keys: e.keys, data: e.data })),
  }
  if (tx.type === 'L1_HANDLER') receipt.message_hash = null
  if (deployed !== undefined) receipt.contract_address = deployed
  const revert = r.revert_error ?? r.revert_reason
  if (revert != null) receipt.revert_reason = revert
  return receipt
}

function convertStateDiff(d: any): any {
  if (!d || typeof d !== 'object') fail('state_update.state_diff: expected an object')
  const storage = d.storage_diffs ?? {}
  const nonces = d.nonces ?? {}
  const out: any = {
    storage_diffs: Array.isArray(storage)
      ? storage
      : Object.entries(storage).map(([address, entries]) => ({ address, storage_entries: entries })),
    deprecated_declared_classes: d.old_declared_contracts ?? d.deprecated_declared_classes ?? [],
    declared_classes: d.declared_classes ?? [],
    deployed_contracts: d.deployed_contracts ?? [],
    replaced_classes: (d.replaced_classes ?? []).map((c: any) => ({ contract_address: c.contract_address ?? c.address, class_hash: c.class_hash })),
    nonces: Array.isArray(nonces)
      ? nonces
      : Object.entries(nonces).map(([contract_address, nonce]) => ({ contract_address, nonce })),
  }
  if (d.migrated_compiled_classes != null) out.migrated_compiled_classes = d.migrated_compiled_classes
  return out
}

export function feederToRpc(feeder: any): { block: any; stateUpdate: any } {
  const fb = feeder?.block
  const fs = feeder?.state_update
  if (!fb || typeof fb !== 'object') fail('feeder answer: block is missing (get_state_update?includeBlock=true)')
  if (!fs || typeof fs !== 'object') fail('feeder answer: state_update is missing')
  if (fb.block_hash == null) fail('feeder block.block_hash is missing')
  if (fb.block_number == null) fail('feeder block.block_number is missing')
  if (!Array.isArray(fb.transactions)) fail('feeder block.transactions: expected an array')
  const receipts = fb.transaction_receipts ?? []
  if (!Array.isArray(receipts)) fail('feeder block.transaction_receipts: expected an array')
  const byHash = new Map<string, any>()
  for (const r of receipts) if (r?.transaction_hash != null) byHash.set(String(r.transaction_hash).toLowerCase(), r)
  const finality = FINALITY.has(fb.status) ? fb.status : null

  const transactions = fb.transactions.map((t: any, i: number) => {
    const { tx, deployed } = convertTransaction(t, i)
    const r = byHash.get(String(tx.transaction_hash).toLowerCase())
    if (!r) fail(`feeder block.transaction_receipts: no receipt for transaction ${tx.transaction_hash}`)
    return { transaction: tx, receipt: convertReceipt(r, tx, deployed, finality) }
  })

  const block: any = {
    status: fb.status,
    block_hash: fb.block_hash,
    parent_hash: fb.parent_block_hash ?? fb.parent_hash,
    block_number: fb.block_number,
    new_root: fb.state_root ?? fb.new_root ?? fs.new_root,
    timestamp: fb.timestamp,
    sequencer_address: fb.sequencer_address,
    starknet_version: fb.starknet_version,
  }
  if (fb.l1_gas_price != null) block.l1_gas_price = fb.l1_gas_price
  else if (fb.gas_price != null) block.l1_gas_price = { price_in_wei: fb.gas_price }
  if (fb.l1_data_gas_price != null) block.l1_data_gas_price = fb.l1_data_gas_price
  if (fb.l2_gas_price != null) block.l2_gas_price = fb.l2_gas_price
  if (fb.l1_da_mode != null) block.l1_da_mode = fb.l1_da_mode
  block.transactions = transactions

  const stateUpdate = {
    block_hash: fs.block_hash ?? fb.block_hash,
    new_root: fs.new_root,
    old_root: fs.old_root,
    state_diff: convertStateDiff(fs.state_diff),
  }
  return { block, stateUpdate }
}
