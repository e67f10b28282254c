import { big, cols, inList, json, list, num, sameTx, str } from './builders.js'
import type { FamilyDecl, FieldDecl, FilterDecl, ItemDecl, RelationDecl } from './declaration.js'

/*
 * The Starknet family (docs/protocol.md §6).
 * Every felt (hashes, addresses, keys, data, calldata, …) is stored normalised: lower case, no
 * leading zeros after `0x` (`0x0` for zero), so that filters (normalised the same way) match
 * whatever form the node or the query used. Small integers (indexes, nonce) are numbers; objects
 * (resource bounds, actual fee, state-update lists) are stored as JSON text.
 */

const felt = (column: string): FilterDecl => inList(column, 'felt')
const text = (column: string): FilterDecl => inList(column, 'string')
/** Rows of `target` made by the same call (same transaction and trace address). */
const sameCall = (target: string): RelationDecl => ({
  kind: 'join',
  target,
  on: [['transaction_index', 'transaction_index'], ['trace_address', 'trace_address']],
})
const traceAddress: FieldDecl = { encoding: { kind: 'sql', expr: 'to_json(trace_address)', columns: ['trace_address'] } }

// ---------------------------------------------------------------- tables

const blocksTable = {
  name: 'blocks',
  blockColumn: 'number',
  sortBy: ['number'],
  columns: [
    ...cols('BIGINT', 'number'),
    ...cols('VARCHAR', 'hash', 'parent_hash', 'status', 'new_root'),
    ...cols('BIGINT', 'timestamp'),
    ...cols('VARCHAR', 'sequencer_address', 'starknet_version', 'l1_gas_price_in_fri', 'l1_gas_price_in_wei',
      'l1_data_gas_price_in_fri', 'l1_data_gas_price_in_wei', 'l2_gas_price_in_fri', 'l2_gas_price_in_wei', 'l1_da_mode'),
  ],
}

const transactionsTable = {
  name: 'transactions',
  blockColumn: 'block_number',
  sortBy: ['sender_address', 'contract_address', 'type', 'block_number', 'transaction_index'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'transaction_index'),
    ...cols('VARCHAR', 'transaction_hash', 'contract_address', 'entry_point_selector'),
    ...cols('VARCHAR[]', 'calldata'),
    ...cols('VARCHAR', 'max_fee', 'type', 'sender_address', 'version'),
    ...cols('VARCHAR[]', 'signature'),
    ...cols('UBIGINT', 'nonce'),
    ...cols('VARCHAR', 'class_hash', 'compiled_class_hash', 'contract_address_salt'),
    ...cols('VARCHAR[]', 'constructor_calldata'),
    /** JSON object `{l1GasMaxAmount, l1GasMaxPricePerUnit, l2GasMaxAmount, …}` */
    ...cols('VARCHAR', 'resource_bounds', 'tip'),
    ...cols('VARCHAR[]', 'paymaster_data', 'account_deployment_data'),
    ...cols('VARCHAR', 'nonce_data_availability_mode', 'fee_data_availability_mode', 'message_hash',
      /** JSON object `{amount, unit}` */
      'actual_fee', 'finality_status', 'execution_status', 'revert_reason'),
    ...cols('BIGINT', 'calldata_size', 'signature_size', 'constructor_calldata_size', 'paymaster_data_size',
      'account_deployment_data_size'),
  ],
}

const eventsTable = {
  name: 'events',
  blockColumn: 'block_number',
  sortBy: ['from_address', 'key0', 'block_number', 'transaction_index', 'event_index'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'transaction_index', 'event_index'),
    ...cols('INTEGER[]', 'trace_address'),
    ...cols('VARCHAR', 'from_address', 'key0', 'key1', 'key2', 'key3'),
    ...cols('VARCHAR[]', 'keys', 'data'),
    ...cols('BIGINT', 'keys_size', 'data_size'),
  ],
}

const tracesTable = {
  name: 'traces',
  blockColumn: 'block_number',
  optional: true,
  sortBy: ['contract_address', 'entry_point_selector', 'block_number', 'transaction_index', 'trace_address'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'transaction_index'),
    ...cols('INTEGER[]', 'trace_address'),
    ...cols('VARCHAR', 'trace_type', 'invocation_type', 'caller_address', 'contract_address', 'call_type', 'class_hash',
      'entry_point_selector', 'entry_point_type', 'revert_reason'),
    ...cols('VARCHAR[]', 'calldata', 'result'),
    ...cols('BIGINT', 'calldata_size', 'result_size'),
  ],
}

