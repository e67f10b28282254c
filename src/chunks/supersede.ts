/*
 * The superseding rule of compaction (docs/ingest.md, "Compaction"): among complete chunks, a chunk
 * whose [first, last] lies inside another complete chunk's range (and is not the same range) is
 * superseded by it: the bigger one holds the same blocks, merged. Listings resolve it the same way
 * everywhere (the ingest's resume, the router, a worker's view), so a merged chunk and the chunks it
 * replaces are never served side by side. Overlaps that are not containment remain problems.
 */

export interface Ranged {
  first: number
  last: number
}

export interface Superseded<T> {
  chunk: T
  /** The outermost chunk containing it. */
  by: T
}

/**
 * Split `chunks` into those no other chunk contains (`kept`, ascending by first block) and those
 * contained in one of them (`superseded`). Two chunks of the very same range both stay kept (the
 * continuity check reports them as an overlap).
 */
export function supersede<T extends Ranged>(chunks: readonly T[]): { kept: T[]; superseded: Superseded<T>[] } {
  const sorted = [...chunks].sort((a, b) => a.first - b.first || b.last - a.last)
  const kept: T[] = []
  const superseded: Superseded<T>[] = []
  /** The kept chunk reaching furthest so far. */
  let reach: T | undefined
  for (const c of sorted) {
    if (reach && c.last <= reach.last && (c.first !== reach.first || c.last !== reach.last)) {
      superseded.push({ chunk: c, by: reach })
      continue
    }
    kept.push(c)
    if (!reach || c.last > reach.last) reach = c
  }
  return { kept, superseded }
}

/** The chunks no other contains, ascending (what is served and what an ingest resumes after). */
export function resolveChunks<T extends Ranged>(chunks: readonly T[]): T[] {
  return supersede(chunks).kept
}
