import type { Sql } from './lazy-connection.js'
import type { QueryPlan } from './plan.js'
import { unfiltered } from './plan.js'
import type { ChunkPlan, SelectedBlock, SliceRows } from './chunk-plan.js'
import { ChunkSql, type ChunkSource, type ValueTables } from './chunk-sql.js'
import { boundaryHeaders, readHeaders } from './headers-plan.js'
import { keyedPlan, prepareKeyed } from './keyed-plan.js'
import { varcharBytes } from '../fast-path.js'
import type { RowTexts } from './row-texts.js'
import type { ChunkMetaReader } from './summary.js'
import { prepareTempTables } from './temp-table-plan.js'

/*
 * One query over one chunk, in DuckDB, in separate short statements (measured: a semi join per
 * step is ~10× faster than one statement of CTEs). `prepare` picks the plan:
 * - headers only (headers-plan.ts): a chunk the summaries rule out, or a query without item kinds;
 * - the keyed plan (keyed-plan.ts): every request has a condition and the chunk selects at most
 *   `keyedPlan.maxRows` rows;
 * - the temp-table plan (temp-table-plan.ts) for the rest, whose slices read in block order
 *   without `ORDER BY` (block-order-plan.ts) when every kind is read whole from a block-ordered copy.
 * The SQL they share is chunk-sql.ts.
 */
export class ChunkRun {
  private readonly sql: ChunkSql
  private plan?: ChunkPlan

  constructor(
    private readonly con: Sql,
    plan: QueryPlan,
    chunk: ChunkSource,
    /** Inclusive block range of this chunk that the query covers. */
    readonly from: number,
    readonly to: number,
    valueTable: ValueTables,
    /** The answer's row texts, which slices' rows are. */
    private readonly texts: RowTexts,
  ) {
    this.sql = new ChunkSql(plan, chunk, from, to, valueTable)
  }

  /**
   * Picks and prepares the plan; returns the candidate blocks, ascending. With `ruledOut` (from the
   * chunk summaries) no item is read. `meta`: the reader of the chunk's meta.json the query has.
   */
  async prepare(includeAllBlocks: boolean, ruledOut = false, meta?: ChunkMetaReader): Promise<SelectedBlock[]> {
    const { con, sql, texts } = this
    if (ruledOut && !includeAllBlocks && (await sql.isDense(con))) {
      this.plan = await boundaryHeaders(con, sql, texts)
    } else {
      if (!ruledOut) await sql.loadNulls(con, meta)
      const keyed = !ruledOut && sql.kinds.length > 0 && keyedPlan.maxRows >= 0 && !sql.plan.scans.some(unfiltered)
      this.plan = (keyed ? await prepareKeyed(con, sql, texts, includeAllBlocks) : undefined) ??
        (await prepareTempTables(con, sql, texts, includeAllBlocks, ruledOut))
    }
    return this.plan.candidates
  }

  /** Rows of blocks `lo..hi` (of the candidates) in the answer's order: each header, then its block's rows kind by kind. */
  slice(lo: number, hi: number, weight: number): AsyncGenerator<SliceRows> {
    return this.prepared().slice(lo, hi, weight)
  }

  /** The items of one kind in one block, one `,{…}` text per row (for blocks too big for a slice). */
  async *rows(kindIndex: number, block: number): AsyncGenerator<Uint8Array> {
    const related = this.prepared().related
    if (!related) return
    const result = await this.con.stream(this.sql.blockItems(this.sql.kinds[kindIndex], block, related))
    for await (const chunk of result) {
      const rows: Uint8Array[] = []
      varcharBytes(chunk, 0, rows)
      yield* rows
    }
  }

  /** The header JSON of one block. */
  async header(block: number): Promise<Uint8Array> {
    return this.plan?.headers?.get(block) ?? (await readHeaders(this.con, this.sql, [block]))[0]
  }

  private prepared(): ChunkPlan {
    if (!this.plan) throw new Error('ChunkRun: prepare() first')
    return this.plan
  }
}
