import type { BlockRows, Row } from '../../../chunks/rows.js'
import { jsonText } from '../squid-json.js'
import type { DecodedSubstrateBlock, Json } from './types.js'

/*
 * A decoded Substrate block → rows of the Substrate tables (columns of src/families/substrate.ts).
 * JSON values (args, signature, error, origin, digest) become JSON text; hex in the helper columns
 * is lower case, as the special request lists compare it.
 */

const lower = (v: unknown): string | null => (typeof v === 'string' ? v.toLowerCase() : null)

/** `Revive.ContractEmitted {contract, topics, data}`: the helper values the `reviveContractEmitted` list filters on. */
function revive(name: string, args: Json): { contract: string | null; topics: (string | null)[] } {
  if (name !== 'Revive.ContractEmitted' || !args || typeof args !== 'object' || Array.isArray(args)) return { contract: null, topics: [] }
  const topics = Array.isArray(args.topics) ? args.topics.map(lower) : []
  return { contract: lower(args.contract), topics }
}

export function substrateRows(b: DecodedSubstrateBlock): BlockRows {
  const h = b.header
  const number = h.number
  const blocks: Row[] = [{
    number,
    hash: h.hash.toLowerCase(),
    parent_hash: h.parentHash.toLowerCase(),
    state_root: h.stateRoot.toLowerCase(),
    extrinsics_root: h.extrinsicsRoot.toLowerCase(),
    digest: JSON.stringify(h.digest),
    spec_name: h.specName,
    spec_version: h.specVersion,
    impl_name: h.implName,
    impl_version: h.implVersion,
    timestamp: h.timestamp ?? null,
    validator: lower(h.validator),
  }]
  const extrinsics: Row[] = b.extrinsics.map((x) => ({
    block_number: number,
    index: x.index,
    version: x.version,
    signature: jsonText(x.signature),
    fee: x.fee ?? null,
    tip: x.tip ?? null,
    error: jsonText(x.error),
    success: x.success,
    hash: x.hash.toLowerCase(),
  }))
  const calls: Row[] = b.calls.map((c) => {
    const args = JSON.stringify(c.args ?? null)
    return {
      block_number: number,
      extrinsic_index: c.extrinsicIndex,
      address: c.address,
      name: c.name,
      args,
      origin: jsonText(c.origin),
      error: jsonText(c.error),
      success: c.success,
      ethereum_transact_to: lower(c._ethereumTransactTo),
      ethereum_transact_sighash: lower(c._ethereumTransactSighash),
      args_size: args.length,
    }
  })
  const events: Row[] = b.events.map((e) => {
    const args = JSON.stringify(e.args ?? null)
    const topics = e._evmLogTopics ?? []
    const r = revive(e.name, e.args)
    return {
      block_number: number,
      index: e.index,
      name: e.name,
      args,
      phase: e.phase,
      extrinsic_index: e.extrinsicIndex ?? null,
      call_address: e.callAddress ?? null,
      topics: e.topics,
      evm_log_address: lower(e._evmLogAddress),
      evm_log_topic0: lower(topics[0]),
      evm_log_topic1: lower(topics[1]),
      evm_log_topic2: lower(topics[2]),
      evm_log_topic3: lower(topics[3]),
      contract_address: lower(e._contractAddress),
      gear_program_id: lower(e._gearProgramId),
      revive_contract: r.contract,
      revive_topic0: r.topics[0] ?? null,
      revive_topic1: r.topics[1] ?? null,
      revive_topic2: r.topics[2] ?? null,
      revive_topic3: r.topics[3] ?? null,
      args_size: args.length,
    }
  })
  return { blocks, extrinsics, calls, events }
}
