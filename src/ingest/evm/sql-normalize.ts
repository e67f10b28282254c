import type { DuckDBConnection } from '@duckdb/node-api'
import { ident, lit } from '../../sql-text.js'
import { ndjsonObjectBound } from '../../chunks/ndjson-bound.js'
import { evmFamily } from '../../families/evm.js'
import { columnsOf, EVM_COLUMNS, isDerived, sourcePath, type Conversion, type EvmSpooledTable, type JsonShape, type RawObject, type SourcePath } from './columns.js'

/*
 * The EVM normaliser as SQL: raw `eth_getBlockByNumber(n, true)` and `eth_getBlockReceipts(n)`
 * answers, spooled to disk as the node sent them (JSON-RPC batch answers, `id` = block number), are
 * read by DuckDB's `read_json` with explicit column types and turned into the rows
 * `normalize.ts` builds (`blockRow`, `transactionRow`, `logRows`): the same columns and values.
 * Both are generated from the column map of columns.ts: here each conversion becomes an SQL
 * expression, and the raw fields `read_json` reads (with their types) are those the map names.
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
 * A JSON value as JSON text (`jsonText()`), when it has the shape (others: null).
 * Hex inside it must be lower-cased: rows whose text has an upper-case hex digit in a `"0x…"` string
 * are listed by `jsonToLower` and rewritten in JS (nodes send lower-case hex, so this is rare).
 */
const SHAPE_SQL: Record<JsonShape, (x: string) => string> = {
  array: (x) => `json_type(${x}) = 'ARRAY'`,
  'object or array': (x) => `json_type(${x}) IN ('OBJECT', 'ARRAY')`,
  any: (x) => `${x} IS NOT NULL`,
}
const json = (x: string, shape: JsonShape): ColumnSql => ({ value: `CASE WHEN ${SHAPE_SQL[shape](x)} THEN ${x}::VARCHAR END` })

const ARRAY = (x: string) => `json_type(${x}) = 'ARRAY'`

/** A JSON array of hex strings → a list, each lower-cased (`hexList`). */
const hexList = (hex: HexColumn) => (x: string): ColumnSql => {
  const list = `from_json(${x}, '["VARCHAR"]')`
  return {
    value: `CASE WHEN ${ARRAY(x)} THEN list_transform(${list}, h -> lower(h)) END`,
    ok: `(json_type(${x}) IS DISTINCT FROM 'ARRAY' OR list_bool_and(list_transform(${list}, h -> ${hex('h').ok})))`,
  }
}

/** An EIP-7702 authorization list, its members normalised as `authorizationList()` in normalize.ts does. */
const authorizationList = (hex: HexColumn) => (x: string): ColumnSql => {
  const list = `from_json(${x}, '[{"chainId":"VARCHAR","address":"VARCHAR","nonce":"VARCHAR","yParity":"VARCHAR","v":"VARCHAR","r":"VARCHAR","s":"VARCHAR"}]')`
  const member = `{'chainId': ${intOf('a.chainId')}, 'address': lower(a.address), 'nonce': ${intOf('a.nonce')}, 'yParity': ${intOf('coalesce(a.yParity, a.v)')}, 'r': lower(a.r), 's': lower(a.s)}`
  const valid = [int('a.chainId'), hex('a.address'), int('a.nonce'), int('coalesce(a.yParity, a.v)'), hex('a.r'), hex('a.s')].map((c) => c.ok).join(' AND ')
  return {
    value: `CASE WHEN ${ARRAY(x)} THEN to_json(list_transform(${list}, a -> ${member}))::VARCHAR END`,
    ok: `(json_type(${x}) IS DISTINCT FROM 'ARRAY' OR list_bool_and(list_transform(${list}, a -> ${valid})))`,
  }
}

// ---------------------------------------------------------------- raw answer types (read_json columns)

const V = 'VARCHAR'
const J = 'JSON'
const struct = (fields: Record<string, string>) => `STRUCT(${Object.entries(fields).map(([k, t]) => `${ident(k)} ${t}`).join(', ')})`

/** The type `read_json` reads a raw field as: a list when a source takes an element, JSON when a key or a JSON value, else text. */
function rawType(c: Conversion, p: SourcePath): string {
  if (typeof p.member === 'number') return `${V}[]`
  if (p.member != null || c.kind === 'json' || c.kind === 'hexList' || c.kind === 'authorizationList') return J
  return V
}

/** The raw fields of `object` that a table's columns read, with their types, plus those the checks read (`extra`). */
function rawFields(table: EvmSpooledTable, object: RawObject, extra: Record<string, string> = {}): Record<string, string> {
  const fields: Record<string, string> = {}
  const add = (field: string, type: string) => {
    if (fields[field] && fields[field] !== type) throw new Error(`evm SQL normaliser: ${object}.${field} is read as ${fields[field]} and as ${type}`)
    fields[field] = type
  }
  for (const [, c] of columnsOf(table)) {
    if (!('from' in c)) continue
    for (const source of c.from) {
      const p = sourcePath(source)
      if (p.object === object) add(p.field, rawType(c, p))
    }
  }
  for (const [field, type] of Object.entries(extra)) add(field, type)
  return fields
}

// ---------------------------------------------------------------- column expressions, from the column map (columns.ts)

