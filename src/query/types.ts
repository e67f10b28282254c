import type { ChunkRef } from '../chunks/layout.js'
import type { FamilyDecl } from '../families/declaration.js'
import type { LocalTables } from '../storage/local-forms.js'

/** A chunk this worker holds, with the block range it answers for. */
export interface HeldChunk extends ChunkRef {
  /**
   * First block this chunk answers for: the previous dataset chunk's `last + 1` (0 for the first
   * chunk). Blocks in `[coverFrom, first)` are a gap (docs/protocol.md §3.5): a query starting there is
   * answered from this chunk's first existing block.
   */
  coverFrom: number
  /** Absolute folder of the chunk's Parquet files on this machine. */
  dir: string
  /**
   * SQL names of the chunk's tables in a local form, read instead of the Parquet files: for a view
   * whose chunks all keep one form throughout (tests, benches). A worker's view leaves it out and
   * gives each query the forms it reads through `DatasetView.localForm`.
   */
  local?: LocalTables
  /** Whether the files are still as fetched (checked before the chunk is read; a cache copy may have been damaged). */
  intact?: () => Promise<boolean>
}

/** What one worker serves of one dataset. */
export interface DatasetView {
  name: string
  family: FamilyDecl
  /** Held chunks, ascending by block, not overlapping (the engine finds a query's first chunk by binary search). */
  chunks: HeldChunk[]
  /** Last block of the whole dataset (not only of this worker); -1 when empty. */
  height: number
  /**
   * The local form of one of `chunks` for this query, when built: acquired at the first call (the
   * engine calls it as it opens the chunk) and given back when the query's lease ends. Undefined:
   * the chunk is read from its Parquet files.
   */
  localForm?(chunk: HeldChunk): LocalTables | undefined
}

export interface QueryBudgets {
  /** Stop at a block boundary once this many bytes of JSON were produced (default 20 MiB). */
  sizeBytes: number
  /** Stop at a block boundary once this many ms passed since the first chunk (default 2000). */
  timeMs: number
  /**
   * Largest estimated JSON read in one DuckDB statement (default 16 MiB): bigger slices read a
   * chunk fewer times, smaller ones bound DuckDB's sort memory per running query.
   */
  sliceBytes?: number
  /**
   * Slices estimated above this (default 4 MiB) are read one at a time per process, their output
   * held until the statement is done: bounds DuckDB's memory under concurrent heavy queries.
   */
  heavySliceBytes?: number
}

/** A validated, planned query ready to stream. Errors (ApiError) are thrown before this exists. */
export interface QueryStream {
  /** Pieces of UTF-8 JSON that concatenate to the response array. */
  body: AsyncIterable<Uint8Array>
  /** Filled in while streaming. */
  stats: { chunksRead: number; blocks: number; bytes: number; lastBlock: number }
}
