import type { DuckDBConnection } from '@duckdb/node-api'
import { ident, lit } from '../../sql-text.js'
import { evmFamily } from '../../families/evm.js'
import type { TableDecl } from '../../families/declaration.js'

/*
 * The EVM normaliser as SQL: raw `eth_getBlockByNumber(n, true)` and `eth_getBlockReceipts(n)`
 * answers, spooled to disk as the node sent them (JSON-RPC batch answers, `id` = block number), are
 * read by DuckDB's `read_json` with explicit column types and turned into the rows
 * `normalize.ts` builds (`blockRow`, `transactionRow`, `logRows`): the same columns and values.
 * Each column's expression is declared once below; the SELECT lists are generated from the table
 * declarations (src/families/evm.ts), so a declared column without an expression fails at load.
 * Every expression comes with a validity condition (hex strings, quantities); a row failing one
 * stops the statement with an error naming its block (`spoolCheckFailure`), and the chunk writer
 * (spool-write.ts) explains it with the JS checks' exact message.
 */

/** A column's value (SQL over the raw fields) and the condition under which the raw value is valid. */
interface ColumnSql {
  value: string
  ok?: string
}

const HEX_RE = `'0x[0-9a-fA-F]*'`

/** A hex column's SQL: the checked or the trusted way (below). */
type HexColumn = (x: string) => ColumnSql
const SAFE = 9007199254740991

/**
 * Hex string (`hex()` in normalize.ts). Checked: every character is validated and the value
 * lower-cased. Trusted: the answer's text had no upper-case hex digit and no backslash
 * (`needsHexCheck`, native searches in the fetch worker), so the value is taken as it is and only
 * its `0x` prefix is checked (a per-character check costs ≈ 2–3 ms per mainnet block in DuckDB or
 * JS, more than the rest). Such a value never needs JSON escaping; a non-hex letter in it is not
 * noticed (docs/ingest.md).
 */
const hexColumn = (checked: boolean): HexColumn => (x) => checked
  ? { value: `lower(${x})`, ok: `(${x} IS NULL OR regexp_full_match(${x}, ${HEX_RE}))` }
  : { value: x, ok: `(${x} IS NULL OR starts_with(${x}, '0x'))` }

/** Hex quantity, decimal string or JSON number → BIGINT, a safe integer (`int()`). */
const intOf = (x: string) => `CASE WHEN ${x} = '0x' THEN 0 ELSE TRY_CAST(${x} AS BIGINT) END`
const int = (x: string): ColumnSql => ({
  value: intOf(x),
  ok: `(${x} IS NULL OR (regexp_full_match(${x}, '0x[0-9a-fA-F]*|[0-9]+') AND ${intOf(x)} BETWEEN -${SAFE} AND ${SAFE}))`,
})

/** u64 quantity → UBIGINT (`u64()`). */
const u64Of = (x: string) => `CASE WHEN ${x} = '0x' THEN 0::UBIGINT ELSE TRY_CAST(${x} AS UBIGINT) END`
const u64 = (x: string): ColumnSql => ({
  value: u64Of(x),
  ok: `(${x} IS NULL OR (regexp_full_match(${x}, '0x[0-9a-fA-F]*|[0-9]+') AND ${u64Of(x)} IS NOT NULL))`,
})

/**
 * A JSON value as JSON text (`jsonText()`); `only` restricts it to arrays / objects (others: null).
 * Hex inside it must be lower-cased: rows whose text has an upper-case hex digit in a `"0x…"` string
 * are listed by `jsonToLower` and rewritten in JS (nodes send lower-case hex, so this is rare).
 */
const json = (x: string, only?: 'ARRAY' | 'OBJECT' | 'OBJECT_OR_ARRAY'): ColumnSql => {
  const cond = only === 'OBJECT_OR_ARRAY' ? `json_type(${x}) IN ('OBJECT', 'ARRAY')` : only ? `json_type(${x}) = '${only}'` : `${x} IS NOT NULL`
  return { value: `CASE WHEN ${cond} THEN ${x}::VARCHAR END` }
}

