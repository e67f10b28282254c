import path from 'node:path'
import type { DuckDBDataChunk } from '@duckdb/node-api'
import type { Sql } from './lazy-connection.js'
import { ident, lit } from '../db.js'
import type { ItemDecl } from '../families/declaration.js'
import { tableOf } from '../families/declaration.js'
import { unfiltered, type QueryPlan, type ScanPlan } from './plan.js'
import type { HeldChunk } from './types.js'
import { bigintColumn, bigintNumbers, integerColumn, integerNumbers, varcharBytes } from './raw-rows.js'
import type { RowTexts } from './row-texts.js'
import { chunkIsDense } from './summary.js'
import { cachedHeader, keepHeader } from './header-cache.js'
import { NARROW_FLAG, NARROW_SUFFIX } from '../storage/local-forms.js'
import { filterSql, itemJsonSql, outputFields, relationJoinSql, relationSourceColumns, weightParts, weightSql } from './sql.js'

/*
 * One query over one chunk, in DuckDB, in separate short statements (measured: a semi join per
 * step is ~10× faster than one statement of CTEs). Two plans.
 *
 * The keyed plan (`prepareKeyed`, `keyedSlice`), for every query whose requests all have a
 * condition and select at most `keyedPlan.maxRows` rows in the chunk — two statements:
 *   1. kind, block, output weight and row number of every selected row → JS, ordered by kind,
 *      block and key (in JS when the keys allow, `keysPack`; a relation joins its request's matched
 *      rows as a subquery; in a chunk that lacks blocks or whose header weight depends on columns,
 *      the blocks with their header weight come along). The candidate blocks and their weights follow in JS: no temp table, no
 *      statement of their own.
 *   2. per slice of blocks, each row's JSON text built inside DuckDB with its row number, unordered;
 *      JS puts the rows in order by their rank from statement 1. A kind pulled in by a relation is
 *      read by its row-number runs (few runs: the local form skips the vectors, Parquet the pages,
 *      that hold none); rows in more than `keyedPlan.maxRanges` runs are joined through a temp table
 *      sel_<kind>, one more statement. In a local form with narrow copies of wide columns
 *      (`narrowCopies` in local-forms.ts), statement 1 also reads each row's flag, and a kind's
 *      flagged rows are read from the copies, its other rows from the columns (one part each).
 *
 * The temp-table plan, for the rest (a request without conditions, a bigger selection):
 *   1. rows matched by requests with relation flags → temp table m<scan>;
 *   2. per item kind, keys, output weight and Parquet row number of the selected rows → temp table
 *      sel_<kind> (or the m table of step 1 when that is all that selects the kind; a kind that the
 *      slices read again by its own filters needs it for step 3 only: a subquery there);
 *   3. the blocks to return with their estimated weight → read into JS (in a chunk that holds every
 *      block, from the temp tables alone);
 *   4. per slice of blocks, each row's JSON text built inside DuckDB, ordered by block, kind and
 *      key, streamed to JS as raw bytes. A kind read whole (a request without conditions) reads the
 *      local form's block-ordered copy of its table; when every kind does, the slice has no
 *      `ORDER BY` and JS places each kind's rows after their block's header (`orderedSlice`).
 */

export interface SelectedBlock {
  number: number
  /** Estimated JSON size of the block with its items. */
  weight: number
  /** Has items (or is returned for includeAllBlocks): not merely a range boundary. */
  items: boolean
}

/** Estimated JSON size below which a slice is read as a materialised result. */
const SMALL_SLICE = 1024 * 1024

/**
 * Limits of the keyed plan (`prepareKeyed`); tests lower them to run the other paths.
 * - `maxRows`: most selected rows read into JS; a query selecting more runs with temp tables.
 * - `maxRanges`: most row-number runs a related kind's rows are read by; rows in more runs are
 *   joined through a temp table. Each run costs ≈ 0.1 ms (an OR of BETWEENs, measured with 5–64).
 * - `jsOrder`: statement 1 comes unordered and JS orders it, where the kinds' keys allow
 *   (`keysPack`); false: DuckDB's `ORDER BY` always.
 */
export const keyedPlan = { maxRows: 16384, maxRanges: 16, jsOrder: true }

/** Candidate blocks named in a slice's header read; more are read as a range. */
const MAX_IN_LIST = 16

/** Rows of a slice: block number, kind (0 = header, i > 0 = the plan's kinds[i-1]) and JSON text. */
export interface SliceRows {
  block: ArrayLike<number>
  kind: ArrayLike<number>
  /** Each row's JSON: a row of the answer's `RowTexts`. */
  json: ArrayLike<number>
}

/** Where a chunk's tables are read: its Parquet folder, or the worker's local form of it. */
export type ChunkSource = Pick<HeldChunk, 'dir' | 'local'>

/** Values of long filter lists live in per-query temp tables; this creates them once. */
export type ValueTables = (values: unknown[]) => string

export class ChunkRun {
  private readonly kinds: ItemDecl[]
  /** Block-number column of the header table (`number`). */
  private readonly blockCol: string

  constructor(
    private readonly con: Sql,
    private readonly plan: QueryPlan,
    private readonly chunk: ChunkSource,
    /** Inclusive block range of this chunk that the query covers. */
    readonly from: number,
    readonly to: number,
    private readonly valueTable: ValueTables,
    /** The answer's row texts, which slices' rows are (its slabs). */
    private readonly texts: RowTexts,
  ) {
    this.kinds = plan.kinds
    this.blockCol = tableOf(plan.family, plan.family.header.table).blockColumn
  }

