import { blockRowsSize, ndjsonTables, ndjsonText, type BlockRows, type RowsText } from '../chunks/rows.js'
import type { SpoolEntry, SpoolWriter } from '../chunks/writer.js'
import type { FamilyDecl } from '../families/declaration.js'
import { log } from '../log.js'
import { exponential, retry } from '../retry.js'

/*
 * What the ingest loop needs from a chain, whatever the family: the head, and batches of blocks as
 * table rows with the hash and parent hash that continuity is checked on. Resume, continuity,
 * `--follow`, chunking, progress and retries live in the loop and are the same for every family.
 */

/** A fetched block as rows. */
export interface BlockOfRows {
  number: number
  hash: string
  parentHash: string
  rows: BlockRows
  /** Size of the rows as the chunk writer counts it (computed here, off the loop's thread). */
  bytes: number
  /** Rows of the family's NDJSON tables, already as text. */
  texts: Record<string, RowsText>
  /**
   * A block fetched into a spool (its answers on disk, turned into rows when the chunk closes,
   * `BlockSource.spoolWriter`): the files holding its answers, per kind, and its row count per table.
   */
  spool?: SpoolEntry & { rows: Record<string, number> }
}

export interface RowsBatch {
  /** Blocks normalised before the error, if any. */
  blocks: BlockOfRows[]
  /** The batch failed: at `block` (whose continuity the loop checks first) or as a whole. */
  error?: { error: unknown; block?: { number: number; hash: string; parentHash: string } }
  /** Time spent normalising (ms). */
  normalizeMs: number
}

/** Heads a node may tell besides its latest block. */
export type FinalityLevel = 'finalized' | 'safe'

export interface BlockSource {
  readonly family: FamilyDecl
  /** Tables every chunk of this ingest holds (optional tables the options leave out are absent). */
  tables(): string[]
  /** Which RPC method fills each table (recorded in the chunk's meta.json). */
  describe(): Record<string, string>
  /** The node's latest block number. */
  head(): Promise<number>
  /** The node's finalized (or safe) head; undefined when the node, or the family, does not tell it. */
  finalizedHead?(level: FinalityLevel): Promise<number | undefined>
  /**
   * The node's hashes of these blocks, written as the dataset stores them (undefined for a block it
   * does not have): what a reorg's fork point is found with.
   */
  blockHashes?(numbers: number[]): Promise<(string | undefined)[]>
  /** Fetch and normalise blocks, in the given order; a failure comes back with the blocks before it. */
  fetchRows(numbers: number[], opts?: FetchOptions): Promise<RowsBatch>
  /** Close connections (a WebSocket), when the source holds any. */
  close?(): Promise<void>
  /** When the source fetches into a spool (`BlockOfRows.spool`): what turns a chunk's spool into its tables. */
  spoolWriter?(): SpoolWriter | undefined
}

/** A normaliser found the node's answer malformed (the source turns it into BadRpcAnswer). */
export class MalformedRpcData extends Error {}

/** A malformed or inconsistent answer: names the block and the method. */
export class BadRpcAnswer extends Error {
  constructor(readonly block: number, readonly method: string, message: string) {
    super(`block ${block}: ${method} returned malformed data: ${message}`)
  }
}

/** What to do about a block the node does not have (appended to BlockNotAvailable's message). */
export const MISSING_BLOCK_HINT =
  'ingest only blocks the node has: --from/--to within its range, or --blocks <list> for a node that serves isolated blocks (replay-rpc prints its list)'

/**
 * The node does not have this block (yet). `method`: the call that answered no block (none: the
 * block is above the node's confirmed head); `head`: the node's head, when it was asked.
 */
