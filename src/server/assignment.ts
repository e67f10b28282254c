import type { ChunkRef } from '../chunks/layout.js'
import { mergeRanges, type Range } from './ranges.js'

/*
 * Which workers should hold which chunks of one dataset: highest-random-weight (rendezvous) hashing
 * of chunk groups × live workers. Each group goes to the `replication` live workers with the highest
 * score `hash(dataset, group) ⊕ hash(worker)`, so the result depends only on the chunk listing and the
 * set of live workers: two routers over the same storage with the same workers agree, and a router
 * restarted with the same workers comes back to the same assignment. A worker joining takes over the
 * groups where it scores in the top `replication`, a worker leaving hands on only its own groups:
 * either moves about `replication / N` of the groups.
 *
 * Groups are runs of consecutive chunks (so a worker gets contiguous ranges and one answer covers
 * several chunks). A chunk starts a new group when the hash of its path is 0 modulo `groupChunks`
 * (and the first chunk always does): groups average `groupChunks` chunks, depend on nothing but the
 * chunks' own paths, and chunks appended to a dataset join its last group until one starts a new
 * one. A group is named by its first chunk's path.
 */

export interface AssignmentOptions {
  replication: number
  /** Average chunks per group (1: every chunk on its own). */
  groupChunks: number
}

interface Pick {
  id: string
  score: number
}

interface Group {
  key: string
  /** Hash of the dataset and the key. */
  hash: number
  /** Index of the group's first chunk in the listing, and one past its last. */
  start: number
  end: number
  /** Highest score first, at most `replication`. */
  picks: Pick[]
}

export class DatasetAssignment {
  private chunks: ChunkRef[] = []
  private groups: Group[] = []
  /** Chunk index → its group. */
  private groupAt: Group[] = []
  private live = new Map<string, number>()
  /** Worker → the groups it is picked for, kept up to date as picks change. */
  private groupsOf = new Map<string, Set<Group>>()
  /**
   * Worker → its chunks (ascending) and their ranges, built when asked and dropped only for the
   * workers a change touches: with many workers, one joining must not rebuild every list.
   */
  private chunkLists = new Map<string, ChunkRef[]>()
  private rangeLists = new Map<string, Range[]>()

  constructor(
    private readonly dataset: string,
    private readonly opts: AssignmentOptions,
  ) {}

  /** The listing changed: keep the groups of a listing that only grew, rebuild otherwise. */
  setChunks(chunks: ChunkRef[]): void {
    const old = this.chunks
    const grew = old.length > 0 && chunks.length >= old.length && chunks[old.length - 1].path === old[old.length - 1].path && chunks[0].path === old[0].path
    this.chunks = chunks
    if (grew) {
      for (let i = old.length; i < chunks.length; i++) this.place(chunks, i)
    } else {
      const known = new Map(this.groups.map((g) => [g.key, g.picks]))
      this.groups = []
      this.groupAt = []
      this.groupsOf.clear()
      this.chunkLists.clear()
      this.rangeLists.clear()
      for (let i = 0; i < chunks.length; i++) this.place(chunks, i, known)
    }
  }

  /** Put chunk `i` into the last group or start a group with it. */
  private place(chunks: ChunkRef[], i: number, known?: Map<string, Pick[]>): void {
    const last = this.groups.at(-1)
    if (!last || hash32(chunks[i].path) % this.opts.groupChunks === 0) {
      const key = chunks[i].path
      const hash = hash32(`${this.dataset}\n${key}`)
      const g: Group = { key, hash, start: i, end: i + 1, picks: known?.get(key) ?? this.pickAll(hash) }
      this.groups.push(g)
      this.groupAt.push(g)
      for (const p of g.picks) this.addHolder(p.id, g)
    } else {
      last.end = i + 1
      this.groupAt.push(last)
      for (const p of last.picks) this.touch(p.id)
    }
  }