  /** A table of the chunk as an SQL source; with `rowNumbers`, with the row numbers `rowNumber` names. */
  private file(table: string, rowNumbers = false): string {
    const local = this.chunk.local?.(table)
    if (local) return local
    return `read_parquet(${lit(path.join(this.chunk.dir, `${table}.parquet`))}${rowNumbers ? ', file_row_number = true' : ''})`
  }

  /**
   * A row's number in its Parquet file: the local form keeps the file's row order, so there it is
   * the rowid (a direct column, not a projection over every column: measured 0.4–0.8 ms less
   * planning per statement).
   */
  private rowNumber(table: string, alias: string): string {
    return `${alias}.${this.chunk.local?.(table) ? 'rowid' : 'file_row_number'}`
  }

  /** Columns of a kind's table with a narrow copy in the local form (none when reading Parquet). */
  private narrow(kind: ItemDecl): readonly string[] {
    return this.chunk.local?.narrow(kind.table) ?? []
  }

  private selected(item: ItemDecl): string[] {
    return this.plan.fields[item.selector] ?? []
  }

  /** Block-number column of an item's table (temp tables call it `block_number` whatever the table does). */
  private blockColumn(item: ItemDecl): string {
    return tableOf(this.plan.family, item.table).blockColumn
  }

  /** `alias.<block column> AS block_number, alias.<key>, …` */
  private keySelect(item: ItemDecl, alias: string, extra: string[] = []): string {
    const block = `${alias}.${ident(this.blockColumn(item))} AS block_number`
    const rest = [...new Set([...item.key, ...extra])].filter((c) => c !== 'block_number')
    return [block, ...rest.map((c) => `${alias}.${ident(c)}`)].join(', ')
  }

  private range(alias: string, column: string): string {
    return `${alias}.${ident(column)} BETWEEN ${this.from} AND ${this.to}`
  }

  private where(scan: ScanPlan, alias: string): string {
    const conds = [this.range(alias, this.blockColumn(scan.item))]
    for (const [column, value] of Object.entries(scan.request.where ?? {})) {
      conds.push(`${alias}.${ident(column)} = ${typeof value === 'number' ? String(value) : lit(value)}`)
    }
    for (const [name, value] of Object.entries(scan.filters)) {
      const c = filterSql(scan.request.filters[name], value, alias, this.valueTable)
      if (c) conds.push(c)
    }
    return conds.join(' AND ')
  }

  /** Kinds whose selected rows are exactly a temp table of step 1 (no statement of their own). */
  private readonly selAlias = new Map<ItemDecl, string>()

  private selName(item: ItemDecl): string {
    return this.selAlias.get(item) ?? ident(`sel_${item.selector}`)
  }

  /** The chunk summaries say no request can match here: only boundary headers are read. */
  private ruledOut = false

  /**
   * Steps 1–3. Returns the candidate blocks, ascending. With `ruledOut` (from the chunk summaries)
   * steps 1–2 are skipped and no item is read.
   */
  async prepare(includeAllBlocks: boolean, ruledOut = false): Promise<SelectedBlock[]> {
    this.ruledOut = ruledOut
    const header = this.plan.family.header
    if (ruledOut && !includeAllBlocks && (await chunkIsDense(this.con, this.chunk.dir, header.table, this.blockCol))) {
      // Nothing can match: the answer holds at most the range's first and last blocks.
      const numbers = this.from === this.to ? [this.from] : [this.from, this.to]
      const json = await this.headers(numbers)
      this.candidates = numbers.map((number, i) => ({ number, weight: json[i].length, items: false }))
      this.headerJson = new Map(numbers.map((n, i) => [n, json[i]]))
      return this.candidates
    }
    const kinds = ruledOut ? [] : this.kinds
    this.keyed = undefined
    if (kinds.length > 0 && keyedPlan.maxRows >= 0 && !this.plan.scans.some(unfiltered)) {
      const blocks = await this.prepareKeyed(includeAllBlocks)
      if (blocks) return blocks
    }
    // 1. matched rows of requests that pull related items
    for (const scan of ruledOut ? [] : this.plan.scans) {
      if (scan.relations.length === 0) continue
      const select = this.keySelect(scan.item, 'src', scan.relations.flatMap((r) => relationSourceColumns(r.decl)))
      await this.con.run(
        `CREATE OR REPLACE TEMP TABLE m${scan.id} AS SELECT ${select}, ${weightSql(scan.item, this.selected(scan.item), 'src')} AS w, ` +
          `${this.rowNumber(scan.item.table, 'src')} AS r FROM ${this.file(scan.item.table, true)} src WHERE ${this.where(scan, 'src')}`,
      )
    }
    // 2. selected keys per kind
    for (const kind of kinds) {
      const { parts, only } = this.selectionParts(kind, (scan) => `m${scan.id}`)
      // One request with relation flags and nothing else selects this kind: its m table is the selection.
      this.selAlias.delete(kind)
      if (parts.length === 1 && only) {
        this.selAlias.set(kind, only)
        continue
      }
      // A kind read again by its filters in the slices needs its selection for the block weights
      // only: a subquery of that statement, no temp table.
      if (this.readByFilter(kind)) {
        this.selAlias.set(kind, `(${parts.join(' UNION ')})`)
        continue
      }
      await this.con.run(`CREATE OR REPLACE TEMP TABLE ${this.selName(kind)} AS ${parts.join(' UNION ')}`)
    }
    // 3. blocks: with items, the range boundaries, or all of them
    const blockCol = ident(this.blockCol)
    const itemWeights = kinds.map((k) => `SELECT block_number, w FROM ${this.selName(k)}`).join(' UNION ALL ')
    const items = kinds.length ? `LEFT JOIN (SELECT block_number, sum(w) AS iw FROM (${itemWeights}) GROUP BY block_number) s ON s.block_number = b.${blockCol}` : ''
    const iw = kinds.length ? 's.iw' : 'NULL'
    // Read straight into JS (one statement, no temp table): slices name the blocks they need. When
    // no item is read, the headers' JSON comes along and the slices need no statement at all.
    const headersOnly = kinds.length === 0
    const headerWeight = weightSql(header, this.selected(header), 'b')
    const { fixed: headerFixed, columns: headerWeightColumns } = weightParts(header, this.selected(header))
    // In a chunk that holds every block of its range, the blocks need not be read unless their
    // weight depends on their columns: the boundaries are `from` and `to` (one Parquet file and
    // 1–2 ms less per chunk).
    const known = !headersOnly && headerWeightColumns.length === 0 && (await chunkIsDense(this.con, this.chunk.dir, header.table, this.blockCol))
    let sql: string
    if (known && !includeAllBlocks) {
      sql =
        `SELECT block_number::BIGINT AS number, (${headerWeight} + sum(w))::BIGINT AS w, 1 AS items FROM (${itemWeights}) ` +
        `WHERE block_number BETWEEN ${this.from} AND ${this.to} GROUP BY block_number ORDER BY number`
    } else {
      const blocks = known ? `(SELECT range AS ${blockCol} FROM range(${this.from}, ${this.to + 1}))` : this.file(header.table)
      const x =
        `SELECT b.${blockCol}::BIGINT AS number, (${headerWeight} + coalesce(${iw}, 0))::BIGINT AS w, ` +
        `(${includeAllBlocks ? 'TRUE' : `${iw} IS NOT NULL`})::INTEGER AS items` +
        `${headersOnly ? `, ${this.headerText('b')} AS j` : ''} ` +
        `FROM ${blocks} b ${items} WHERE ${this.range('b', this.blockCol)}`
      sql = includeAllBlocks
        ? `${x} ORDER BY number`
        : `WITH x AS (${x}) SELECT * FROM x WHERE items = 1 OR number = (SELECT min(number) FROM x) OR number = (SELECT max(number) FROM x) ORDER BY number`
    }
    const numbers: number[] = []
    const weights: number[] = []
    const hasItems: number[] = []
    const json: Uint8Array[] = []
    // Materialised (`run`): for a few hundred rows a streaming result costs milliseconds more.
    for (const chunk of await (await this.con.run(sql)).fetchAllChunks()) {
      bigintNumbers(chunk, 0, numbers)
      bigintNumbers(chunk, 1, weights)
      integerNumbers(chunk, 2, hasItems)
      if (headersOnly) varcharBytes(chunk, 3, json)
    }
    this.candidates = numbers.map((number, i) => ({ number, weight: weights[i], items: hasItems[i] === 1 }))
    if (known && !includeAllBlocks) {
      const bare = (number: number): SelectedBlock => ({ number, weight: headerFixed, items: false })
      if (this.candidates[0]?.number !== this.from) this.candidates.unshift(bare(this.from))
      if (this.candidates[this.candidates.length - 1].number !== this.to) this.candidates.push(bare(this.to))
    }
    this.headerJson = headersOnly ? new Map(numbers.map((n, i) => [n, json[i]])) : undefined
    return this.candidates
  }

