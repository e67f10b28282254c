import type { ChunkRef } from '../chunks/layout.js'
import { connect, lit } from '../db.js'
import type { IngestTarget } from './target.js'

/*
 * Reorgs above the finality: when a fetched block's parent hash is not the hash of the block before
 * it in the dataset, the fork point is the highest block whose hash the node and the dataset agree
 * on (a hash names its whole ancestry, so every block below it agrees too). The loop then drops the
 * dataset's blocks above it and reads the node's chain from there.
 */

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