  /** The live workers changed: groups take in joiners that outscore their picks and replace leavers. */
  setLive(ids: Iterable<string>): void {
    const next = new Map<string, number>()
    for (const id of ids) next.set(id, this.live.get(id) ?? hash32(id))
    const joined = [...next.keys()].filter((id) => !this.live.has(id))
    const left = new Set([...this.live.keys()].filter((id) => !next.has(id)))
    if (!joined.length && !left.size) return
    this.live = next
    const want = Math.min(this.opts.replication, next.size)
    const joinedHashes = joined.map((id) => next.get(id)!)
    for (const g of this.groups) {
      if (g.picks.length > want || (left.size && g.picks.some((p) => left.has(p.id)))) {
        this.repick(g)
        continue
      }
      // The hot loop when many workers join one by one: no allocation unless the joiner gets in.
      for (let j = 0; j < joined.length; j++) {
        const s = score(g.hash, joinedHashes[j])
        const last = g.picks.at(-1)
        if (g.picks.length >= want && last && !better(s, joined[j], last)) continue
        const out = insertPick(g.picks, { id: joined[j], score: s }, want)
        if (out === undefined) continue
        this.addHolder(joined[j], g)
        if (out) this.dropHolder(out.id, g)
      }
    }
    for (const id of left) {
      this.groupsOf.delete(id)
      this.touch(id)
    }
  }

  /** Pick the group's workers again from scratch. */
  private repick(g: Group): void {
    const picks = this.pickAll(g.hash)
    for (const p of g.picks) if (!picks.some((q) => q.id === p.id)) this.dropHolder(p.id, g)
    for (const p of picks) if (!g.picks.some((q) => q.id === p.id)) this.addHolder(p.id, g)
    g.picks = picks
  }

  private addHolder(id: string, g: Group): void {
    let set = this.groupsOf.get(id)
    if (!set) this.groupsOf.set(id, (set = new Set()))
    set.add(g)
    this.touch(id)
  }

  private dropHolder(id: string, g: Group): void {
    const set = this.groupsOf.get(id)
    set?.delete(g)
    if (set?.size === 0) this.groupsOf.delete(id)
    this.touch(id)
  }

  /** The worker's lists are out of date. */
  private touch(id: string): void {
    this.chunkLists.delete(id)
    this.rangeLists.delete(id)
  }

  private pickAll(groupHash: number): Pick[] {
    const want = Math.min(this.opts.replication, this.live.size)
    const picks: Pick[] = []
    for (const [id, wh] of this.live) insertPick(picks, { id, score: score(groupHash, wh) }, want)
    return picks
  }

  /** Workers the chunk at `index` of the listing is assigned to. */
  assignedAt(index: number): readonly string[] {
    return this.groupAt[index]?.picks.map((p) => p.id) ?? []
  }

  isAssigned(index: number, worker: string): boolean {
    const picks = this.groupAt[index]?.picks
    if (picks) for (const p of picks) if (p.id === worker) return true
    return false
  }

  /** The chunks assigned to `worker`, ascending. */
  chunksOf(worker: string): readonly ChunkRef[] {
    let list = this.chunkLists.get(worker)
    if (!list) {
      list = []
      const groups = [...(this.groupsOf.get(worker) ?? [])].sort((a, b) => a.start - b.start)
      for (const g of groups) for (let i = g.start; i < g.end; i++) list.push(this.chunks[i])
      this.chunkLists.set(worker, list)
    }
    return list
  }

  /** The chunks assigned to `worker` as merged ranges. */
  rangesOf(worker: string): Range[] {
    let r = this.rangeLists.get(worker)
    if (!r) this.rangeLists.set(worker, (r = mergeRanges(this.chunksOf(worker))))
    return r
  }

  get groupCount(): number {
    return this.groups.length
  }
}

/**
 * Keep `picks` the `want` highest scores, highest first (ties: the smaller id). Returns undefined
 * when `p` did not get in, else the pick it pushed out (null: none).
 */
function insertPick(picks: Pick[], p: Pick, want: number): Pick | null | undefined {
  let i = picks.length
  while (i > 0 && better(p.score, p.id, picks[i - 1])) i--
  if (i >= want) return undefined
  picks.splice(i, 0, p)
  return picks.length > want ? picks.pop()! : null
}

/** Whether a pick of `score` and `id` ranks above `b`. */
function better(score: number, id: string, b: Pick): boolean {
  return score !== b.score ? score > b.score : id < b.id
}

/** A worker's score for a group: the two hashes mixed (murmur3's finaliser), as an unsigned 32-bit number. */
function score(groupHash: number, workerHash: number): number {
  return fmix32((groupHash ^ fmix32(workerHash + 0x9e3779b9)) >>> 0)
}

function fmix32(h: number): number {
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/** FNV-1a over the UTF-16 code units, finalised: a stable 32-bit hash of a string. */
export function hash32(s: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return fmix32(h >>> 0)
}
