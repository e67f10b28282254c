import { ident, lit } from '../db.js'
import type { FieldDecl, FilterDecl, ItemDecl, RelationDecl } from '../families/declaration.js'

/*
 * SQL fragments generated from a family declaration: an item's JSON text, its output-weight
 * estimate, request filters and relation joins. Everything here is pure string building.
 */

/** Default output weight of one field, in bytes (REFERENCE §3.3). */
export const FIELD_WEIGHT = 32

/** Output fields of an item: identifier fields first, then the selected ones in declaration order. */
export function outputFields(item: ItemDecl, selected: string[]): string[] {
  const chosen = new Set(selected)
  const out = [...item.idFields]
  for (const name of Object.keys(item.fields)) if (chosen.has(name) && !out.includes(name)) out.push(name)
  return out
}

const MAX_SAFE = '9007199254740991'

/** A field's value as a DuckDB expression that `json_object` embeds correctly. */
function valueSql(f: FieldDecl, q: (column: string) => string): string {
  const e = f.encoding
  let v: string
  switch (e.kind) {
    case 'number':
    case 'string':
      v = q(e.column)
      break
    case 'bigint':
      v = `CASE WHEN ${q(e.column)} > ${MAX_SAFE} THEN to_json(${q(e.column)}::VARCHAR) ELSE to_json(${q(e.column)}) END`
      break
    case 'json':
      v = `${q(e.column)}::JSON`
      break
    case 'sql':
      v = e.columns.reduce((expr, c) => expr.replace(new RegExp(`\\b${c}\\b`, 'g'), q(c)), e.expr)
      break
  }
  return f.when ? `CASE WHEN ${qualifyCondition(f.when, q)} THEN ${v} END` : v
}

/** `when` conditions are written over bare column names; qualify the leading column name. */
function qualifyCondition(cond: string, q: (column: string) => string): string {
  return cond.replace(/^(\w+)/, (c) => q(c))
}

/**
 * JSON text of one item row. Nested objects (trace `action`/`result`) appear only when one of
 * their selected fields applies to the row (`when`), drop null members, and with `dropIfEmpty` are
 * left out when every member is null; `json_merge_patch` does the dropping (RFC 7386 semantics).
 */
export function itemJsonSql(item: ItemDecl, selected: string[], alias = ''): string {
  const q = (c: string) => (alias ? `${alias}.${ident(c)}` : ident(c))
  const top: string[] = []
  const nested = new Map<string, { key: string; f: FieldDecl }[]>()
  for (const name of outputFields(item, selected)) {
    const f = item.fields[name]
    if (f.path && f.path.length === 2) {
      const list = nested.get(f.path[0]) ?? []
      list.push({ key: f.path[1], f })
      nested.set(f.path[0], list)
    } else {
      top.push(`${lit(f.path?.[0] ?? name)}, ${valueSql(f, q)}`)
    }
  }
  const base = `json_object(${top.join(', ')})`
  if (nested.size === 0) return base
  const objects: string[] = []
  for (const decl of item.nested ?? []) {
    const members = nested.get(decl.name)
    if (!members) continue
    const applies = members.some((m) => !m.f.when)
      ? 'TRUE'
      : [...new Set(members.map((m) => qualifyCondition(m.f.when!, q)))].join(' OR ')
    const values = members.map((m) => valueSql(m.f, q))
    const cond = decl.dropIfEmpty ? `(${applies}) AND (${values.map((v) => `${v} IS NOT NULL`).join(' OR ')})` : applies
    const obj = `json_object(${members.map((m, i) => `${lit(m.key)}, ${values[i]}`).join(', ')})`
    objects.push(`${lit(decl.name)}, CASE WHEN ${cond} THEN ${obj} END`)
  }
  return `json_merge_patch(${base}, json_object(${objects.join(', ')}))`
}

/** Estimated JSON size of an item row: fixed weights plus stored size columns. */
export function weightSql(item: ItemDecl, selected: string[], alias = ''): string {
  const q = (c: string) => (alias ? `${alias}.${ident(c)}` : ident(c))
  let fixed = item.baseWeight ?? 0
  const columns: string[] = []
  for (const name of outputFields(item, selected)) {
    const w = item.fields[name].weight
    if (w === undefined) fixed += FIELD_WEIGHT
    else if (typeof w === 'number') fixed += w
    else columns.push(`coalesce(${q(w.column)}, 0)`)
  }
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
export function relationJoinSql(rel: RelationDecl): string {
  const parts = ['t.block_number = m.block_number', ...rel.on.map(([s, t]) => `t.${ident(t)} = m.${ident(s)}`)]
  if (rel.kind === 'descendants') {
    const ta = `t.${ident(rel.targetAddress)}`
    const sa = `m.${ident(rel.sourceAddress)}`
    parts.push(`len(${ta}) ${rel.inclusive ? '>=' : '>'} len(${sa})`, `list_slice(${ta}, 1, len(${sa})) = ${sa}`)
  } else if (rel.kind === 'ancestors') {
    const ta = `t.${ident(rel.targetAddress)}`
    const sa = `m.${ident(rel.sourceAddress)}`
    parts.push(`len(${ta}) ${rel.inclusive ? '<=' : '<'} len(${sa})`, `list_slice(${sa}, 1, len(${ta})) = ${ta}`)
  }
  return parts.join(' AND ')
}

/** Source columns a relation reads from the matched rows. */
export function relationSourceColumns(rel: RelationDecl): string[] {
  const cols = rel.on.map(([s]) => s)
  if (rel.kind !== 'join') cols.push(rel.sourceAddress)
  return cols
}