const sizeOf = (column: string): ColumnSql => ({ value: `coalesce(length(${ident(column)}), 0)` })

// ---------------------------------------------------------------- raw answer types (read_json columns)

const V = 'VARCHAR'
const J = 'JSON'
const struct = (fields: Record<string, string>) => `STRUCT(${Object.entries(fields).map(([k, t]) => `${ident(k)} ${t}`).join(', ')})`

const TX_FIELDS = {
  transactionIndex: V, hash: V, blockHash: V, nonce: V, from: V, to: V, input: V, data: V, value: V, gas: V, gasPrice: V,
  maxFeePerGas: V, maxPriorityFeePerGas: V, v: V, r: V, s: V, yParity: V, chainId: V, type: V, maxFeePerBlobGas: V,
  blobVersionedHashes: J, accessList: J, authorizationList: J, calls: J, nonceKey: V, signature: J, feeToken: V,
  feePayerSignature: J, aaAuthorizationList: J, keyAuthorization: J, validBefore: V, validAfter: V,
}

const BLOCK_FIELDS = {
  number: V, hash: V, parentHash: V, nonce: V, sha3Uncles: V, logsBloom: V, transactionsRoot: V, stateRoot: V, receiptsRoot: V,
  mixHash: V, miner: V, difficulty: V, totalDifficulty: V, extraData: V, size: V, gasLimit: V, gasUsed: V, timestamp: V,
  baseFeePerGas: V, l1BlockNumber: V, blobGasUsed: V, excessBlobGas: V, uncles: J, withdrawals: J, withdrawalsRoot: V,
  parentBeaconBlockRoot: V, requestsHash: V, mainBlockGeneralGasLimit: V, sharedGasLimit: V, timestampMillisPart: V,
  transactions: `${struct(TX_FIELDS)}[]`,
}

const LOG_FIELDS = { logIndex: V, transactionIndex: V, transactionHash: V, blockHash: V, address: V, data: V, topics: `${V}[]` }

const RECEIPT_FIELDS = {
  transactionHash: V, blockHash: V, transactionIndex: V, status: V, contractAddress: V, gasUsed: V, cumulativeGasUsed: V,
  effectiveGasPrice: V, type: V, l1Fee: V, l1FeeScalar: V, l1GasPrice: V, l1GasUsed: V, l1BlobBaseFee: V,
  l1BlobBaseFeeScalar: V, l1BaseFeeScalar: V, logsBloom: V, blobGasUsed: V, blobGasPrice: V,
  logs: `${struct(LOG_FIELDS)}[]`,
}

// ---------------------------------------------------------------- column expressions

const b = (f: string) => `b.${ident(f)}`
const t = (f: string) => `t.${ident(f)}`
const r = (f: string) => `r.${ident(f)}`
const l = (f: string) => `l.${ident(f)}`

const BLOCK_COLUMNS = (hex: HexColumn): Record<string, ColumnSql> => ({
  number: int(b('number')),
  hash: hex(b('hash')),
  parent_hash: hex(b('parentHash')),
  nonce: hex(b('nonce')),
  sha3_uncles: hex(b('sha3Uncles')),
  logs_bloom: hex(b('logsBloom')),
  transactions_root: hex(b('transactionsRoot')),
  state_root: hex(b('stateRoot')),
  receipts_root: hex(b('receiptsRoot')),
  mix_hash: hex(b('mixHash')),
  miner: hex(b('miner')),
  difficulty: hex(b('difficulty')),
  total_difficulty: hex(b('totalDifficulty')),
  extra_data: hex(b('extraData')),
  size: int(b('size')),
  gas_limit: hex(b('gasLimit')),
  gas_used: hex(b('gasUsed')),
  timestamp: int(b('timestamp')),
  base_fee_per_gas: hex(b('baseFeePerGas')),
  l1_block_number: int(b('l1BlockNumber')),
  blob_gas_used: hex(b('blobGasUsed')),
  excess_blob_gas: hex(b('excessBlobGas')),
  uncles: json(b('uncles'), 'ARRAY'),
  withdrawals: json(b('withdrawals'), 'ARRAY'),
  withdrawals_root: hex(b('withdrawalsRoot')),
  parent_beacon_block_root: hex(b('parentBeaconBlockRoot')),
  requests_hash: hex(b('requestsHash')),
  main_block_general_gas_limit: hex(b('mainBlockGeneralGasLimit')),
  shared_gas_limit: hex(b('sharedGasLimit')),
  timestamp_millis_part: int(b('timestampMillisPart')),
  extra_data_size: sizeOf('extra_data'),
  withdrawals_size: sizeOf('withdrawals'),
})

