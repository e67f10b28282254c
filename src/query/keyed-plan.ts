import { ident } from '../db.js'
import type { ItemDecl } from '../families/declaration.js'
import { eachSliceRow, interleave, sliceChunks, SMALL_SLICE, withBoundaries, type ChunkPlan, type SelectedBlock, type SliceRows } from './chunk-plan.js'
import type { ChunkSql, RelatedRows } from './chunk-sql.js'
import type { Sql } from './lazy-connection.js'
import { narrowColumns, narrowParts } from './narrow-columns.js'
import type { ScanPlan } from './plan.js'
import { bigintColumn, integerColumn } from '../fast-path.js'
import type { RowTexts } from './row-texts.js'
import { weightParts, weightSql } from './sql.js'
import { concatTyped, lowerBound, orderInJs, permute, rowRanges, sortedWithRanks } from './typed-order.js'

/*
 * The keyed plan, for every query whose requests all have a condition and select at most
 * `keyedPlan.maxRows` rows in the chunk — two statements:
 *   1. kind, block, output weight and row number of every selected row → JS, ordered by kind,
 *      block and key (in JS when the keys allow, `keysPack`; a relation joins its request's matched
 *      rows as a subquery; in a chunk that lacks blocks or whose header weight depends on columns,
 *      the blocks with their header weight come along). The candidate blocks and their weights
 *      follow in JS: no temp table, no statement of their own.
 *   2. per slice of blocks, each row's JSON text built inside DuckDB with its row number, unordered;
 *      JS puts the rows in order by their rank from statement 1. A kind pulled in by a relation is
 *      read by its row-number runs (few runs: the local form skips the vectors, Parquet the pages,
 *      that hold none); rows in more than `keyedPlan.maxRanges` runs are joined through a temp table
 *      sel_<kind>, one more statement. In a local form with narrow copies of wide columns
 *      (narrow-columns.ts), statement 1 also reads each row's flag, and a kind's flagged rows are
 *      read from the copies, its other rows from the columns (one part each).
 */

/**
 * Limits of the keyed plan; tests lower them to run the other paths.
 * - `maxRows`: most selected rows read into JS; a query selecting more runs with temp tables.
 * - `maxRanges`: most row-number runs a related kind's rows are read by; rows in more runs are
 *   joined through a temp table. Each run costs ≈ 0.1 ms (an OR of BETWEENs, measured with 5–64).
 * - `jsOrder`: statement 1 comes unordered and JS orders it, where the kinds' keys allow
 *   (`keysPack`); false: DuckDB's `ORDER BY` always.
 */
export const keyedPlan = { maxRows: 16384, maxRanges: 16, jsOrder: true }

/** DuckDB types of key columns that order as integers. */
const INTEGER_TYPES = new Set(['TINYINT', 'SMALLINT', 'INTEGER', 'BIGINT', 'UTINYINT', 'USMALLINT', 'UINTEGER', 'UBIGINT'])

/** Selected rows of one kind, in the order of the answer (block, then key). */
interface KeyedRows {
  /** Block of each row. */
  block: Float64Array
  /** The row numbers ascending, and the rank of each. */
  sorted: Float64Array
  ranks: Int32Array
  /** A related kind's rows as a condition on their row numbers, when they lie in few runs (else a temp table holds them). */
  ranges?: string
  /** Per row (as `block`), 1 when its values are in narrow copies (a local form with narrow copies of its table's wide columns). */
  narrow?: Int32Array
}

/**
 * Statement 1: the selected rows' keys into JS, the candidate blocks from them. Undefined, with
 * nothing kept, when the chunk selects more than `keyedPlan.maxRows` rows (the temp-table plan
 * takes over; the statement read at most one row more).
 */
