import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { ChunkMeta } from '../src/chunks/layout.js'
import { resolveChunks, supersede } from '../src/chunks/supersede.js'
import { planMerges, tailBound, type CompactBounds, type PlanChunk } from '../src/compact/plan.js'

/*
 * The merge plan and the superseding rule on their own: what merges, what never does, and the tier
 * bound holding while a tail grows block by block with every plan applied (the plan is pure; the
 * chunks written from it are tested in compaction.test.ts).
 */

let n = 0
function chunk(first: number, last: number, o: Partial<ChunkMeta> = {}): PlanChunk {
  const meta: ChunkMeta = { family: 'evm', first, last, lastHash: '0x' + (++n).toString(16).padStart(8, '0'), firstParentHash: '0x', previousLast: first - 1, blockCount: last - first + 1, rowBytes: (last - first + 1) * 1000, tables: ['blocks'], rows: {}, ...o }
  return { ref: { top: 0, first, last, hash: meta.lastHash.slice(2, 10), path: `0000000000/${first}-${last}-${n}` }, meta }
}

/** Apply merges as the compactor does: the merged chunk replaces its parts. */
function apply(chunks: PlanChunk[], b: CompactBounds): PlanChunk[] {
  for (;;) {
    const merges = planMerges(chunks, b)
    if (!merges.length) return chunks
    for (const m of merges) {
      const at = chunks.indexOf(m.chunks[0])
      const first = m.chunks[0].meta.first
      const last = m.chunks.at(-1)!.meta.last
      const merged = chunk(first, last, { tier: m.tier, sealed: m.sealed || undefined, blockCount: m.chunks.reduce((s, c) => s + c.meta.blockCount, 0), rowBytes: m.chunks.reduce((s, c) => s + c.meta.rowBytes!, 0) })
      chunks = [...chunks.slice(0, at), merged, ...chunks.slice(at + m.chunks.length)]
    }
  }
}

