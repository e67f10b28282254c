import type { ChunkRef } from '../chunks/layout.js'
import type { ChunkLinks } from '../chunks/chunk-index.js'
import { mapLimit } from '../semaphore.js'
import type { ClaimRange } from '../ingest/range-claims.js'

/*
 * Which listed chunks may be served. Chunks must follow each other without overlapping; a jump
 * between chunks is a gap only when the later chunk says which chunk it was written after
 * (`meta.previousLast`) and that chunk is not there: deliberate jumps (`ingest --from` above the
 * last block, sparse block lists) are not gaps. Serving stops before the first problem: blocks past
 * it would be answered as if the missing or doubled ones did not exist.
 *
 * Missing blocks in a range an ingest claims (src/ingest/range-claims.ts: a backfill of several
 * ranges in parallel, running or stopped before its end) are no problem but a gap being filled:
 * the chunks after it are served, the blocks in it are not (the router answers 503 for them), and
 * it is reported until filled. Also below the first chunk, where the gap starts at the claim's start.
 */

/** Blocks missing between served chunks, in a range an ingest claims. */
export interface FillGap {
  first: number
  last: number
}

export interface Continuity {
  servable: ChunkRef[]
  /** Human-readable, one per problem (only the first problem stops serving). */
  problems: string[]
  /** Gaps being filled, ascending (the servable chunks lie around them). */
  gaps: FillGap[]
}

export async function checkContinuity(chunks: ChunkRef[], metaOf: (c: ChunkRef) => Promise<ChunkLinks>, claims: readonly ClaimRange[] = []): Promise<Continuity> {
  // The metas of the jumps, read 64 at a time (a sparse dataset has a jump before every chunk).
  const jumps = chunks.filter((c, i) => i > 0 && c.first > chunks[i - 1].last + 1)
  const metas = new Map<ChunkRef, ChunkLinks | undefined>()
  await mapLimit(jumps, 64, async (c) => void metas.set(c, await metaOf(c).catch(() => undefined)))
  const problems: string[] = []
  const gaps: FillGap[] = []
  const claimed = (first: number, last: number) => claims.filter((r) => r.from <= last && first <= (r.to ?? Infinity))
  let end = chunks.length
  if (chunks.length) {
    const below = claimed(0, chunks[0].first - 1)
    if (below.length) gaps.push({ first: Math.min(...below.map((r) => r.from)), last: chunks[0].first - 1 })
  }
  for (let i = 1; i < chunks.length; i++) {
    const prev = chunks[i - 1]
    const c = chunks[i]
    if (c.first <= prev.last) {
      problems.push(`chunks ${prev.path} and ${c.path} overlap (blocks ${c.first}–${Math.min(prev.last, c.last)} are in both); served up to block ${prev.last}`)
    } else if (c.first > prev.last + 1) {
      const meta = metas.get(c)
      const expected = meta?.previousLast
      if (expected === undefined || expected === prev.last) continue
      if (expected > prev.last && claimed(prev.last + 1, c.first - 1).length) {
        if (end === chunks.length) gaps.push({ first: prev.last + 1, last: c.first - 1 })
        continue
      }
      problems.push(
        `chunk ${c.path} was written after block ${expected}, but the chunk before it ends at block ${prev.last}: ` +
          `a chunk is missing (blocks ${prev.last + 1}–${Math.min(expected, c.first - 1)}); served up to block ${prev.last}`,
      )
    } else continue
    if (end === chunks.length) end = i
  }
  return { servable: chunks.slice(0, end), problems, gaps }
}

/**
 * `checkContinuity` over the successive listings of one dataset: a listing that only adds chunks
 * after a listing without problems is checked from the last chunk before on, so a relisting costs
 * what is new, not the whole dataset (the paths are still compared, which is cheap).
 */
export class ContinuityTracker {
  private listed: ChunkRef[] = []
  private problems: string[] = []
  private gaps: FillGap[] = []
  private claims = ''

  async check(chunks: ChunkRef[], metaOf: (c: ChunkRef) => Promise<ChunkLinks>, claims: readonly ClaimRange[] = []): Promise<Continuity> {
    const n = this.listed.length
    const claimsKey = JSON.stringify(claims.map((r) => [r.from, r.to]))
    const grew = n > 0 && this.problems.length === 0 && claimsKey === this.claims && chunks.length >= n && this.listed.every((c, i) => c.path === chunks[i].path)
    let result: Continuity
    if (grew) {
      const tail = await checkContinuity(chunks.slice(n - 1), metaOf, claims)
      result = { servable: chunks.slice(0, n - 1 + tail.servable.length), problems: tail.problems, gaps: [...this.gaps, ...tail.gaps.filter((g) => g.first > chunks[n - 1].last)] }
    } else {
      result = await checkContinuity(chunks, metaOf, claims)
    }
    this.listed = chunks
    this.problems = result.problems
    this.gaps = result.gaps
    this.claims = claimsKey
    return result
  }
}
