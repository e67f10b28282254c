import { parseChunkPath, readMetaInDir, type ChunkRef } from '../chunks/layout.js'
import type { FamilyDecl } from '../families/declaration.js'
import { log } from '../log.js'
import { mapLimit } from '../semaphore.js'
import type { DatasetView, HeldChunk } from '../query/types.js'
import { prepareQueryValidator } from '../query/validate.js'
import type { LocalTables } from '../storage/local-forms.js'
import type { Readiness } from './http.js'
import { workerChunksHeld } from './metrics.js'
import { mergeRanges, rangesContain, type Range } from './ranges.js'
import type { DesiredState, PingAnswer } from './router.js'
import { lowerBoundLast } from '../chunks/search.js'
import { resolveChunks, supersede } from '../chunks/supersede.js'
import type { ChunkStorage, DatasetAnnouncement } from './storage.js'
import { httpRequest } from '../http-request.js'
import { extendListing } from './freshness.js'
import { PingSession } from './ping-session.js'

/*
 * What a worker holds. With a router, the worker pings it with what it holds and gets back what it
 * should hold; it fetches missing chunks through the storage and gives back chunks it should no
 * longer hold once a grace period has passed (clients may have been sent here just before the router
 * changed its mind) and no query uses them. Without a router it holds every chunk in storage.
 *
 * Queries see a dataset through a view: its held chunks, sorted, built once and reused until the
 * held set or the listing changes, so a lease costs the same however many chunks are held. Views are
 * numbered (epochs) and the worker counts the running leases of each. A chunk past its grace period
 * leaves the view first (retired at the current epoch: new queries no longer see it) and is deleted
 * once no lease of that epoch or an older one is running, since only those may read it. Local forms
 * are acquired per chunk as a query opens it (`DatasetView.localForm`) and released with the lease,
 * so forms no query reads stay free to be dropped for room. A chunk gets its form once queries have
 * read it from Parquet `formsAfterReads` times (the storage's setting; 0: every held chunk).
 */

export interface WorkerNodeOptions {
  id: string
  /** Base URL clients reach this worker at (the router appends `/datasets/<name>/query`). */
  publicUrl: string
  storage: ChunkStorage
  /** Router base URL; absent → serve every chunk of the storage (standalone worker). */
  routerUrl?: string
  heartbeatMs: number
  /** Keep serving an unassigned chunk this long before giving it back. */
  dropGraceMs: number
  /** Queries answered so far, reported in pings (the router shows queries/s). */
  queryCount?: () => number
  /** Extra headers of each ping (the worker token of access control). */
  pingHeaders?: () => Record<string, string>
  /** Held chunks whose files a reconcile pass looks at (default INTACT_PER_PASS). */
  intactPerPass?: number
}

/**
 * Reads of a chunk count at most once per `windowMs` (tests lower it): one client's sync reads a
 * chunk in several requests (each answer stops at the size budget and the next one continues, and
 * parallel segments start inside chunks), which is one read, not several.
 */
export const formReads = { windowMs: 60_000 }

interface Held {
  ref: ChunkRef
  dir: string
  /** Its local form is built. */
  formed?: boolean
  /** Reads from its Parquet files, at most one per `formReads.windowMs` (it gets a form at `formsAfterReads`). */
  reads?: number
  /** When the last read was counted. */
  readCountedAt?: number
  /** meta.json's `previousLast`: the block the chunk was written after (a chunk after a gap being filled answers only from its own first block). */
  previousLast?: number
  /** When the chunk stopped being desired; undefined while desired. */
  undesiredSince?: number
  /** Out of the view after the grace period, at this epoch: deleted once no lease of it or an older one runs. */
  retiredAt?: number
}