const messagesTable = {
  name: 'messages',
  blockColumn: 'block_number',
  sortBy: ['to_address', 'from_address', 'block_number', 'transaction_index', 'order'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'transaction_index'),
    ...cols('INTEGER[]', 'trace_address'),
    ...cols('INTEGER', 'order'),
    ...cols('VARCHAR', 'from_address', 'to_address'),
    ...cols('VARCHAR[]', 'payload'),
    ...cols('BIGINT', 'payload_size'),
  ],
}

const stateUpdatesTable = {
  name: 'state_updates',
  blockColumn: 'block_number',
  optional: true,
  sortBy: ['block_number'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('VARCHAR', 'new_root', 'old_root',
      // JSON arrays, nested keys snake_case as the node writes them
      'deprecated_declared_classes', 'declared_classes', 'deployed_contracts', 'replaced_classes', 'nonces',
      'migrated_compiled_classes'),
    ...cols('BIGINT', 'deprecated_declared_classes_size', 'declared_classes_size', 'deployed_contracts_size',
      'replaced_classes_size', 'nonces_size', 'migrated_compiled_classes_size'),
  ],
}

const storageDiffsTable = {
  name: 'storage_diffs',
  blockColumn: 'block_number',
  optional: true,
  sortBy: ['address', 'key', 'block_number'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('VARCHAR', 'address', 'key', 'value'),
  ],
}

// ---------------------------------------------------------------- items

const header: ItemDecl = {
  selector: 'block',
  output: 'header',
  table: 'blocks',
  key: [],
  idFields: ['number', 'hash'],
  requests: [],
  fields: {
    number: num('number'),
    hash: str('hash'),
    parentHash: str('parent_hash'),
    status: str('status'),
    newRoot: str('new_root'),
    timestamp: num('timestamp'),
    sequencerAddress: str('sequencer_address'),
    starknetVersion: str('starknet_version'),
    l1GasPriceInFri: str('l1_gas_price_in_fri'),
    l1GasPriceInWei: str('l1_gas_price_in_wei'),
    l1DataGasPriceInFri: str('l1_data_gas_price_in_fri'),
    l1DataGasPriceInWei: str('l1_data_gas_price_in_wei'),
    l2GasPriceInFri: str('l2_gas_price_in_fri'),
    l2GasPriceInWei: str('l2_gas_price_in_wei'),
    l1DaMode: str('l1_da_mode'),
  },
}

const transaction: ItemDecl = {
  selector: 'transaction',
  output: 'transactions',
  table: 'transactions',
  key: ['transaction_index'],
  idFields: ['transactionIndex'],
  fields: {
    transactionIndex: num('transaction_index'),
    transactionHash: str('transaction_hash'),
    contractAddress: str('contract_address'),
    entryPointSelector: str('entry_point_selector'),
    calldata: list('calldata'),
    maxFee: str('max_fee'),
    type: str('type'),
    senderAddress: str('sender_address'),
    version: str('version'),
    signature: list('signature'),
    nonce: big('nonce'),
    classHash: str('class_hash'),
    compiledClassHash: str('compiled_class_hash'),
    contractAddressSalt: str('contract_address_salt'),
    constructorCalldata: list('constructor_calldata'),
    resourceBounds: json('resource_bounds', 200),
    tip: str('tip'),
    paymasterData: list('paymaster_data'),
    accountDeploymentData: list('account_deployment_data'),
    nonceDataAvailabilityMode: str('nonce_data_availability_mode'),
    feeDataAvailabilityMode: str('fee_data_availability_mode'),
    messageHash: str('message_hash'),
    actualFee: json('actual_fee', 64),
    finalityStatus: str('finality_status'),
    executionStatus: str('execution_status'),
    revertReason: str('revert_reason'),
  },
  requests: [
    {
      name: 'transactions',
      filters: {
        contractAddress: felt('contract_address'),
        senderAddress: felt('sender_address'),
        type: text('type'),
        firstNonce: { kind: 'min', column: 'nonce' },
        lastNonce: { kind: 'max', column: 'nonce' },
      },
      relations: {
        events: sameTx('event'),
        traces: sameTx('trace'),
        messages: sameTx('message'),
      },
    },
  ],
}

