import type { ChunkRef } from '../chunks/layout.js'
import { connect, lit } from '../db.js'
import { log } from '../log.js'
import { reorgsExpected, type FinalityHead } from './finality.js'
import type { ReorgInfo } from './loop.js'
import type { BlockSource } from './source.js'
import type { IngestTarget } from './target.js'

/*
 * Reorgs above the finality: when a fetched block's parent hash is not the hash of the block before
 * it in the dataset, the fork point is the highest block whose hash the node and the dataset agree
 * on (a hash names its whole ancestry, so every block below it agrees too). The loop then drops the
 * dataset's blocks above it and reads the node's chain from there (ReorgHandler).
 */

/** The chain does not continue where we are: a reorg deeper than --max-reorg-depth, or a wrong dataset. */
export class ReorgError extends Error {}

/** The dataset's last block: the next block read must have its hash as parent hash. */
export interface DatasetTip {
  number: number
  hash: string
  /** Where the hash comes from (for messages). */
  where: string
}

/** What a reorg needs of the ingest loop. */
export interface ReorgLoop {
  /** Drop the open chunk and wait until the chunks closing now are in place (or throw their error); the open chunk's first block. */
  dropOpenChunk(): Promise<number | undefined>
  /**
   * The blocks from `resumeAt` on are gone: `deleted` (newest first) are no longer in the written
   * chunks; `tip` is the dataset's new last block when its hash is known.
   */
  rewound(r: { resumeAt: number; deleted: ChunkRef[]; tip: DatasetTip | undefined; info: ReorgInfo }): void
}

export interface ReorgSettings {
  target: IngestTarget
  source: BlockSource
  heads: FinalityHead
  hashes: DatasetHashes
  /** The dataset's complete chunks, ascending: those above a fork point are popped from it. */
  written: ChunkRef[]
  /** --max-reorg-depth (0: any mismatch stops the ingest). */
  maxDepth: number
  /** Blocks per node request in the fork search. */
  window: number
  /** The ingest reads a list of blocks (--blocks): a mismatch is not re-read. */
  blockList: boolean
}

/**
 * A fetched block that does not continue the dataset: find the fork point, drop the blocks above it
 * (the open chunk, written chunks newest first) and tell where to read from.
 */
export class ReorgHandler {
  constructor(private readonly s: ReorgSettings, private readonly loop: ReorgLoop) {}

  /** `f` does not continue `tip`; returns the block to read the node's chain from. Throws ReorgError when it cannot be re-read. */
  async handle(f: { number: number; hash: string; parentHash: string }, tip: DatasetTip): Promise<number> {
    const { target, source, heads, hashes, written, maxDepth } = this.s
    const mismatch = `block ${f.number} (${f.hash}) has parent hash ${f.parentHash}, but block ${tip.number} has hash ${tip.hash} (${tip.where})`
    if (this.s.blockList || maxDepth === 0 || !source.blockHashes) {
      const why = this.s.blockList ? 'with --blocks, a mismatch is not re-read' : maxDepth === 0 ? '--max-reorg-depth is 0' : 'this source cannot tell the hashes of its blocks, so a reorg cannot be re-read'
      throw new ReorgError(`chain mismatch: ${mismatch}; ${why}. Nothing of block ${f.number} was written; ` +
        `if the dataset's blocks are on the abandoned fork, delete the chunks from block ${tip.number} on and ingest again.`)
    }
    // the chunks closing now are placed first: the search and the deletion see every written block
    const open = await this.loop.dropOpenChunk()
    const found = await findForkPoint(tip.number, maxDepth, (n) => hashes.hashOf(n), (ns) => source.blockHashes!(ns), this.s.window)
    if (!('fork' in found)) {
      throw new ReorgError(
        `chain mismatch deeper than --max-reorg-depth (${maxDepth}): ${mismatch}. ` +
          ('missing' in found
            ? `The node's chain shares no block with the dataset down to its first block${found.missing >= 0 ? ` (the dataset has no block ${found.missing})` : ''}: it serves another chain, or the dataset was written from another fork. `
            : `The node's chain and the dataset differ on each of the ${maxDepth} blocks below ${tip.number + 1}. `) +
          `Nothing of block ${f.number} was written; if the dataset's blocks are on the abandoned fork, delete its chunks down to the fork point and ingest again, or pass a larger --max-reorg-depth.`,
      )
    }
    const fork = found.fork
    const orphaned = await hashes.hashOf(fork + 1)
    const [replacing] = await source.blockHashes([fork + 1])
    const finalHead = Math.max(heads.known, reorgsExpected(heads.finality) ? (await source.finalizedHead?.('finalized').catch(() => undefined)) ?? -1 : -1)
    if (fork < finalHead) {
      log.error({ block: fork + 1, datasetHash: orphaned, nodeHash: replacing, finalizedHead: finalHead },
        `a reorg replaced block ${fork + 1}, below the finalized head ${finalHead} the node announced: the node's finality is not final`)
    }
    const deleted: ChunkRef[] = []
    while (written.length && written[written.length - 1].last > fork) {
      const c = written.pop()!
      await target.deleteChunk(c)
      deleted.push(c)
      log.warn({ chunk: c.path }, 'reorg: deleted a chunk of replaced blocks')
    }
    const resumeAt = Math.min(fork + 1, open ?? Infinity, ...deleted.map((c) => c.first))
    hashes.forget(resumeAt)
    const below = await hashes.hashOf(resumeAt - 1)
    this.loop.rewound({
      resumeAt,
      deleted,
      tip: below ? { number: resumeAt - 1, hash: below, where: 'in the dataset below the fork point' } : undefined,
      info: { forkPoint: fork, tip: tip.number, deletedChunks: deleted.map((c) => c.path), resumeAt },
    })
    log.warn({ forkPoint: fork, depth: tip.number - fork, datasetHash: orphaned, nodeHash: replacing, deletedChunks: deleted.length, resumeAt },
      `chain reorganisation above the finality: blocks ${fork + 1}–${tip.number} replaced; reading the node's chain from block ${resumeAt}`)
    return resumeAt
  }
}

