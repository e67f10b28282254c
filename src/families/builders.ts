import type { ColumnDecl, FieldDecl, FilterDecl, RelationDecl } from './declaration.js'

/* Short constructors for family declarations. */

export const num = (column: string): FieldDecl => ({ encoding: { kind: 'number', column } })
export const str = (column: string, weight?: FieldDecl['weight']): FieldDecl => ({ encoding: { kind: 'string', column }, weight })
/** A hex string column the ingest checks (`0x` + lower-case hex digits): no JSON escaping needed. */
export const hexStr = (column: string, weight?: FieldDecl['weight']): FieldDecl => ({ encoding: { kind: 'hex', column }, weight })
/** A hex string column weighted by its stored `X_size` column (the value's length). */
export const sizedHex = (column: string): FieldDecl => hexStr(column, { column: `${column}_size` })
export const big = (column: string): FieldDecl => ({ encoding: { kind: 'bigint', column } })
export const json = (column: string, weight?: FieldDecl['weight']): FieldDecl => ({ encoding: { kind: 'json', column }, weight })
/** A string column weighted by its stored `X_size` column (the value's length). */
export const sized = (column: string): FieldDecl => str(column, { column: `${column}_size` })
/** A list column as a JSON array, optionally weighted by its stored `X_size` column. */
export const list = (column: string, sized = true): FieldDecl => ({
  encoding: { kind: 'sql', expr: `to_json(${column})`, columns: [column] },
  weight: sized ? { column: `${column}_size` } : undefined,
})

export const cols = (type: ColumnDecl['type'], ...names: string[]): ColumnDecl[] => names.map((name) => ({ name, type }))

export const inList = (column: string, values: Extract<FilterDecl, { kind: 'in' }>['values']): FilterDecl => ({ kind: 'in', column, values })

/** Rows of `target` in the same transaction. */
export const sameTx = (target: string): RelationDecl => ({ kind: 'join', target, on: [['transaction_index', 'transaction_index']] })
