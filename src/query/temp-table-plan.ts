import { ident } from '../db.js'
import type { ItemDecl } from '../families/declaration.js'
import { blockOrderSlice } from './block-order-plan.js'
import { sliceChunks, SMALL_SLICE, withBoundaries, type ChunkPlan, type SelectedBlock, type SliceRows } from './chunk-plan.js'
import type { ChunkSql, RelatedRows } from './chunk-sql.js'
import { HeadersPlan } from './headers-plan.js'
import type { Sql } from './lazy-connection.js'
import { bigintColumn, bigintNumbers, integerColumn, integerNumbers, varcharBytes } from '../fast-path.js'
import type { RowTexts } from './row-texts.js'
import { weightParts, weightSql } from './sql.js'

/*
 * The temp-table plan, for the queries the keyed plan does not take (a request without conditions,
 * a bigger selection):
 *   1. rows matched by requests with relation flags → temp table m<scan>;
 *   2. per item kind, keys, output weight and Parquet row number of the selected rows → temp table
 *      sel_<kind> (or the m table of step 1 when that is all that selects the kind; a kind that the
 *      slices read again by its own filters needs it for step 3 only: a subquery there);
 *   3. the blocks to return with their estimated weight → read into JS (in a chunk that holds every
 *      block, from the temp tables alone; with no item kind to read, the headers' JSON comes along:
 *      headers-plan.ts);
 *   4. per slice of blocks, each row's JSON text built inside DuckDB, ordered by block, kind and
 *      key, streamed to JS as raw bytes; when every kind is read whole from its block-ordered copy,
 *      block-order-plan.ts instead.
 */

/** Steps 1–3. With `ruledOut` (from the chunk summaries) steps 1–2 are skipped and no item is read. */
export async function prepareTempTables(con: Sql, sql: ChunkSql, texts: RowTexts, includeAllBlocks: boolean, ruledOut: boolean): Promise<ChunkPlan> {
  const { from, to } = sql
  const header = sql.plan.family.header
  const kinds = ruledOut ? [] : sql.kinds
  // 1. matched rows of requests that pull related items
  for (const scan of ruledOut ? [] : sql.plan.scans) {
    if (scan.relations.length === 0) continue
    await con.run(
      `CREATE OR REPLACE TEMP TABLE m${scan.id} AS SELECT ${sql.matchedSelect(scan)}, ${weightSql(scan.item, sql.selected(scan.item), 'src')} AS w, ` +
        `${sql.rowNumber(scan.item.table, 'src')} AS r FROM ${sql.file(scan.item.table, true)} src WHERE ${sql.where(scan, 'src')}`,
    )
  }
  // 2. selected keys per kind
  /** Kinds whose selection is a temp table of step 1 or a subquery, not sel_<kind>. */
  const selAlias = new Map<ItemDecl, string>()
  const selName = (kind: ItemDecl) => selAlias.get(kind) ?? ident(`sel_${kind.selector}`)
  for (const kind of kinds) {
    const { parts, only } = sql.selectionParts(kind, (scan) => `m${scan.id}`)
    // One request with relation flags and nothing else selects this kind: its m table is the selection.
    if (parts.length === 1 && only) {
      selAlias.set(kind, only)
      continue
    }
    // A kind read again by its filters in the slices needs its selection for the block weights
    // only: a subquery of that statement, no temp table.
    if (sql.readByFilter(kind)) {
      selAlias.set(kind, `(${parts.join(' UNION ')})`)
      continue
    }
    await con.run(`CREATE OR REPLACE TEMP TABLE ${selName(kind)} AS ${parts.join(' UNION ')}`)
  }
  // 3. blocks: with items, the range boundaries, or all of them
  const blockCol = ident(sql.blockCol)
  const itemWeights = kinds.map((k) => `SELECT block_number, w FROM ${selName(k)}`).join(' UNION ALL ')
  const items = kinds.length ? `LEFT JOIN (SELECT block_number, sum(w) AS iw FROM (${itemWeights}) GROUP BY block_number) s ON s.block_number = b.${blockCol}` : ''
  const iw = kinds.length ? 's.iw' : 'NULL'
  // Read straight into JS (one statement, no temp table): slices name the blocks they need. When
  // no item is read, the headers' JSON comes along and the slices need no statement at all.
  const headersOnly = kinds.length === 0
  const headerWeight = weightSql(header, sql.selected(header), 'b')
  const { fixed: headerFixed, columns: headerWeightColumns } = weightParts(header, sql.selected(header))
  // In a chunk that holds every block of its range, the blocks need not be read unless their
  // weight depends on their columns: the boundaries are `from` and `to` (one Parquet file and
  // 1–2 ms less per chunk).
  const known = !headersOnly && headerWeightColumns.length === 0 && (await sql.isDense(con))
  let statement: string
  if (known && !includeAllBlocks) {
    statement =
      `SELECT block_number::BIGINT AS number, (${headerWeight} + sum(w))::BIGINT AS w, 1 AS items FROM (${itemWeights}) ` +
      `WHERE block_number BETWEEN ${from} AND ${to} GROUP BY block_number ORDER BY number`
  } else {
    const blocks = known ? `(SELECT range AS ${blockCol} FROM range(${from}, ${to + 1}))` : sql.file(header.table)
    const x =
      `SELECT b.${blockCol}::BIGINT AS number, (${headerWeight} + coalesce(${iw}, 0))::BIGINT AS w, ` +
      `(${includeAllBlocks ? 'TRUE' : `${iw} IS NOT NULL`})::INTEGER AS items` +
      `${headersOnly ? `, ${sql.headerText('b')} AS j` : ''} ` +
      `FROM ${blocks} b ${items} WHERE ${sql.range('b', sql.blockCol)}`
    statement = includeAllBlocks
      ? `${x} ORDER BY number`
      : `WITH x AS (${x}) SELECT * FROM x WHERE items = 1 OR number = (SELECT min(number) FROM x) OR number = (SELECT max(number) FROM x) ORDER BY number`
  }
  const numbers: number[] = []
  const weights: number[] = []
  const hasItems: number[] = []
  const json: Uint8Array[] = []
  // Materialised (`run`): for a few hundred rows a streaming result costs milliseconds more.
  for (const chunk of await (await con.run(statement)).fetchAllChunks()) {
    bigintNumbers(chunk, 0, numbers)
    bigintNumbers(chunk, 1, weights)
    integerNumbers(chunk, 2, hasItems)
    if (headersOnly) varcharBytes(chunk, 3, json)
  }
  let candidates = numbers.map((number, i) => ({ number, weight: weights[i], items: hasItems[i] === 1 }))
  if (known && !includeAllBlocks) candidates = withBoundaries(candidates, from, to, (number) => ({ number, weight: headerFixed, items: false }))
  if (headersOnly) return new HeadersPlan(candidates, new Map(numbers.map((n, i) => [n, json[i]])), texts)
  return new TempTablePlan(con, sql, texts, candidates, selName)
}

