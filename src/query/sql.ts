import { ident, lit } from '../db.js'
import type { FieldDecl, FilterDecl, ItemDecl, RelationDecl } from '../families/declaration.js'

/*
 * SQL fragments generated from a family declaration: an item's JSON text, its output-weight
 * estimate, request filters and relation joins. Everything here is pure string building.
 */

/** Default output weight of one field, in bytes (docs/protocol.md §3.6). */
export const FIELD_WEIGHT = 32

/** Output fields of an item: identifier fields first, then the selected ones in declaration order. */
export function outputFields(item: ItemDecl, selected: string[]): string[] {
  const chosen = new Set(selected)
  const out = [...item.idFields]
  for (const name of Object.keys(item.fields)) if (chosen.has(name) && !out.includes(name)) out.push(name)
  return out
}

const MAX_SAFE = '9007199254740991'

/**
 * A field's value as DuckDB VARCHAR holding its JSON text, NULL when the value is null. Built with
 * `concat` rather than `json_object`: measured 20–40 % less DuckDB time per row
 * (docs/benchmark-history.md, step 10).
 */
function valueText(f: FieldDecl, q: (column: string) => string): string {
  const e = f.encoding
  let v: string
  switch (e.kind) {
    case 'number':
      v = `CAST(${q(e.column)} AS VARCHAR)`
      break
    case 'string':
      v = `CAST(to_json(${q(e.column)}) AS VARCHAR)`
      break
    case 'hex':
      v = `CASE WHEN ${q(e.column)} IS NOT NULL THEN concat('"', ${q(e.column)}, '"') END`
      break
    case 'bigint':
      v = `CASE WHEN ${q(e.column)} > ${MAX_SAFE} THEN concat('"', ${q(e.column)}, '"') ELSE CAST(${q(e.column)} AS VARCHAR) END`
      break
    case 'boolean':
      v = `CAST(${q(e.column)} AS VARCHAR)`
      break
    case 'json':
      v = q(e.column)
      break
    case 'hexList':
      v = hexListSql(e.columns.map(q))
      break
    case 'sql':
      v = `CAST(${e.columns.reduce((expr, c) => expr.replace(new RegExp(`\\b${c}\\b`, 'g'), q(c)), e.expr)} AS VARCHAR)`
      break
  }
  return f.when ? `CASE WHEN ${qualifyCondition(f.when, q)} THEN ${v} END` : v
}

/**
 * A top-level field's JSON text, `null` when the value is null. A hex value is one CASE (measured
 * 35–40 % less DuckDB time per transaction row than `to_json` inside `coalesce`).
 */
function fieldText(f: FieldDecl, q: (column: string) => string): string {
  if (f.encoding.kind === 'hex' && !f.when) return `CASE WHEN ${q(f.encoding.column)} IS NULL THEN 'null' ELSE concat('"', ${q(f.encoding.column)}, '"') END`
  return `coalesce(${valueText(f, q)}, 'null')`
}

/** `when` conditions are written over bare column names; qualify the leading column name. */
function qualifyCondition(cond: string, q: (column: string) => string): string {
  return cond.replace(/^(\w+)/, (c) => q(c))
}

/** `"key":` as an SQL string literal. */
const keyLit = (key: string, comma: boolean) => lit(`${comma ? ',' : ''}${JSON.stringify(key)}:`)

/**
 * What a chunk's file says of a column's NULLs: none, every row, or some (or unknown). A column
 * without NULLs needs no NULL case in its text, and a column of NULLs is the literal `null`
 * (column-nulls.ts reads this from the chunk's Parquet statistics).
 */
export type Nulls = 'none' | 'all' | 'some'

/** Hex values as a JSON array of those not null: never NULL itself. */
function hexListSql(values: string[]): string {
  return `CASE WHEN coalesce(${values.join(', ')}) IS NULL THEN '[]' ELSE concat('["', concat_ws('","', ${values.join(', ')}), '"]') END`
}

/**
 * A top-level field's text as pieces of a `concat`: a literal (`{ text }`) or an SQL expression.
 * A field on one column whose file has no NULLs is its value without the NULL case (a hex value is
 * the column between two quote literals, which merge with the keys around them); a column of NULLs
 * is `null`. `concat` with fewer, merged arguments and no CASE per field: measured about half of
 * DuckDB's time for a log row's text (docs/benchmark-history.md, step 50).
 */