  /**
   * The SELECTs whose UNION is the selection of a kind: `block_number`, its key columns, output
   * weight `w` and row number `r` of each row. `matched(scan)` names the matched rows of a request
   * with relation flags (its m table, or the same rows as a subquery); `only` is that name when it
   * alone selects the kind.
   */
  private selectionParts(kind: ItemDecl, matched: (scan: ScanPlan) => string, direct = false, flag = false): { parts: string[]; only?: string } {
    const keyList = (alias: string) =>
      alias === 'm' ? ['block_number', ...kind.key].map((c) => `m.${ident(c)}`).join(', ') : this.keySelect(kind, alias)
    // With `flag`, also `x`: the row's values are in narrow copies (local form; see `keyedSlice`).
    const w = weightSql(kind, this.selected(kind), 't')
    const x = flag ? `, ${this.narrow(kind).length ? `t.${ident(NARROW_FLAG)}` : 'FALSE'} AS x` : ''
    const parts: string[] = []
    let only: string | undefined
    for (const scan of this.plan.scans) {
      if (scan.item === kind) {
        const viaM = scan.relations.length > 0 && !direct
        only = viaM ? matched(scan) : undefined
        parts.push(
          viaM
            ? `SELECT ${keyList('m')}, m.w, m.r FROM ${matched(scan)} m`
            : `SELECT ${keyList('t')}, ${w} AS w, ${this.rowNumber(kind.table, 't')} AS r${x} FROM ${this.file(kind.table, true)} t WHERE ${this.where(scan, 't')}`,
        )
      }
      for (const rel of scan.relations) {
        if (rel.target !== kind) continue
        parts.push(
          `SELECT ${keyList('t')}, ${w} AS w, ${this.rowNumber(kind.table, 't')} AS r${x} FROM ${this.file(kind.table, true)} t SEMI JOIN ${matched(scan)} m ` +
            `ON ${relationJoinSql(rel.decl, this.blockColumn(kind))} WHERE ${this.range('t', this.blockColumn(kind))}`,
        )
      }
    }
    return { parts, only }
  }

  /** The rows a request with relation flags matches, as a subquery (the columns of its m table that relations read). */
  private matchedRows(scan: ScanPlan): string {
    const select = this.keySelect(scan.item, 'src', scan.relations.flatMap((r) => relationSourceColumns(r.decl)))
    return `(SELECT ${select} FROM ${this.file(scan.item.table)} src WHERE ${this.where(scan, 'src')})`
  }

