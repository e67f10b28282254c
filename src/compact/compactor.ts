import { rm } from 'node:fs/promises'
import path from 'node:path'
import type { ChunkMeta, ChunkRef } from '../chunks/layout.js'
import { supersede, type Superseded } from '../chunks/supersede.js'
import type { ParquetSettings } from '../chunks/writer.js'
import type { FamilyDecl } from '../families/declaration.js'
import { LeaseLost } from '../ingest/locked.js'
import type { IngestTarget } from '../ingest/target.js'
import { log } from '../log.js'
import { mapLimit } from '../semaphore.js'
import { writeMerged } from './merge.js'
import {
  compactionChunksMerged,
  compactionFailures,
  compactionMerges,
  compactionMergeSeconds,
  compactionOpenChunks,
  compactionRemoved,
  compactionSuperseded,
} from './metrics.js'
import { isOpen, planMerges, type CompactBounds, type Merge, type PlanChunk } from './plan.js'

/*
 * Compaction of a dataset the process holds (the ingest's lock or S3 lease: an ingest with
 * `--follow`, or the `compact` command; docs/ingest.md, "Compaction"). A pass merges what plan.ts
 * says until nothing is left, each merged chunk appearing atomically as the ingest's chunks do (temp
 * folder + rename; on S3 blocks.parquet last), and deletes the chunks a merged chunk superseded once
 * `graceMs` has passed since it was published (its meta's `compactedAt`): by then the router has
 * switched to it and workers have dropped them (docs/serving.md, "Compaction"). A pass repeats what a
 * killed run left undone: merges are planned from the listing, and superseded chunks are deleted
 * whenever their grace has passed.
 */

export interface CompactorOptions extends Omit<CompactBounds, 'maxBlock' | 'excluded'> {
  /** Dataset name (logs and metrics). */
  dataset: string
  /** Superseded chunks are deleted this long after the merged chunk was published. */
  graceMs: number
  /** Background passes (`start`): at most this long apart (`kick` starts one sooner). Default 2 s. */
  intervalMs?: number
  /** Only chunks ending at or below this block are merged (default: all). */
  maxBlock?: () => number
  /** Ranges whose chunks are not merged (read at each pass). */
  excluded?: () => Promise<{ from: number; to: number | null }[]>
  /**
   * Read every chunk's meta (the `compact` command). Otherwise only the end of the dataset is looked
   * at: back to the last `CLOSED_RUN` consecutive chunks compaction leaves as they are.
   */
  all?: boolean
  /** Parquet settings of the merged chunks (default: the writer's, `PARQUET_DEFAULTS`). */
  write?: ParquetSettings
  /** Background passes stopped: the S3 lease was lost. */
  onLeaseLost?: (e: LeaseLost) => void
}

export interface PassResult {
  merged: number
  removed: number
  /** Open chunks (that a later pass may merge) and superseded chunks waiting for their grace, at the end. */
  open: number
  waiting: number
}

/** Superseded chunks deleted at once. */
const REMOVALS = 4

/** Without `all`: the backward scan for open chunks stops after this many closed ones in a row. */
const CLOSED_RUN = 16

/**
 * Complete chunks are listed from storage at the first pass and then this often; in between the
 * compactor keeps the listing itself (it is the only one merging and deleting, and the ingest tells
 * it each chunk it writes: `add`), so a pass costs no listing of a big dataset.
 */
const FULL_LISTING_MS = 10 * 60_000

export class Compactor {
  private readonly metas = new Map<string, ChunkMeta>()
  /** Superseding chunks without `compactedAt`: when this process first saw them. */
  private readonly firstSeen = new Map<string, number>()
  private stopped = false
  private loop?: Promise<void>
  private wake?: () => void
  /** Complete chunks as last listed, with what this process did since. */
  private known?: ChunkRef[]
  private listedAt = 0

  constructor(
    private readonly target: IngestTarget,
    private readonly family: FamilyDecl,
    private readonly o: CompactorOptions,
  ) {
    if (o.fanout < 2) throw new Error(`--compact-fanout must be 2 or more, not ${o.fanout}`)
  }

  /** Merge until nothing is left to merge, deleting superseded chunks whose grace has passed. */
  async catchUp(): Promise<PassResult> {
    const result: PassResult = { merged: 0, removed: 0, open: 0, waiting: 0 }
    for (;;) {
      const { kept, superseded } = supersede(await this.listing())
      const removed = await this.removeSuperseded(superseded)
      result.removed += removed
      result.waiting = superseded.length - removed
      compactionSuperseded.set({ dataset: this.o.dataset }, result.waiting)
      const chunks = await this.tail(kept)
      const bounds = { ...this.o, maxBlock: this.o.maxBlock?.(), excluded: await this.o.excluded?.() }
      result.open = chunks.filter((c) => isOpen(c.meta, bounds)).length
      compactionOpenChunks.set({ dataset: this.o.dataset }, result.open)
      const merges = planMerges(chunks, bounds)
      if (!merges.length || this.stopped) return result
      for (const m of merges) {
        if (this.stopped) return result
        await this.mergeOne(m)
        result.merged++
      }
    }
  }

