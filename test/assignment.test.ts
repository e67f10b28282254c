import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { syntheticChunk } from '../bench/lib/synthetic-chunks.js'
import type { ChunkRef } from '../src/chunks/layout.js'
import { DatasetAssignment } from '../src/server/assignment.js'
import { mergeRanges } from '../src/server/ranges.js'
import { prng } from './helpers/fault-proxy.js'

/*
 * The assignment keeps each worker's chunk list up to date as workers join and leave and the
 * listing grows or changes, instead of rebuilding every list on every change. After each step of a
 * random sequence, every worker's `chunksOf` and `rangesOf` must be what the chunks' own picks say,
 * and the whole assignment must equal one built from scratch over the same listing and live set.
 */

/** Synthetic chunks `from` … `to` - 1 (chunk i holds block 10·i). */
const chunks = (from: number, to: number): ChunkRef[] => Array.from({ length: to - from }, (_, i) => syntheticChunk(from + i).ref)

function assertConsistent(a: DatasetAssignment, listing: ChunkRef[], live: string[], step: string): void {
  const fresh = new DatasetAssignment('ds', { replication: 2, groupChunks: 3 })
  fresh.setLive(live)
  fresh.setChunks(listing)
  for (const w of [...live, 'never-seen']) {
    const want = listing.filter((_, i) => a.assignedAt(i).includes(w))
    assert.deepEqual(a.chunksOf(w), want, `${step}: chunksOf(${w})`)
    assert.deepEqual(a.rangesOf(w), mergeRanges(want), `${step}: rangesOf(${w})`)
    assert.deepEqual(a.chunksOf(w), fresh.chunksOf(w), `${step}: ${w} as built from scratch`)
  }
  for (let i = 0; i < listing.length; i++) assert.deepEqual([...a.assignedAt(i)].sort(), [...fresh.assignedAt(i)].sort(), `${step}: chunk ${i}`)
}

describe('chunk assignment kept up to date', () => {
  it('joins, leaves, a growing listing and a replaced one: every list equals the picks and a fresh build', () => {
    const seed = Number(process.env.BLOCK_ARCHIVE_TEST_SEED ?? Date.now() % 1_000_000)
    const random = prng(seed)
    const a = new DatasetAssignment('ds', { replication: 2, groupChunks: 3 })
    let made = 40
    let listing = chunks(0, made)
    let live = ['w0']
    let next = 1
    a.setLive(live)
    a.setChunks(listing)
    for (let step = 0; step < 150; step++) {
      const r = random()
      let what: string
      if (r < 0.35) {
        const n = 1 + Math.floor(random() * 3)
        const joined = Array.from({ length: n }, () => `w${next++}`)
        live = [...live, ...joined]
        what = `join ${joined}`
      } else if (r < 0.6 && live.length > 1) {
        const gone = live[Math.floor(random() * live.length)]
        live = live.filter((w) => w !== gone)
        what = `leave ${gone}`
      } else if (r < 0.85) {
        const n = 1 + Math.floor(random() * 5)
        listing = [...listing, ...chunks(made, made + n)]
        made += n
        what = `grow to ${listing.length}`
      } else {
        // A merge replaced a run of chunks: the listing is not an extension of the old one.
        const from = Math.floor(random() * (listing.length - 2))
        const merged = { ...listing[from], last: listing[from + 2].last, path: `${listing[from].path}-merged` }
        listing = [...listing.slice(0, from), merged, ...listing.slice(from + 3)]
        what = `merge at ${from}`
      }
      if (what.startsWith('join') || what.startsWith('leave')) a.setLive(live)
      else a.setChunks(listing)
      // Ask for some lists between changes, so cached lists have to be dropped, not just built late.
      for (const w of live) if (random() < 0.5) a.chunksOf(w)
      assertConsistent(a, listing, live, `seed ${seed}, step ${step} (${what})`)
    }
  })
})
