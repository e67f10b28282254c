import { cols, inList, json, list, num, str } from './builders.js'
import type { FamilyDecl, FieldDecl, FilterDecl, ItemDecl, RelationDecl, RequestDecl } from './declaration.js'

/*
 * The Substrate family (docs/protocol.md §7).
 * Calls form a tree per extrinsic: a call's `address` is its position (root `[]`, the i-th inner
 * call of a batch/proxy/multisig `[i]`, …); an event's `call_address` is the address of the call
 * that emitted it. Args, signatures, errors, origins and digests are stored as JSON text in the form
 * squid typegen decodes. The helper columns (`evm_log_*`, `ethereum_transact_*`, `contract_address`,
 * `gear_program_id`, `revive_*`) hold values taken from the args at ingest, so that the special
 * request lists (`evmLogs`, `ethereumTransactions`, …) filter on plain columns; hex in them is lower
 * case.
 */

const hex = (column: string): FilterDecl => inList(column, 'hex')
const exact = (column: string): FilterDecl => inList(column, 'string')
const address = (column: string): FieldDecl => ({ encoding: { kind: 'sql', expr: `to_json(${column})`, columns: [column] } })
const bool = (column: string): FieldDecl => ({ encoding: { kind: 'boolean', column } })

// ---------------------------------------------------------------- tables

const blocksTable = {
  name: 'blocks',
  blockColumn: 'number',
  sortBy: ['number'],
  columns: [
    ...cols('BIGINT', 'number'),
    ...cols('VARCHAR', 'hash', 'parent_hash', 'state_root', 'extrinsics_root', 'digest', 'spec_name'),
    ...cols('BIGINT', 'spec_version'),
    ...cols('VARCHAR', 'impl_name'),
    ...cols('BIGINT', 'impl_version', 'timestamp'),
    ...cols('VARCHAR', 'validator'),
  ],
}

const extrinsicsTable = {
  name: 'extrinsics',
  blockColumn: 'block_number',
  sortBy: ['block_number', 'index'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'index', 'version'),
    ...cols('VARCHAR', 'signature', 'fee', 'tip', 'error'),
    ...cols('BOOLEAN', 'success'),
    ...cols('VARCHAR', 'hash'),
  ],
}

const callsTable = {
  name: 'calls',
  blockColumn: 'block_number',
  sortBy: ['name', 'ethereum_transact_to', 'ethereum_transact_sighash', 'block_number', 'extrinsic_index', 'address'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'extrinsic_index'),
    ...cols('INTEGER[]', 'address'),
    ...cols('VARCHAR', 'name', 'args', 'origin', 'error'),
    ...cols('BOOLEAN', 'success'),
    ...cols('VARCHAR', 'ethereum_transact_to', 'ethereum_transact_sighash'),
    ...cols('BIGINT', 'args_size'),
  ],
}

const eventsTable = {
  name: 'events',
  blockColumn: 'block_number',
  sortBy: ['name', 'evm_log_address', 'evm_log_topic0', 'contract_address', 'gear_program_id', 'block_number', 'index'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'index'),
    ...cols('VARCHAR', 'name', 'args', 'phase'),
    ...cols('INTEGER', 'extrinsic_index'),
    ...cols('INTEGER[]', 'call_address'),
    ...cols('VARCHAR[]', 'topics'),
    ...cols('VARCHAR', 'evm_log_address', 'evm_log_topic0', 'evm_log_topic1', 'evm_log_topic2', 'evm_log_topic3',
      'contract_address', 'gear_program_id', 'revive_contract', 'revive_topic0', 'revive_topic1', 'revive_topic2',
      'revive_topic3'),
    ...cols('BIGINT', 'args_size'),
  ],
}

// ---------------------------------------------------------------- relations

const sameExtrinsic: [string, string][] = [['extrinsic_index', 'extrinsic_index']]
/** The extrinsic of an event or call. */
const extrinsicOf: RelationDecl = { kind: 'join', target: 'extrinsic', on: [['extrinsic_index', 'index']] }
const callRelations: Record<string, RelationDecl> = {
  extrinsic: extrinsicOf,
  // all ancestors of the call
  stack: { kind: 'ancestors', target: 'call', on: sameExtrinsic, sourceAddress: 'address', targetAddress: 'address' },
  // events of the call and of all its descendants (docs/protocol.md §3.3)
  events: { kind: 'descendants', target: 'event', on: sameExtrinsic, sourceAddress: 'address', targetAddress: 'call_address', inclusive: true },
  // calls with the same parent (the call itself included)
  siblings: { kind: 'siblings', target: 'call', on: sameExtrinsic, sourceAddress: 'address', targetAddress: 'address' },
}
const eventRelations: Record<string, RelationDecl> = {
  extrinsic: extrinsicOf,
  call: { kind: 'join', target: 'call', on: [...sameExtrinsic, ['call_address', 'address']] },
  // the emitting call and all its ancestors
  stack: { kind: 'ancestors', target: 'call', on: sameExtrinsic, sourceAddress: 'call_address', targetAddress: 'address', inclusive: true },
}