  /**
   * Steps 1–3 of the keyed plan (see the top of the file): the selected rows' keys into JS, the
   * candidate blocks from them. Undefined, with nothing kept, when the chunk selects more than
   * `keyedPlan.maxRows` rows (the temp-table plan takes over; the statement read at most one row
   * more).
   */
  private async prepareKeyed(includeAllBlocks: boolean): Promise<SelectedBlock[] | undefined> {
    const header = this.plan.family.header
    const { fixed, columns } = weightParts(header, this.selected(header))
    // In a chunk that holds every block of its range, with header weights known without reading
    // them, the blocks need not be read (as in step 3).
    const known = columns.length === 0 && (await chunkIsDense(this.con, this.chunk.dir, header.table, this.blockCol))
    const order = this.orderColumns()
    // Each kind's selection, as a UNION (also the temp table of a kind whose rows lie in many runs, below).
    // A local form with narrow copies of wide columns: each row's flag comes along (as x).
    const flag = this.kinds.some((kind) => this.narrow(kind).length > 0)
    const selections = this.kinds.map((kind) => this.selectionParts(kind, (scan) => this.matchedRows(scan), true, flag).parts.join(' UNION '))
    const xColumn = flag ? ', x::INTEGER AS x' : ''
    // Kinds with at most one integer key are put in order in JS (`orderInJs`); others by DuckDB.
    const inJs = this.keysPack()
    const keyColumns = (i: number, key?: string) => (inJs ? `${key ? `${ident(key)}::BIGINT` : '0::BIGINT'} AS q` : order.columns(i, ''))
    const parts = selections.map((selection, i) =>
      `SELECT ${i} AS k, block_number::BIGINT AS b, w::BIGINT AS w, r::BIGINT AS r${xColumn}, ${keyColumns(i, this.kinds[i].key[0])} FROM (${selection})`)
    // The LIMIT first: a selection too big for this plan is given up after maxRows + 1 rows.
    let rows = `${parts.join(' UNION ALL ')} LIMIT ${keyedPlan.maxRows + 1}`
    if (!known) {
      // The blocks with their header weight, as kind -1.
      const blockCol = ident(this.blockCol)
      rows = `(${rows}) UNION ALL SELECT -1, t.${blockCol}::BIGINT, (${weightSql(header, this.selected(header), 't')})::BIGINT, 0${flag ? ', 0' : ''}, ${inJs ? '0' : order.columns(-1, '')} ` +
        `FROM ${this.file(header.table)} t WHERE ${this.range('t', this.blockCol)}`
    }
    const sql = inJs
      ? `SELECT k, b, w, r${flag ? ', x' : ''}, q FROM (${rows})`
      : `SELECT k, b, w, r${flag ? ', x' : ''} FROM (${rows}) ORDER BY k, b${order.names.map((n) => `, ${n}`).join('')}`
    const chunks = await (await this.con.run(sql)).fetchAllChunks()
    const int = (col: number) => concatTyped(chunks.map((c) => integerColumn(c, col)), (n) => new Int32Array(n))
    const big = (col: number) => concatTyped(chunks.map((c) => bigintColumn(c, col)), (n) => new Float64Array(n))
    let k = int(0)
    let b = big(1)
    let w = big(2)
    let r = big(3)
    let x = flag ? int(4) : undefined
    if (inJs) {
      const at = orderInJs(k, b, big(flag ? 5 : 4), this.from, this.to, this.kinds.length)
      ;[k, b, w, r] = [permute(k, at), permute(b, at), permute(w, at), permute(r, at)]
      if (x) x = permute(x, at)
    }
    const headers = lowerBound(k, 0)
    if (k.length - headers > keyedPlan.maxRows) return undefined
    const weights = new Map<number, number>()
    const selected: KeyedRows[] = this.kinds.map((_, i) => {
      // Rows arrive ordered by kind: each kind's are one stretch.
      const at = lowerBound(k, i, headers)
      const end = lowerBound(k, i + 1, at)
      const rows = keyedRows(b.subarray(at, end), r.subarray(at, end), this.narrow(this.kinds[i]).length ? x?.subarray(at, end) : undefined)
      for (let j = at; j < end; j++) weights.set(b[j], (weights.get(b[j]) ?? 0) + w[j])
      return rows
    })
    this.keyed = selected
    this.selAlias.clear()
    for (const [i, kind] of this.kinds.entries()) {
      if (this.readByFilter(kind)) continue
      const ranges = rowRanges(selected[i].sorted)
      if (ranges.length === 0) selected[i].ranges = 'FALSE'
      else if (ranges.length <= keyedPlan.maxRanges) {
        const r = this.rowNumber(kind.table, 'src')
        selected[i].ranges = ranges.map(([x, y]) => (x === y ? `${r} = ${x}` : `${r} BETWEEN ${x} AND ${y}`)).join(' OR ')
      } else {
        // Scattered rows: slices join them by row number through a temp table, as on the temp-table plan.
        await this.con.run(`CREATE OR REPLACE TEMP TABLE ${this.selName(kind)} AS ${selections[i]}`)
      }
    }
    const block = (number: number, headerWeight: number): SelectedBlock => {
      const items = weights.get(number)
      return { number, weight: headerWeight + (items ?? 0), items: includeAllBlocks || items !== undefined }
    }
    if (known) {
      if (includeAllBlocks) {
        this.candidates = []
        for (let n = this.from; n <= this.to; n++) this.candidates.push(block(n, fixed))
      } else {
        // The blocks with items and the range's boundaries.
        this.candidates = [...weights.keys()].sort((x, y) => x - y).map((n) => block(n, fixed))
        if (this.candidates[0]?.number !== this.from) this.candidates.unshift(block(this.from, fixed))
        if (this.candidates[this.candidates.length - 1].number !== this.to) this.candidates.push(block(this.to, fixed))
      }
    } else {
      // The blocks the chunk has: with items, all of them for includeAllBlocks, the first and the last.
      this.candidates = []
      for (let i = 0; i < headers; i++) {
        if (includeAllBlocks || weights.has(b[i]) || i === 0 || i === headers - 1) this.candidates.push(block(b[i], w[i]))
      }
    }
    return this.candidates
  }

