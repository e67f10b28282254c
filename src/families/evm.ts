import { big, cols, hexStr, inList, json, num, sameTx, sized, sizedHex, str } from './builders.js'
import type { FamilyDecl, FieldDecl, FilterDecl, ItemDecl } from './declaration.js'

/*
 * The EVM family (docs/protocol.md §5).
 * Hex values are stored lower-case as VARCHAR; `X_size` columns hold the string length of X and
 * serve as output-weight estimates so the engine can cut a response without reading X.
 */

const hex = (column: string): FilterDecl => inList(column, 'hex')
const nonZero = (column: string): FilterDecl => ({ kind: 'nonZero', column })

// ---------------------------------------------------------------- tables

const blocksTable = {
  name: 'blocks',
  blockColumn: 'number',
  sortBy: ['number'],
  columns: [
    ...cols('BIGINT', 'number'),
    ...cols('VARCHAR', 'hash', 'parent_hash', 'nonce', 'sha3_uncles', 'logs_bloom', 'transactions_root', 'state_root',
      'receipts_root', 'mix_hash', 'miner', 'difficulty', 'total_difficulty', 'extra_data'),
    ...cols('BIGINT', 'size'),
    ...cols('VARCHAR', 'gas_limit', 'gas_used'),
    ...cols('BIGINT', 'timestamp'),
    ...cols('VARCHAR', 'base_fee_per_gas'),
    ...cols('BIGINT', 'l1_block_number'),
    ...cols('VARCHAR', 'blob_gas_used', 'excess_blob_gas', 'uncles', 'withdrawals', 'withdrawals_root',
      'parent_beacon_block_root', 'requests_hash', 'main_block_general_gas_limit', 'shared_gas_limit'),
    ...cols('BIGINT', 'timestamp_millis_part', 'extra_data_size', 'withdrawals_size'),
  ],
}

const transactionsTable = {
  name: 'transactions',
  blockColumn: 'block_number',
  sortBy: ['sighash', 'to', 'from', 'block_number', 'transaction_index'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'transaction_index'),
    ...cols('VARCHAR', 'hash'),
    ...cols('UBIGINT', 'nonce'),
    ...cols('VARCHAR', 'from', 'to', 'input', 'value', 'gas', 'gas_price', 'max_fee_per_gas', 'max_priority_fee_per_gas',
      'v', 'r', 's'),
    ...cols('INTEGER', 'y_parity'),
    ...cols('UBIGINT', 'chain_id'),
    ...cols('VARCHAR', 'sighash', 'contract_address', 'gas_used', 'cumulative_gas_used', 'effective_gas_price'),
    ...cols('INTEGER', 'type', 'status'),
    ...cols('VARCHAR', 'max_fee_per_blob_gas'),
    ...cols('VARCHAR[]', 'blob_versioned_hashes'),
    ...cols('VARCHAR', 'l1_fee', 'l1_fee_scalar', 'l1_gas_price', 'l1_gas_used', 'l1_blob_base_fee'),
    ...cols('UBIGINT', 'l1_blob_base_fee_scalar', 'l1_base_fee_scalar'),
    ...cols('VARCHAR', 'access_list', 'logs_bloom', 'blob_gas_used', 'blob_gas_price', 'authorization_list',
      // Tempo (type 0x76)
      'calls', 'nonce_key', 'signature', 'fee_token', 'fee_payer_v', 'fee_payer_r', 'fee_payer_s',
      'aa_authorization_list', 'key_authorization'),
    ...cols('UBIGINT', 'valid_before', 'valid_after'),
    ...cols('BIGINT', 'input_size', 'access_list_size', 'authorization_list_size', 'calls_size'),
  ],
}

const logsTable = {
  name: 'logs',
  blockColumn: 'block_number',
  sortBy: ['topic0', 'address', 'block_number', 'log_index'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'log_index', 'transaction_index'),
    ...cols('VARCHAR', 'transaction_hash', 'address', 'data', 'topic0', 'topic1', 'topic2', 'topic3'),
    ...cols('BIGINT', 'data_size'),
  ],
}

