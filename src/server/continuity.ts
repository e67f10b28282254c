import type { ChunkRef } from '../chunks/layout.js'
import type { ChunkLinks } from '../chunks/chunk-index.js'
import { mapLimit } from '../storage/dataset-store.js'

/*
 * Which listed chunks may be served. Chunks must follow each other without overlapping; a jump
 * between chunks is a gap only when the later chunk says which chunk it was written after
 * (`meta.previousLast`) and that chunk is not there: deliberate jumps (`ingest --from` above the
 * last block, sparse block lists) are not gaps. Serving stops before the first problem: blocks past
 * it would be answered as if the missing or doubled ones did not exist.
 */

export interface Continuity {
  servable: ChunkRef[]
  /** Human-readable, one per problem (only the first problem stops serving). */
  problems: string[]
}

export async function checkContinuity(chunks: ChunkRef[], metaOf: (c: ChunkRef) => Promise<ChunkLinks>): Promise<Continuity> {
  // The metas of the jumps, read 64 at a time (a sparse dataset has a jump before every chunk).
  const jumps = chunks.filter((c, i) => i > 0 && c.first > chunks[i - 1].last + 1)
  const metas = new Map<ChunkRef, ChunkLinks | undefined>()
  await mapLimit(jumps, 64, async (c) => void metas.set(c, await metaOf(c).catch(() => undefined)))
  const problems: string[] = []
  let end = chunks.length
  for (let i = 1; i < chunks.length; i++) {
    const prev = chunks[i - 1]
    const c = chunks[i]
    if (c.first <= prev.last) {
      problems.push(`chunks ${prev.path} and ${c.path} overlap (blocks ${c.first}–${Math.min(prev.last, c.last)} are in both); served up to block ${prev.last}`)
    } else if (c.first > prev.last + 1) {
      const meta = metas.get(c)
      const expected = meta?.previousLast
      if (expected === undefined || expected === prev.last) continue
      problems.push(
        `chunk ${c.path} was written after block ${expected}, but the chunk before it ends at block ${prev.last}: ` +
          `a chunk is missing (blocks ${prev.last + 1}–${Math.min(expected, c.first - 1)}); served up to block ${prev.last}`,
      )
    } else continue
    if (end === chunks.length) end = i
  }
  return { servable: chunks.slice(0, end), problems }
}

/**
 * `checkContinuity` over the successive listings of one dataset: a listing that only adds chunks
 * after a listing without problems is checked from the last chunk before on, so a relisting costs
 * what is new, not the whole dataset (the paths are still compared, which is cheap).
 */
export class ContinuityTracker {
  private listed: ChunkRef[] = []
  private problems: string[] = []

  async check(chunks: ChunkRef[], metaOf: (c: ChunkRef) => Promise<ChunkLinks>): Promise<Continuity> {
    const n = this.listed.length
    const grew = n > 0 && this.problems.length === 0 && chunks.length >= n && this.listed.every((c, i) => c.path === chunks[i].path)
    let result: Continuity
    if (grew) {
      const tail = await checkContinuity(chunks.slice(n - 1), metaOf)
      result = { servable: chunks.slice(0, n - 1 + tail.servable.length), problems: tail.problems }
    } else {
      result = await checkContinuity(chunks, metaOf)
    }
    this.listed = chunks
    this.problems = result.problems
    return result
  }
}