interface DatasetHolding {
  name: string
  family: FamilyDecl
  /** The dataset's chunks as last listed from storage (for coverFrom and height). */
  listing: ChunkRef[]
  held: Map<string, Held>
  desired: Range[]
  /** What queries see (the held chunks not retired); undefined after a change, built again at the next lease. */
  view?: { epoch: number; chunks: HeldChunk[]; height: number }
  /** Epoch of the latest view built (0: none yet). */
  epoch: number
  /** Running leases per epoch of their view. */
  leases: Map<number, number>
  /**
   * Bumped whenever the listing, the held set, a chunk's retirement or the desired ranges change:
   * what is computed from them over every chunk (`memo`) is computed again only then, so a
   * heartbeat of a worker holding 100,000 chunks costs little while nothing changes.
   */
  version: number
  memos: Map<string, { version: number; value: unknown }>
  /** `version` at which reconcile last found no held chunk leaving (undesired or retired). */
  settledAt: number
  /** Where the next bounded integrity sweep of held chunks starts (`INTACT_PER_PASS`). */
  intactCursor: number
}

export interface Lease {
  view: DatasetView
  release(): void
}

export class WorkerNode {
  private readonly datasets = new Map<string, DatasetHolding>()
  private timer?: NodeJS.Timeout
  private stopped = false
  private syncing?: Promise<void>
  lastPingOk = 0
  lastPingError?: string
  /** Heard from the router (standalone: listed storage) at least once. */
  private exchanged = false
  /** Finished a fetch pass after that. */
  private fetchedOnce = false

  constructor(readonly opts: WorkerNodeOptions) {}

  /** Register, fetch the first chunks and report them; then keep heartbeating until `stop`. */
  async start(): Promise<void> {
    await this.heartbeat()
    await this.settled()
    const loop = () => {
      if (this.stopped) return
      this.timer = setTimeout(async () => {
        await this.heartbeat()
        loop()
      }, this.opts.heartbeatMs)
      this.timer.unref()
    }
    loop()
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    await this.nudging
    await this.fresh
    await this.settled()
    await this.forming
    await this.opts.storage.close?.()
  }

  /** One heartbeat: ping the router (or list storage when standalone), then reconcile held chunks. */
  async heartbeat(): Promise<void> {
    await this.exchange()
    // Fetching may be slow (downloads): it runs in the background, one pass at a time. Not once
    // stopped (a ping in flight during stop): sync() would return at once, leaving `syncing` set to a
    // settled promise that settled() then awaits forever.
    if (!this.stopped) {
      if (this.syncing && this.desiredChanged && this.opts.routerUrl) this.fetchFreshBeside()
      this.syncing ??= this.sync()
    }
    if (!this.opts.routerUrl) await this.syncing
  }

  private nudging?: Promise<void>
  private nudgeAgain = false

  /**
   * The router says this worker's assignment grew (src/server/freshness.ts): heartbeat now instead
   * of at the next beat. Nudges during a heartbeat make one more after it.
   */
  nudge(): void {
    if (this.stopped || !this.opts.routerUrl) return
    log.debug({ worker: this.opts.id }, 'worker: nudged')
    if (this.nudging) {
      this.nudgeAgain = true
      return
    }
    this.nudging = (async () => {
      do {
        this.nudgeAgain = false
        await this.heartbeat()
      } while (this.nudgeAgain && !this.stopped)
    })().finally(() => (this.nudging = undefined))
  }

  /** Wait until the current fetch/drop pass is done. */
  async settled(): Promise<void> {
    while (this.syncing) await this.syncing
  }

  private async exchange(): Promise<void> {
    try {
      if (this.opts.routerUrl) await this.pingRouter()
      else await this.desireEverything()
      this.exchanged = true
    } catch (e) {
      this.lastPingError = e instanceof Error ? e.message : String(e)
      log.warn({ worker: this.opts.id, err: this.lastPingError }, 'worker: heartbeat failed')
    }
  }

  /** Reconcile; when that changed what is held, tell the router at once rather than at the next beat. */
  private async sync(): Promise<void> {
    // A pass before the first exchange has nothing to fetch: it does not make the worker ready.
    const knewDesired = this.exchanged
    try {
      for (;;) {
        // A ping answered during the pass may have changed the assignment after the pass read it.
        this.desiredChanged = false
        const changed = await this.reconcile()
        if (this.stopped) break
        if (changed && this.opts.routerUrl) await this.exchange()
        else if (!this.desiredChanged) break
      }
      if (knewDesired) this.fetchedOnce = true
    } finally {
      this.syncing = undefined
    }
    // Forms are looked at again when what is held changed, or when a pass left due forms unbuilt.
    const seen = this.versions()
    if (seen !== this.formsSeen || this.formsLeft) this.formPass()
  }