const tracesTable = {
  name: 'traces',
  blockColumn: 'block_number',
  optional: true,
  ndjson: true,
  sortBy: ['type', 'create_from', 'call_sighash', 'call_to', 'call_from', 'block_number', 'transaction_index', 'trace_address'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'transaction_index'),
    ...cols('INTEGER[]', 'trace_address'),
    ...cols('INTEGER', 'subtraces'),
    ...cols('VARCHAR', 'type', 'error', 'revert_reason',
      'create_from', 'create_value', 'create_gas', 'create_init', 'create_result_gas_used', 'create_result_code',
      'create_result_address',
      'call_from', 'call_to', 'call_value', 'call_gas', 'call_sighash', 'call_input', 'call_type',
      'call_result_gas_used', 'call_result_output',
      'suicide_address', 'suicide_refund_address', 'suicide_balance',
      'reward_author', 'reward_value', 'reward_type'),
    ...cols('BIGINT', 'create_init_size', 'create_result_code_size', 'call_input_size', 'call_result_output_size'),
  ],
}

const stateDiffsTable = {
  name: 'statediffs',
  blockColumn: 'block_number',
  optional: true,
  ndjson: true,
  sortBy: ['address', 'key', 'block_number', 'transaction_index'],
  columns: [
    ...cols('BIGINT', 'block_number'),
    ...cols('INTEGER', 'transaction_index'),
    ...cols('VARCHAR', 'address', 'key', 'kind', 'prev', 'next'),
    ...cols('BIGINT', 'prev_size', 'next_size'),
  ],
}

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
    hash: hexStr('hash'),
    parentHash: hexStr('parent_hash'),
    timestamp: num('timestamp'),
    transactionsRoot: hexStr('transactions_root'),
    receiptsRoot: hexStr('receipts_root'),
    stateRoot: hexStr('state_root'),
    logsBloom: hexStr('logs_bloom', 512),
    sha3Uncles: hexStr('sha3_uncles'),
    extraData: sizedHex('extra_data'),
    miner: hexStr('miner'),
    nonce: hexStr('nonce'),
    mixHash: hexStr('mix_hash'),
    size: num('size'),
    gasLimit: hexStr('gas_limit'),
    gasUsed: hexStr('gas_used'),
    difficulty: hexStr('difficulty'),
    totalDifficulty: hexStr('total_difficulty'),
    baseFeePerGas: hexStr('base_fee_per_gas'),
    l1BlockNumber: num('l1_block_number'),
    blobGasUsed: hexStr('blob_gas_used'),
    excessBlobGas: hexStr('excess_blob_gas'),
    uncles: json('uncles'),
    withdrawals: json('withdrawals', { column: 'withdrawals_size' }),
    withdrawalsRoot: hexStr('withdrawals_root'),
    parentBeaconBlockRoot: hexStr('parent_beacon_block_root'),
    requestsHash: hexStr('requests_hash'),
    mainBlockGeneralGasLimit: hexStr('main_block_general_gas_limit'),
    sharedGasLimit: hexStr('shared_gas_limit'),
    timestampMillisPart: num('timestamp_millis_part'),
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
    hash: hexStr('hash'),
    nonce: big('nonce'),
    from: hexStr('from'),
    to: hexStr('to'),
    input: sizedHex('input'),
    value: hexStr('value'),
    gas: hexStr('gas'),
    gasPrice: hexStr('gas_price'),
    maxFeePerGas: hexStr('max_fee_per_gas'),
    maxPriorityFeePerGas: hexStr('max_priority_fee_per_gas'),
    v: hexStr('v'),
    r: hexStr('r'),
    s: hexStr('s'),
    yParity: num('y_parity'),
    chainId: big('chain_id'),
    sighash: hexStr('sighash'),
    contractAddress: hexStr('contract_address'),
    gasUsed: hexStr('gas_used'),
    cumulativeGasUsed: hexStr('cumulative_gas_used'),
    effectiveGasPrice: hexStr('effective_gas_price'),
    type: num('type'),
    status: num('status'),
    maxFeePerBlobGas: hexStr('max_fee_per_blob_gas'),
    blobVersionedHashes: { encoding: { kind: 'sql', expr: 'to_json(blob_versioned_hashes)', columns: ['blob_versioned_hashes'] } },
    l1Fee: hexStr('l1_fee'),
    l1FeeScalar: str('l1_fee_scalar'),
    l1GasPrice: hexStr('l1_gas_price'),
    l1GasUsed: hexStr('l1_gas_used'),
    l1BlobBaseFee: hexStr('l1_blob_base_fee'),
    l1BlobBaseFeeScalar: big('l1_blob_base_fee_scalar'),
    l1BaseFeeScalar: big('l1_base_fee_scalar'),
    accessList: json('access_list', { column: 'access_list_size' }),
    logsBloom: hexStr('logs_bloom', 512),
    blobGasUsed: hexStr('blob_gas_used'),
    blobGasPrice: hexStr('blob_gas_price'),
    authorizationList: json('authorization_list', { column: 'authorization_list_size' }),
    calls: json('calls', { column: 'calls_size' }),
    nonceKey: hexStr('nonce_key'),
    signature: json('signature'),
    feeToken: hexStr('fee_token'),
    feePayerV: hexStr('fee_payer_v'),
    feePayerR: hexStr('fee_payer_r'),
    feePayerS: hexStr('fee_payer_s'),
    validBefore: big('valid_before'),
    validAfter: big('valid_after'),
    aaAuthorizationList: json('aa_authorization_list'),
    keyAuthorization: json('key_authorization'),
  },
  requests: [
    {
      name: 'transactions',
      filters: {
        from: hex('from'),
        to: hex('to'),
        sighash: hex('sighash'),
        type: { kind: 'in', column: 'type', values: 'integer' },
        firstNonce: { kind: 'min', column: 'nonce' },
        lastNonce: { kind: 'max', column: 'nonce' },
      },
      relations: {
        logs: sameTx('log'),
        traces: sameTx('trace'),
        stateDiffs: sameTx('stateDiff'),
      },
    },
  ],
}

