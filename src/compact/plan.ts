import type { ChunkMeta, ChunkRef } from '../chunks/layout.js'

/*
 * Which chunks to merge (docs/ingest.md, "Compaction"). Size-tiered: the ingest's chunks are tier 0;
 * `fanout` consecutive chunks of the same tier become one chunk of the next tier, as long as the
 * result stays within the ingest's chunk bounds (blocks and row bytes). When `fanout` of them do not
 * fit, the longest run of them that fits (at least two) is merged into a *sealed* chunk, which is not
 * merged again. Since merges take the oldest `fanout` chunks of a tier and new chunks are tier 0, the
 * open chunks of a run hold at most `fanout − 1` chunks of each tier (a base-`fanout` counter).
 */

export interface PlanChunk {
  ref: ChunkRef
  meta: ChunkMeta
}

export interface CompactBounds {
  /** Chunks merged into one (2 or more). */
  fanout: number
  /** The ingest's `--chunk-blocks` and `--chunk-mb` (as bytes): a merged chunk stays within both. */
  chunkBlocks: number
  chunkBytes: number
  /** Only chunks ending at or below this block are merged (e.g. below the finality point). */
  maxBlock?: number
  /** Chunks overlapping these ranges are not merged (ranges other ingests are writing; `to` null: no end). */
  excluded?: { from: number; to: number | null }[]
}

export interface Merge {
  chunks: PlanChunk[]
  /** Tier of the merged chunk. */
  tier: number
  /** Merged further never (it did not fit `fanout` chunks of its tier). */
  sealed: boolean
}

export const tierOf = (m: ChunkMeta) => m.tier ?? 0

/** Whether compaction may still merge this chunk: it knows its row bytes, is under both bounds and not sealed. */
export function isOpen(m: ChunkMeta, b: CompactBounds): boolean {
  return m.rowBytes != null && !m.sealed && m.blockCount < b.chunkBlocks && m.rowBytes < b.chunkBytes
}

const fits = (chunks: PlanChunk[], b: CompactBounds) =>
  sum(chunks, (c) => c.meta.blockCount) <= b.chunkBlocks && sum(chunks, (c) => c.meta.rowBytes ?? Infinity) <= b.chunkBytes

/** Chunks that may be merged into one: the next follows the previous directly, with the same tables and sources. */
function joinable(a: PlanChunk, c: PlanChunk): boolean {
  const follows = c.ref.first === a.ref.last + 1 || c.meta.previousLast === a.ref.last
  return follows && c.meta.family === a.meta.family && same(a.meta.tables, c.meta.tables) && same((a.meta as any).sources, (c.meta as any).sources)
}

/**
 * The merges to do now over `chunks` (complete, none superseded, ascending), disjoint: each is
 * `fanout` same-tier chunks (or a sealed shorter run); cascades to higher tiers come at the next plan.
 */
export function planMerges(chunks: PlanChunk[], b: CompactBounds): Merge[] {
  if (b.fanout < 2) throw new Error(`compaction fanout must be 2 or more, not ${b.fanout}`)
  const merges: Merge[] = []
  for (const run of openRuns(chunks, b)) {
    let i = 0
    while (i < run.length) {
      const tier = tierOf(run[i].meta)
      let end = i
      while (end < run.length && tierOf(run[end].meta) === tier) end++
      while (end - i >= b.fanout) {
        const group = run.slice(i, i + b.fanout)
        if (fits(group, b)) {
          merges.push({ chunks: group, tier: tier + 1, sealed: false })
          i += group.length
          continue
        }
        let k = group.length - 1
        while (k >= 2 && !fits(group.slice(0, k), b)) k--
        if (k >= 2) {
          merges.push({ chunks: group.slice(0, k), tier: tier + 1, sealed: true })
          i += k
        } else i++ // this one and the next exceed the bounds together: it stays as it is
      }
      i = end
    }
  }
  return merges
}

/** Maximal runs of open chunks that can be merged with their neighbours. */
function openRuns(chunks: PlanChunk[], b: CompactBounds): PlanChunk[][] {
  const runs: PlanChunk[][] = []
  let run: PlanChunk[] = []
  for (const c of chunks) {
    const ok = isOpen(c.meta, b) && c.ref.last <= (b.maxBlock ?? Infinity) && !(b.excluded ?? []).some((x) => c.ref.first <= (x.to ?? Infinity) && x.from <= c.ref.last)
    if (ok && run.length && joinable(run[run.length - 1], c)) run.push(c)
    else {
      if (run.length > 1) runs.push(run)
      run = ok ? [c] : []
    }
  }
  if (run.length > 1) runs.push(run)
  return runs
}

/**
 * The most open chunks a run keeps once compaction has caught up: `fanout − 1` per tier, and tier
 * t chunks hold at least fanout^t blocks and fewer than `chunkBlocks`.
 */
export function tailBound(b: Pick<CompactBounds, 'fanout' | 'chunkBlocks'>): number {
  let tiers = 0
  while (b.fanout ** tiers < b.chunkBlocks) tiers++
  return (b.fanout - 1) * Math.max(1, tiers)
}

const sum = <T>(xs: T[], f: (x: T) => number) => xs.reduce((a, x) => a + f(x), 0)
const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)
