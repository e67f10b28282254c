import { ident } from '../db.js'
import type { ItemDecl } from '../families/declaration.js'
import { NARROW_FLAG, NARROW_SUFFIX } from '../storage/local-forms.js'
import type { ChunkSource } from './chunk-sql.js'

/*
 * Narrow copies of wide columns (`narrowCopies` in src/storage/local-forms.ts): in a local form,
 * the rows of vectors holding much wide text (calldata) also keep their values in narrow copies of
 * the column, with a row flag. The keyed plan reads each selected row's flag in its first statement
 * (`narrowFlag`), and its slices read flagged rows from the copies, the others from the columns
 * (`narrowParts`), so that no wide string is decoded for a row that is not itself wide.
 */

/** Columns of a kind's table with a narrow copy in the local form (none when reading Parquet). */
export function narrowColumns(chunk: ChunkSource, kind: ItemDecl): readonly string[] {
  return chunk.local?.narrow(kind.table) ?? []
}

/** `, <alias>.<flag> AS x`: whether a row's values are in the narrow copies (FALSE for a table without copies). */
export function narrowFlag(chunk: ChunkSource, kind: ItemDecl, alias: string): string {
  return `, ${narrowColumns(chunk, kind).length ? `${alias}.${ident(NARROW_FLAG)}` : 'FALSE'} AS x`
}

/**
 * The parts of a slice statement reading a kind whose table has narrow copies: the flagged rows
 * read the copies, the others the columns themselves; each part only when the slice has such rows
 * (`flags`: the slice's rows, 1 = flagged). `part(json, condition)` is a part with that JSON text
 * and extra condition; `itemJson(stored)` the row's JSON reading each column from `stored(column)`.
 */
export function narrowParts(
  narrow: readonly string[],
  flags: Int32Array,
  part: (json: string, condition: string) => string,
  itemJson: (stored?: (column: string) => string) => string,
): string[] {
  const copies = new Set(narrow)
  const flag = `src.${ident(NARROW_FLAG)}`
  const parts: string[] = []
  if (flags.includes(1)) parts.push(part(itemJson((c) => (copies.has(c) ? c + NARROW_SUFFIX : c)), ` AND ${flag}`))
  if (flags.includes(0)) parts.push(part(itemJson(), ` AND NOT ${flag}`))
  return parts
}
