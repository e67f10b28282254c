import type { DuckDBDataChunk } from '@duckdb/node-api'
import type { Sql } from './lazy-connection.js'
import type { RelatedRows } from './chunk-sql.js'
import { bigintColumn, integerColumn } from '../fast-path.js'
import type { RowTexts } from './row-texts.js'
import type { ItemDecl } from '../families/declaration.js'

/*
 * What every plan of a chunk (chunk-run.ts) gives the engine, and the pieces of a slice the plans
 * share.
 */

export interface SelectedBlock {
  number: number
  /** Estimated JSON size of the block with its items. */
  weight: number
  /** Has items (or is returned for includeAllBlocks): not merely a range boundary. */
  items: boolean
}

/** Rows of a slice: block number, kind (0 = header, i > 0 = the plan's kinds[i-1]) and JSON text. */
export interface SliceRows {
  block: ArrayLike<number>
  kind: ArrayLike<number>
  /** Each row's JSON: a row of the answer's `RowTexts`. */
  json: ArrayLike<number>
}

/** One query over one chunk, prepared: its candidate blocks, and how it reads them. */
export interface ChunkPlan {
  /** Candidate blocks, ascending. */
  readonly candidates: SelectedBlock[]
  /** The header JSON of the candidates, when it was read with them. */
  readonly headers?: Map<number, Uint8Array>
  /** Where slices find the rows a relation pulls into a kind; undefined when no item is read. */
  readonly related?: RelatedRows
  /**
   * Header and item rows of blocks `lo..hi` (of the candidates), ordered by block, then kind
   * (0 = header, i > 0 = `kinds[i-1]`), then key.
   */
  slice(lo: number, hi: number, weight: number): AsyncGenerator<SliceRows>
}

/** Estimated JSON size below which a slice is read as a materialised result. */
export const SMALL_SLICE = 1024 * 1024

/** A slice statement's result: streamed when `stream` (a streaming result costs a few ms more than a materialised one). */
export async function sliceChunks(con: Sql, sql: string, stream: boolean): Promise<AsyncIterable<DuckDBDataChunk> | DuckDBDataChunk[]> {
  return stream ? await con.stream(sql) : await (await con.run(sql)).fetchAllChunks()
}

/**
 * `candidates` (ascending) with the range's boundaries `from` and `to` added where missing
 * (`bare(n)`: a boundary block without items).
 */
export function withBoundaries(candidates: SelectedBlock[], from: number, to: number, bare: (number: number) => SelectedBlock): SelectedBlock[] {
  if (candidates[0]?.number !== from) candidates.unshift(bare(from))
  if (candidates[candidates.length - 1].number !== to) candidates.push(bare(to))
  return candidates
}

/** Each row of a slice statement's result (b, k, r, j): a header (k = 0), or an item row of kind index k − 1. */
export async function eachSliceRow(
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

/**
 * A slice's rows in the answer's order, from its headers (in any order) and each kind's rows
 * ordered by block: each header, then its block's rows of each kind.
 */
export function interleave(
  kindDecls: ItemDecl[],
  headerBlocks: number[],
  headers: number[],
  kinds: { block: ArrayLike<number>; json: ArrayLike<number> }[],
  lo: number,
  hi: number,
): SliceRows {
  // Headers come in the header table's order, by block as a rule. (Loops, not closures made per
  // slice: V8 would compile those again every few queries, keyed-plan.ts.)
  let order: number[] | Int32Array = new Int32Array(headerBlocks.length)
  let ordered = true
  for (let i = 0; i < order.length; i++) {
    order[i] = i
    if (i > 0 && headerBlocks[i] < headerBlocks[i - 1]) ordered = false
  }
  if (!ordered) order = [...order].sort((x, y) => headerBlocks[x] - headerBlocks[y])
  let total = headers.length
  for (const k of kinds) total += k.json.length
  const rows = { block: new Float64Array(total), kind: new Int32Array(total), json: new Int32Array(total) }
  let at = 0
  const next = new Int32Array(kinds.length)
  for (const h of order) {
    const b = headerBlocks[h]
    rows.block[at] = b
    rows.kind[at] = 0
    rows.json[at++] = headers[h]
    for (let i = 0; i < kinds.length; i++) {
      const { block, json } = kinds[i]
      for (; next[i] < json.length && block[next[i]] === b; next[i]++) {
        const row = json[next[i]]
        if (row < 0) throw new Error(`row of ${kindDecls[i].selector} in block ${b} missing from its slice`)
        rows.block[at] = b
        rows.kind[at] = i + 1
        rows.json[at++] = row
      }
    }
  }
  // Every block with items has its header (the header part reads every candidate block).
  if (at !== total) throw new Error(`${total - at} rows of blocks ${lo}..${hi} without their block's header`)
  return rows
}
