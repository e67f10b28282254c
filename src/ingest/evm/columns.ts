import { evmFamily } from '../../families/evm.js'

/*
 * Where each column of the EVM blocks, transactions and logs tables comes from in the raw JSON-RPC
 * answers, and how it is converted: the one map both normalisers are derived from — the JS row
 * builder (normalize.ts: fetch workers, blocks near the head, traces and state diffs, the bench and
 * test data) and the SQL over spooled answers (sql-normalize.ts: the default path). Adding a field
 * is one line here (and its column in src/families/evm.ts); each normaliser fails at load when a
 * declared column has no entry.
 *
 * A source is `object.field`, `object.field.key` (a member of a JSON object) or `object.field.i`
 * (an element of a list), on the objects: `b` the block (`eth_getBlockByNumber(n, true)`), `t` a
 * transaction of it, `r` its receipt (absent: every receipt field is null), `l` a log of a receipt.
 * `a|b` takes the first that is not null.
 */

/** The raw objects a source names. */
export type RawObject = 'b' | 't' | 'r' | 'l'

const RAW_OBJECT_NAMES: Record<RawObject, string> = { b: 'block', t: 'transaction', r: 'receipt', l: 'log' }

/** Shapes a JSON-valued column takes (others are stored as null). */
export type JsonShape = 'array' | 'object or array' | 'any'

/**
 * How a column is made:
 * - `hex`: a 0x-prefixed hex string, lower-cased;
 * - `int`: a quantity (hex, decimal string or JSON number) that must be a safe integer;
 * - `u64`: a quantity that must fit in 64 bits (stored as UBIGINT);
 * - `text`: the value as text (a JSON number as its digits);
 * - `json`: JSON text with its hex strings lower-cased, when the value has `shape`;
 * - `hexList`: a list of hex strings (a JSON array), each lower-cased;
 * - `authorizationList`: an EIP-7702 authorization list, its members normalised (`{chainId, address, nonce, yParity, r, s}`);
 * - `blockNumber`: the block's number;
 * - `size`: the length of another column's text (0 when null), `sighash`: its first 4 bytes (`0x` + 8 digits).
 */
export type Conversion =
  | { kind: 'hex' | 'int' | 'u64' | 'text' | 'hexList' | 'authorizationList'; from: string[]; default?: string; required?: boolean }
  | { kind: 'json'; from: string[]; shape: JsonShape }
  | { kind: 'blockNumber' }
  | { kind: 'size' | 'sighash'; of: string }

type Options = { default?: string; required?: boolean }
const sources = (from: string) => from.split('|')

const hex = (from: string, o: Options = {}): Conversion => ({ kind: 'hex', from: sources(from), ...o })
const int = (from: string, o: Options = {}): Conversion => ({ kind: 'int', from: sources(from), ...o })
const u64 = (from: string): Conversion => ({ kind: 'u64', from: sources(from) })
const text = (from: string): Conversion => ({ kind: 'text', from: sources(from) })
const json = (from: string, shape: JsonShape): Conversion => ({ kind: 'json', from: sources(from), shape })
const hexList = (from: string): Conversion => ({ kind: 'hexList', from: sources(from) })
const authorizationList = (from: string): Conversion => ({ kind: 'authorizationList', from: sources(from) })
const blockNumber: Conversion = { kind: 'blockNumber' }
const size = (of: string): Conversion => ({ kind: 'size', of })
const sighash = (of: string): Conversion => ({ kind: 'sighash', of })