  /**
   * Step 4 on the keyed plan: the rows of blocks `lo..hi` unordered from DuckDB, each with its row
   * number, then put in order in JS: headers by block, items by their rank from `prepareKeyed`.
   */
  private async *keyedSlice(lo: number, hi: number, weight: number): AsyncGenerator<SliceRows> {
    const parts = [this.headerPart(lo, hi, '0::BIGINT AS r')]
    const spans = this.kinds.map((_, i) => this.rankSpan(i, lo, hi))
    this.kinds.forEach((kind, i) => {
      if (spans[i][0] === spans[i][1]) return
      const part = (json: string, flag = '') =>
        `SELECT src.${ident(this.blockColumn(kind))}::BIGINT AS b, ${i + 1} AS k, ${this.rowNumber(kind.table, 'src')}::BIGINT AS r, ${json} AS j FROM ${this.source(kind, lo, hi)}${flag}`
      const narrow = this.narrow(kind)
      const flags = this.keyed![i].narrow?.subarray(spans[i][0], spans[i][1])
      if (narrow.length === 0 || !flags) {
        parts.push(part(this.itemJson(kind)))
        return
      }
      // A local form with narrow copies of wide columns (see narrowCopies in local-forms.ts): the
      // flagged rows read the copies, so that their vectors' wide strings are not decoded; the
      // others read the columns themselves. Each part only when the slice has such rows.
      const copies = new Set(narrow)
      const flag = `src.${ident(NARROW_FLAG)}`
      if (flags.includes(1)) parts.push(part(this.itemJson(kind, (c) => (copies.has(c) ? c + NARROW_SUFFIX : c)), ` AND ${flag}`))
      if (flags.includes(0)) parts.push(part(this.itemJson(kind), ` AND NOT ${flag}`))
    })
    const sql = parts.join(' UNION ALL ')
    const headerBlocks: number[] = []
    const headers: number[] = []
    const items = spans.map(([a, b]) => new Int32Array(b - a).fill(-1))
    // JS holds every row until they are ordered, so streaming saves DuckDB's copy only: a
    // materialised result up to 4 MiB (measured p10 14.9 against 15.7 ms streamed for logs+tx).
    const chunks = weight > 4 * SMALL_SLICE ? await this.con.stream(sql) : await (await this.con.run(sql)).fetchAllChunks()
    await eachSliceRow(chunks, this.texts, (block, json) => {
      headerBlocks.push(block)
      headers.push(json)
    }, (i, _block, r, json) => {
      const rank = rankOf(this.keyed![i], r)
      if (rank < spans[i][0] || rank >= spans[i][1]) throw new Error(`row ${r} of ${this.kinds[i].selector} was not selected for blocks ${lo}..${hi}`)
      items[i][rank - spans[i][0]] = json
    })
    yield this.interleave(headerBlocks, headers, spans.map(([a, b], i) => ({ block: this.keyed![i].block.subarray(a, b), json: items[i] })), lo, hi)
  }

  /**
   * A slice's rows in the answer's order, from its headers (in any order) and each kind's rows
   * ordered by block: each header, then its block's rows of each kind.
   */
  private interleave(headerBlocks: number[], headers: number[], kinds: { block: ArrayLike<number>; json: ArrayLike<number> }[], lo: number, hi: number): SliceRows {
    // Headers come in the header table's order, by block as a rule.
    let order = headerBlocks.map((_, i) => i)
    if (headerBlocks.some((b, i) => i > 0 && b < headerBlocks[i - 1])) order = order.sort((x, y) => headerBlocks[x] - headerBlocks[y])
    const total = headers.length + kinds.reduce((n, k) => n + k.json.length, 0)
    const rows = { block: new Float64Array(total), kind: new Int32Array(total), json: new Int32Array(total) }
    let at = 0
    const next = kinds.map(() => 0)
    for (const h of order) {
      const b = headerBlocks[h]
      rows.block[at] = b
      rows.kind[at] = 0
      rows.json[at++] = headers[h]
      kinds.forEach(({ block, json }, i) => {
        for (; next[i] < json.length && block[next[i]] === b; next[i]++) {
          const row = json[next[i]]
          if (row < 0) throw new Error(`row of ${this.kinds[i].selector} in block ${b} missing from its slice`)
          rows.block[at] = b
          rows.kind[at] = i + 1
          rows.json[at++] = row
        }
      })
    }
    // Every block with items has its header (the header part reads every candidate block).
    if (at !== total) throw new Error(`${total - at} rows of blocks ${lo}..${hi} without their block's header`)
    return rows
  }

  /**
   * Step 4 when every kind of the query is read whole from its block-ordered copy in the local form
   * (`blockOrdered`): no `ORDER BY`. The rows of each kind come in the copy's order (checked by rowid,
   * put in order when a parallel scan mixed them) and JS places them after their block's header.
   */
  private async *orderedSlice(lo: number, hi: number, weight: number): AsyncGenerator<SliceRows> {
    const parts = [this.headerPart(lo, hi, '0::BIGINT AS r')]
    this.kinds.forEach((kind, i) => {
      parts.push(`SELECT src.${ident(this.blockColumn(kind))}::BIGINT AS b, ${i + 1} AS k, src.rowid::BIGINT AS r, ${this.itemJson(kind)} AS j FROM ${this.source(kind, lo, hi)}`)
    })
    const headerBlocks: number[] = []
    const headers: number[] = []
    const rows = this.kinds.map(() => ({ block: [] as number[], r: [] as number[], json: [] as number[] }))
    const sql = parts.join(' UNION ALL ')
    const chunks = weight > SMALL_SLICE ? await this.con.stream(sql) : await (await this.con.run(sql)).fetchAllChunks()
    await eachSliceRow(chunks, this.texts, (block, json) => {
      headerBlocks.push(block)
      headers.push(json)
    }, (i, block, r, json) => {
      rows[i].block.push(block)
      rows[i].r.push(r)
      rows[i].json.push(json)
    })
    yield this.interleave(headerBlocks, headers, rows.map(inCopyOrder), lo, hi)
  }