export async function prepareKeyed(con: Sql, sql: ChunkSql, texts: RowTexts, includeAllBlocks: boolean): Promise<KeyedPlan | undefined> {
  const { kinds, from, to } = sql
  const header = sql.plan.family.header
  const { fixed, columns } = weightParts(header, sql.selected(header))
  // In a chunk that holds every block of its range, with header weights known without reading
  // them, the blocks need not be read.
  const known = columns.length === 0 && (await sql.isDense(con))
  const order = sql.orderColumns()
  // Each kind's selection (also the temp table of a kind whose rows lie in many runs, below): its
  // parts with UNION ALL, a row that several parts select repeated. DuckDB's UNION would set up a
  // hash table per statement (about 1.4 ms however few the rows); statement 1's rows are put in
  // order anyway, so a repeated row is dropped in JS, and the temp table is only joined by row number.
  // A local form with narrow copies of wide columns: each row's flag comes along (as x).
  const flag = kinds.some((kind) => narrowColumns(sql.chunk, kind).length > 0)
  const matchedRows = (scan: ScanPlan) =>
    `(SELECT ${sql.matchedSelect(scan)} FROM ${sql.file(scan.item.table)} src WHERE ${sql.where(scan, 'src')})`
  const partLists = kinds.map((kind) => sql.selectionParts(kind, matchedRows, true, flag).parts)
  const selections = partLists.map((parts) => parts.join(' UNION ALL '))
  const repeats = partLists.some((parts) => parts.length > 1)
  const xColumn = flag ? ', x::INTEGER AS x' : ''
  // Kinds with at most one integer key are put in order in JS (`orderInJs`); others by DuckDB.
  const inJs = keysPack(sql)
  const keyColumns = (i: number, key?: string) => (inJs ? `${key ? `${ident(key)}::BIGINT` : '0::BIGINT'} AS q` : order.columns(i, ''))
  const parts = selections.map((selection, i) =>
    `SELECT ${i} AS k, block_number::BIGINT AS b, w::BIGINT AS w, r::BIGINT AS r${xColumn}, ${keyColumns(i, kinds[i].key[0])} FROM (${selection})`)
  // The LIMIT first: a selection too big for this plan is given up after maxRows + 1 rows.
  let rows = `${parts.join(' UNION ALL ')} LIMIT ${keyedPlan.maxRows + 1}`
  if (!known) {
    // The blocks with their header weight, as kind -1.
    const blockCol = ident(sql.blockCol)
    rows = `(${rows}) UNION ALL SELECT -1, t.${blockCol}::BIGINT, (${weightSql(header, sql.selected(header), 't')})::BIGINT, 0${flag ? ', 0' : ''}, ${inJs ? '0' : order.columns(-1, '')} ` +
      `FROM ${sql.file(header.table)} t WHERE ${sql.range('t', sql.blockCol)}`
  }
  const statement = inJs
    ? `SELECT k, b, w, r${flag ? ', x' : ''}, q FROM (${rows})`
    : `SELECT k, b, w, r${flag ? ', x' : ''} FROM (${rows}) ORDER BY k, b${order.names.map((n) => `, ${n}`).join('')}`
  const chunks = await (await con.run(statement)).fetchAllChunks()
  const int = (col: number) => concatTyped(chunks.map((c) => integerColumn(c, col)), (n) => new Int32Array(n))
  const big = (col: number) => concatTyped(chunks.map((c) => bigintColumn(c, col)), (n) => new Float64Array(n))
  let k = int(0)
  let b = big(1)
  let w = big(2)
  let r = big(3)
  let x = flag ? int(4) : undefined
  if (inJs) {
    const at = orderInJs(k, b, big(flag ? 5 : 4), from, to, kinds.length)
    ;[k, b, w, r] = [permute(k, at), permute(b, at), permute(w, at), permute(r, at)]
    if (x) x = permute(x, at)
  }
  const headers = lowerBound(k, 0)
  // Repeated rows count: the LIMIT may have cut the selection however many distinct rows it has.
  if (k.length - headers > keyedPlan.maxRows) return undefined
  if (repeats) {
    const keep = firstOccurrences(k, r, headers)
    if (keep) {
      const kept = <T extends Int32Array | Float64Array>(values: T) => values.filter((_, i) => keep[i]) as T
      ;[k, b, w, r] = [kept(k), kept(b), kept(w), kept(r)]
      if (x) x = kept(x)
    }
  }
  const weights = new Map<number, number>()
  const selected: KeyedRows[] = []
  for (let i = 0, at = headers; i < kinds.length; i++) {
    // Rows arrive ordered by kind: each kind's are one stretch.
    const end = lowerBound(k, i + 1, at)
    addWeights(weights, b, w, at, end)
    const narrow = narrowColumns(sql.chunk, kinds[i]).length ? x?.subarray(at, end).slice() : undefined
    selected.push(keyedRows(b, r, narrow, at, end))
    at = end
  }
  for (const [i, kind] of kinds.entries()) {
    if (sql.readByFilter(kind)) continue
    const ranges = rowRanges(selected[i].sorted)
    if (ranges.length === 0) selected[i].ranges = 'FALSE'
    else if (ranges.length <= keyedPlan.maxRanges) {
      const rn = sql.rowNumber(kind.table, 'src')
      selected[i].ranges = ranges.map(([p, q]) => (p === q ? `${rn} = ${p}` : `${rn} BETWEEN ${p} AND ${q}`)).join(' OR ')
    } else {
      // Scattered rows: slices join them by row number through a temp table, as on the temp-table plan.
      await con.run(`CREATE OR REPLACE TEMP TABLE ${selName(kind)} AS ${selections[i]}`)
    }
  }
  const candidates: SelectedBlock[] = []
  if (known) {
    if (includeAllBlocks) {
      for (let n = from; n <= to; n++) candidates.push(selectedBlock(weights, includeAllBlocks, n, fixed))
    } else {
      // The blocks with items and the range's boundaries.
      for (const n of Float64Array.from(weights.keys()).sort()) candidates.push(selectedBlock(weights, includeAllBlocks, n, fixed))
      withBoundaries(candidates, from, to, (n) => selectedBlock(weights, includeAllBlocks, n, fixed))
    }
  } else {
    // The blocks the chunk has: with items, all of them for includeAllBlocks, the first and the last.
    for (let i = 0; i < headers; i++) {
      if (includeAllBlocks || weights.has(b[i]) || i === 0 || i === headers - 1) candidates.push(selectedBlock(weights, includeAllBlocks, b[i], w[i]))
    }
  }
  return new KeyedPlan(con, sql, texts, candidates, selected)
}