class TempTablePlan implements ChunkPlan, RelatedRows {
  readonly rowNumbers = false

  constructor(
    private readonly con: Sql,
    private readonly sql: ChunkSql,
    private readonly texts: RowTexts,
    readonly candidates: SelectedBlock[],
    readonly selection: (kind: ItemDecl) => string,
  ) {}

  get related(): RelatedRows {
    return this
  }

  ranges(): undefined {
    return undefined
  }

  /**
   * Step 4: header and item rows ordered by block, kind and key as they come from DuckDB (2,048
   * rows at a time). Ordering the rows in DuckDB costs next to nothing; aggregating them per block
   * cost 20–40 %.
   */
  async *slice(lo: number, hi: number, weight: number): AsyncGenerator<SliceRows> {
    const { sql } = this
    if (sql.kinds.length > 0 && sql.kinds.every((kind) => sql.blockOrdered(kind))) {
      yield* blockOrderSlice(this.con, sql, this.texts, this, this.candidates, lo, hi, weight)
      return
    }
    const order = sql.orderColumns()
    const parts = [sql.headerPart(lo, hi, order.columns(-1), this.candidates)]
    sql.kinds.forEach((kind, i) => {
      parts.push(sql.itemPart(i, order.columns(i), sql.itemJson(kind), sql.source(kind, lo, hi, this)))
    })
    const statement = `SELECT b, k, j FROM (${parts.join(' UNION ALL ')}) ORDER BY b, k${order.names.map((n) => `, ${n}`).join('')}`
    // A streaming result costs a few ms more than a materialised one; only big slices need it.
    for await (const chunk of await sliceChunks(this.con, statement, weight > SMALL_SLICE)) {
      const json: number[] = []
      this.texts.copyColumn(chunk, 2, json)
      yield { block: bigintColumn(chunk, 0), kind: integerColumn(chunk, 1), json }
    }
  }
}