const AUTH = `from_json(${t('authorizationList')}, '[{"chainId":"VARCHAR","address":"VARCHAR","nonce":"VARCHAR","yParity":"VARCHAR","v":"VARCHAR","r":"VARCHAR","s":"VARCHAR"}]')`
const authOk = (f: (x: string) => ColumnSql) => (x: string) => f(x).ok!
const INPUT = `coalesce(${t('input')}, ${t('data')}, '0x')`
const FEE_PAYER_V = `coalesce(${t('feePayerSignature')}->>'v', ${t('feePayerSignature')}->>'yParity')`

const TX_COLUMNS = (hex: HexColumn): Record<string, ColumnSql> => ({
  block_number: { value: 'n' },
  transaction_index: int(t('transactionIndex')),
  hash: hex(t('hash')),
  nonce: u64(t('nonce')),
  from: hex(t('from')),
  to: hex(t('to')),
  input: hex(INPUT),
  value: hex(t('value')),
  gas: hex(t('gas')),
  gas_price: hex(t('gasPrice')),
  max_fee_per_gas: hex(t('maxFeePerGas')),
  max_priority_fee_per_gas: hex(t('maxPriorityFeePerGas')),
  v: hex(t('v')),
  r: hex(t('r')),
  s: hex(t('s')),
  y_parity: int(t('yParity')),
  chain_id: u64(t('chainId')),
  sighash: { value: `CASE WHEN length(${INPUT}) >= 10 THEN lower(substr(${INPUT}, 1, 10)) END` },
  contract_address: hex(r('contractAddress')),
  gas_used: hex(r('gasUsed')),
  cumulative_gas_used: hex(r('cumulativeGasUsed')),
  effective_gas_price: hex(r('effectiveGasPrice')),
  type: int(`coalesce(${t('type')}, ${r('type')})`),
  status: int(r('status')),
  max_fee_per_blob_gas: hex(t('maxFeePerBlobGas')),
  blob_versioned_hashes: {
    value: `CASE WHEN json_type(${t('blobVersionedHashes')}) = 'ARRAY' THEN list_transform(from_json(${t('blobVersionedHashes')}, '["VARCHAR"]'), h -> lower(h)) END`,
    ok: `(json_type(${t('blobVersionedHashes')}) IS DISTINCT FROM 'ARRAY' OR list_bool_and(list_transform(from_json(${t('blobVersionedHashes')}, '["VARCHAR"]'), h -> ${hex('h').ok})))`,
  },
  l1_fee: hex(r('l1Fee')),
  l1_fee_scalar: { value: r('l1FeeScalar') },
  l1_gas_price: hex(r('l1GasPrice')),
  l1_gas_used: hex(r('l1GasUsed')),
  l1_blob_base_fee: hex(r('l1BlobBaseFee')),
  l1_blob_base_fee_scalar: u64(r('l1BlobBaseFeeScalar')),
  l1_base_fee_scalar: u64(r('l1BaseFeeScalar')),
  access_list: json(t('accessList'), 'ARRAY'),
  logs_bloom: hex(r('logsBloom')),
  blob_gas_used: hex(r('blobGasUsed')),
  blob_gas_price: hex(r('blobGasPrice')),
  authorization_list: {
    value: `CASE WHEN json_type(${t('authorizationList')}) = 'ARRAY' THEN to_json(list_transform(${AUTH}, a -> {'chainId': ${intOf('a.chainId')}, 'address': lower(a.address), 'nonce': ${intOf('a.nonce')}, 'yParity': ${intOf('coalesce(a.yParity, a.v)')}, 'r': lower(a.r), 's': lower(a.s)}))::VARCHAR END`,
    ok: `(json_type(${t('authorizationList')}) IS DISTINCT FROM 'ARRAY' OR list_bool_and(list_transform(${AUTH}, a -> ${authOk(int)('a.chainId')} AND ${authOk(hex)('a.address')} AND ${authOk(int)('a.nonce')} AND ${authOk(int)('coalesce(a.yParity, a.v)')} AND ${authOk(hex)('a.r')} AND ${authOk(hex)('a.s')})))`,
  },
  calls: json(t('calls'), 'ARRAY'),
  nonce_key: hex(t('nonceKey')),
  signature: json(t('signature'), 'OBJECT_OR_ARRAY'),
  fee_token: hex(t('feeToken')),
  fee_payer_v: hex(FEE_PAYER_V),
  fee_payer_r: hex(`${t('feePayerSignature')}->>'r'`),
  fee_payer_s: hex(`${t('feePayerSignature')}->>'s'`),
  aa_authorization_list: json(t('aaAuthorizationList'), 'ARRAY'),
  key_authorization: json(t('keyAuthorization')),
  valid_before: u64(t('validBefore')),
  valid_after: u64(t('validAfter')),
  input_size: sizeOf('input'),
  access_list_size: sizeOf('access_list'),
  authorization_list_size: sizeOf('authorization_list'),
  calls_size: sizeOf('calls'),
})

