import { eachSliceRow, interleave, sliceChunks, SMALL_SLICE, type SelectedBlock, type SliceRows } from './chunk-plan.js'
import type { ChunkSql, RelatedRows } from './chunk-sql.js'
import type { Sql } from './lazy-connection.js'
import type { RowTexts } from './row-texts.js'

/*
 * The block-order slice of the temp-table plan: when every kind of the query is read whole from
 * its block-ordered copy in the local form (`ChunkSql.blockOrdered`: `LocalTables.byBlock`), the
 * slice statement has no `ORDER BY`. The rows of each kind come in the copy's order (checked by
 * rowid, put in order when a parallel scan mixed them) and JS places them after their block's
 * header.
 */

export async function* blockOrderSlice(
  con: Sql,
  sql: ChunkSql,
  texts: RowTexts,
  related: RelatedRows,
  candidates: SelectedBlock[],
  lo: number,
  hi: number,
  weight: number,
): AsyncGenerator<SliceRows> {
  const parts = [sql.headerPart(lo, hi, '0::BIGINT AS r', candidates)]
  sql.kinds.forEach((kind, i) => {
    parts.push(sql.itemPart(i, 'src.rowid::BIGINT AS r', sql.itemJson(kind), sql.source(kind, lo, hi, related)))
  })
  const headerBlocks: number[] = []
  const headers: number[] = []
  const rows = sql.kinds.map(() => ({ block: [] as number[], r: [] as number[], json: [] as number[] }))
  const chunks = await sliceChunks(con, parts.join(' UNION ALL '), weight > SMALL_SLICE)
  await eachSliceRow(chunks, texts, (block, json) => {
    headerBlocks.push(block)
    headers.push(json)
  }, (i, block, r, json) => {
    rows[i].block.push(block)
    rows[i].r.push(r)
    rows[i].json.push(json)
  })
  yield interleave(sql.kinds, headerBlocks, headers, rows.map(inCopyOrder), lo, hi)
}

/** A kind's rows of a slice from its block-ordered copy, in the copy's order (by rowid). */
function inCopyOrder(rows: { block: number[]; r: number[]; json: number[] }): { block: ArrayLike<number>; json: number[] } {
  const { block, r, json } = rows
  if (r.every((x, i) => i === 0 || x > r[i - 1])) return rows
  const order = r.map((_, i) => i).sort((x, y) => r[x] - r[y])
  return { block: order.map((i) => block[i]), json: order.map((i) => json[i]) }
}