/** Hashes of the dataset's blocks: the latest ones held in memory, older ones read from the written chunks. */
export class DatasetHashes {
  private readonly recent = new Map<number, string>()
  private readonly fromChunks = new Map<string, Map<number, string>>()

  /** `chunks`: the complete chunks now (ascending); `keep`: how many recent hashes stay in memory. */
  constructor(private readonly target: IngestTarget, private readonly chunks: () => readonly ChunkRef[], private readonly keep: number) {}

  remember(number: number, hash: string): void {
    this.recent.set(number, hash)
    if (this.recent.size > this.keep) this.recent.delete(this.recent.keys().next().value!)
  }

  /** Blocks from `number` on are gone from the dataset. */
  forget(number: number): void {
    for (const n of [...this.recent.keys()]) if (n >= number) this.recent.delete(n)
    const kept = new Set(this.chunks().filter((c) => c.last < number).map((c) => c.path))
    for (const p of [...this.fromChunks.keys()]) if (!kept.has(p)) this.fromChunks.delete(p)
  }

  /** The dataset's hash of block `n` (lower case), undefined when the dataset has no such block. */
  async hashOf(n: number): Promise<string | undefined> {
    const r = this.recent.get(n)
    if (r) return r
    const c = this.chunks().find((x) => x.first <= n && n <= x.last)
    if (!c) return undefined
    let hashes = this.fromChunks.get(c.path)
    if (!hashes) {
      const meta = await this.target.readChunkMeta(c)
      if (meta.last === n) return meta.lastHash.toLowerCase()
      hashes = await this.target.blockHashes(c)
      this.fromChunks.set(c.path, hashes)
    }
    return hashes.get(n)
  }
}

export type ForkSearch =
  /** The highest block both chains hold. */
  | { fork: number }
  /** No common block within `maxDepth` below the tip. */
  | { tooDeep: true }
  /** The dataset has no block `missing` (below its first block, or a gap) and the chains differ above it. */
  | { missing: number }

/**
 * Walk down from `tip` (the dataset's last block) comparing the dataset's hashes with the node's,
 * `window` blocks per node request, at most `maxDepth` blocks deep.
 */
export async function findForkPoint(
  tip: number,
  maxDepth: number,
  ours: (n: number) => Promise<string | undefined>,
  theirs: (numbers: number[]) => Promise<(string | undefined)[]>,
  window = 32,
): Promise<ForkSearch> {
  const deepest = Math.max(tip - maxDepth, -1)
  for (let hi = tip; hi >= deepest && hi >= 0; hi -= window) {
    const numbers: number[] = []
    for (let n = hi; n > hi - window && n >= deepest && n >= 0; n--) numbers.push(n)
    const mine: (string | undefined)[] = []
    for (const n of numbers) {
      const h = await ours(n)
      mine.push(h)
      if (h == null) break
    }
    const node = await theirs(numbers.slice(0, mine.length).filter((_, i) => mine[i] != null))
    for (let i = 0; i < mine.length; i++) {
      if (mine[i] == null) return { missing: numbers[i] }
      if (node[i] === mine[i]) return { fork: numbers[i] }
    }
  }
  return tip - maxDepth < 0 ? { missing: -1 } : { tooDeep: true }
}

/** Number → hash (lower case) of a blocks.parquet file. */
export async function readBlockHashes(file: string): Promise<Map<number, string>> {
  const con = await connect()
  try {
    const r = await con.runAndReadAll(`SELECT number, hash FROM read_parquet(${lit(file)})`)
    return new Map(r.getRows().map(([n, h]) => [Number(n), String(h).toLowerCase()]))
  } finally {
    con.closeSync()
  }
}