  /** The sum of the datasets' versions: changes whenever one of them changes. */
  private versions(): number {
    let sum = 0
    for (const ds of this.datasets.values()) sum += ds.version
    return sum
  }

  /** `versions()` at the start of the last forms pass. */
  private formsSeen = -1
  /** The last forms pass left chunks due a form without one (no room): the next sync tries again. */
  private formsLeft = false
  private forming?: Promise<void>
  /** A chunk became due for a form while a pass ran: run another after it. */
  private formsDue = false

  /** A query read a held chunk from its Parquet files: count it, and build its form once it is due. */
  private readFromParquet(ds: DatasetHolding, c: HeldChunk): void {
    const h = ds.held.get(c.path)
    if (!h || !this.opts.storage.keepsLocalForms) return
    // Formed but read from Parquet: its form made room for another; count its reads again.
    if (h.formed) {
      h.formed = false
      h.reads = 0
      h.readCountedAt = undefined
    }
    const now = Date.now()
    if (h.readCountedAt !== undefined && now - h.readCountedAt < formReads.windowMs) return
    h.readCountedAt = now
    h.reads = (h.reads ?? 0) + 1
    if (h.reads === this.formsAfterReads) this.formPass()
  }

  private get formsAfterReads(): number {
    return this.opts.storage.formsAfterReads ?? 0
  }

  /** Whether a held chunk without a form should get one: every chunk, or one read often enough. */
  private formDue(h: Held): boolean {
    return !h.formed && h.retiredAt === undefined && (h.reads ?? 0) >= this.formsAfterReads
  }

  /**
   * Build the local forms of held chunks that are due one (`formDue`), the most read first, one at a
   * time, in the background (queries read the Parquet files meanwhile). A chunk without room for one
   * is tried again at the next pass.
   */
  private formPass(): void {
    const storage = this.opts.storage
    if (!storage.keepsLocalForms || !storage.buildLocalForm || this.stopped) return
    if (this.forming) {
      this.formsDue = true
      return
    }
    this.formsDue = false
    this.formsSeen = this.versions()
    const pass = (async () => {
      let left = false
      try {
        for (const ds of this.datasets.values()) {
          for (const h of ds.held.values()) if (!h.formed && storage.hasLocalForm?.(ds.name, h.ref)) h.formed = true
          const due = [...ds.held.values()].filter((h) => this.formDue(h)).sort((a, b) => (b.reads ?? 0) - (a.reads ?? 0))
          for (const h of due) {
            if (this.stopped) return
            if (!this.formDue(h) || ds.held.get(h.ref.path) !== h) continue
            h.formed = await storage.buildLocalForm!(ds.name, h.ref, h.dir)
            if (!h.formed) left = true
          }
        }
      } catch (e) {
        left = true
        log.warn({ worker: this.opts.id, err: e instanceof Error ? e.message : String(e) }, 'worker: local forms pass failed')
      }
      this.formsLeft = left
    })()
    // Cleared once settled, not in the pass's own `finally`: a pass with nothing to build (no
    // dataset yet: the router was not up at the first heartbeat) ends before the assignment, and
    // clearing there left a settled pass in place that turned every later pass away.
    this.forming = pass
    void pass.finally(() => {
      if (this.forming === pass) this.forming = undefined
      if (this.formsDue) this.formPass()
    })
  }

  /** Ranges of served chunks (held, not retired) per dataset, as reported to the router. */
  state(): Record<string, Range[]> {
    const out: Record<string, Range[]> = {}
    for (const ds of this.datasets.values()) out[ds.name] = memo(ds, 'ranges', () => mergeRanges(served(ds).map((h) => h.ref)))
    return out
  }

  has(dataset: string): boolean {
    return this.datasets.has(dataset)
  }