  /**
   * The block-ordered copy (local form) that a kind is read from whole: the kind is selected by an
   * unfiltered request of its own (no relation reads into it), so a slice takes every row of its
   * blocks. Undefined otherwise.
   */
  private blockOrdered(kind: ItemDecl): string | undefined {
    if (this.ruledOut || !this.readByFilter(kind) || !this.plan.scans.some((s) => s.item === kind && unfiltered(s))) return undefined
    return this.chunk.local?.byBlock(kind.table)
  }

  /** Ranks `[first, end)` of a kind's selected rows in blocks `lo..hi` (keyed plan; ranks follow the block order). */
  private rankSpan(kindIndex: number, lo: number, hi: number): [number, number] {
    const blocks = this.keyed![kindIndex].block
    const first = lowerBound(blocks, lo)
    return [first, lowerBound(blocks, hi + 1, first)]
  }

  /**
   * Whether the keyed plan's first statement may come unordered, to be put in order in JS by one
   * number per row (`orderInJs`): every kind has at most one key column, of an integer type, and
   * (kind, block) fit in 21 bits beside a 32-bit key. Its `ORDER BY` cost 1.4 ms of 7.7 for logs+tx
   * (docs/benchmark-history.md, step 33).
   */
  private keysPack(): boolean {
    if (!keyedPlan.jsOrder || (this.to - this.from + 1) * (this.kinds.length + 1) >= 2 ** 21) return false
    return this.kinds.every((kind) => kind.key.length === 0 || (kind.key.length === 1 && INTEGER_TYPES.has(this.keyType(kind, kind.key[0]))))
  }

  /** DuckDB type of a kind's key column. */
  private keyType(kind: ItemDecl, column: string): string {
    const type = tableOf(this.plan.family, kind.table).columns.find((c) => c.name === column)?.type
    if (!type) throw new Error(`key column ${column} of ${kind.selector} is not declared`)
    return type
  }

  /** Rows of each kind selected in `prepareKeyed` (index as `kinds`); undefined on the temp-table plan. */
  private keyed?: KeyedRows[]

  /** Header JSON of the candidate blocks, when `prepare` read it (no item kinds to read). */
  private headerJson?: Map<number, Uint8Array>

  /** Candidate blocks from `prepare`, ascending. */
  private candidates: SelectedBlock[] = []

  /**
   * Step 4 for blocks `lo..hi` (of the candidates): header and item rows ordered by block, then kind
   * (0 = header, i > 0 = `kinds[i-1]`), then key, as they come from DuckDB (2,048 rows at a time).
   * Ordering the rows in DuckDB costs next to nothing; aggregating them per block cost 20–40 %.
   */
  async *slice(lo: number, hi: number, weight: number): AsyncGenerator<SliceRows> {
    if (this.headerJson) {
      const rows = { block: [] as number[], kind: [] as number[], json: [] as number[] }
      for (const b of this.candidates) {
        if (b.number < lo || b.number > hi) continue
        rows.block.push(b.number)
        rows.kind.push(0)
        rows.json.push(this.texts.add(this.headerJson.get(b.number)!))
      }
      yield rows
      return
    }
    if (this.keyed) {
      yield* this.keyedSlice(lo, hi, weight)
      return
    }
    if (this.kinds.length > 0 && this.kinds.every((kind) => this.blockOrdered(kind))) {
      yield* this.orderedSlice(lo, hi, weight)
      return
    }
    const order = this.orderColumns()
    const parts = [this.headerPart(lo, hi, order.columns(-1))]
    if (!this.ruledOut) this.kinds.forEach((kind, i) => {
      parts.push(`SELECT src.${ident(this.blockColumn(kind))}::BIGINT AS b, ${i + 1} AS k, ${order.columns(i)}, ${this.itemJson(kind)} AS j FROM ${this.source(kind, lo, hi)}`)
    })
    const sql = `SELECT b, k, j FROM (${parts.join(' UNION ALL ')}) ORDER BY b, k${order.names.map((n) => `, ${n}`).join('')}`
    // A streaming result costs a few ms more than a materialised one; only big slices need it.
    const chunks = weight > SMALL_SLICE ? await this.con.stream(sql) : await (await this.con.run(sql)).fetchAllChunks()
    for await (const chunk of chunks) {
      const json: number[] = []
      this.texts.copyColumn(chunk, 2, json)
      yield { block: bigintColumn(chunk, 0), kind: integerColumn(chunk, 1), json }
    }
  }

  /** The items of one kind in one block, one `,{…}` text per row (for blocks too big for a slice). */
  async *rows(kindIndex: number, block: number): AsyncGenerator<Uint8Array> {
    if (this.ruledOut) return
    const kind = this.kinds[kindIndex]
    const order = kind.key.length ? ` ORDER BY ${kind.key.map((c) => `src.${ident(c)}`).join(', ')}` : ''
    const result = await this.con.stream(`SELECT ${this.itemJson(kind)} FROM ${this.source(kind, block, block)}${order}`)
    for await (const chunk of result) {
      const rows: Uint8Array[] = []
      varcharBytes(chunk, 0, rows)
      yield* rows
    }
  }

