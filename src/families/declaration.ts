/**
 * A dataset family is declared once, as data: the Parquet tables of a chunk, the item kinds a query
 * can ask for, each item's selectable fields (with their JSON encoding), filters and relations.
 * The ingest writer and the generic query engine are both driven by these declarations.
 */

/** DuckDB column types used in chunk files. */
export type ColumnType =
  | 'BIGINT'
  | 'UBIGINT'
  | 'INTEGER'
  | 'VARCHAR'
  | 'VARCHAR[]'
  | 'INTEGER[]'
  | 'BOOLEAN'
  | 'DOUBLE'

export interface ColumnDecl {
  name: string
  type: ColumnType
}

export interface TableDecl {
  /** File name without `.parquet`. */
  name: string
  /** Column holding the block number (`number` for the blocks table). */
  blockColumn: string
  columns: ColumnDecl[]
  /** Row order inside the file; chosen so that filtered columns prune well by row-group stats. */
  sortBy: string[]
  /** A chunk may lack this table (for example traces when the source had none). */
  optional?: boolean
  /**
   * Written through NDJSON + DuckDB `read_json` rather than the Appender: for tables with many
   * mostly-null columns, where DuckDB's parallel JSON reader and sort beat per-value appends.
   */
  ndjson?: boolean
}

/**
 * How a field becomes JSON.
 * - `number`: integer column as a JSON number.
 * - `string`: string column as a JSON string (hex values are stored lower-case).
 * - `hex`: string column of `0x`-prefixed lower-case hex; the ingest makes sure no value holds a
 *   character JSON escapes (docs/ingest.md), so it is written between quotes as stored, without
 *   `to_json` (measured 35–40 % less DuckDB time for a transaction's JSON).
 * - `bigint`: unsigned integer as a JSON number, or a decimal string above 2^53 − 1.
 * - `boolean`: BOOLEAN column as `true`/`false`.
 * - `json`: the column holds JSON text, emitted as-is.
 * - `sql`: `expr` is a DuckDB expression (over the table's columns) that yields the JSON value.
 */
export type FieldEncoding =
  | { kind: 'number'; column: string }
  | { kind: 'string'; column: string }
  | { kind: 'hex'; column: string }
  | { kind: 'bigint'; column: string }
  | { kind: 'boolean'; column: string }
  | { kind: 'json'; column: string }
  /** Hex columns as a JSON array of those not null, in order (`[]` when all are null). */
  | { kind: 'hexList'; columns: string[] }
  | { kind: 'sql'; expr: string; columns: string[] }

export interface FieldDecl {
  encoding: FieldEncoding
  /**
   * Where the value goes in the item object: a top-level key (default: the field name) or a
   * nested object and key, e.g. `['action', 'from']` for EVM trace fields.
   */
  path?: [string] | [string, string]
  /** SQL condition: the field is emitted only for rows where this holds (trace type-specific fields). */
  when?: string
  /** Output-size estimate for this field: a fixed weight or a column holding the value's length. */
  weight?: number | { column: string }
}

/**
 * Nested objects (like trace `action`/`result`): sub-fields whose value is null are omitted, and
 * an object left empty is omitted when `dropIfEmpty` is set.
 */
export interface NestedObjectDecl {
  name: string
  dropIfEmpty: boolean
}

/** A request filter key. All list filters are OR inside, AND across keys (docs/protocol.md §3.1). */
export type FilterDecl =
  /** value ∈ list; `values` says how each value is checked and normalised before matching (docs/protocol.md §3.2). */
  | { kind: 'in'; column: string; values: 'hex' | 'string' | 'lowercase' | 'integer' | 'felt' }
  /** `column >= value` / `column <= value` for an integer bound. */
  | { kind: 'min' | 'max'; column: string }
  /** boolean: `true` keeps rows whose hex quantity column is non-null and non-zero. */
  | { kind: 'nonZero'; column: string }