const LOG_COLUMNS = (hex: HexColumn): Record<string, ColumnSql> => ({
  block_number: { value: 'n' },
  log_index: int(l('logIndex')),
  transaction_index: int(`coalesce(${l('transactionIndex')}, ${r('transactionIndex')})`),
  transaction_hash: hex(`coalesce(${l('transactionHash')}, ${r('transactionHash')})`),
  address: hex(l('address')),
  data: hex(l('data')),
  topic0: hex(`${l('topics')}[1]`),
  topic1: hex(`${l('topics')}[2]`),
  topic2: hex(`${l('topics')}[3]`),
  topic3: hex(`${l('topics')}[4]`),
  data_size: sizeOf('data'),
})

/** Columns computed from other columns of the row (sizes): in an outer SELECT. */
const DERIVED = new Set(['extra_data_size', 'withdrawals_size', 'input_size', 'access_list_size', 'authorization_list_size', 'calls_size', 'data_size'])

/** JSON-text columns whose hex must be lower case. */
const JSON_COLUMNS: Record<string, string[]> = {
  blocks: ['uncles', 'withdrawals'],
  transactions: ['access_list', 'calls', 'signature', 'aa_authorization_list', 'key_authorization'],
  logs: [],
}

const decl = (name: string): TableDecl => evmFamily.tables.find((x) => x.name === name)!

/** `SELECT` of a table's columns in declaration order (casts to the declared types), plus `_ok`: every check holds. */
function selectList(table: TableDecl, exprs: Record<string, ColumnSql>): { inner: string; checks: string; outer: string } {
  const missing = table.columns.filter((c) => !exprs[c.name]).map((c) => c.name)
  const extra = Object.keys(exprs).filter((k) => !table.columns.some((c) => c.name === k))
  if (missing.length || extra.length) throw new Error(`evm SQL normaliser of ${table.name}: no expression for ${missing.join(', ')}; unknown ${extra.join(', ')}`)
  const inner = table.columns.filter((c) => !DERIVED.has(c.name)).map((c) => `CAST(${exprs[c.name].value} AS ${c.type}) AS ${ident(c.name)}`)
  const checks = table.columns.map((c) => exprs[c.name].ok).filter((x): x is string => !!x)
  const outer = table.columns.map((c) => (DERIVED.has(c.name) ? `CAST(${exprs[c.name].value} AS ${c.type}) AS ${ident(c.name)}` : ident(c.name)))
  return { inner: inner.join(', '), checks: checks.join(' AND '), outer: outer.join(', ') }
}