/*
 * The per-row work of statement 1 lives in module-level functions, not in closures made per
 * query: V8 keeps a closure's optimised code only while a closure of it lives, so closures made per
 * query were compiled again every few queries (with the slice's, 214 ms of compiling per 30 logs+tx
 * answers before, 91–115 ms after; docs/benchmark-history.md, step 49).
 */

/** Adds each row's weight `w` in `at..end` to its block's (`b`) total. */
function addWeights(weights: Map<number, number>, b: Float64Array, w: Float64Array, at: number, end: number): void {
  for (let j = at; j < end; j++) weights.set(b[j], (weights.get(b[j]) ?? 0) + w[j])
}

/** One kind's selected rows: those at `at..end` of statement 1's (ordered) rows. */
function keyedRows(b: Float64Array, r: Float64Array, narrow: Int32Array | undefined, at: number, end: number): KeyedRows {
  const { sorted, ranks } = sortedWithRanks(r.subarray(at, end))
  return { block: b.slice(at, end), sorted, ranks, narrow }
}

/** A candidate block: its header's weight and its items' (`weights`). */
function selectedBlock(weights: Map<number, number>, includeAllBlocks: boolean, number: number, headerWeight: number): SelectedBlock {
  const items = weights.get(number)
  return { number, weight: headerWeight + (items ?? 0), items: includeAllBlocks || items !== undefined }
}

/**
 * Which item rows (from `headers` on) are a row's first occurrence, by kind and row number; undefined
 * when no row is repeated.
 */
function firstOccurrences(k: Int32Array, r: Float64Array, headers: number): Uint8Array | undefined {
  const seen = new Set<number>()
  let keep: Uint8Array | undefined
  for (let i = headers; i < k.length; i++) {
    const id = k[i] * 2 ** 40 + r[i]
    if (!seen.has(id)) seen.add(id)
    else (keep ??= new Uint8Array(k.length).fill(1))[i] = 0
  }
  return keep
}

/** The temp table of a kind's rows when they lie in too many runs. */
const selName = (kind: ItemDecl) => ident(`sel_${kind.selector}`)