function fieldPieces(f: FieldDecl, q: (column: string) => string, nulls: (column: string) => Nulls): Piece[] {
  const e = f.encoding
  if (e.kind === 'hexList' && !f.when) {
    // Columns of NULLs add nothing; a first column without NULLs makes the list never empty.
    const present = e.columns.filter((c) => nulls(c) !== 'all')
    if (present.length === 0) return [{ text: '[]' }]
    if (nulls(present[0]) !== 'none') return [hexListSql(present.map(q))]
    return [{ text: '["' }, present.length === 1 ? q(present[0]) : `concat_ws('","', ${present.map(q).join(', ')})`, { text: '"]' }]
  }
  const state = f.when || e.kind === 'sql' || e.kind === 'hexList' ? 'some' : nulls(e.column)
  if (state === 'all') return [{ text: 'null' }]
  if (state === 'none') {
    if (e.kind === 'hex') return [{ text: '"' }, q(e.column), { text: '"' }]
    return [valueText(f, q)]
  }
  return [fieldText(f, q)]
}

type Piece = string | { text: string }

/** `concat(…)` of the pieces, adjacent literals merged into one. */
function concatSql(pieces: Piece[]): string {
  const args: string[] = []
  let text: string | undefined
  for (const p of pieces) {
    if (typeof p === 'string') {
      if (text !== undefined) args.push(lit(text))
      text = undefined
      args.push(p)
    } else {
      text = (text ?? '') + p.text
    }
  }
  if (text !== undefined) args.push(lit(text))
  return `concat(${args.join(', ')})`
}

/**
 * JSON text of one item row, as a VARCHAR expression. Top-level fields are always present (null
 * when the value is null). Nested objects (trace `action`/`result`) appear only when one of their
 * selected fields applies to the row (`when`), leave out null members, and with `dropIfEmpty` are
 * left out when every member is null. `prefix` is written before the object (item rows carry the
 * comma that separates them in their array, so that rows lying back to back in DuckDB's memory
 * are already the array's text). `stored` names the column a value is read from (a local form's
 * narrow copy of a column, say); `nulls` what the chunk holds of a (declared) column's NULLs.
 */
export function itemJsonSql(
  item: ItemDecl,
  selected: string[],
  alias = '',
  prefix = '',
  stored: (column: string) => string = (c) => c,
  nulls: (column: string) => Nulls = () => 'some',
): string {
  const q = (c: string) => (alias ? `${alias}.${ident(stored(c))}` : ident(stored(c)))
  const pieces: Piece[] = [{ text: `${prefix}{` }]
  let first = true
  const key = (name: string) => {
    pieces.push({ text: `${first ? '' : ','}${JSON.stringify(name)}:` })
    first = false
  }
  const nested = new Map<string, { key: string; f: FieldDecl }[]>()
  for (const name of outputFields(item, selected)) {
    const f = item.fields[name]
    if (f.path && f.path.length === 2) {
      const list = nested.get(f.path[0]) ?? []
      list.push({ key: f.path[1], f })
      nested.set(f.path[0], list)
    } else {
      key(f.path?.[0] ?? name)
      pieces.push(...fieldPieces(f, q, nulls))
    }
  }
  for (const decl of item.nested ?? []) {
    const members = nested.get(decl.name)
    if (!members) continue
    const applies = members.some((m) => !m.f.when)
      ? 'TRUE'
      : [...new Set(members.map((m) => qualifyCondition(m.f.when!, q)))].join(' OR ')
    const values = members.map((m) => valueText(m.f, q))
    const cond = decl.dropIfEmpty ? `(${applies}) AND (${values.map((v) => `${v} IS NOT NULL`).join(' OR ')})` : applies
    // Each present member is written with a leading comma; the object drops the first one.
    const body = `concat(${members.map((m, i) => `CASE WHEN ${values[i]} IS NOT NULL THEN concat(${keyLit(m.key, true)}, ${values[i]}) ELSE '' END`).join(', ')})`
    pieces.push(`CASE WHEN ${cond} THEN concat(${keyLit(decl.name, !first)}, '{', substr(${body}, 2), '}') ELSE '' END`)
    first = false
  }
  // An item with no identifier fields and nothing selected (Starknet `stateUpdates: [{}]`) is `{}`.
  if (first) return lit(`${prefix}{}`)
  pieces.push({ text: '}' })
  return concatSql(pieces)
}