export class BlockNotAvailable extends Error {
  constructor(readonly block: number, readonly method?: string, readonly head?: number) {
    const why = method ? `${method} returned no block` : 'it is above the confirmed head'
    super(`block ${block} is not available from the node (${why}${head != null ? `; the node's head is ${head}` : ''}); ${MISSING_BLOCK_HINT}`)
  }
}

/**
 * The node cannot answer a method the options ask for (it lacks the method, or answers an error for
 * this block): names the method, the flag that asked for it and the flags that avoid it.
 */
export class MethodNotAvailable extends Error {}

/** The block changed between two calls (a reorg at the head while fetching); fetch it again. */
export class BlockChanged extends Error {}

/**
 * A missing block this far below the node's head is not a lagging node behind a load balancer: the
 * node does not have it (a pruned or sparse node), and asking again will not help.
 */
export const NEAR_HEAD_BLOCKS = 64

/**
 * A block that changed between calls is fetched again (up to 5 times). So is a block briefly missing
 * just below the head (load-balanced nodes lag behind each other); with `head` (the node's head,
 * asked only then) a block more than NEAR_HEAD_BLOCKS below it fails at once.
 */
export async function fetchWithRetry<T>(fetch: (nums: number[]) => Promise<T>, nums: number[], head?: () => Promise<number>): Promise<T> {
  return retry(() => fetch(nums), {
    attempts: 5,
    pauseMs: exponential(500, Infinity),
    retryable: async (e) => {
      if (!(e instanceof BlockChanged || e instanceof BlockNotAvailable)) return false
      if (e instanceof BlockNotAvailable && head) {
        const h = await head().catch(() => undefined)
        if (h != null && e.block < h - NEAR_HEAD_BLOCKS) throw new BlockNotAvailable(e.block, e.method, h)
      }
      return true
    },
    onRetry: (e, attempt) => {
      const what = e instanceof BlockNotAvailable ? `block ${e.block} is missing below the node's head, asking again` : 'inconsistent answers, fetching the blocks again'
      log.warn({ blocks: `${nums[0]}-${nums[nums.length - 1]}`, attempt, err: (e as Error).message }, what)
    },
  })
}

/** One normalised block as the loop takes it: NDJSON tables as text, the size counted. */
export function blockOfRows(family: FamilyDecl, f: { number: number; hash: string; parentHash: string }, rows: BlockRows): BlockOfRows {
  const texts: Record<string, RowsText> = {}
  let bytes = 0
  for (const t of ndjsonTables(family)) {
    const list = rows[t]
    if (!list) continue
    texts[t] = { text: ndjsonText(list), rows: list.length }
    bytes += texts[t].text.length
    delete rows[t]
  }
  bytes += blockRowsSize(family, Object.keys(rows), rows)
  return { number: f.number, hash: f.hash, parentHash: f.parentHash, rows, bytes, texts }
}

/** How a source's raw answers become rows. */
export interface Normaliser<T> {
  family: FamilyDecl
  /** Raw answers → rows of the family's tables (throws MalformedRpcData on bad input). */
  rows(raw: T): BlockRows
  /** The method a normaliser complaint is about (for the error message). */
  method(message: string): string
  /** The block's identity as the raw answer gives it, for the loop's continuity check before failing. */
  identity(raw: T): { hash: string; parentHash: string }
  /** The node's head, asked when a block is missing (fetchWithRetry: far below the head, it fails at once). */
  head?: () => Promise<number>
}

/**
 * Fetch `numbers` (blocks that changed or are briefly missing are fetched again) and normalise each;
 * a normaliser complaint ends the batch as BadRpcAnswer naming the block and method, with the blocks
 * before it.
 */
export async function fetchAndNormalize<T>(numbers: number[], fetch: (numbers: number[]) => Promise<T[]>, n: Normaliser<T>): Promise<RowsBatch> {
  let fetched: T[]
  try {
    fetched = await fetchWithRetry(fetch, numbers, n.head)
  } catch (error) {
    return { blocks: [], error: { error }, normalizeMs: 0 }
  }
  const t0 = performance.now()
  const blocks: BlockOfRows[] = []
  for (const [i, raw] of fetched.entries()) {
    const number = numbers[i]
    try {
      const rows = n.rows(raw)
      const header = rows[n.family.header.table][0]
      blocks.push(blockOfRows(n.family, { number, hash: header.hash as string, parentHash: header.parent_hash as string }, rows))
    } catch (e) {
      const error = e instanceof MalformedRpcData ? new BadRpcAnswer(number, n.method(e.message), e.message) : e
      return { blocks, error: { error, block: { number, ...n.identity(raw) } }, normalizeMs: performance.now() - t0 }
    }
  }
  return { blocks, normalizeMs: performance.now() - t0 }
}

export interface FetchOptions {
  /**
   * Normalise the blocks in JS even where the source would spool them (EVM): a following ingest
   * near the head writes a chunk every block or two, and one spooled close costs several DuckDB
   * statements where the JS path costs a few milliseconds (docs/ingest.md, "Freshness").
   */
  inline?: boolean
}