const log: ItemDecl = {
  selector: 'log',
  output: 'logs',
  table: 'logs',
  key: ['log_index'],
  idFields: ['logIndex', 'transactionIndex'],
  fields: {
    logIndex: num('log_index'),
    transactionIndex: num('transaction_index'),
    transactionHash: hexStr('transaction_hash'),
    address: hexStr('address'),
    data: sizedHex('data'),
    topics: {
      // concat_ws skips the null topics, with '","' between them instead of quoting each topic
      // apart (four `||` pairs): measured 21 instead of 30 ms of DuckDB CPU for the topics of a
      // chunk's 91,000 logs (src/query/sql.ts).
      encoding: { kind: 'hexList', columns: ['topic0', 'topic1', 'topic2', 'topic3'] },
      weight: 4 * 66,
    },
  },
  requests: [
    {
      name: 'logs',
      filters: {
        address: hex('address'),
        topic0: hex('topic0'),
        topic1: hex('topic1'),
        topic2: hex('topic2'),
        topic3: hex('topic3'),
      },
      relations: {
        transaction: sameTx('transaction'),
        transactionLogs: sameTx('log'),
        transactionTraces: sameTx('trace'),
        transactionStateDiffs: sameTx('stateDiff'),
      },
    },
  ],
}

/** A trace field that lives in `action` or `result` and exists only for one trace type. */
const traceField = (type: string, object: 'action' | 'result', key: string, field: FieldDecl): FieldDecl => ({
  ...field,
  path: [object, key],
  when: `type = '${type}'`,
})