/**
 * A relation flag on a request: for every item the request matched, add items of `target`.
 * - `join`: rows of `target` in the same block whose `on` columns equal the source's.
 * - `descendants` / `ancestors`: rows of `target` in the same block with equal `on` columns whose
 *   address array (`targetAddress`) has the source's address (`sourceAddress`) as a strict prefix
 *   (descendants) or is a strict prefix of it (ancestors). `inclusive` also takes the equal address.
 * - `siblings`: rows of `target` in the same block with equal `on` columns whose address has the same
 *   parent as the source's (same length, equal but for the last element; the source itself included).
 */
export type RelationDecl =
  | { kind: 'join'; target: string; on: [source: string, target: string][] }
  | {
      kind: 'descendants' | 'ancestors' | 'siblings'
      target: string
      on: [source: string, target: string][]
      sourceAddress: string
      targetAddress: string
      inclusive?: boolean
    }

/**
 * One request list of a query that selects items of a kind. A kind may have several (Substrate
 * `events` and `evmLogs` both select from the events table); each has its own filters, relation
 * flags and an implicit condition.
 */
export interface RequestDecl {
  /** Key of the request list in the query (e.g. `logs`, `evmLogs`). */
  name: string
  /** Implicit condition: column → the value it must equal (e.g. `{ name: 'EVM.Log' }`). */
  where?: Record<string, string | number>
  filters: Record<string, FilterDecl>
  relations: Record<string, RelationDecl>
}

export interface ItemDecl {
  /** Key in `fields` (e.g. `log`). */
  selector: string
  /** Key of the output array in a block object (e.g. `logs`). */
  output: string
  table: string
  /** Primary key after the block number: item order inside a block. */
  key: string[]
  fields: Record<string, FieldDecl>
  /** Always emitted, whatever the selection (docs/protocol.md §3.6). */
  idFields: string[]
  nested?: NestedObjectDecl[]
  /** Request lists selecting this kind (none for the block header). */
  requests: RequestDecl[]
  /** Weight of every item row on top of its fields (keys, framing). */
  baseWeight?: number
}

export interface FamilyDecl<N extends string = string> {
  /** The family's name (in `dataset.json`, `ingest --family`); the registry (index.ts) lists the families. */
  name: N
  /** Accepted values of the query's `type` key; `undefined` in the list means "absent is fine". */
  queryTypes: (string | undefined)[]
  /** How block hashes (and `parentBlockHash`) are written: lower-case hex, or Starknet felts (no leading zeros). */
  hashValues: 'hex' | 'felt'
  tables: TableDecl[]
  /** The block header item; its table has one row per block. */
  header: ItemDecl
  /** Item kinds, in output order. */
  items: ItemDecl[]
}

export function tableOf(family: FamilyDecl, name: string): TableDecl {
  const t = family.tables.find((t) => t.name === name)
  if (!t) throw new Error(`family ${family.name} has no table ${name}`)
  return t
}

export function itemOf(family: FamilyDecl, selector: string): ItemDecl {
  const i = family.items.find((i) => i.selector === selector)
  if (!i) throw new Error(`family ${family.name} has no item kind ${selector}`)
  return i
}

/** Lower case; felts also lose leading zeros after `0x` (`0x00AB` → `0xab`, zero → `0x0`). */
export function normalizeHex(value: string, how: 'hex' | 'felt'): string {
  const v = value.toLowerCase()
  if (how === 'hex') return v
  return '0x' + (v.slice(2).replace(/^0+/, '') || '0')
}

/**
 * The answer's order of each item table whose file is sorted otherwise (by filter keys): its block
 * column, then the item's key. A worker's local form keeps a copy of such a table in this order, so
 * that a slice of blocks that reads every row reads them in place and in order (local-forms.ts).
 */
export function blockOrders(family: FamilyDecl): Record<string, string[]> {
  const out: Record<string, string[]> = {}
  for (const item of family.items) {
    const table = tableOf(family, item.table)
    const order = [table.blockColumn, ...item.key]
    if (out[table.name] || order.every((c, i) => table.sortBy[i] === c)) continue
    out[table.name] = order
  }
  return out
}
