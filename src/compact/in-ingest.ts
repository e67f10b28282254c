import type { FamilyDecl } from '../families/declaration.js'
import type { IngestTarget } from '../ingest/target.js'
import { Compactor } from './compactor.js'

/* The compactor an ingest with `--follow --compact` runs beside its loop, on the target it holds. */

export interface CompactSettings {
  fanout: number
  graceMs: number
  intervalMs?: number
  /** Only chunks ending at or below this block are merged (default: all written chunks). */
  maxBlock?: () => number
  /** Block ranges whose chunks are not merged (other ingests' claims: ranges still being written). */
  excluded?: () => Promise<{ from: number; to: number | null }[]>
}


export function startCompactor(target: IngestTarget, family: FamilyDecl, dataset: string, chunkBlocks: number, chunkBytes: number, s: CompactSettings): Compactor {
  const c = new Compactor(target, family, { dataset, chunkBlocks, chunkBytes, fanout: s.fanout, graceMs: s.graceMs, intervalMs: s.intervalMs, maxBlock: s.maxBlock, excluded: s.excluded })
  c.start()
  return c
}