const event: ItemDecl = {
  selector: 'event',
  output: 'events',
  table: 'events',
  key: ['transaction_index', 'event_index'],
  idFields: ['transactionIndex', 'eventIndex'],
  fields: {
    transactionIndex: num('transaction_index'),
    eventIndex: num('event_index'),
    fromAddress: str('from_address'),
    keys: list('keys'),
    data: list('data'),
    traceAddress,
  },
  requests: [
    {
      name: 'events',
      filters: {
        fromAddress: felt('from_address'),
        key0: felt('key0'),
        key1: felt('key1'),
        key2: felt('key2'),
        key3: felt('key3'),
      },
      relations: {
        transaction: sameTx('transaction'),
      },
    },
  ],
}

const trace: ItemDecl = {
  selector: 'trace',
  output: 'traces',
  table: 'traces',
  key: ['transaction_index', 'trace_address'],
  idFields: ['transactionIndex', 'traceAddress'],
  fields: {
    transactionIndex: num('transaction_index'),
    traceAddress,
    traceType: str('trace_type'),
    invocationType: str('invocation_type'),
    callerAddress: str('caller_address'),
    contractAddress: str('contract_address'),
    callType: str('call_type'),
    classHash: str('class_hash'),
    entryPointSelector: str('entry_point_selector'),
    entryPointType: str('entry_point_type'),
    revertReason: str('revert_reason'),
    calldata: list('calldata'),
    result: list('result'),
  },
  requests: [
    {
      name: 'traces',
      filters: {
        traceType: text('trace_type'),
        invocationType: text('invocation_type'),
        callerAddress: felt('caller_address'),
        contractAddress: felt('contract_address'),
        classHash: felt('class_hash'),
        callType: text('call_type'),
        entryPointSelector: felt('entry_point_selector'),
        entryPointType: text('entry_point_type'),
      },
      relations: {
        transaction: sameTx('transaction'),
        events: sameCall('event'),
        messages: sameCall('message'),
      },
    },
  ],
}

const message: ItemDecl = {
  selector: 'message',
  output: 'messages',
  table: 'messages',
  key: ['transaction_index', 'order'],
  idFields: ['transactionIndex', 'traceAddress', 'order'],
  fields: {
    transactionIndex: num('transaction_index'),
    traceAddress,
    order: num('order'),
    fromAddress: str('from_address'),
    toAddress: str('to_address'),
    payload: list('payload'),
  },
  requests: [
    {
      name: 'messages',
      filters: {
        fromAddress: felt('from_address'),
        toAddress: felt('to_address'),
      },
      relations: {},
    },
  ],
}

const stateUpdate: ItemDecl = {
  selector: 'stateUpdate',
  // The output names of state updates and storage diffs are the py archive's table names.
  output: 'state_updates',
  table: 'state_updates',
  key: [],
  idFields: [],
  fields: {
    newRoot: str('new_root'),
    oldRoot: str('old_root'),
    deprecatedDeclaredClasses: json('deprecated_declared_classes', { column: 'deprecated_declared_classes_size' }),
    declaredClasses: json('declared_classes', { column: 'declared_classes_size' }),
    deployedContracts: json('deployed_contracts', { column: 'deployed_contracts_size' }),
    replacedClasses: json('replaced_classes', { column: 'replaced_classes_size' }),
    nonces: json('nonces', { column: 'nonces_size' }),
    migratedCompiledClasses: json('migrated_compiled_classes', { column: 'migrated_compiled_classes_size' }),
  },
  requests: [{ name: 'stateUpdates', filters: {}, relations: {} }],
}

const storageDiff: ItemDecl = {
  selector: 'storageDiff',
  output: 'storage_diffs',
  table: 'storage_diffs',
  key: ['address', 'key'],
  idFields: ['address', 'key'],
  fields: {
    address: str('address'),
    key: str('key'),
    value: str('value'),
  },
  requests: [
    {
      name: 'storageDiffs',
      filters: {
        address: felt('address'),
        key: felt('key'),
      },
      relations: {},
    },
  ],
}

export const starknetFamily: FamilyDecl<'starknet'> = {
  name: 'starknet',
  queryTypes: ['starknet'],
  hashValues: 'felt',
  tables: [blocksTable, transactionsTable, eventsTable, tracesTable, messagesTable, stateUpdatesTable, storageDiffsTable],
  header,
  items: [transaction, event, trace, message, stateUpdate, storageDiff],
}