/** SQL reading a source (`a|b`: coalesce; else the default). */
function sourceSql(from: string[], fallback?: string): string {
  const reads = from.map((source) => {
    const { object, field, member } = sourcePath(source)
    const x = `${object}.${ident(field)}`
    return member == null ? x : typeof member === 'number' ? `${x}[${member + 1}]` : `${x}->>${lit(member)}`
  })
  if (fallback != null) reads.push(lit(fallback))
  return reads.length === 1 ? reads[0] : `coalesce(${reads.join(', ')})`
}

/** The SQL of the conversions of one raw value (those of `HELPERS.convert` in normalize.ts). */
const convertSql = (hex: HexColumn) => ({
  hex,
  int,
  u64,
  text: (x: string): ColumnSql => ({ value: x }),
  hexList: hexList(hex),
  authorizationList: authorizationList(hex),
}) satisfies Record<Exclude<Conversion['kind'], 'json' | 'blockNumber' | 'size' | 'sighash'>, (x: string) => ColumnSql>

/** A column's SQL (value and validity) from its conversion (columns.ts). */
function columnSql(c: Conversion, hex: HexColumn): ColumnSql {
  switch (c.kind) {
    case 'blockNumber':
      return { value: 'n' }
    case 'size':
      return { value: `coalesce(length(${ident(c.of)}), 0)` }
    case 'sighash':
      return { value: `CASE WHEN length(${ident(c.of)}) >= 10 THEN substr(${ident(c.of)}, 1, 10) END` }
    case 'json':
      return json(sourceSql(c.from), c.shape)
    default: {
      const x = sourceSql(c.from, c.default)
      const col = convertSql(hex)[c.kind](x)
      return c.required ? { value: col.value, ok: `${x} IS NOT NULL AND ${col.ok ?? 'true'}` } : col
    }
  }
}

/** JSON-text columns whose hex must be lower case. */
const JSON_COLUMNS = Object.fromEntries(Object.keys(EVM_COLUMNS).map((table) => [table, columnsOf(table as EvmSpooledTable).filter(([, c]) => c.kind === 'json').map(([name]) => name)]))

/**
 * `SELECT` of a table's columns in declaration order (casts to the declared types), plus `_ok`: every
 * check holds. Columns computed from other columns of the row (sizes, sighash) are in an outer SELECT.
 */
function selectList(table: EvmSpooledTable, hex: HexColumn): { inner: string; checks: string; outer: string } {
  const types = new Map(evmFamily.tables.find((x) => x.name === table)!.columns.map((c) => [c.name, c.type]))
  const columns = columnsOf(table).map(([name, c]) => ({ name, derived: isDerived(c), sql: columnSql(c, hex), type: types.get(name)! }))
  const cast = (c: (typeof columns)[number]) => `CAST(${c.sql.value} AS ${c.type}) AS ${ident(c.name)}`
  return {
    inner: columns.filter((c) => !c.derived).map(cast).join(', '),
    checks: columns.map((c) => c.sql.ok).filter((x): x is string => !!x).join(' AND '),
    outer: columns.map((c) => (c.derived ? cast(c) : ident(c.name))).join(', '),
  }
}

type Selects = Record<EvmSpooledTable, ReturnType<typeof selectList>>
function selects(checked: boolean): Selects {
  const hex = hexColumn(checked)
  return { blocks: selectList('blocks', hex), transactions: selectList('transactions', hex), logs: selectList('logs', hex) }
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
  /** Bytes of the longest answer the files may hold (`ndjsonObjectBound`): `read_json`'s `maximum_object_size`. */
  maxObjectBytes: number
}

// the raw fields read: those the columns name, and those the checks in `spoolQueries` read
const TX_STRUCT = struct({ hash: V, transactions: `${struct(rawFields('transactions', 't', { hash: V, blockHash: V, transactionIndex: V }))}[]` })
const HEADER_STRUCT = struct(rawFields('blocks', 'b'))
const RECEIPTS_NARROW = `${struct(rawFields('transactions', 'r', { transactionHash: V }))}[]`
const LOG_STRUCT = struct(rawFields('logs', 'l', { transactionHash: V, blockHash: V, topics: `${V}[]` }))
const RECEIPTS_LOGS = `${struct(rawFields('logs', 'r', { transactionHash: V, blockHash: V, logs: `${LOG_STRUCT}[]` }))}[]`

/** The spool's answers of the chunk's blocks, read with explicit types (each consumer reads the files again: cheaper than keeping nested values in a table). */
const readSpool = (files: string[], result: string, s: SpoolInput) =>
  `(SELECT id AS n, result FROM read_json([${files.map(lit).join(', ')}], format = 'newline_delimited', columns = {id: 'BIGINT', result: ${lit(result)}}, ` +
  `maximum_object_size = ${s.maxObjectBytes}) WHERE id BETWEEN ${s.first} AND ${s.last})`

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

/** `spoolQueries` over spool files as they are on disk: `read_json`'s bound taken from their sizes (`ndjsonObjectBound`). */
export async function spoolQueriesOver(s: Omit<SpoolInput, 'maxObjectBytes'>): Promise<Record<'blocks' | 'transactions' | 'logs', string>> {
  return spoolQueries({ ...s, maxObjectBytes: await ndjsonObjectBound([...s.blockFiles, ...s.receiptFiles]) })
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
    `AND ${intOf('t."transactionIndex"')} = i AND (t.blockHash IS NULL OR lower(t.blockHash) = lower(_hash))`)} AS _ok ` +
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