type Selects = Record<'blocks' | 'transactions' | 'logs', ReturnType<typeof selectList>>
function selects(checked: boolean): Selects {
  const hex = hexColumn(checked)
  return { blocks: selectList(decl('blocks'), BLOCK_COLUMNS(hex)), transactions: selectList(decl('transactions'), TX_COLUMNS(hex)), logs: selectList(decl('logs'), LOG_COLUMNS(hex)) }
}
const CHECKED = selects(true)
const TRUSTED = selects(false)


/** The spool files of a chunk and the block range to take from them (files may hold blocks of neighbouring chunks). */
export interface SpoolInput {
  blockFiles: string[]
  receiptFiles: string[]
  first: number
  last: number
  /** Validate every hex character and lower-case (some answer had upper-case hex digits or a backslash), or trust them. */
  checked: boolean
}

const TX_STRUCT = struct({ hash: V, transactions: `${struct(TX_FIELDS)}[]` })
const HEADER_STRUCT = struct(Object.fromEntries(Object.entries(BLOCK_FIELDS).filter(([k]) => k !== 'transactions')))
const RECEIPTS_NARROW = `${struct(Object.fromEntries(Object.entries(RECEIPT_FIELDS).filter(([k]) => k !== 'logs')))}[]`
const RECEIPTS_LOGS = `${struct({ transactionHash: V, blockHash: V, transactionIndex: V, logs: RECEIPT_FIELDS.logs })}[]`

/** The spool's answers of the chunk's blocks, read with explicit types (each consumer reads the files again: cheaper than keeping nested values in a table). */
const readSpool = (files: string[], result: string, s: SpoolInput) =>
  `(SELECT id AS n, result FROM read_json([${files.map(lit).join(', ')}], format = 'newline_delimited', columns = {id: 'BIGINT', result: ${lit(result)}}, ` +
  `maximum_object_size = 1073741824) WHERE id BETWEEN ${s.first} AND ${s.last})`

const ok = (x: string) => `coalesce(${x}, false)`

/** Marks the message of the error a failed check raises inside DuckDB (`spoolCheckFailure` reads it). */
const CHECK_FAILED = 'spool check failed'

/**
 * The outer SELECT list, its first column (the block number) guarded: a row whose `_ok` is not true
 * stops the statement with an error naming the block and the table (DuckDB `error()`), so the checks
 * cost no pass of their own.
 */
function guarded(outer: string, first: string, what: string, also = 'true'): string {
  const col = ident(first)
  if (!outer.startsWith(col)) throw new Error(`evm SQL normaliser: ${what} must start with ${first}`)
  return `CASE WHEN _ok AND ${also} THEN ${col} ELSE error(concat('${CHECK_FAILED}: block ', n, ': ${what}')) END AS ${col}` + outer.slice(col.length)
}

/** A failed check's block and table, from a DuckDB error message. */
export function spoolCheckFailure(message: string): { block: number; what: string } | undefined {
  const m = new RegExp(`${CHECK_FAILED}: block (\\d+): (\\w+)`).exec(message)
  return m ? { block: Number(m[1]), what: m[2] } : undefined
}

/**
 * The SELECT of each table over the chunk's spool: the declared columns in declared order, unsorted.
 * Running one fails with a `spoolCheckFailure` error when an answer fails a check: a value that is not
 * what its column takes (hex, quantity), transactions that are not numbered 0, 1, … or name another
 * block, receipts that are not one per transaction in order, logs naming another transaction or block
 * than their receipt, a receipt without a logs array, a log with more than 4 topics.
 */