export const EVM_COLUMNS: Record<'blocks' | 'transactions' | 'logs', Record<string, Conversion>> = {
  blocks: {
    number: int('b.number', { required: true }),
    hash: hex('b.hash', { required: true }),
    parent_hash: hex('b.parentHash', { required: true }),
    nonce: hex('b.nonce'),
    sha3_uncles: hex('b.sha3Uncles'),
    logs_bloom: hex('b.logsBloom'),
    transactions_root: hex('b.transactionsRoot'),
    state_root: hex('b.stateRoot'),
    receipts_root: hex('b.receiptsRoot'),
    mix_hash: hex('b.mixHash'),
    miner: hex('b.miner'),
    difficulty: hex('b.difficulty'),
    total_difficulty: hex('b.totalDifficulty'),
    extra_data: hex('b.extraData'),
    size: int('b.size'),
    gas_limit: hex('b.gasLimit'),
    gas_used: hex('b.gasUsed'),
    timestamp: int('b.timestamp'),
    base_fee_per_gas: hex('b.baseFeePerGas'),
    l1_block_number: int('b.l1BlockNumber'),
    blob_gas_used: hex('b.blobGasUsed'),
    excess_blob_gas: hex('b.excessBlobGas'),
    uncles: json('b.uncles', 'array'),
    withdrawals: json('b.withdrawals', 'array'),
    withdrawals_root: hex('b.withdrawalsRoot'),
    parent_beacon_block_root: hex('b.parentBeaconBlockRoot'),
    requests_hash: hex('b.requestsHash'),
    main_block_general_gas_limit: hex('b.mainBlockGeneralGasLimit'),
    shared_gas_limit: hex('b.sharedGasLimit'),
    timestamp_millis_part: int('b.timestampMillisPart'),
    extra_data_size: size('extra_data'),
    withdrawals_size: size('withdrawals'),
  },
  transactions: {
    block_number: blockNumber,
    transaction_index: int('t.transactionIndex', { required: true }),
    hash: hex('t.hash'),
    nonce: u64('t.nonce'),
    from: hex('t.from'),
    to: hex('t.to'),
    input: hex('t.input|t.data', { default: '0x' }),
    value: hex('t.value'),
    gas: hex('t.gas'),
    gas_price: hex('t.gasPrice'),
    max_fee_per_gas: hex('t.maxFeePerGas'),
    max_priority_fee_per_gas: hex('t.maxPriorityFeePerGas'),
    v: hex('t.v'),
    r: hex('t.r'),
    s: hex('t.s'),
    y_parity: int('t.yParity'),
    chain_id: u64('t.chainId'),
    sighash: sighash('input'),
    contract_address: hex('r.contractAddress'),
    gas_used: hex('r.gasUsed'),
    cumulative_gas_used: hex('r.cumulativeGasUsed'),
    effective_gas_price: hex('r.effectiveGasPrice'),
    type: int('t.type|r.type'),
    status: int('r.status'),
    max_fee_per_blob_gas: hex('t.maxFeePerBlobGas'),
    blob_versioned_hashes: hexList('t.blobVersionedHashes'),
    l1_fee: hex('r.l1Fee'),
    l1_fee_scalar: text('r.l1FeeScalar'),
    l1_gas_price: hex('r.l1GasPrice'),
    l1_gas_used: hex('r.l1GasUsed'),
    l1_blob_base_fee: hex('r.l1BlobBaseFee'),
    l1_blob_base_fee_scalar: u64('r.l1BlobBaseFeeScalar'),
    l1_base_fee_scalar: u64('r.l1BaseFeeScalar'),
    access_list: json('t.accessList', 'array'),
    logs_bloom: hex('r.logsBloom'),
    blob_gas_used: hex('r.blobGasUsed'),
    blob_gas_price: hex('r.blobGasPrice'),
    authorization_list: authorizationList('t.authorizationList'),
    calls: json('t.calls', 'array'),
    nonce_key: hex('t.nonceKey'),
    signature: json('t.signature', 'object or array'),
    fee_token: hex('t.feeToken'),
    fee_payer_v: hex('t.feePayerSignature.v|t.feePayerSignature.yParity'),
    fee_payer_r: hex('t.feePayerSignature.r'),
    fee_payer_s: hex('t.feePayerSignature.s'),
    aa_authorization_list: json('t.aaAuthorizationList', 'array'),
    key_authorization: json('t.keyAuthorization', 'any'),
    valid_before: u64('t.validBefore'),
    valid_after: u64('t.validAfter'),
    input_size: size('input'),
    access_list_size: size('access_list'),
    authorization_list_size: size('authorization_list'),
    calls_size: size('calls'),
  },
  logs: {
    block_number: blockNumber,
    log_index: int('l.logIndex'),
    transaction_index: int('l.transactionIndex|r.transactionIndex'),
    transaction_hash: hex('l.transactionHash|r.transactionHash'),
    address: hex('l.address'),
    data: hex('l.data'),
    topic0: hex('l.topics.0'),
    topic1: hex('l.topics.1'),
    topic2: hex('l.topics.2'),
    topic3: hex('l.topics.3'),
    data_size: size('data'),
  },
}

/** A source split: its object, field and the key or list index inside the field (if any). */
export interface SourcePath {
  object: RawObject
  field: string
  member?: string | number
}

export function sourcePath(source: string): SourcePath {
  const [object, field, member, ...more] = source.split('.')
  if (!(object in RAW_OBJECT_NAMES) || !field || more.length) throw new Error(`evm columns: bad source ${JSON.stringify(source)}`)
  if (member == null) return { object: object as RawObject, field }
  return { object: object as RawObject, field, member: /^\d+$/.test(member) ? Number(member) : member }
}

/** How a source is named in error messages: `transaction.input`. */
export const sourceLabel = (source: string): string => {
  const p = sourcePath(source)
  return `${RAW_OBJECT_NAMES[p.object]}.${p.field}${p.member == null ? '' : `.${p.member}`}`
}

/** A column's value depends on other columns of the row (computed after them). */
export const isDerived = (c: Conversion): c is Extract<Conversion, { of: string }> => 'of' in c

export type EvmSpooledTable = keyof typeof EVM_COLUMNS

/**
 * A table's columns with their conversions, in the order src/families/evm.ts declares them; fails
 * when a declared column has no conversion (or a conversion no column), or a size or sighash is of
 * a column declared after it.
 */
export function columnsOf(table: EvmSpooledTable): [string, Conversion][] {
  const declared = evmFamily.tables.find((x) => x.name === table)!.columns.map((c) => c.name)
  const map = EVM_COLUMNS[table]
  const missing = declared.filter((c) => !map[c])
  const extra = Object.keys(map).filter((c) => !declared.includes(c))
  if (missing.length || extra.length) throw new Error(`evm columns of ${table}: no conversion for ${missing.join(', ') || '-'}; unknown ${extra.join(', ') || '-'}`)
  return declared.map((name, i) => {
    const c = map[name]
    if (isDerived(c) && !declared.slice(0, i).includes(c.of)) throw new Error(`evm columns of ${table}: ${name} is of ${c.of}, declared after it`)
    return [name, c]
  })
}