  /**
   * A view of what this worker serves of `dataset` for one query: no chunk of it is deleted, and no
   * local form the query acquires through `view.localForm` is dropped, until `release`. Costs the
   * same however many chunks are held (the view is shared until the held set changes). Undefined
   * for a dataset this worker does not know.
   */
  lease(dataset: string): Lease | undefined {
    const ds = this.datasets.get(dataset)
    if (!ds) return undefined
    const { epoch, chunks, height } = (ds.view ??= this.buildView(ds))
    ds.leases.set(epoch, (ds.leases.get(epoch) ?? 0) + 1)
    const storage = this.opts.storage
    const forms = new Map<HeldChunk, LocalTables | undefined>()
    let released = false
    const localForm = storage.localForm
      ? (c: HeldChunk) => {
          if (released) return undefined
          if (!forms.has(c)) {
            const local = storage.localForm!(ds.name, c)
            forms.set(c, local)
            if (!local) this.readFromParquet(ds, c)
          }
          return forms.get(c)
        }
      : undefined
    return {
      view: { name: ds.name, family: ds.family, chunks, height, localForm },
      release: () => {
        if (released) return
        released = true
        const left = ds.leases.get(epoch)! - 1
        if (left > 0) ds.leases.set(epoch, left)
        else ds.leases.delete(epoch)
        for (const [c, local] of forms) if (local) storage.releaseLocalForm?.(ds.name, c)
      },
    }
  }

  /** Queries running with a lease (all datasets). */
  activeLeases(): number {
    let n = 0
    for (const ds of this.datasets.values()) for (const count of ds.leases.values()) n += count
    return n
  }

  /**
   * The next epoch's view: served chunks ascending, never two that overlap (a merged chunk held
   * hides the chunks it supersedes: src/chunks/supersede.ts), each with the block it answers from
   * (`coverFrom`, from the listing).
   */
  private buildView(ds: DatasetHolding): NonNullable<DatasetHolding['view']> {
    const held = withoutOverlaps(served(ds))
    const cover = coverFromListing(ds.listing)
    // A literal, not `{ ...h.ref, dir, … }`: V8 gives every object built by a spread with more
    // properties its own hidden class, about 400 bytes more per chunk held and slower property reads.
    const chunks: HeldChunk[] = held.map(({ ref, dir, previousLast }, i) => ({
      top: ref.top,
      first: ref.first,
      last: ref.last,
      hash: ref.hash,
      path: ref.path,
      dir,
      coverFrom: cover(ref, previousLast),
      intact: () => this.checkIntact(ds, held[i]),
    }))
    return { epoch: ++ds.epoch, chunks, height: ds.listing.reduce((m, c) => Math.max(m, c.last), -1) }
  }

  /** Whether a lease of a view of `epoch` or older is running (its query may read chunks retired since). */
  private leasedUpTo(ds: DatasetHolding, epoch: number): boolean {
    for (const e of ds.leases.keys()) if (e <= epoch) return true
    return false
  }

  status() {
    return {
      worker_id: this.opts.id,
      worker_url: this.opts.publicUrl,
      router_url: this.opts.routerUrl ?? null,
      last_ping_ms_ago: this.lastPingOk ? Date.now() - this.lastPingOk : null,
      last_ping_error: this.lastPingError ?? null,
      local_forms: this.opts.storage.keepsLocalForms ? this.localForms() : null,
      state: {
        available: this.state(),
        desired: Object.fromEntries([...this.datasets.values()].map((d) => [d.name, d.desired])),
      },
    }
  }

  /**
   * Held chunks with a local form, and those due one that have none yet (built in the background);
   * with `formsAfterReads` > 0 the others are read from Parquet until queries read them that often.
   */
  localForms(): { built: number; pending: number } {
    let built = 0
    let pending = 0
    for (const ds of this.datasets.values()) for (const h of ds.held.values()) h.formed ? built++ : this.formDue(h) && pending++
    return { built, pending }
  }

  /** Ready once it knows what to hold (a ping answered, or standalone a storage listing) and has fetched it once. */
  readiness(): Readiness {
    if (!this.exchanged) {
      const what = this.opts.routerUrl ? 'no successful ping to the router yet' : 'storage not listed yet'
      return { ready: false, reason: this.lastPingError ? `${what}: ${this.lastPingError}` : what }
    }
    if (!this.fetchedOnce) return { ready: false, reason: 'first fetch of chunks not finished' }
    return { ready: true }
  }

  /** What the router acknowledged of this worker's state: pings send what changed since (ping-session.ts). */
  private readonly session = new PingSession()