/** A request list over the events table restricted to one event name. */
const eventsNamed = (name: string, eventName: string, filters: Record<string, FilterDecl>): RequestDecl => ({
  name,
  where: { name: eventName },
  filters,
  relations: eventRelations,
})

const topics = (prefix: string): Record<string, FilterDecl> =>
  Object.fromEntries([0, 1, 2, 3].map((i) => [`topic${i}`, hex(`${prefix}_topic${i}`)]))

// ---------------------------------------------------------------- items

const header: ItemDecl = {
  selector: 'block',
  output: 'header',
  table: 'blocks',
  key: [],
  idFields: ['number', 'hash', 'parentHash'],
  requests: [],
  fields: {
    number: num('number'),
    hash: str('hash'),
    parentHash: str('parent_hash'),
    stateRoot: str('state_root'),
    extrinsicsRoot: str('extrinsics_root'),
    digest: json('digest', 128),
    specName: str('spec_name'),
    specVersion: num('spec_version'),
    implName: str('impl_name'),
    implVersion: num('impl_version'),
    timestamp: num('timestamp'),
    validator: str('validator'),
  },
}

const extrinsic: ItemDecl = {
  selector: 'extrinsic',
  output: 'extrinsics',
  table: 'extrinsics',
  key: ['index'],
  idFields: ['index'],
  requests: [],
  fields: {
    index: num('index'),
    version: num('version'),
    signature: json('signature', 128),
    fee: str('fee'),
    tip: str('tip'),
    error: json('error'),
    success: bool('success'),
    hash: str('hash'),
  },
}

const call: ItemDecl = {
  selector: 'call',
  output: 'calls',
  table: 'calls',
  key: ['extrinsic_index', 'address'],
  idFields: ['extrinsicIndex', 'address'],
  fields: {
    extrinsicIndex: num('extrinsic_index'),
    address: address('address'),
    name: str('name'),
    args: json('args', { column: 'args_size' }),
    origin: json('origin'),
    error: json('error'),
    success: bool('success'),
  },
  requests: [
    {
      name: 'calls',
      filters: { name: exact('name') },
      relations: {
        ...callRelations,
        subcalls: { kind: 'descendants', target: 'call', on: sameExtrinsic, sourceAddress: 'address', targetAddress: 'address' },
      },
    },
    {
      name: 'ethereumTransactions',
      where: { name: 'Ethereum.transact' },
      filters: { to: hex('ethereum_transact_to'), sighash: hex('ethereum_transact_sighash') },
      relations: callRelations,
    },
  ],
}

const event: ItemDecl = {
  selector: 'event',
  output: 'events',
  table: 'events',
  key: ['index'],
  idFields: ['index', 'extrinsicIndex', 'callAddress'],
  fields: {
    index: num('index'),
    extrinsicIndex: num('extrinsic_index'),
    callAddress: address('call_address'),
    name: str('name'),
    args: json('args', { column: 'args_size' }),
    phase: str('phase'),
    topics: list('topics', false),
  },
  requests: [
    { name: 'events', filters: { name: exact('name') }, relations: eventRelations },
    eventsNamed('evmLogs', 'EVM.Log', { address: hex('evm_log_address'), ...topics('evm_log') }),
    eventsNamed('contractsEvents', 'Contracts.ContractEmitted', { contractAddress: hex('contract_address') }),
    // The SDK's name and event (docs/protocol.md §3.3), and the original archives' (§8).
    eventsNamed('gearMessagesQueued', 'Gear.MessageQueued', { programId: hex('gear_program_id') }),
    eventsNamed('gearMessagesEnqueued', 'Gear.UserMessageEnqueued', { programId: hex('gear_program_id') }),
    eventsNamed('gearUserMessagesSent', 'Gear.UserMessageSent', { programId: hex('gear_program_id') }),
    eventsNamed('reviveContractEmitted', 'Revive.ContractEmitted', { contract: hex('revive_contract'), ...topics('revive') }),
  ],
}

export const substrateFamily: FamilyDecl<'substrate'> = {
  name: 'substrate',
  queryTypes: ['substrate'],
  hashValues: 'hex',
  tables: [blocksTable, extrinsicsTable, callsTable, eventsTable],
  header,
  items: [event, call, extrinsic],
}