  /** Passes in the background until `stop`; failures are logged and retried at the next pass. */
  start(): void {
    this.loop ??= (async () => {
      while (!this.stopped) {
        try {
          const r = await this.catchUp()
          if (r.merged || r.removed) log.info({ dataset: this.o.dataset, ...r }, 'compaction pass')
        } catch (e) {
          compactionFailures.inc({ dataset: this.o.dataset })
          if (e instanceof LeaseLost) {
            // another process holds the dataset now: stop (an ingest stops by itself at its next chunk)
            log.error({ dataset: this.o.dataset, err: e.message }, 'compaction stopped')
            this.stopped = true
            this.o.onLeaseLost?.(e)
            break
          }
          this.known = undefined // list again: what failed may have changed storage
          log.warn({ dataset: this.o.dataset, err: e instanceof Error ? e.message : String(e) }, 'compaction pass failed; retrying at the next pass')
        }
        if (this.stopped) break
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, this.o.intervalMs ?? 2000)
          this.wake = () => {
            clearTimeout(t)
            resolve()
          }
        })
        this.wake = undefined
      }
    })()
  }

  /** A chunk the ingest has written (complete): known without listing, and the next background pass starts now. */
  add(ref: ChunkRef): void {
    if (this.known && !this.known.some((c) => c.path === ref.path)) this.known.push(ref)
    this.wake?.()
  }

  private async listing(): Promise<ChunkRef[]> {
    if (!this.known || Date.now() - this.listedAt >= FULL_LISTING_MS) {
      this.known = await this.target.listComplete()
      this.listedAt = Date.now()
    }
    return [...this.known]
  }

  /** Stop after the merge in progress (a merge is never left half published). */
  async stop(): Promise<void> {
    this.stopped = true
    this.wake?.()
    await this.loop
  }

  private async meta(ref: ChunkRef): Promise<ChunkMeta> {
    let m = this.metas.get(ref.path)
    if (!m) {
      m = await this.target.readChunkMeta(ref)
      this.metas.set(ref.path, m)
    }
    return m
  }

  /** The chunks (with metas) plan.ts looks at: all of them, or the end of the dataset. */
  private async tail(kept: ChunkRef[]): Promise<PlanChunk[]> {
    if (this.o.all) {
      const out: PlanChunk[] = []
      for (let i = 0; i < kept.length; i += 16) {
        const part = kept.slice(i, i + 16)
        const metas = await Promise.all(part.map((ref) => this.meta(ref)))
        out.push(...part.map((ref, j) => ({ ref, meta: metas[j] })))
      }
      return out
    }
    const out: PlanChunk[] = []
    let closed = 0
    for (let i = kept.length - 1; i >= 0 && closed < CLOSED_RUN; i--) {
      const ref = kept[i]
      // a range as long as the block bound: closed without reading its meta (a sparse one left open is only not merged)
      const meta = ref.last - ref.first + 1 >= this.o.chunkBlocks ? undefined : await this.meta(ref)
      if (!meta) {
        closed++
        continue
      }
      out.push({ ref, meta })
      closed = isOpen(meta, { ...this.o, maxBlock: undefined, excluded: undefined }) ? 0 : closed + 1
    }
    return out.reverse()
  }

  /** Deletes the superseded chunks whose grace has passed, `REMOVALS` at once (in object storage each is a few round trips). */
  private async removeSuperseded(superseded: Superseded<ChunkRef>[]): Promise<number> {
    const now = Date.now()
    let removed = 0
    await mapLimit(superseded, REMOVALS, async ({ chunk, by }) => {
      if (this.stopped) return
      const at = Date.parse((await this.meta(by)).compactedAt ?? '')
      const since = Number.isFinite(at) ? at : this.firstSeen.get(by.path) ?? (this.firstSeen.set(by.path, now), now)
      if (now - since < this.o.graceMs || this.stopped) return
      await this.target.removeChunk(chunk)
      this.metas.delete(chunk.path)
      this.known = this.known?.filter((c) => c.path !== chunk.path)
      removed++
      compactionRemoved.inc({ dataset: this.o.dataset })
      log.info({ dataset: this.o.dataset, chunk: chunk.path, supersededBy: by.path }, 'superseded chunk removed')
    })
    return removed
  }

  private async mergeOne(m: Merge): Promise<void> {
    const t0 = performance.now()
    const opened: { dir: string; done(): Promise<void> }[] = []
    let ref: ChunkRef
    try {
      // at once: from object storage each is a download, whose time is mostly the round trips
      const folders = await Promise.allSettled(m.chunks.map((c) => this.target.chunkFolder(c.ref)))
      for (const f of folders) if (f.status === 'fulfilled') opened.push(f.value)
      for (const f of folders) if (f.status === 'rejected') throw f.reason
      ref = await writeMerged(this.family, this.target.buildRoot, { merge: m, folders: opened.map((f) => f.dir), top: m.chunks[0].ref.top }, this.o.write)
    } finally {
      for (const f of opened) await f.done()
    }
    try {
      await this.target.publish(ref)
    } catch (e) {
      // Built in a staging folder (object storage): drop it, the next pass merges again. (A folder
      // target's rename was the publishing: the chunk is in place.)
      if (this.target.buildRoot !== this.target.where) await rm(path.join(this.target.buildRoot, ref.path), { recursive: true, force: true })
      throw e
    }
    this.known?.push(ref)
    const seconds = (performance.now() - t0) / 1000
    compactionMerges.inc({ dataset: this.o.dataset })
    compactionChunksMerged.inc({ dataset: this.o.dataset }, m.chunks.length)
    compactionMergeSeconds.observe({ dataset: this.o.dataset }, seconds)
    log.info({ dataset: this.o.dataset, chunk: ref.path, merged: m.chunks.length, tier: m.tier, sealed: m.sealed, ms: Math.round(seconds * 1000) }, 'chunks merged')
  }
}
