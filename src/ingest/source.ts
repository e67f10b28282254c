import { blockRowsSize, ndjsonTables, ndjsonText, type BlockRows, type RowsText } from '../chunks/writer.js'
import type { FamilyDecl } from '../families/declaration.js'
import { log } from '../log.js'

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
}

export interface RowsBatch {
  /** Blocks normalised before the error, if any. */
  blocks: BlockOfRows[]
  /** The batch failed: at `block` (whose continuity the loop checks first) or as a whole. */
  error?: { error: unknown; block?: { number: number; hash: string; parentHash: string } }
  /** Time spent normalising (ms). */
  normalizeMs: number
}

export interface BlockSource {
  readonly family: FamilyDecl
  /** Tables every chunk of this ingest holds (optional tables the options leave out are absent). */
  tables(): string[]
  /** Which RPC method fills each table (recorded in the chunk's meta.json). */
  describe(): Record<string, string>
  /** The node's latest block number. */
  head(): Promise<number>
  /** Fetch and normalise blocks, in the given order; a failure comes back with the blocks before it. */
  fetchRows(numbers: number[]): Promise<RowsBatch>
  /** Close connections (a WebSocket), when the source holds any. */
  close?(): Promise<void>
}

/** A normaliser found the node's answer malformed (the source turns it into BadRpcAnswer). */
export class MalformedRpcData extends Error {}

/** A malformed or inconsistent answer: names the block and the method. */
export class BadRpcAnswer extends Error {
  constructor(readonly block: number, readonly method: string, message: string) {
    super(`block ${block}: ${method} returned malformed data: ${message}`)
  }
}

/** The node does not have this block (yet). */
export class BlockNotAvailable extends Error {
  constructor(readonly block: number, method = 'the node') {
    super(`block ${block} is not available from the node (${method} returned no block)`)
  }
}

/** The block changed between two calls (a reorg at the head while fetching); fetch it again. */
export class BlockChanged extends Error {}

/** A block that changed between calls, or is briefly missing below the head, is fetched again. */
export async function fetchWithRetry<T>(fetch: (nums: number[]) => Promise<T>, nums: number[]): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fetch(nums)
    } catch (e) {
      if (!(e instanceof BlockChanged || e instanceof BlockNotAvailable) || attempt >= 5) throw e
      log.warn({ blocks: `${nums[0]}-${nums[nums.length - 1]}`, attempt, err: e.message }, 'inconsistent answers, fetching the blocks again')
      await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** attempt))
    }
  }
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
}

/**
 * Fetch `numbers` (blocks that changed or are briefly missing are fetched again) and normalise each;
 * a normaliser complaint ends the batch as BadRpcAnswer naming the block and method, with the blocks
 * before it.
 */
export async function fetchAndNormalize<T>(numbers: number[], fetch: (numbers: number[]) => Promise<T[]>, n: Normaliser<T>): Promise<RowsBatch> {
  let fetched: T[]
  try {
    fetched = await fetchWithRetry(fetch, numbers)
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