export function spoolQueries(s: SpoolInput): Record<'blocks' | 'transactions' | 'logs', string> {
  const q = s.checked ? CHECKED : TRUSTED
  const blocks =
    `SELECT ${guarded(q.blocks.outer, 'number', 'block', `n = "number"`)} FROM (` +
    `SELECT n, ${q.blocks.inner}, ${ok(q.blocks.checks)} AS _ok FROM (SELECT n, result AS b FROM ${readSpool(s.blockFiles, HEADER_STRUCT, s)}))`
  // transactions with their receipts by position (a missing or extra entry is a row with nulls, which fails the checks)
  const transactions =
    `SELECT ${guarded(q.transactions.outer, 'block_number', 'transactions')} FROM (` +
    `SELECT n, i, ${q.transactions.inner}, ${ok(`${q.transactions.checks} AND t IS NOT NULL AND (_rs IS NULL OR (i < len(_rs) AND (r IS NULL OR lower(r.transactionHash) = lower(t.hash)))) ` +
    `AND ${intOf(t('transactionIndex'))} = i AND (t.blockHash IS NULL OR lower(t.blockHash) = lower(_hash))`)} AS _ok ` +
    `FROM (SELECT b.n, b.result.hash AS _hash, r.result AS _rs, unnest(b.result.transactions) AS t, unnest(r.result) AS r, ` +
    `unnest(range(greatest(len(b.result.transactions), len(r.result)))) AS i ` +
    `FROM ${readSpool(s.blockFiles, TX_STRUCT, s)} b LEFT JOIN ${readSpool(s.receiptFiles, RECEIPTS_NARROW, s)} r USING (n)))`
  // a receipt without a logs array gives one row (`_nologs`), which fails the checks; log indexes that
  // repeat within a block were renumbered before spooling (spool-fetch.ts)
  const logs =
    `SELECT ${guarded(q.logs.outer, 'block_number', 'logs')} FROM (` +
    `SELECT n, ${q.logs.inner}, ${ok(`${q.logs.checks} AND _nologs IS NULL AND len(l.topics) <= 4 ` +
    `AND (l.transactionHash IS NULL OR lower(l.transactionHash) = lower(r.transactionHash)) ` +
    `AND (l.blockHash IS NULL OR r.blockHash IS NULL OR lower(l.blockHash) = lower(r.blockHash))`)} AS _ok ` +
    `FROM (SELECT n, r, unnest(r.logs) AS l, unnest(CASE WHEN r.logs IS NULL THEN [true] END) AS _nologs ` +
    `FROM (SELECT n, unnest(result) AS r FROM ${readSpool(s.receiptFiles, RECEIPTS_LOGS, s)}) WHERE r IS NOT NULL))`
  return { blocks, transactions, logs }
}

/** Rows whose JSON text has upper-case hex (to be lower-cased in JS): table, rowid, column, text. */
export async function jsonToLower(con: DuckDBConnection, tables: Record<string, string>): Promise<{ table: string; rowid: bigint; column: string; text: string }[]> {
  const parts: string[] = []
  for (const [table, columns] of Object.entries(JSON_COLUMNS)) {
    for (const c of columns) {
      parts.push(`SELECT '${table}' AS t, rowid, '${c}' AS c, ${ident(c)} AS x FROM ${tables[table]} WHERE regexp_matches(${ident(c)}, '"0x[0-9a-fA-F]*[A-F]')`)
    }
  }
  const rows = (await con.runAndReadAll(parts.join(' UNION ALL '))).getRows()
  return rows.map(([table, rowid, column, text]) => ({ table: String(table), rowid: rowid as bigint, column: String(column), text: String(text) }))
}

export const SPOOLED_TABLES = ['blocks', 'transactions', 'logs']
