import path from 'node:path'
import { ident, lit } from '../db.js'
import { tableOf, type ItemDecl } from '../families/declaration.js'
import type { Sql } from './lazy-connection.js'
import { narrowFlag } from './narrow-columns.js'
import { unfiltered, type QueryPlan, type ScanPlan } from './plan.js'
import type { SelectedBlock } from './chunk-plan.js'
import { columnNulls, type ColumnNulls } from './column-nulls.js'
import { filterSql, itemJsonSql, relationJoinSql, relationSourceColumns, weightSql, type Nulls } from './sql.js'
import { chunkIsDense, type ChunkMetaReader } from './summary.js'
import type { HeldChunk } from './types.js'

/*
 * The SQL text that the plans of one query over one chunk share: where the chunk's tables are
 * read, each request's conditions, the selection of a kind, a slice's header part and a kind's
 * rows in a slice.
 */

/** Where a chunk's tables are read: its Parquet folder, or the worker's local form of it. */
export type ChunkSource = Pick<HeldChunk, 'dir' | 'local'>

/** Values of long filter lists live in per-query temp tables; this creates them once. */
export type ValueTables = (values: unknown[]) => string

/** Where a plan's slices find the rows that a relation pulls into a kind. */
export interface RelatedRows {
  /** Every kind's rows carry their row number (the keyed plan places each row by it). */
  readonly rowNumbers: boolean
  /** A kind's selected rows as a condition on their row numbers, when they lie in few runs. */
  ranges(kind: ItemDecl): string | undefined
  /** The temp table (or subquery) of a kind's selected rows: `block_number`, key, `w`, `r`. */
  selection(kind: ItemDecl): string
}

/** Candidate blocks named in a slice's header read; more are read as a range. */
const MAX_IN_LIST = 16

export class ChunkSql {
  readonly kinds: ItemDecl[]
  /** Block-number column of the header table (`number`). */
  readonly blockCol: string
  /** What the chunk's tables hold of NULLs, once `loadNulls` read it (else nothing is known). */
  private nulls = new Map<string, ColumnNulls>()

  constructor(
    readonly plan: QueryPlan,
    readonly chunk: ChunkSource,
    /** Inclusive block range of this chunk that the query covers. */
    readonly from: number,
    readonly to: number,
    private readonly valueTable: ValueTables,
  ) {
    this.kinds = plan.kinds
    this.blockCol = tableOf(plan.family, plan.family.header.table).blockColumn
  }

  /** A table of the chunk as an SQL source; with `rowNumbers`, with the row numbers `rowNumber` names. */
  file(table: string, rowNumbers = false): string {
    const local = this.chunk.local?.(table)
    if (local) return local
    return `read_parquet(${lit(path.join(this.chunk.dir, `${table}.parquet`))}${rowNumbers ? ', file_row_number = true' : ''})`
  }

  /**
   * A row's number in its Parquet file: the local form keeps the file's row order, so there it is
   * the rowid (a direct column, not a projection over every column: measured 0.4–0.8 ms less
   * planning per statement).
   */
  rowNumber(table: string, alias: string): string {
    return `${alias}.${this.chunk.local?.(table) ? 'rowid' : 'file_row_number'}`
  }

  /** Whether the chunk holds every block of its range (summary.ts). */
  isDense(con: Sql): Promise<boolean> {
    return chunkIsDense(con, this.chunk.dir, this.plan.family.header.table, this.blockCol)
  }

  /** Reads what the tables of the query's kinds and headers hold of NULLs (column-nulls.ts), from the chunk's meta.json through `meta` when given. */
  async loadNulls(con: Sql, meta?: ChunkMetaReader): Promise<void> {
    const tables = [this.plan.family.header.table, ...this.kinds.map((k) => k.table)]
    this.nulls = await columnNulls(con, this.chunk.dir, tables, meta)
  }

  private nullsOf(table: string): (column: string) => Nulls {
    const known = this.nulls.get(table)
    return (column) => known?.get(column) ?? 'some'
  }

  selected(item: ItemDecl): string[] {
    return this.plan.fields[item.selector] ?? []
  }

  /** Block-number column of an item's table (temp tables call it `block_number` whatever the table does). */
  blockColumn(item: ItemDecl): string {
    return tableOf(this.plan.family, item.table).blockColumn
  }