  private async pingRouter(): Promise<void> {
    const state = this.state()
    let answer = await this.postPing(state)
    let desired = this.session.answered(state, answer)
    if (!desired) {
      // the router does not know the state the delta was based on (it restarted): the full state now
      answer = await this.postPing(state)
      desired = this.session.answered(state, answer)
      if (!desired) throw new Error('the router asked for the full state twice in a row')
    }
    this.opts.storage.useDatasets(answer.datasets)
    await this.applyDesired(desired, answer.datasets, answer.recent)
    this.lastPingOk = Date.now()
    this.lastPingError = undefined
  }

  private async postPing(state: Record<string, Range[]>): Promise<PingAnswer> {
    try {
      const res = await httpRequest(`${this.opts.routerUrl}/ping`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...this.opts.pingHeaders?.() },
        body: JSON.stringify({ worker_id: this.opts.id, worker_url: this.opts.publicUrl, ...this.session.fields(state), queries: this.opts.queryCount?.() }),
        timeoutMs: Math.max(5000, this.opts.heartbeatMs * 2),
      })
      const text = res.text
      if (res.status < 200 || res.status >= 300) throw new Error(`router answered ${res.status}: ${text.slice(0, 300)}`)
      return JSON.parse(text) as PingAnswer
    } catch (e) {
      this.session.reset() // the router may or may not have taken the ping: the next one sends everything
      throw e
    }
  }

  private async desireEverything(): Promise<void> {
    const desired: DesiredState = {}
    const infos = await this.opts.storage.listDatasets()
    for (const info of infos) {
      const chunks = await this.opts.storage.listChunks(info.name)
      setListing(this.holding(info.name, info.family), chunks)
      desired[info.name] = mergeRanges(chunks)
    }
    await this.applyDesired(desired)
  }

  private holding(name: string, family: FamilyDecl): DatasetHolding {
    let ds = this.datasets.get(name)
    if (!ds) {
      ds = { name, family, listing: [], held: new Map(), desired: [], epoch: 0, leases: new Map(), version: 0, memos: new Map(), settledAt: -1, intactCursor: 0 }
      this.datasets.set(name, ds)
      setImmediate(() => prepareQueryValidator(family))
    }
    return ds
  }

  private async applyDesired(desired: DesiredState, announced: DatasetAnnouncement[] = [], recent?: PingAnswer['recent']): Promise<void> {
    const missing = Object.keys(desired).filter((name) => !this.datasets.has(name))
    if (missing.length) {
      for (const info of await this.opts.storage.listDatasets()) {
        if (missing.includes(info.name)) this.holding(info.name, info.family)
      }
    }
    for (const ds of this.datasets.values()) {
      const next = desired[ds.name] ?? []
      if (JSON.stringify(next) !== JSON.stringify(ds.desired)) {
        this.desiredChanged = true
        ds.desired = next
        ds.version++
      }
      // The router knows chunks this worker has not listed yet (new ones at the end, or one put back
      // where a chunk was missing): the listed chunks do not cover the desired ranges. List again.
      const listed = () => memo(ds, 'covers', () => coversDesired(ds.listing, ds.desired))
      // The router's newest chunks usually are what is missing (src/server/freshness.ts).
      if (!listed()) {
        const extended = extendListing(ds.listing, recent?.[ds.name])
        const coversNow = extended && coversDesired(extended, ds.desired)
        setListing(ds, coversNow ? extended : await this.opts.storage.listChunks(ds.name))
        // still not: a chunk of a range backfilled below the last one, where an incremental listing does not look
        if (!coversNow && !listed()) {
          setListing(ds, await this.opts.storage.listChunks(ds.name, true))
        }
      }
      // Merged chunks (compaction) cover ranges already covered, and an incremental listing of object
      // storage skips them (their keys sort before those of the chunks they merge): the router names them.
      const named = announced.find((a) => a.name === ds.name)?.merged ?? []
      const known = named.length ? memo(ds, 'paths', () => new Set(ds.listing.map((c) => c.path))) : undefined
      const merged = named.filter((p) => !known!.has(p)).map(parseChunkPath).filter((c) => c !== undefined)
      if (merged.length) setListing(ds, [...ds.listing, ...merged].sort((a, b) => a.first - b.first || a.last - b.last))
    }
  }

  /**
   * Fetch desired chunks not held yet (a few at a time); retire held chunks no longer desired after
   * the grace period, and delete them once no lease that may read them runs; delete chunks no longer
   * intact. Returns whether the served set changed.
   */
  private async reconcile(): Promise<boolean> {
    const now = Date.now()
    let changed = false
    let diskFull = false
    for (const ds of this.datasets.values()) {
      // A bounded share of the held chunks' files is looked at per pass (a stat each, at once: one
      // after the other they delayed a fresh chunk's download); a query looks at a chunk's own
      // files before it reads them, so a damaged copy is never served either way.
      const t0 = performance.now()
      const sweep = this.intactSweep(ds)
      const intact = await Promise.all(sweep.map((h) => this.checkIntact(ds, h)))
      if (intact.includes(false)) changed = true
      log.debug({ worker: this.opts.id, dataset: ds.name, chunks: sweep.length, ms: Math.round(performance.now() - t0) }, 'worker: held chunks checked')
      // Nothing changed since a pass found no chunk leaving: no held chunk to retire or drop.
      if (ds.settledAt !== ds.version && (await this.retireAndDrop(ds, now))) changed = true
      // Kept until a version change: a chunk whose download failed stays in it and is tried again.
      const todo = memo(ds, 'to fetch', () => this.toFetch(ds))
      await mapLimit(todo, this.fetchAtOnce, async (ref) => {
        // The router may have changed its mind while earlier chunks downloaded (workers registering one by one).
        if (this.stopped || !rangesContain(ds.desired, ref.first, ref.last)) return
        try {
          if (await this.fetchInto(ds, ref)) changed = true
        } catch (e) {
          log.error({ worker: this.opts.id, dataset: ds.name, chunk: ref.path, err: e instanceof Error ? e.message : e }, 'worker: cannot fetch chunk')
          if ((e as NodeJS.ErrnoException)?.code === 'ENOSPC') diskFull = true
        }
      })
      workerChunksHeld.set({ worker: this.opts.id, dataset: ds.name }, ds.held.size)
    }
    this.fetchAtOnce = diskFull ? 1 : CHUNKS_FETCHED_AT_ONCE
    if (this.exchanged && !this.pruned && !this.stopped) {
      // What an earlier run left in the cache and is not wanted now can go.
      this.pruned = true
      await this.opts.storage.pruneUnused([...this.datasets.values()].flatMap((ds) => [...ds.held.values()].map((h) => ({ dataset: ds.name, chunk: h.ref }))))
    }
    return changed
  }

  /** Up to INTACT_PER_PASS held chunks, taking turns: every chunk is looked at once in held / INTACT_PER_PASS passes. */
  private intactSweep(ds: DatasetHolding): Held[] {
    const n = this.opts.intactPerPass ?? INTACT_PER_PASS
    const held = memo(ds, 'held', () => [...ds.held.values()])
    if (held.length <= n) return held
    const from = ds.intactCursor % held.length
    ds.intactCursor = from + n
    const out = held.slice(from, from + n)
    return out.length < n ? out.concat(held.slice(0, n - out.length)) : out
  }

  /**
   * Held chunks leaving: retired from the view (superseded by a served merged chunk, or undesired
   * for the grace period), served again when wanted again, deleted once no lease may read them.
   * Marks the dataset settled when none is leaving. Returns whether the served set changed.
   */
  private async retireAndDrop(ds: DatasetHolding, now: number): Promise<boolean> {
    let changed = false
    // held chunks a served held chunk supersedes (a merged chunk fetched): out of the next view at once
    const held = memo(ds, 'held', () => [...ds.held.values()])
    const servedPaths = new Set(served(ds).map((h) => h.ref.path))
    const superseded = new Set(supersede(held.map((h) => h.ref)).superseded.filter((x) => servedPaths.has(x.by.path)).map((x) => x.chunk.path))
    let leaving = false
    // Settled only if nothing but this pass changed the dataset meanwhile (a chunk fetched beside it during a drop).
    const from = ds.version
    let own = 0
    const change = () => {
      heldChanged(ds)
      own++
      changed = true
    }
    // `held` is this version's array: deletions below make a new one, not change it
    for (const h of held) {
      if (superseded.has(h.ref.path) && h.retiredAt === undefined) {
        h.retiredAt = ds.epoch
        change()
      }
      const wanted = rangesContain(ds.desired, h.ref.first, h.ref.last) && !superseded.has(h.ref.path)
      if (wanted) h.undesiredSince = undefined
      else h.undesiredSince ??= now
      if (wanted && h.retiredAt !== undefined) {
        // Wanted again before it was deleted: served again as it is.
        h.retiredAt = undefined
        change()
      }
      if (h.undesiredSince !== undefined && h.retiredAt === undefined && now - h.undesiredSince >= this.opts.dropGraceMs) {
        // The latest view built (epoch `ds.epoch`) may hold it; the next one does not.
        h.retiredAt = ds.epoch
        change()
      }
      if (h.retiredAt !== undefined && !this.leasedUpTo(ds, h.retiredAt)) {
        ds.held.delete(h.ref.path)
        change()
        await this.opts.storage.dropChunk(ds.name, h.ref)
        log.info({ worker: this.opts.id, dataset: ds.name, chunk: h.ref.path }, 'worker: chunk dropped')
        continue
      }
      if (h.undesiredSince !== undefined || h.retiredAt !== undefined) leaving = true
    }
    if (!leaving && ds.version === from + own) ds.settledAt = ds.version
    return changed
  }

  /** Of listed chunks in the desired ranges, those not held that no other one of them nor a served held chunk contains. */
  private toFetch(ds: DatasetHolding): ChunkRef[] {
    const servedRefs = served(ds).map((h) => h.ref)
    const candidates = ds.listing.filter((ref) => rangesContain(ds.desired, ref.first, ref.last))
    const covered = new Set(supersede([...servedRefs, ...candidates]).superseded.map((x) => x.chunk.path))
    return candidates.filter((ref) => !ds.held.has(ref.path) && !covered.has(ref.path))
  }

  /** Fetch a chunk and hold it; false when it was held meanwhile (by the other pass: the storage fetches a chunk once). */
  private async fetchInto(ds: DatasetHolding, ref: ChunkRef): Promise<boolean> {
    const dir = await this.opts.storage.fetchChunk(ds.name, ref)
    // the dataset's chunk index has it for the chunks it names: no file read per chunk taken
    const indexed = await this.opts.storage.indexedLinks?.(ds.name, ref)
    const previousLast = indexed ? indexed.previousLast : readPreviousLast(dir)
    if (ds.held.has(ref.path)) return false
    ds.held.set(ref.path, { ref, dir, previousLast })
    heldChanged(ds)
    workerChunksHeld.set({ worker: this.opts.id, dataset: ds.name }, ds.held.size)
    return true
  }

  private fresh?: Promise<void>

  /**
   * Chunks that became desired while a pass is fetching (a nudge for a fresh chunk while the pass
   * downloads a merged chunk or a backlog): the newest few are fetched at once beside that pass,
   * and the router is pinged as soon as they are held, instead of after the pass.
   */
  private fetchFreshBeside(): void {
    if (this.fresh || this.stopped) return
    this.fresh = (async () => {
      let got = false
      for (const ds of this.datasets.values()) {
        await Promise.all(this.toFetch(ds).slice(-FRESH_FETCHED_BESIDE).map(async (ref) => {
          try {
            if (await this.fetchInto(ds, ref)) got = true
          } catch (e) {
            log.warn({ worker: this.opts.id, dataset: ds.name, chunk: ref.path, err: e instanceof Error ? e.message : e }, 'worker: cannot fetch a fresh chunk (the next pass tries again)')
          }
        }))
      }
      if (got) this.nudge()
    })().finally(() => (this.fresh = undefined))
  }

  private pruned = false
  /** Set when a ping changes what is desired (read by `sync`). */
  private desiredChanged = false
  /**
   * Chunk downloads at once: one after a pass in which a download met a full disk (ENOSPC), since
   * parallel downloads would each take part of the space left and all fail, pass after pass, where
   * one chunk at a time still fits; back to CHUNKS_FETCHED_AT_ONCE after a pass without.
   */
  private fetchAtOnce = CHUNKS_FETCHED_AT_ONCE

  /**
   * Whether a held chunk's files are still as fetched. When not, the chunk stops being served at
   * once, is deleted, and the next pass fetches it again.
   */
  private async checkIntact(ds: DatasetHolding, h: Held): Promise<boolean> {
    if (await this.opts.storage.intact(ds.name, h.ref)) return true
    if (ds.held.get(h.ref.path) === h) {
      ds.held.delete(h.ref.path)
      heldChanged(ds)
      log.warn({ worker: this.opts.id, dataset: ds.name, chunk: h.ref.path }, 'worker: chunk changed on disk; not served, fetching it again')
      await this.opts.storage.dropChunk(ds.name, h.ref)
      if (!this.stopped) this.syncing ??= this.sync()
    }
    return false
  }
}