  /** The header JSON of one block. */
  async header(block: number): Promise<Uint8Array> {
    return this.headerJson?.get(block) ?? (await this.headers([block]))[0]
  }

  /** Header JSON of existing blocks, kept in memory for the next query (see header-cache.ts). */
  private async headers(blocks: number[]): Promise<Uint8Array[]> {
    const header = this.plan.family.header
    const fields = outputFields(header, this.selected(header)).join(',')
    const found = new Map<number, Uint8Array>()
    for (const b of blocks) {
      const json = cachedHeader(this.chunk.dir, b, fields)
      if (json) found.set(b, json)
    }
    const missing = blocks.filter((b) => !found.has(b))
    if (missing.length > 0) {
      const blockCol = ident(this.blockCol)
      const result = await this.con.run(
        `SELECT src.${blockCol}::BIGINT, ${this.headerText('src')} FROM ${this.file(header.table)} src WHERE src.${blockCol} IN (${missing.join(', ')})`,
      )
      for (const chunk of await result.fetchAllChunks()) {
        const numbers: number[] = []
        const json: Uint8Array[] = []
        bigintNumbers(chunk, 0, numbers)
        varcharBytes(chunk, 1, json)
        numbers.forEach((n, i) => {
          found.set(n, json[i])
          keepHeader(this.chunk.dir, n, fields, json[i])
        })
      }
    }
    return blocks.map((b) => {
      const json = found.get(b)
      if (!json) throw new Error(`block ${b} is not in chunk ${this.chunk.dir}`)
      return json
    })
  }

  /**
   * ` AND <column> IN (…)` naming the candidate blocks in `lo..hi`, when there are few of them; with
   * many, nothing (the writer passes over the other headers): a long IN list cost more than building
   * every header's JSON of the range (measured 3.1 against 1.3 ms for 160 of 200 blocks).
   */
  private candidatesIn(column: string, lo: number, hi: number): string {
    const list = this.candidates.filter((b) => b.number >= lo && b.number <= hi).map((b) => b.number)
    if (list.length > MAX_IN_LIST) return ''
    return ` AND ${column} IN (${list.length ? list.join(', ') : 'NULL'})`
  }

  /** A slice's header rows, `b, 0 AS k, <columns>, j`, of the candidate blocks in `lo..hi`. */
  private headerPart(lo: number, hi: number, columns: string): string {
    const blockCol = `src.${ident(this.blockCol)}`
    return (
      `SELECT ${blockCol}::BIGINT AS b, 0 AS k, ${columns}, ${this.headerText('src')} AS j ` +
      `FROM ${this.file(this.plan.family.header.table)} src WHERE ${blockCol} BETWEEN ${lo} AND ${hi}${this.candidatesIn(blockCol, lo, hi)}`
    )
  }

  /** A header row's JSON text. */
  private headerText(alias: string): string {
    return itemJsonSql(this.plan.family.header, this.selected(this.plan.family.header), alias)
  }

  /** An item row's JSON after a comma: `,{…}` (the engine drops the comma of a block's first item). */
  private itemJson(kind: ItemDecl, stored?: (column: string) => string): string {
    return itemJsonSql(kind, this.selected(kind), 'src', ',', stored)
  }

  /**
   * Columns that order a slice's rows within a block: one per key column of each kind (NULL in the
   * other kinds' rows, so that they compare equal there), typed as the key column.
   */
  private orderColumns(): { names: string[]; columns: (kindIndex: number, alias?: string) => string } {
    const slots = this.kinds.flatMap((kind, i) =>
      kind.key.map((column, j) => ({ kind: i, column, type: this.keyType(kind, column), name: `o${i}_${j}` })),
    )
    return {
      names: slots.map((s) => s.name),
      columns: (i, alias = 'src.') => slots.map((s) => `${s.kind === i ? `${alias}${ident(s.column)}` : 'NULL'}::${s.type} AS ${s.name}`).join(', ') || 'NULL AS o',
    }
  }

  /**
   * `FROM … WHERE …` of the selected rows of a kind in blocks `lo..hi`. A kind selected only by its
   * own requests repeats their filters, which the Parquet scan evaluates first so that it decodes
   * the other columns of matching rows only. Rows pulled in by a relation are read by Parquet row
   * number: on the keyed plan by their runs when few (5 runs of 640 transactions: 5.4–7.8 ms,
   * where a semi join on row numbers from a list took 9.5–12.6 and `rowid IN (…)` 17–24 ms), else
   * by a join to sel_<kind>, whose min/max prune row groups (a join on (block, key) decodes every
   * row of the file first: measured 4–7× slower for transactions).
   */
  private source(kind: ItemDecl, lo: number, hi: number): string {
    const range = `src.${ident(this.blockColumn(kind))} BETWEEN ${lo} AND ${hi}`
    // A kind read whole, from its block-ordered copy: only the slice's vectors, in the answer's order.
    const copy = this.blockOrdered(kind)
    if (copy) return `${copy} src WHERE ${range}`
    // Related rows are joined by row number, and the keyed plan places every row by it.
    const byFilter = this.readByFilter(kind)
    const from = this.file(kind.table, this.keyed !== undefined || !byFilter)
    if (byFilter) {
      const conds = this.plan.scans.filter((s) => s.item === kind).map((scan) => `(${this.where(scan, 'src')})`)
      return `${from} src WHERE ${range} AND (${conds.join(' OR ')})`
    }
    // Keyed plan, rows in few runs: by those runs (the local form skips the 2,048-row vectors that
    // hold none; the block range keeps the slice's rows).
    const ranges = this.keyed?.[this.kinds.indexOf(kind)].ranges
    if (ranges) return `${from} src WHERE ${range} AND (${ranges})`
    return (
      `${from} src SEMI JOIN (SELECT r FROM ${this.selName(kind)} ` +
      `WHERE block_number BETWEEN ${lo} AND ${hi}) s ON ${this.rowNumber(kind.table, 'src')} = s.r WHERE ${range}`
    )
  }