describe('compaction plan', () => {
  it('keeps the open tail within (F − 1) per tier while it grows, and never exceeds the bounds', () => {
    for (const b of [{ fanout: 2, chunkBlocks: 100, chunkBytes: 1e12 }, { fanout: 4, chunkBlocks: 100, chunkBytes: 1e12 }, { fanout: 3, chunkBlocks: 1000, chunkBytes: 50_000 }]) {
      let chunks: PlanChunk[] = []
      let next = 0
      for (let i = 0; i < 600; i++) {
        const size = 1 + (i % 3)
        chunks.push(chunk(next, next + size - 1))
        next += size
        chunks = apply(chunks, b)
        for (const c of chunks) {
          assert.ok(c.meta.blockCount <= b.chunkBlocks && c.meta.rowBytes! <= b.chunkBytes, `${JSON.stringify(b)}: ${c.meta.first}-${c.meta.last} over the bounds`)
        }
        const open = chunks.filter((c) => !c.meta.sealed && c.meta.blockCount < b.chunkBlocks && c.meta.rowBytes! < b.chunkBytes)
        // chunks that cannot merge with their successor (together over the bounds) are not counted
        const stuck = open.filter((c, j) => j + 1 < open.length && c.meta.blockCount + open[j + 1].meta.blockCount > b.chunkBlocks)
        assert.ok(open.length - stuck.length <= tailBound(b), `${JSON.stringify(b)} after ${i + 1} chunks: ${open.length} open (bound ${tailBound(b)})`)
      }
      for (let i = 1; i < chunks.length; i++) assert.equal(chunks[i].meta.first, chunks[i - 1].meta.last + 1)
      assert.ok(chunks.length < 600 / 5, `${chunks.length} chunks`)
    }
    assert.equal(tailBound({ fanout: 4, chunkBlocks: 10_000 }), 21)
  })

  it('leaves the chunks of ranges other ingests claim alone (a backfill in parallel), and never merges across the block before a range', () => {
    const b: CompactBounds = { fanout: 2, chunkBlocks: 1000, chunkBytes: 1e9 }
    const chunks = [chunk(0, 9), chunk(10, 19), chunk(20, 29), chunk(30, 39), chunk(40, 49), chunk(50, 59)]
    const merged = (m: ReturnType<typeof planMerges>) => m.map((x) => x.chunks.map((c) => c.meta.first))
    assert.deepEqual(merged(planMerges(chunks, b)), [[0, 10], [20, 30], [40, 50]])
    assert.deepEqual(merged(planMerges(chunks, { ...b, excluded: [{ from: 20, to: 39 }] })), [[0, 10], [40, 50]])
    assert.deepEqual(merged(planMerges(chunks, { ...b, excluded: [{ from: 35, to: null }] })), [[0, 10]], 'a claim up to the head')
    // the first chunk of a range says which block it follows: not the end of the chunk before it while the blocks between are missing
    assert.deepEqual(merged(planMerges([chunk(0, 9), chunk(30, 39, { previousLast: 29 })], b)), [])
  })

  it('never merges across a jump, other tables, full, sealed or size-less chunks, or above maxBlock', () => {
    const b = { fanout: 2, chunkBlocks: 10, chunkBytes: 1e12 }
    assert.equal(planMerges([chunk(0, 0), chunk(5, 5, { previousLast: 3 })], b).length, 0, 'a jump')
    assert.equal(planMerges([chunk(0, 0), chunk(1, 1, { tables: ['blocks', 'logs'] })], b).length, 0, 'other tables')
    assert.equal(planMerges([chunk(0, 9), chunk(10, 10)], b).length, 0, 'full')
    assert.equal(planMerges([chunk(0, 1, { sealed: true }), chunk(2, 2)], b).length, 0, 'sealed')
    assert.equal(planMerges([chunk(0, 0, { rowBytes: undefined }), chunk(1, 1)], b).length, 0, 'no rowBytes')
    assert.equal(planMerges([chunk(0, 0), chunk(1, 1)], { ...b, maxBlock: 0 }).length, 0, 'above maxBlock')
    assert.equal(planMerges([chunk(0, 0), chunk(1, 1)], b).length, 1)
    // a sparse dataset: a jump the ingest made on purpose (previousLast says so) is merged over
    assert.equal(planMerges([chunk(0, 0), chunk(5, 5, { previousLast: 0 })], b).length, 1)
    // four tier-0 chunks of 4, 4, 2 and 2 blocks with a bound of 10: the longest run that fits (three), sealed
    const [m] = planMerges([chunk(0, 3), chunk(4, 7), chunk(8, 9), chunk(10, 11)], { fanout: 4, chunkBlocks: 10, chunkBytes: 1e12 })
    assert.deepEqual(m.chunks.map((c) => c.meta.first), [0, 4, 8])
    assert.equal(m.sealed, true)
  })

  it('supersede: contained chunks go, equal ranges and partial overlaps stay', () => {
    const r = (first: number, last: number, path: string) => ({ first, last, path })
    const { kept, superseded } = supersede([r(0, 3, 'a'), r(4, 7, 'b'), r(0, 7, 'M'), r(8, 8, 'c'), r(4, 5, 'x')])
    assert.deepEqual(kept.map((c) => c.path), ['M', 'c'])
    assert.deepEqual(superseded.map((s) => [s.chunk.path, s.by.path]).sort(), [['a', 'M'], ['b', 'M'], ['x', 'M']])
    assert.deepEqual(resolveChunks([r(0, 3, 'a'), r(0, 3, 'a2')]).map((c) => c.path), ['a', 'a2'], 'the same range twice is an overlap, not a merge')
    assert.deepEqual(resolveChunks([r(0, 5, 'a'), r(3, 8, 'b')]).map((c) => c.path), ['a', 'b'], 'a partial overlap stays for the continuity check')
  })
})