/** Chunk downloads in flight per dataset. */
const CHUNKS_FETCHED_AT_ONCE = 3
/** Newest chunks fetched beside a pass under way (fetchFreshBeside). */
const FRESH_FETCHED_BESIDE = 2

/** Held chunks queries may be given (not retired). */
const served = (ds: DatasetHolding): Held[] => memo(ds, 'served', () => [...ds.held.values()].filter((h) => h.retiredAt === undefined))

/** Held chunks without superseded ones and, should partly overlapping chunks be held, without the later of two (a view never holds both). */
function withoutOverlaps(held: Held[]): Held[] {
  const kept = supersede(held.map((h) => ({ first: h.ref.first, last: h.ref.last, h }))).kept
  const out: Held[] = []
  for (const { h } of kept) if (!out.length || h.ref.first > out[out.length - 1].ref.last) out.push(h)
  return out
}

/**
 * The block a held chunk answers from: after the previous chunk of the listing (resolved: a merged
 * chunk stands for the chunks it supersedes), so a deliberate jump before a chunk is answered by it;
 * a chunk inside a listed merged chunk answers from its own first block, unless it starts it. So does
 * a chunk written after a block the listing does not have yet (`previousLast` above the chunk before
 * it: a range backfilled in parallel, the gap below it still being filled), so that no answer runs
 * across the blocks missing there.
 */
