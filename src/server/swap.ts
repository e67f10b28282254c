import type { ChunkRef } from '../chunks/layout.js'
import type { ChunkLinks } from '../chunks/chunk-index.js'
import type { Superseded } from '../chunks/supersede.js'

/*
 * The router's side of compaction (docs/serving.md, "Compaction"): a merged chunk that no live worker
 * serves yet is routed as the chunks it replaces (its meta's `replaces`, while they are all still
 * complete in storage), and both are assigned, so workers fetch the merged chunk while the small
 * ones answer. Once a live worker serves the merged chunk, routing switches to it in one step and the
 * small ones are no longer assigned (workers drop them after their grace, as any unassigned chunk).
 */

export interface Routing {
  /** What blocks are routed to: no two overlap. */
  chunks: ChunkRef[]
  /** Merged chunks not served yet: assigned (to be fetched) but not routed to. */
  pending: ChunkRef[]
}

export class MergeSwap {
  /** Merged chunk path → the chunks it replaces, each complete in the latest listing. */
  private replaces = new Map<string, { ref: ChunkRef; parts: ChunkRef[] }>()
  /** Chunk path → its meta's `replaces` (undefined: none); metas never change. */
  private readonly known = new Map<string, string[] | undefined>()
  private lastKey?: string
  /** Paths of the merged chunks that stand in for others (announced to workers). */
  merged: string[] = []

  /**
   * After a listing (`all` complete chunks, `superseded` the ones a bigger chunk contains): which
   * merged chunks can still stand in as the chunks they replace. Returns whether that changed.
   */
  async update(all: ChunkRef[], superseded: Superseded<ChunkRef>[], metaOf: (c: ChunkRef) => Promise<ChunkLinks>): Promise<boolean> {
    // nothing merged, before or now: nothing to look up (a relisting of 100,000 chunks stays cheap)
    if (!superseded.length && !this.replaces.size && !this.known.size) return false
    const byPath = new Map(all.map((c) => [c.path, c]))
    // merged chunks: those containing another (a superseded chunk may itself be merged, from a lower tier)
    const containers = new Map<string, ChunkRef>()
    for (const { chunk, by } of superseded) {
      containers.set(by.path, by)
      if (chunk.last > chunk.first) containers.set(chunk.path, chunk)
    }
    const next = new Map<string, { ref: ChunkRef; parts: ChunkRef[] }>()
    for (const c of containers.values()) {
      if (!this.known.has(c.path)) this.known.set(c.path, await metaOf(c).then((m) => m.replaces, () => undefined))
      const paths = this.known.get(c.path)
      const parts = paths?.map((p) => byPath.get(p))
      if (parts?.length && parts.every((p) => p)) next.set(c.path, { ref: c, parts: (parts as ChunkRef[]).sort((a, b) => a.first - b.first) })
    }
    for (const p of this.known.keys()) if (!byPath.has(p)) this.known.delete(p)
    const changed = JSON.stringify([...next.values()]) !== JSON.stringify([...this.replaces.values()])
    this.replaces = next
    this.merged = [...next.keys()]
    if (changed) this.lastKey = undefined
    return changed
  }

  /**
   * The routing over `listed` (servable chunks, none superseded) given which chunks have a live
   * server; undefined when it is as last computed (cheap: called at every route).
   */
  routing(listed: ChunkRef[], served: (c: ChunkRef) => boolean, force = false): Routing | undefined {
    if (!this.replaces.size) {
      if (!force && this.lastKey === '') return undefined
      this.lastKey = ''
      return { chunks: listed, pending: [] }
    }
    const key = [...this.replaces.values()].map((r) => (served(r.ref) ? '1' : '0')).join('')
    if (!force && key === this.lastKey) return undefined
    this.lastKey = key
    const chunks: ChunkRef[] = []
    const pending: ChunkRef[] = []
    const expand = (c: ChunkRef) => {
      const parts = this.replaces.get(c.path)?.parts
      if (!parts || served(c)) return void chunks.push(c)
      pending.push(c)
      for (const p of parts) expand(p)
    }
    for (const c of listed) expand(c)
    return { chunks, pending }
  }
}
