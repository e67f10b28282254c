import { Gauge } from 'prom-client'
import { registry } from '../metrics.js'
import type { FillGap } from './continuity.js'
import type { ClaimRecord } from '../ingest/range-claims.js'
import type { ChunkStorage } from './storage.js'

/*
 * The router's view of gaps being filled (a backfill in parallel, docs/ingest.md): blocks missing
 * between served chunks, in ranges ingests claim. Blocks in them are answered 503 (a client waits
 * and asks again, rather than getting an answer that skips them); the height stays below the first
 * one; chunks after them are served.
 */

export const routerGaps = new Gauge({
  name: 'block_archive_router_backfill_gaps',
  help: 'Gaps between served chunks that ingests are still filling (ranges claimed by a backfill), per dataset',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export const routerGapBlocks = new Gauge({
  name: 'block_archive_router_backfill_gap_blocks',
  help: 'Blocks missing in those gaps, per dataset (0 once every range is filled)',
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export function reportGaps(dataset: string, gaps: readonly FillGap[]): void {
  routerGaps.set({ dataset }, gaps.length)
  routerGapBlocks.set({ dataset }, gaps.reduce((n, g) => n + g.last - g.first + 1, 0))
}

/** The gap holding `block`, if any. */
export function blockInGap(gaps: readonly FillGap[], block: number): FillGap | undefined {
  return gaps.find((g) => g.first <= block && block <= g.last)
}

/** Whether a gap lies between the two blocks (above `low`, below `high`). */
export function gapsBelow(gaps: readonly FillGap[], low: number, high: number): boolean {
  return gaps.some((g) => g.first > low && g.last < high)
}

/** Claims are read again at least this often while none is known (a backfill below the first chunk). */
const CLAIMS_RECHECK_MS = 10_000

/**
 * The range claims of one dataset, read when they may matter, so that a relisting of a dataset
 * nobody backfills costs no request more: at the first listing, at every listing while claims
 * exist, every CLAIMS_RECHECK_MS otherwise, and when the listing finds a missing chunk (`force`:
 * the first chunk of a range that started since).
 */
export class ClaimWatch {
  private claims: ClaimRecord[] = []
  private readAt = -Infinity
  /** Read during the current listing. */
  fresh = false

  constructor(
    private readonly storage: ChunkStorage,
    private readonly dataset: string,
  ) {}

  async read(force: boolean, now = Date.now()): Promise<ClaimRecord[]> {
    this.fresh = force || this.claims.length > 0 || now - this.readAt >= CLAIMS_RECHECK_MS
    if (!this.fresh || !this.storage.listClaims) return this.claims
    this.claims = await this.storage.listClaims(this.dataset)
    this.readAt = now
    return this.claims
  }
}