function coverFromListing(listing: ChunkRef[]): (c: ChunkRef, previousLast?: number) => number {
  const resolved = resolveChunks(listing)
  return (c, previousLast) => {
    const i = lowerBoundLast(resolved, c.first)
    const at = resolved[i]
    if (!at || at.first > c.first || (at.first !== c.first && at.path !== c.path)) return c.first
    if (i > 0 && previousLast !== undefined && previousLast > resolved[i - 1].last) return c.first
    return i > 0 ? resolved[i - 1].last + 1 : 0
  }
}

/** `previousLast` of the chunk in `dir` (undefined when its meta.json does not say or cannot be read). */
function readPreviousLast(dir: string): number | undefined {
  try {
    const v = readMetaInDir(dir)?.previousLast
    return typeof v === 'number' ? v : undefined
  } catch {
    return undefined
  }
}

/** Whether the chunks of `listing` inside the desired ranges make up exactly those ranges. */
const coversDesired = (listing: ChunkRef[], desired: Range[]): boolean =>
  JSON.stringify(mergeRanges(listing.filter((c) => rangesContain(desired, c.first, c.last)))) === JSON.stringify(desired)

/** A new listing of the dataset (the view's `coverFrom` and height come from it). */
function setListing(ds: DatasetHolding, listing: ChunkRef[]): void {
  // A standalone worker lists storage every beat: the same chunks keep the view and what is computed over them.
  if (listing.length === ds.listing.length && listing.every((c, i) => c.path === ds.listing[i].path)) return
  ds.listing = listing
  heldChanged(ds)
}

/** The held set, a retirement or the listing changed: a new view, and what is computed over the chunks again. */
function heldChanged(ds: DatasetHolding): void {
  ds.version++
  ds.view = undefined
}

/** `compute()` over the dataset's chunks, computed again only after the dataset's version changed. */
function memo<T>(ds: DatasetHolding, key: string, compute: () => T): T {
  const m = ds.memos.get(key)
  if (m && m.version === ds.version) return m.value as T
  const value = compute()
  ds.memos.set(key, { version: ds.version, value })
  return value
}

/** Held chunks whose files a reconcile pass looks at (`intactSweep`). */
const INTACT_PER_PASS = 1000