  /** A kind selected only by its own requests, without relations into it: read again by their filters. */
  private readByFilter(kind: ItemDecl): boolean {
    const related = this.plan.scans.some((s) => s.relations.some((r) => r.target === kind))
    return !related && this.plan.scans.some((s) => s.item === kind)
  }

}

/** Selected rows of one kind (keyed plan), in the order of the answer (block, then key). */
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

function keyedRows(block: Float64Array, r: Float64Array, narrow?: Int32Array): KeyedRows {
  // Sorted as one number per row, row number and rank (a typed array's own sort, no comparator).
  let scale = 1
  while (scale < r.length) scale *= 2
  const keys = new Float64Array(r.length)
  for (let i = 0; i < r.length; i++) keys[i] = r[i] * scale + i
  keys.sort()
  const sorted = new Float64Array(r.length)
  const ranks = new Int32Array(r.length)
  for (let i = 0; i < r.length; i++) {
    sorted[i] = Math.floor(keys[i] / scale)
    ranks[i] = keys[i] - sorted[i] * scale
  }
  return { block: block.slice(), sorted, ranks, narrow: narrow?.slice() }
}

/** DuckDB types of key columns that order as integers. */
const INTEGER_TYPES = new Set(['TINYINT', 'SMALLINT', 'INTEGER', 'BIGINT', 'UTINYINT', 'USMALLINT', 'UINTEGER', 'UBIGINT'])

/**
 * Where each row of the keyed plan's statement 1 goes when ordered by kind, block and key: each
 * row packs into ((k + 1)·blocks + b − from)·2^32 + key, sorted as a typed array.
 */
function orderInJs(k: Int32Array, b: Float64Array, key: Float64Array, from: number, to: number, kinds: number): Int32Array {
  const n = k.length
  const blocks = to - from + 1
  const packed = new Float64Array(n)
  for (let i = 0; i < n; i++) {
    if (!(key[i] >= 0 && key[i] < 2 ** 32) || k[i] < -1 || k[i] >= kinds || b[i] < from || b[i] > to) {
      throw new Error(`row (kind ${k[i]}, block ${b[i]}, key ${key[i]}) is outside the packed order`)
    }
    packed[i] = ((k[i] + 1) * blocks + b[i] - from) * 2 ** 32 + key[i]
  }
  const sorted = packed.slice().sort()
  const position = new Int32Array(n)
  const taken = new Uint8Array(n)
  for (let i = 0; i < n; i++) {
    let at = lowerBound(sorted, packed[i])
    while (taken[at]) at++ // equal keys (not expected: the selection is a UNION) keep a place each
    taken[at] = 1
    position[i] = at
  }
  return position
}

/** `values` with row i moved to `position[i]`. */
function permute<T extends Int32Array | Float64Array>(values: T, position: Int32Array): T {
  const out = (values instanceof Int32Array ? new Int32Array(values.length) : new Float64Array(values.length)) as T
  for (let i = 0; i < values.length; i++) out[position[i]] = values[i]
  return out
}

/** The arrays one after the other. */
function concatTyped<T extends Float64Array | Int32Array>(parts: T[], make: (n: number) => T): T {
  if (parts.length === 1) return parts[0]
  const out = make(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

/** Each row of a slice statement's result (b, k, r, j): a header (k = 0), or an item row of kind index k − 1. */
async function eachSliceRow(
  chunks: AsyncIterable<DuckDBDataChunk> | Iterable<DuckDBDataChunk>,
  texts: RowTexts,
  header: (block: number, json: number) => void,
  item: (kindIndex: number, block: number, r: number, json: number) => void,
): Promise<void> {
  for await (const chunk of chunks) {
    const block = bigintColumn(chunk, 0)
    const kind = integerColumn(chunk, 1)
    const r = bigintColumn(chunk, 2)
    const json: number[] = []
    texts.copyColumn(chunk, 3, json)
    for (let n = 0; n < kind.length; n++) {
      if (kind[n] === 0) header(block[n], json[n])
      else item(kind[n] - 1, block[n], r[n], json[n])
    }
  }
}

/** A kind's rows of a slice from its block-ordered copy, in the copy's order (by rowid). */
function inCopyOrder(rows: { block: number[]; r: number[]; json: number[] }): { block: ArrayLike<number>; json: number[] } {
  const { block, r, json } = rows
  if (r.every((x, i) => i === 0 || x > r[i - 1])) return rows
  const order = r.map((_, i) => i).sort((x, y) => r[x] - r[y])
  return { block: order.map((i) => block[i]), json: order.map((i) => json[i]) }
}

/** Rank of a selected row by its row number (-1: not selected). */
function rankOf(rows: KeyedRows, r: number): number {
  const at = lowerBound(rows.sorted, r)
  return rows.sorted[at] === r ? rows.ranks[at] : -1
}

/** First index of the ascending `values` from `start` on whose value is at least `value`. */
function lowerBound(values: ArrayLike<number>, value: number, start = 0): number {
  let lo = start
  let hi = values.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (values[mid] < value) lo = mid + 1
    else hi = mid
  }
  return lo
}

/** Consecutive runs of row numbers (ascending), `[first, last]` each. */
function rowRanges(sorted: ArrayLike<number>): [number, number][] {
  const out: [number, number][] = []
  for (let i = 0; i < sorted.length; i++) {
    const r = sorted[i]
    const last = out[out.length - 1]
    if (last && r <= last[1] + 1) last[1] = Math.max(last[1], r)
    else out.push([r, r])
  }
  return out
}