/**
 * Whether statement 1 may come unordered, to be put in order in JS by one number per row
 * (`orderInJs`): every kind has at most one key column, of an integer type, and (kind, block) fit
 * in 21 bits beside a 32-bit key. Its `ORDER BY` cost 1.4 ms of 7.7 for logs+tx
 * (docs/benchmark-history.md, step 33).
 */
function keysPack(sql: ChunkSql): boolean {
  if (!keyedPlan.jsOrder || (sql.to - sql.from + 1) * (sql.kinds.length + 1) >= 2 ** 21) return false
  return sql.kinds.every((kind) => kind.key.length === 0 || (kind.key.length === 1 && INTEGER_TYPES.has(sql.keyType(kind, kind.key[0]))))
}

/** Rank of a selected row by its row number (-1: not selected). */
function rankOf(rows: KeyedRows, r: number): number {
  const at = lowerBound(rows.sorted, r)
  return rows.sorted[at] === r ? rows.ranks[at] : -1
}

export class KeyedPlan implements ChunkPlan, RelatedRows {
  readonly rowNumbers = true

  constructor(
    private readonly con: Sql,
    private readonly sql: ChunkSql,
    private readonly texts: RowTexts,
    readonly candidates: SelectedBlock[],
    /** Rows of each kind (index as `kinds`). */
    private readonly keyed: KeyedRows[],
  ) {}

  get related(): RelatedRows {
    return this
  }

  ranges(kind: ItemDecl): string | undefined {
    return this.keyed[this.sql.kinds.indexOf(kind)].ranges
  }

  selection(kind: ItemDecl): string {
    return selName(kind)
  }

  /**
   * Statement 2 for blocks `lo..hi`: the rows unordered from DuckDB, each with its row number, then
   * put in order in JS: headers by block, items by their rank from statement 1.
   */
  async *slice(lo: number, hi: number, weight: number): AsyncGenerator<SliceRows> {
    const { sql, keyed } = this
    const kinds = sql.kinds
    const parts = [sql.headerPart(lo, hi, '0::BIGINT AS r', this.candidates)]
    const spans = kinds.map((_, i) => this.rankSpan(i, lo, hi))
    kinds.forEach((kind, i) => {
      if (spans[i][0] === spans[i][1]) return
      const part = (json: string, condition = '') => sql.itemPart(i, `${sql.rowNumber(kind.table, 'src')}::BIGINT AS r`, json, `${sql.source(kind, lo, hi, this)}${condition}`)
      const narrow = narrowColumns(sql.chunk, kind)
      const flags = keyed[i].narrow?.subarray(spans[i][0], spans[i][1])
      if (narrow.length === 0 || !flags) parts.push(part(sql.itemJson(kind)))
      else parts.push(...narrowParts(narrow, flags, part, (stored) => sql.itemJson(kind, stored)))
    })
    const statement = parts.join(' UNION ALL ')
    const headerBlocks: number[] = []
    const headers: number[] = []
    const items = spans.map(([a, b]) => new Int32Array(b - a).fill(-1))
    // JS holds every row until they are ordered, so streaming saves DuckDB's copy only: a
    // materialised result up to 4 MiB (measured p10 14.9 against 15.7 ms streamed for logs+tx).
    const chunks = await sliceChunks(this.con, statement, weight > 4 * SMALL_SLICE)
    await eachSliceRow(chunks, this.texts, (block, json) => {
      headerBlocks.push(block)
      headers.push(json)
    }, (i, _block, r, json) => {
      const rank = rankOf(keyed[i], r)
      if (rank < spans[i][0] || rank >= spans[i][1]) throw new Error(`row ${r} of ${kinds[i].selector} was not selected for blocks ${lo}..${hi}`)
      items[i][rank - spans[i][0]] = json
    })
    yield interleave(kinds, headerBlocks, headers, spans.map(([a, b], i) => ({ block: keyed[i].block.subarray(a, b), json: items[i] })), lo, hi)
  }

  /** Ranks `[first, end)` of a kind's selected rows in blocks `lo..hi` (ranks follow the block order). */
  private rankSpan(kindIndex: number, lo: number, hi: number): [number, number] {
    const blocks = this.keyed[kindIndex].block
    const first = lowerBound(blocks, lo)
    return [first, lowerBound(blocks, hi + 1, first)]
  }
}