const trace: ItemDecl = {
  selector: 'trace',
  output: 'traces',
  table: 'traces',
  key: ['transaction_index', 'trace_address'],
  idFields: ['transactionIndex', 'traceAddress', 'type'],
  nested: [
    { name: 'action', dropIfEmpty: false },
    { name: 'result', dropIfEmpty: true },
  ],
  fields: {
    transactionIndex: num('transaction_index'),
    traceAddress: { encoding: { kind: 'sql', expr: 'to_json(trace_address)', columns: ['trace_address'] } },
    type: str('type'),
    subtraces: num('subtraces'),
    error: str('error'),
    revertReason: str('revert_reason'),
    createFrom: traceField('create', 'action', 'from', hexStr('create_from')),
    createValue: traceField('create', 'action', 'value', hexStr('create_value')),
    createGas: traceField('create', 'action', 'gas', hexStr('create_gas')),
    createInit: traceField('create', 'action', 'init', sizedHex('create_init')),
    createResultGasUsed: traceField('create', 'result', 'gasUsed', hexStr('create_result_gas_used')),
    createResultCode: traceField('create', 'result', 'code', sizedHex('create_result_code')),
    createResultAddress: traceField('create', 'result', 'address', hexStr('create_result_address')),
    callFrom: traceField('call', 'action', 'from', hexStr('call_from')),
    callTo: traceField('call', 'action', 'to', hexStr('call_to')),
    callValue: traceField('call', 'action', 'value', hexStr('call_value')),
    callGas: traceField('call', 'action', 'gas', hexStr('call_gas')),
    callInput: traceField('call', 'action', 'input', sizedHex('call_input')),
    callSighash: traceField('call', 'action', 'sighash', hexStr('call_sighash')),
    callType: traceField('call', 'action', 'type', str('call_type')),
    callCallType: traceField('call', 'action', 'callType', str('call_type')),
    callResultGasUsed: traceField('call', 'result', 'gasUsed', hexStr('call_result_gas_used')),
    callResultOutput: traceField('call', 'result', 'output', sizedHex('call_result_output')),
    suicideAddress: traceField('suicide', 'action', 'address', hexStr('suicide_address')),
    suicideRefundAddress: traceField('suicide', 'action', 'refundAddress', hexStr('suicide_refund_address')),
    suicideBalance: traceField('suicide', 'action', 'balance', hexStr('suicide_balance')),
    rewardAuthor: traceField('reward', 'action', 'author', hexStr('reward_author')),
    rewardValue: traceField('reward', 'action', 'value', hexStr('reward_value')),
    rewardType: traceField('reward', 'action', 'type', str('reward_type')),
  },
  requests: [
    {
      name: 'traces',
      filters: {
        type: { kind: 'in', column: 'type', values: 'string' },
        createFrom: hex('create_from'),
        callFrom: hex('call_from'),
        callTo: hex('call_to'),
        callSighash: hex('call_sighash'),
        suicideRefundAddress: hex('suicide_refund_address'),
        suicideAddress: hex('suicide_address'),
        createResultAddress: hex('create_result_address'),
        rewardAuthor: hex('reward_author'),
        callCallType: { kind: 'in', column: 'call_type', values: 'string' },
        createValueNonZero: nonZero('create_value'),
        callValueNonZero: nonZero('call_value'),
        suicideBalanceNonZero: nonZero('suicide_balance'),
        rewardValueNonZero: nonZero('reward_value'),
      },
      relations: {
        transaction: sameTx('transaction'),
        transactionLogs: sameTx('log'),
        transactionTraces: sameTx('trace'),
        subtraces: {
          kind: 'descendants',
          target: 'trace',
          on: [['transaction_index', 'transaction_index']],
          sourceAddress: 'trace_address',
          targetAddress: 'trace_address',
        },
        parents: {
          kind: 'ancestors',
          target: 'trace',
          on: [['transaction_index', 'transaction_index']],
          sourceAddress: 'trace_address',
          targetAddress: 'trace_address',
        },
      },
    },
  ],
}

const stateDiff: ItemDecl = {
  selector: 'stateDiff',
  output: 'stateDiffs',
  table: 'statediffs',
  key: ['transaction_index', 'address', 'key'],
  idFields: ['transactionIndex', 'address', 'key', 'kind'],
  fields: {
    transactionIndex: num('transaction_index'),
    address: str('address'),
    key: str('key'),
    kind: str('kind'),
    prev: sized('prev'),
    next: sized('next'),
  },
  requests: [
    {
      name: 'stateDiffs',
      filters: {
        address: hex('address'),
        key: { kind: 'in', column: 'key', values: 'lowercase' },
        kind: { kind: 'in', column: 'kind', values: 'string' },
      },
      relations: {
        transaction: sameTx('transaction'),
      },
    },
  ],
}

export const evmFamily: FamilyDecl<'evm'> = {
  name: 'evm',
  queryTypes: [undefined, 'evm', 'eth'],
  hashValues: 'hex',
  tables: [blocksTable, transactionsTable, logsTable, tracesTable, stateDiffsTable],
  header,
  items: [transaction, log, trace, stateDiff],
}