/** Estimated JSON size of an item row: fixed weights plus stored size columns (terms to add). */
export function weightParts(item: ItemDecl, selected: string[], alias = ''): { fixed: number; columns: string[] } {
  const q = (c: string) => (alias ? `${alias}.${ident(c)}` : ident(c))
  let fixed = item.baseWeight ?? 0
  const columns: string[] = []
  for (const name of outputFields(item, selected)) {
    const w = item.fields[name].weight
    if (w === undefined) fixed += FIELD_WEIGHT
    else if (typeof w === 'number') fixed += w
    else columns.push(`coalesce(${q(w.column)}, 0)`)
  }
  return { fixed, columns }
}

/** The same estimate as one SQL expression. */
export function weightSql(item: ItemDecl, selected: string[], alias = ''): string {
  const { fixed, columns } = weightParts(item, selected, alias)
  return [String(fixed), ...columns].join(' + ')
}

/** Lists longer than this are matched through a temp table instead of an inline `IN (…)`. */
export const INLINE_LIST_MAX = 64

/**
 * The SQL condition of one filter. `valueTable` is called for long lists and returns the name of a
 * one-column (`v`) table holding the values.
 */
export function filterSql(f: FilterDecl, value: unknown, alias: string, valueTable: (values: unknown[]) => string): string | undefined {
  const col = alias ? `${alias}.${ident(f.column)}` : ident(f.column)
  switch (f.kind) {
    case 'in': {
      const list = value as (string | number)[]
      if (list.length === 0) return 'FALSE'
      if (list.length > INLINE_LIST_MAX) return `${col} IN (SELECT v FROM ${valueTable(list)})`
      const items = list.map((v) => (typeof v === 'number' ? String(v) : lit(v)))
      return list.length === 1 ? `${col} = ${items[0]}` : `${col} IN (${items.join(', ')})`
    }
    case 'min':
      return `${col} >= ${Number(value)}`
    case 'max':
      return `${col} <= ${Number(value)}`
    case 'nonZero':
      return value === true ? `(${col} IS NOT NULL AND ltrim(substr(${col}, 3), '0') <> '')` : undefined
  }
}

/** Join condition for a relation from matched source rows `m` to target rows `t` (same block). */
export function relationJoinSql(rel: RelationDecl, targetBlockColumn: string): string {
  const parts = [`t.${ident(targetBlockColumn)} = m.block_number`, ...rel.on.map(([s, t]) => `t.${ident(t)} = m.${ident(s)}`)]
  if (rel.kind === 'descendants') {
    const ta = `t.${ident(rel.targetAddress)}`
    const sa = `m.${ident(rel.sourceAddress)}`
    parts.push(`len(${ta}) ${rel.inclusive ? '>=' : '>'} len(${sa})`, `list_slice(${ta}, 1, len(${sa})) = ${sa}`)
  } else if (rel.kind === 'ancestors') {
    const ta = `t.${ident(rel.targetAddress)}`
    const sa = `m.${ident(rel.sourceAddress)}`
    parts.push(`len(${ta}) ${rel.inclusive ? '<=' : '<'} len(${sa})`, `list_slice(${sa}, 1, len(${ta})) = ${ta}`)
  } else if (rel.kind === 'siblings') {
    const ta = `t.${ident(rel.targetAddress)}`
    const sa = `m.${ident(rel.sourceAddress)}`
    parts.push(`len(${ta}) = len(${sa})`, `(len(${sa}) = 0 OR list_slice(${ta}, 1, len(${ta}) - 1) = list_slice(${sa}, 1, len(${sa}) - 1))`)
  }
  return parts.join(' AND ')
}

/** Source columns a relation reads from the matched rows. */
export function relationSourceColumns(rel: RelationDecl): string[] {
  const cols = rel.on.map(([s]) => s)
  if (rel.kind !== 'join') cols.push(rel.sourceAddress)
  return cols
}