  /** DuckDB type of a kind's key column. */
  keyType(kind: ItemDecl, column: string): string {
    const type = tableOf(this.plan.family, kind.table).columns.find((c) => c.name === column)?.type
    if (!type) throw new Error(`key column ${column} of ${kind.selector} is not declared`)
    return type
  }

  /** `alias.<block column> AS block_number, alias.<key>, …` */
  keySelect(item: ItemDecl, alias: string, extra: string[] = []): string {
    const block = `${alias}.${ident(this.blockColumn(item))} AS block_number`
    const rest = [...new Set([...item.key, ...extra])].filter((c) => c !== 'block_number')
    return [block, ...rest.map((c) => `${alias}.${ident(c)}`)].join(', ')
  }

  range(alias: string, column: string): string {
    return `${alias}.${ident(column)} BETWEEN ${this.from} AND ${this.to}`
  }

  where(scan: ScanPlan, alias: string): string {
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

  /**
   * The SELECTs whose UNION is the selection of a kind: `block_number`, its key columns, output
   * weight `w` and row number `r` of each row. `matched(scan)` names the matched rows of a request
   * with relation flags (its m table, or the same rows as a subquery); `only` is that name when it
   * alone selects the kind. With `direct`, a request with relation flags selects its kind's rows
   * by its own conditions; with `flag`, each row also says whether its values are in narrow copies
   * (`x`, narrow-columns.ts).
   */
  selectionParts(kind: ItemDecl, matched: (scan: ScanPlan) => string, direct = false, flag = false): { parts: string[]; only?: string } {
    const keyList = (alias: string) =>
      alias === 'm' ? ['block_number', ...kind.key].map((c) => `m.${ident(c)}`).join(', ') : this.keySelect(kind, alias)
    const w = weightSql(kind, this.selected(kind), 't')
    const x = flag ? narrowFlag(this.chunk, kind, 't') : ''
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

  /** The columns of the rows a request with relation flags matches that its relations read (its m table's, or as a subquery). */
  matchedSelect(scan: ScanPlan): string {
    return this.keySelect(scan.item, 'src', scan.relations.flatMap((r) => relationSourceColumns(r.decl)))
  }

  /** A header row's JSON text. */
  headerText(alias: string): string {
    const header = this.plan.family.header
    return itemJsonSql(header, this.selected(header), alias, '', undefined, this.nullsOf(header.table))
  }

  /** An item row's JSON after a comma: `,{…}` (the engine drops the comma of a block's first item). */
  itemJson(kind: ItemDecl, stored?: (column: string) => string): string {
    return itemJsonSql(kind, this.selected(kind), 'src', ',', stored, this.nullsOf(kind.table))
  }

  /**
   * Columns that order a slice's rows within a block: one per key column of each kind (NULL in the
   * other kinds' rows, so that they compare equal there), typed as the key column.
   */
  orderColumns(): { names: string[]; columns: (kindIndex: number, alias?: string) => string } {
    const slots = this.kinds.flatMap((kind, i) =>
      kind.key.map((column, j) => ({ kind: i, column, type: this.keyType(kind, column), name: `o${i}_${j}` })),
    )
    return {
      names: slots.map((s) => s.name),
      columns: (i, alias = 'src.') => slots.map((s) => `${s.kind === i ? `${alias}${ident(s.column)}` : 'NULL'}::${s.type} AS ${s.name}`).join(', ') || 'NULL AS o',
    }
  }

  /** A slice's header rows, `b, 0 AS k, <columns>, j`, of the `candidates` in `lo..hi`. */
  headerPart(lo: number, hi: number, columns: string, candidates: SelectedBlock[]): string {
    const blockCol = `src.${ident(this.blockCol)}`
    return (
      `SELECT ${blockCol}::BIGINT AS b, 0 AS k, ${columns}, ${this.headerText('src')} AS j ` +
      `FROM ${this.file(this.plan.family.header.table)} src WHERE ${blockCol} BETWEEN ${lo} AND ${hi}${candidatesIn(blockCol, candidates, lo, hi)}`
    )
  }

  /** A slice's rows of the kind `kinds[kindIndex]`: `b, k, <columns>, j` (`json` its JSON text) `FROM <from>`. */
  itemPart(kindIndex: number, columns: string, json: string, from: string): string {
    return `SELECT src.${ident(this.blockColumn(this.kinds[kindIndex]))}::BIGINT AS b, ${kindIndex + 1} AS k, ${columns}, ${json} AS j FROM ${from}`
  }

  /**
   * `FROM … WHERE …` of the selected rows of a kind in blocks `lo..hi`. A kind selected only by its
   * own requests repeats their filters, which the Parquet scan evaluates first so that it decodes
   * the other columns of matching rows only. Rows pulled in by a relation are read by Parquet row
   * number: on the keyed plan by their runs when few (5 runs of 640 transactions: 5.4–7.8 ms,
   * where a semi join on row numbers from a list took 9.5–12.6 and `rowid IN (…)` 17–24 ms), else
   * by a join to the kind's selection, whose min/max prune row groups (a join on (block, key)
   * decodes every row of the file first: measured 4–7× slower for transactions).
   */
  source(kind: ItemDecl, lo: number, hi: number, related: RelatedRows): string {
    const range = `src.${ident(this.blockColumn(kind))} BETWEEN ${lo} AND ${hi}`
    // A kind read whole, from its block-ordered copy: only the slice's vectors, in the answer's order.
    const copy = this.blockOrdered(kind)
    if (copy) return `${copy} src WHERE ${range}`
    const byFilter = this.readByFilter(kind)
    const from = this.file(kind.table, related.rowNumbers || !byFilter)
    if (byFilter) {
      const conds = this.plan.scans.filter((s) => s.item === kind).map((scan) => `(${this.where(scan, 'src')})`)
      return `${from} src WHERE ${range} AND (${conds.join(' OR ')})`
    }
    // Rows in few runs: by those runs (the local form skips the 2,048-row vectors that hold none;
    // the block range keeps the slice's rows).
    const ranges = related.ranges(kind)
    if (ranges) return `${from} src WHERE ${range} AND (${ranges})`
    return (
      `${from} src SEMI JOIN (SELECT r FROM ${related.selection(kind)} ` +
      `WHERE block_number BETWEEN ${lo} AND ${hi}) s ON ${this.rowNumber(kind.table, 'src')} = s.r WHERE ${range}`
    )
  }

  /** The items of one kind in one block, `,{…}` each in key order (for blocks too big for a slice). */
  blockItems(kind: ItemDecl, block: number, related: RelatedRows): string {
    const order = kind.key.length ? ` ORDER BY ${kind.key.map((c) => `src.${ident(c)}`).join(', ')}` : ''
    return `SELECT ${this.itemJson(kind)} FROM ${this.source(kind, block, block, related)}${order}`
  }

  /** A kind selected only by its own requests, without relations into it: read again by their filters. */
  readByFilter(kind: ItemDecl): boolean {
    const related = this.plan.scans.some((s) => s.relations.some((r) => r.target === kind))
    return !related && this.plan.scans.some((s) => s.item === kind)
  }

  /**
   * The block-ordered copy (local form) that a kind is read from whole: the kind is selected by an
   * unfiltered request of its own (no relation reads into it), so a slice takes every row of its
   * blocks. Undefined otherwise.
   */
  blockOrdered(kind: ItemDecl): string | undefined {
    if (!this.readByFilter(kind) || !this.plan.scans.some((s) => s.item === kind && unfiltered(s))) return undefined
    return this.chunk.local?.byBlock(kind.table)
  }
}

/**
 * ` AND <column> IN (…)` naming the candidate blocks in `lo..hi`, when there are few of them; with
 * many, nothing (the writer passes over the other headers): a long IN list cost more than building
 * every header's JSON of the range (measured 3.1 against 1.3 ms for 160 of 200 blocks).
 */
function candidatesIn(column: string, candidates: SelectedBlock[], lo: number, hi: number): string {
  const list: number[] = []
  for (const b of candidates) if (b.number >= lo && b.number <= hi) list.push(b.number)
  if (list.length > MAX_IN_LIST) return ''
  return ` AND ${column} IN (${list.length ? list.join(', ') : 'NULL'})`
}
