import type { ChunkRef } from '../chunks/layout.js'
import type { DatasetHead } from '../chunks/head-file.js'
import { lowerBoundLast } from '../chunks/search.js'
import { supersede } from '../chunks/supersede.js'
import { DatasetAssignment } from './assignment.js'
import { DEFAULT_GROUP_CHUNKS } from './defaults.js'
import { ApiError } from '../errors.js'
import { log } from '../log.js'
import { routerRelistDuration, routerRelists } from './metrics.js'
import { QueryRate } from './query-rate.js'
import { mergeRanges, rangesContain, subtractRanges, unionRanges, type Range } from './ranges.js'
import { sameRanges, type PingDelta } from './ping-session.js'
import { randomBytes } from 'node:crypto'
import { ContinuityTracker, checkContinuity, type FillGap } from './continuity.js'
import { claimLive, type ClaimRecord } from '../ingest/range-claims.js'
import { blockInGap, ClaimWatch, gapsBelow, reportGaps } from './backfill-gaps.js'
import { HeadLag, type DatasetLag } from './head-lag.js'
import { MergeSwap } from './swap.js'
import type { ChunkStorage, DatasetAnnouncement } from './storage.js'

/*
 * The router's state: datasets and their chunks (from periodic storage listings), registered workers
 * (from pings), which worker should hold which chunk, and where to send a client for a block.
 *
 * Chunks are assigned by rendezvous hashing over the live workers (`assignment.ts`): the same
 * listing and the same live workers give the same assignment in any router. A worker *serves* a
 * chunk when it reports holding it and it is either assigned to it, or no live assigned worker holds
 * it yet (so a chunk moved to another worker stays reachable until the new holder has it). The
 * desired state sent back to a worker is exactly what it should serve or keep. When workers come
 * back holding chunks within two heartbeats of the first ping (a router restarted under running
 * workers), a worker is told to keep only what it holds until those two heartbeats are over: no
 * download is ordered on a partial view of the workers. A fresh start (nothing held) does not wait.
 */

/** Heartbeats after the first ping during which no download is ordered. */
const SETTLE_HEARTBEATS = 2
/** ...but at most this long: with slow heartbeats (a worker pinging hourly) the first downloads do not wait hours. */
const SETTLE_MAX_MS = 10_000
/** The start-up window of `starting`: this many heartbeats, within these bounds. */
const STARTUP_HEARTBEATS = 5
const STARTUP_MIN_MS = 3_000
const STARTUP_MAX_MS = 30_000

export interface RouterOptions {
  /** Chunks are held by this many workers (fewer if fewer are alive). */
  replication: number
  /** Interval at which workers are expected to ping. */
  heartbeatMs: number
  /** A worker that has not pinged for this many intervals is dead: not routed to, its chunks reassigned. */
  missedHeartbeats: number
  /** Average consecutive chunks assigned together (default 8; 1: each chunk on its own). */
  groupChunks?: number
  /**
   * The workers there are, when the router knows it (`serve` starts them itself): the settle window
   * after the first ping ends as soon as that many have pinged.
   */
  expectedWorkers?: number
}


export interface PingMessage {
  worker_id: string
  worker_url: string
  /** dataset name → merged ranges of chunks the worker holds and can serve (or `delta` instead). */
  state?: Record<string, Range[]>
  /** What changed since the state the router acknowledged (ping-session.ts). */
  delta?: PingDelta
  /** The version of the desired state the worker holds: left out of the answer when unchanged. */
  desired_version?: string
  /** Queries the worker has answered since it started (for queries/s on the status page). */
  queries?: number
}

/** dataset name → merged ranges of chunks the worker should hold. */
export type DesiredState = Record<string, Range[]>

/** The router's answer to a ping: what to hold, and where each dataset lives. */
export interface PingAnswer {
  /** Left out when it is the one of the ping's `desired_version`, and with `resync`. */
  desired?: DesiredState
  /** The version of the state the router now holds for the worker (the base of its next delta). */
  state_version?: string
  desired_version?: string
  /** The ping's delta is based on a state the router does not know: ping again with the full state. */
  resync?: boolean
  datasets: DatasetAnnouncement[]
  /** Per dataset its newest chunks (at most RECENT_IN_PING), so a worker can extend its listing with them instead of listing storage (sent with `desired`). */
  recent?: Record<string, ChunkRef[]>
}

export const RECENT_IN_PING = 16

interface WorkerEntry {
  id: string
  url: string
  lastPing: number
  lastRouted: number
  /** dataset → ranges held, as reported (datasets the router does not know included). */
  state: Map<string, Range[]>
  stateVersion?: string
  /** The desired state last answered, and its version. */
  desired?: { version: string; state: DesiredState }
  queryRate: QueryRate
}

interface DatasetEntry {
  name: string
  family: string
  url: string
  /** Chunks blocks are routed to: the listing up to the first gap or overlap, a merged chunk no live worker serves yet as the chunks it replaces (swap.ts). */
  chunks: ChunkRef[]
  /** The listing up to the first gap or overlap, superseded chunks left out. */
  listed: ChunkRef[]
  /** Merged chunks not served yet (assigned, not routed to). */
  pending: ChunkRef[]
  swap: MergeSwap
  /** What is wrong with the listing (gaps, overlaps), as last found. */
  problems: string[]
  /** Which workers hold which chunks of `chunks` (assignment.ts); merged chunks pending go with their first part's workers. */
  assignment: DatasetAssignment
  /** Highest block such that every chunk up to it has been served (docs/protocol.md §1); never goes down. */
  height: number
  /** Blocks missing in ranges ingests claim (a backfill in parallel): not served, reported until filled; the chunks after them are served. */
  gaps: FillGap[]
  /** The ingests' range claims, as last listed. */
  claims: ClaimRecord[]
  /** The last listing and its claims: a relisting that finds both unchanged has nothing to redo. */
  lastListing?: { all: ChunkRef[]; claims: string }
}

export class RouterState {
  private readonly datasets = new Map<string, DatasetEntry>()
  private readonly workers = new Map<string, WorkerEntry>()
  /** Per dataset: the ingests' range claims, read when they may matter (backfill-gaps.ts). */
  private readonly claimWatches = new Map<string, ClaimWatch>()
  /** Per dataset: the last listing's continuity, so a relisting checks only what is new. */
  private readonly continuity = new Map<string, ContinuityTracker>()
  /** Live worker ids as the assignments know them. */
  private readonly live = new Set<string>()
  private lastLiveScan = -Infinity
  /** Time of the first ping. */
  private firstPing?: number
  /** Per dataset: its node's head from the ingest's head file, for the lag (head-lag.ts). */
  private readonly lags = new Map<string, HeadLag>()
  /** Called with the URLs of the live workers assigned chunks new to the router (they are told to ping at once). */
  onNewChunks?: (workerUrls: string[]) => void
  /** A worker pinged holding chunks within the settle window: this router was restarted under running workers. */
  private restart = false
  /** Time of the first ping or routing request (the router's start, as far as answers go). */
  private startedAt?: number
  /** Versions of worker states and desired states: unique to this router process, so a restarted router knows none. */
  private readonly epoch = randomBytes(4).toString('hex')
  private versions = 0

  constructor(
    private readonly storage: ChunkStorage,
    readonly opts: RouterOptions,
  ) {}

  get retryAfterSeconds(): number {
    return Math.max(1, Math.ceil(this.opts.heartbeatMs / 1000))
  }

  private isAlive(w: WorkerEntry, now: number): boolean {
    return now - w.lastPing <= this.opts.heartbeatMs * this.opts.missedHeartbeats
  }

  liveWorkers(now = Date.now()): string[] {
    return [...this.workers.values()].filter((w) => this.isAlive(w, now)).map((w) => w.id)
  }

  /**
   * Re-read datasets and chunk lists from storage (with `only`, that dataset's chunks). Listing
   * errors are logged and the old list kept, except with `strict` (the first listing at start),
   * where they are thrown.
   */
  async relist(strict = false, only?: string): Promise<void> {
    const timer = routerRelistDuration.startTimer()
    let infos
    try {
      infos = await this.storage.listDatasets()
    } catch (e) {
      if (strict) throw e
      log.error({ err: e, storage: this.storage.location }, 'router: cannot list datasets')
      return
    }
    const fresh: [DatasetEntry, ChunkRef[]][] = []
    for (const info of infos) {
      if (only !== undefined && info.name !== only) continue
      let all: ChunkRef[]
      let chunks: ChunkRef[]
      let problems: string[]
      let superseded
      let gaps: FillGap[]
      let claims: ClaimRecord[]
      try {
        let watch = this.claimWatches.get(info.name)
        if (!watch) this.claimWatches.set(info.name, (watch = new ClaimWatch(this.storage, info.name)))
        claims = await watch.read(false)
        // chunks of a range written below the last chunk are where an incremental listing does not look:
        // a full listing while such a range is claimed, and at the listing after its claim is gone (its
        // last chunks were written since the listing before, which did not see them)
        const ranged = (records: ClaimRecord[] | undefined) => (records ?? []).some((c) => c.to !== null)
        all = await this.storage.listChunks(info.name, ranged(claims) || ranged(this.datasets.get(info.name)?.claims))
        // Nothing new (most relistings): supersession, continuity and routing would come out as they
        // are, and over 100,000 chunks redoing them held the event loop for ~35 ms every second.
        const last = this.datasets.get(info.name)
        if (last?.lastListing && !last.problems.length && last.url === info.url && last.lastListing.claims === JSON.stringify(claims) && sameChunks(last.lastListing.all, all)) continue
        let kept
        ;({ kept, superseded } = supersede(all))
        let tracker = this.continuity.get(info.name)
        if (!tracker) this.continuity.set(info.name, (tracker = new ContinuityTracker()))
        const metaOf = (c: ChunkRef) => this.storage.chunkLinks(info.name, c)
        ;({ servable: chunks, problems, gaps } = await tracker.check(kept, metaOf, claims))
        // a missing chunk may be a range being backfilled that started since the claims were read
        if (problems.length && !watch.fresh) ({ servable: chunks, problems, gaps } = await tracker.check(kept, metaOf, (claims = await watch.read(true))))
      } catch (e) {
        if (strict) throw e
        log.error({ err: e, dataset: info.name }, 'router: cannot list chunks')
        continue
      }
      let ds = this.datasets.get(info.name)
      if (!ds) {
        const assignment = new DatasetAssignment(info.name, { replication: this.opts.replication, groupChunks: this.opts.groupChunks ?? DEFAULT_GROUP_CHUNKS })
        assignment.setLive(this.live)
        ds = { name: info.name, family: info.family.name, url: info.url, chunks: [], listed: [], pending: [], swap: new MergeSwap(), problems: [], assignment, height: -1, gaps: [], claims: [] }
        this.datasets.set(info.name, ds)
        log.info({ dataset: info.name, family: info.family.name, url: info.url }, 'router: new dataset')
      }
      ds.url = info.url
      ds.lastListing = { all, claims: JSON.stringify(claims) }
      if (problems.join('\n') !== ds.problems.join('\n')) {
        for (const p of problems) log.error({ dataset: info.name, url: info.url }, `router: ${p}`)
        if (!problems.length) log.info({ dataset: info.name }, 'router: the chunk listing is consistent again')
      }
      ds.problems = problems
      if (JSON.stringify(gaps) !== JSON.stringify(ds.gaps)) log.info({ dataset: info.name, gaps: gaps.map((g) => [g.first, g.last]) }, 'router: blocks still being written between served chunks')
      ds.gaps = gaps
      ds.claims = claims
      reportGaps(info.name, gaps)
      let dsChanged = await ds.swap.update(all, superseded, (c) => this.storage.chunkLinks(info.name, c))
      if (chunks.length !== ds.listed.length || chunks.some((c, i) => c.path !== ds!.listed[i].path)) {
        const before = new Set(ds.listed.map((c) => c.path))
        fresh.push([ds, chunks.filter((c) => !before.has(c.path))])
        ds.listed = chunks
        dsChanged = true
        log.info({ dataset: info.name, chunks: chunks.length, last: chunks.at(-1)?.last ?? -1 }, 'router: chunk list changed')
      }
      if (dsChanged) {
        const entry = ds
        this.applyRouting(entry, entry.swap.routing(entry.listed, (c) => this.heldByLive(entry, c, Date.now()), true)!)
      }
    }
    this.advanceHeights()
    for (const [ds, chunks] of fresh) this.announce(ds, chunks)
    routerRelists.inc()
    timer()
  }

  /**
   * Chunks named by the dataset's head file: those after the last chunk listed are appended when
   * they continue it (checked as a listing would, from their meta.json), without listing storage.
   * Returns false when they do not (a chunk missing in between, an overlap, no chunk listed yet,
   * problems in the listing): the caller lists the dataset instead.
   */
  async appendChunks(dataset: string, announced: ChunkRef[]): Promise<boolean> {
    const ds = this.datasets.get(dataset)
    if (!ds || ds.problems.length) return false
    const lastKnown = ds.listed.at(-1)
    if (!lastKnown) return false
    const fresh = announced.filter((c) => c.first > lastKnown.last)
    if (!fresh.length) return true
    const metaOf = (c: ChunkRef) => this.storage.chunkLinks(dataset, c)
    // Each announced chunk must be there (its meta.json is read once and cached) and follow the one before.
    try {
      await Promise.all(fresh.map(metaOf))
    } catch {
      return false
    }
    const { problems } = await checkContinuity([lastKnown, ...fresh], metaOf)
    if (problems.length) return false
    if (ds.listed.at(-1) !== lastKnown) return false // listed meanwhile
    ds.listed = [...ds.listed, ...fresh]
    log.info({ dataset, chunks: ds.listed.length, last: ds.listed.at(-1)!.last, from: 'head file' }, 'router: chunk list changed')
    this.applyRouting(ds, ds.swap.routing(ds.listed, (c) => this.heldByLive(ds, c, Date.now()), true)!)
    this.advanceHeights()
    this.announce(ds, fresh)
    return true
  }

  /** The ingest's head file was read: the node's head, for the lag. */
  noteHead(dataset: string, head: DatasetHead): void {
    if (!this.datasets.has(dataset)) return
    let lag = this.lags.get(dataset)
    if (!lag) this.lags.set(dataset, (lag = new HeadLag()))
    lag.note(head)
  }

  /** How far the dataset is behind its node (undefined without a head file). */
  lag(dataset: string, now = Date.now()): DatasetLag | undefined {
    const ds = this.datasets.get(dataset)
    if (!ds) return undefined
    this.advanceHeights(now)
    return this.lags.get(dataset)?.lag(ds.height, now)
  }

  /** Where each dataset lives. */
  locations(): { name: string; url: string }[] {
    return [...this.datasets.values()].map((d) => ({ name: d.name, url: d.url }))
  }

  /** Tell the live workers assigned `chunks` (new to the router) to ping now. */
  private announce(ds: DatasetEntry, chunks: ChunkRef[]): void {
    if (!chunks.length || !this.onNewChunks) return
    const now = Date.now()
    const ids = new Set<string>()
    for (const c of chunks) for (const id of this.assigneesOf(ds, c)) ids.add(id)
    const urls = [...ids].map((id) => this.workers.get(id)).filter((w) => w && this.isAlive(w, now)).map((w) => w!.url)
    if (urls.length) this.onNewChunks(urls)
  }

  /** Take a new routing (swap.ts): the assignment follows the chunks routed to. */
  private applyRouting(ds: DatasetEntry, r: { chunks: ChunkRef[]; pending: ChunkRef[] }): void {
    const same = r.chunks.length === ds.chunks.length && r.chunks.every((c, i) => c.path === ds.chunks[i].path)
    ds.chunks = r.chunks
    ds.pending = r.pending
    if (!same) ds.assignment.setChunks(ds.chunks)
  }

  /**
   * Workers assigned chunk `c`: one routed to (by its index), or a merged chunk pending, which goes
   * to the workers of the first chunk it replaces (they serve its blocks meanwhile).
   */
  private assigneesOf(ds: DatasetEntry, c: ChunkRef): readonly string[] {
    const i = lowerBoundLast(ds.chunks, c.first)
    return i < ds.chunks.length ? ds.assignment.assignedAt(i) : []
  }

  /** Whether a live worker holds the chunk (whether or not it is assigned it). */
  private heldByLive(ds: DatasetEntry, c: ChunkRef, now: number): boolean {
    for (const w of this.workers.values()) if (this.isAlive(w, now) && this.holds(w, ds, c)) return true
    return false
  }

  /** A merged chunk got (or lost) its first live server: route to it (or to the chunks it replaces) from now on. */
  private swapMerged(now: number): void {
    for (const ds of this.datasets.values()) {
      const r = ds.swap.routing(ds.listed, (c) => this.heldByLive(ds, c, now))
      if (!r) continue
      const before = ds.chunks.map((c) => c.path).join() + '|' + ds.pending.map((c) => c.path).join()
      this.applyRouting(ds, r)
      if (before === ds.chunks.map((c) => c.path).join() + '|' + ds.pending.map((c) => c.path).join()) continue
      log.info({ dataset: ds.name, chunks: ds.chunks.length, pending: ds.pending.map((c) => c.path) }, 'router: merged chunks swapped in')
    }
  }

  /** Register or refresh a worker; answer its desired state and the datasets' locations. */
  ping(msg: PingMessage, now = Date.now()): PingAnswer {
    this.startedAt ??= now
    let w = this.workers.get(msg.worker_id)
    if (msg.delta && (!w || w.stateVersion !== msg.delta.base)) return { resync: true, datasets: this.announcements() }
    const registering = !w
    if (!w) {
      w = { id: msg.worker_id, url: msg.worker_url, lastPing: now, lastRouted: 0, state: new Map(), queryRate: new QueryRate(this.opts.heartbeatMs / 2) }
      this.workers.set(w.id, w)
      log.info({ worker: w.id, url: w.url }, 'router: worker registered')
    } else if (!this.isAlive(w, now)) {
      log.info({ worker: w.id }, 'router: worker is back')
    }
    w.url = msg.worker_url
    w.lastPing = now
    if (msg.delta) applyDelta(w.state, msg.delta)
    else w.state = new Map(Object.entries(msg.state ?? {}))
    w.stateVersion = `${this.epoch}.${++this.versions}`
    w.queryRate.report(msg.queries, now)
    const wasSettling = this.settling(now)
    this.firstPing ??= now
    if (!this.restart && this.inWindow(now) && [...w.state.values()].some((r) => r.length > 0)) this.restart = true
    // A newcomer changes the live set at once; workers that went silent are found at most every
    // quarter heartbeat (and by `tick`), not at each of many workers' pings.
    if (!this.live.has(w.id) || now - this.lastLiveScan >= this.opts.heartbeatMs / 4) this.updateLive(now)
    this.advanceHeights(now)
    const desired = this.desiredFor(w, now)
    if (wasSettling && !this.settling(now)) {
      // the workers told to wait learn their assignment now rather than at their next heartbeat
      const others = [...this.workers.values()].filter((o) => o !== w && this.isAlive(o, now)).map((o) => o.url)
      if (others.length) this.onNewChunks?.(others)
    }
    const chunks = [...this.datasets.values()].reduce((n, d) => n + d.chunks.length, 0)
    // While settling nobody is told to fetch: an empty answer then says nothing about replicas.
    if (registering && (chunks === 0 || !this.settling(now)) && Object.values(desired).every((r) => r.length === 0)) {
      log.warn(
        { worker: w.id, datasets: this.datasets.size, chunks, liveWorkers: this.liveWorkers(now).length, replication: this.opts.replication },
        chunks === 0 ? 'router: a worker registered, but there are no chunks to serve yet' : 'router: a worker registered with nothing to serve (every chunk already has its replicas)',
      )
    }
    const unchanged = w.desired !== undefined && sameDesired(w.desired.state, desired)
    if (!unchanged) w.desired = { version: `${this.epoch}.${++this.versions}`, state: desired }
    const base = { state_version: w.stateVersion, desired_version: w.desired!.version, datasets: this.announcements() }
    // The worker has this desired state, and listed what it covers: neither it nor the newest chunks are sent again.
    if (unchanged && msg.desired_version === w.desired!.version) return base
    return { ...base, desired, recent: Object.fromEntries([...this.datasets.values()].map((d) => [d.name, d.listed.slice(-RECENT_IN_PING)])) }
  }

  private announcements(): DatasetAnnouncement[] {
    return [...this.datasets.values()].map((d) => ({ name: d.name, family: d.family, url: d.url, ...(d.swap.merged.length ? { merged: d.swap.merged } : {}) }))
  }

  /** Called periodically: notices dead workers even when nobody pings or queries. */
  tick(now = Date.now()): void {
    this.updateLive(now)
  }

  height(dataset: string, now = Date.now()): number {
    const ds = this.dataset(dataset)
    this.advanceHeights(now)
    return ds.height
  }

  /** URL of a live worker serving `block`, or an ApiError (404 unknown dataset, 503 not servable now). */
  route(dataset: string, block: number, now = Date.now()): string {
    const ds = this.dataset(dataset)
    this.advanceHeights(now)
    const gap = blockInGap(ds.gaps, block)
    if (gap) {
      const by = ds.claims.filter((c) => c.from <= gap.last && gap.first <= (c.to ?? Infinity)).map((c) => `${c.from}–${c.to ?? 'head'} (${claimLive(c, now) ? `running: host ${c.host}, pid ${c.pid}` : 'stopped'})`)
      throw new ApiError(
        503,
        'block-not-available',
        `block ${block} of dataset ${dataset} is not available yet: blocks ${gap.first}–${gap.last} are still being written by an ingest of ${by.join(', ') || 'their range'} (height ${ds.height})`,
        undefined,
        this.retryAfterSeconds,
      )
    }
    // A block in a range written after a gap (a backfill in parallel) is served, though above the height.
    const afterGap = block > ds.height && gapsBelow(ds.gaps, ds.height, block) && block <= (ds.chunks.at(-1)?.last ?? -1)
    if (block > ds.height && !afterGap) {
      if (this.starting(now) && block <= (ds.chunks.at(-1)?.last ?? -1)) {
        // Not "above the height": a client would end its range there, and the height of a router that
        // just (re)started is only as high as the workers it has heard from yet.
        throw new ApiError(503, 'not-ready', `block ${block} of dataset ${dataset} is stored, and the router, started moments ago, has not heard yet from a worker serving it; ask again`, undefined, this.retryAfterSeconds)
      }
      throw new ApiError(
        503,
        'block-not-available',
        `block ${block} of dataset ${dataset} is not available yet (height ${ds.height})`,
        undefined,
        this.retryAfterSeconds,
      )
    }
    // The first chunk whose last block is ≥ block: it holds the block, or the block is in the gap before it.
    const i = lowerBoundLast(ds.chunks, block)
    const candidates = i < ds.chunks.length ? this.servers(ds, i, now) : []
    if (candidates.length === 0) {
      throw new ApiError(
        503,
        'no-worker',
        `no live worker serves block ${block} of dataset ${dataset} at the moment`,
        undefined,
        this.retryAfterSeconds,
      )
    }
    // Least recently used first: spreads consecutive requests over the replicas.
    const w = candidates.reduce((a, b) => (b.lastRouted < a.lastRouted ? b : a))
    w.lastRouted = now
    return `${w.url}/datasets/${encodeURIComponent(dataset)}/query`
  }

  /** Last block of the chunk `route` sends `block` to (the one holding it, or the first after a gap); undefined if none. */
  chunkEnd(dataset: string, block: number): number | undefined {
    const ds = this.datasets.get(dataset)
    return ds?.chunks[lowerBoundLast(ds.chunks, block)]?.last
  }

  status(now = Date.now()) {
    this.advanceHeights(now)
    // Workers registered, none alive: nothing is served, which the listing's problems do not show.
    const silent = this.workers.size > 0 && this.liveWorkers(now).length === 0
    const allDead = `every worker is dead (${this.workers.size} registered, none pinged in the last ${this.opts.heartbeatMs * this.opts.missedHeartbeats} ms): no block is served`
    return {
      datasets: [...this.datasets.values()].map((ds) => ({
        name: ds.name,
        family: ds.family,
        url: ds.url,
        height: ds.height,
        chunks: ds.chunks.length,
        problems: silent && ds.chunks.length ? [...ds.problems, allDead] : ds.problems,
        lastChunkBlock: ds.chunks.at(-1)?.last ?? -1,
        lag: this.lags.get(ds.name)?.lag(ds.height, now) ?? null,
        spans: chunkSpans(ds.chunks),
        gaps: ds.gaps.map((g): [number, number] => [g.first, g.last]),
        backfills: ds.claims.map((c) => ({ from: c.from, to: c.to, running: claimLive(c, now), host: c.host, pid: c.pid, ...(c.stoppedAt ? { stoppedAt: c.stoppedAt } : {}) })),
      })),
      workers: [...this.workers.values()].map((w) => ({
        id: w.id,
        url: w.url,
        alive: this.isAlive(w, now),
        lastPingMsAgo: now - w.lastPing,
        state: Object.fromEntries([...w.state].filter(([name]) => this.datasets.has(name))),
        assignedChunks: this.assignedCount(w.id),
        // A dead worker gets no queries; null while not measured yet.
        queriesPerSecond: !this.isAlive(w, now) ? 0 : w.queryRate.perSecond === null ? null : Math.round(w.queryRate.perSecond * 100) / 100,
      })),
    }
  }

  datasetNames(): string[] {
    return [...this.datasets.keys()]
  }

  private dataset(name: string): DatasetEntry {
    const ds = this.datasets.get(name)
    if (!ds) throw new ApiError(404, 'unknown-dataset', `unknown dataset "${name}"`)
    return ds
  }

  private holds(w: WorkerEntry, ds: DatasetEntry, c: ChunkRef): boolean {
    const ranges = w.state.get(ds.name)
    return !!ranges && rangesContain(ranges, c.first, c.last)
  }

  /** Live workers that hold chunk `i` and are meant to serve it (see the comment at the top). */
  private servers(ds: DatasetEntry, i: number, now: number): WorkerEntry[] {
    const c = ds.chunks[i]
    const assignedHolders: WorkerEntry[] = []
    for (const id of ds.assignment.assignedAt(i)) {
      const w = this.workers.get(id)
      if (w && this.isAlive(w, now) && this.holds(w, ds, c)) assignedHolders.push(w)
    }
    if (assignedHolders.length > 0) return assignedHolders
    return [...this.workers.values()].filter((w) => this.isAlive(w, now) && this.holds(w, ds, c))
  }

  /** Whether a live worker chunk `i` is assigned to holds it. */
  private hasAssignedHolder(ds: DatasetEntry, i: number, now: number): boolean {
    return ds.assignment.assignedAt(i).some((id) => {
      const w = this.workers.get(id)
      return !!w && this.isAlive(w, now) && this.holds(w, ds, ds.chunks[i])
    })
  }

  /**
   * The first moments after the router started (a few heartbeats, at least 3 s, at most 30 s, and
   * while settling): workers are still registering, so a stored block above the height is not ready
   * yet rather than above the height.
   */
  private starting(now: number): boolean {
    this.startedAt ??= now
    return now - this.startedAt < Math.min(Math.max(STARTUP_HEARTBEATS * this.opts.heartbeatMs, STARTUP_MIN_MS), STARTUP_MAX_MS) || this.settling(now)
  }

  /** Settling: workers came back holding chunks right after this router started (a restart). */
  private settling(now: number): boolean {
    if (!this.restart || !this.inWindow(now)) return false
    // `serve` knows its workers: once they have all pinged there is nobody left to wait for
    return this.opts.expectedWorkers === undefined || this.live.size < this.opts.expectedWorkers
  }

  private inWindow(now: number): boolean {
    return this.firstPing !== undefined && now - this.firstPing < Math.min(SETTLE_HEARTBEATS * this.opts.heartbeatMs, SETTLE_MAX_MS)
  }

  /**
   * What `w` should hold: its assigned chunks (only those it holds while settling), and the chunks it
   * holds that no live assigned worker holds yet.
   */
  private desiredFor(w: WorkerEntry, now: number): DesiredState {
    const out: DesiredState = {}
    const settling = this.settling(now)
    for (const ds of this.datasets.values()) {
      const held = w.state.get(ds.name) ?? []
      // merged chunks not served yet: fetched by the workers of the chunks they replace
      const merged = settling ? [] : ds.pending.filter((m) => this.assigneesOf(ds, m).includes(w.id))
      // The usual case: the worker holds exactly its assignment.
      if (!settling && !merged.length && sameRanges(held, ds.assignment.rangesOf(w.id))) {
        out[ds.name] = ds.assignment.rangesOf(w.id)
        continue
      }
      const keep: ChunkRef[] = [...merged]
      forEachHeld(ds.chunks, held, (c, i) => {
        if (ds.assignment.isAssigned(i, w.id) ? settling : !this.hasAssignedHolder(ds, i, now)) keep.push(c)
      })
      const mine = settling ? [] : ds.assignment.rangesOf(w.id)
      out[ds.name] = keep.length === 0 ? mine : mergeRanges([...mine.map(([first, last]) => ({ first, last })), ...keep])
    }
    return out
  }

  private advanceHeights(now = Date.now()): void {
    this.swapMerged(now)
    for (const ds of this.datasets.values()) {
      let i = lowerBoundLast(ds.chunks, ds.height + 1)
      while (i < ds.chunks.length && this.servers(ds, i, now).length > 0) {
        if (gapsBelow(ds.gaps, ds.height, ds.chunks[i].first)) break // the height is the top of the blocks served without a gap
        ds.height = ds.chunks[i].last
        i++
      }
    }
  }

  /** Bring the live set up to date; the assignments follow its changes. */
  private updateLive(now: number): void {
    this.lastLiveScan = now
    let changed = false
    for (const w of this.workers.values()) {
      const alive = this.isAlive(w, now)
      if (alive === this.live.has(w.id)) continue
      if (alive) this.live.add(w.id)
      else this.live.delete(w.id)
      changed = true
    }
    if (!changed) return
    for (const ds of this.datasets.values()) ds.assignment.setLive(this.live)
    log.info({ live: this.live.size, datasets: this.datasets.size }, 'router: chunks assigned')
  }

  private assignedCount(id: string): number {
    let n = 0
    for (const ds of this.datasets.values()) n += ds.assignment.chunksOf(id).length
    return n
  }
}

function sameDesired(a: DesiredState, b: DesiredState): boolean {
  const names = Object.keys(a)
  return names.length === Object.keys(b).length && names.every((n) => b[n] !== undefined && sameRanges(a[n], b[n]))
}

/** A worker's reported state, changed by a ping's delta. */
function applyDelta(state: Map<string, Range[]>, delta: PingDelta): void {
  for (const name of new Set([...Object.keys(delta.added), ...Object.keys(delta.removed)])) {
    const ranges = subtractRanges(unionRanges(state.get(name) ?? [], delta.added[name] ?? []), delta.removed[name] ?? [])
    if (ranges.length) state.set(name, ranges)
    else state.delete(name)
  }
}

/** Call `f` for each chunk (with its index) that lies inside the ascending disjoint `ranges`. */
function forEachHeld(chunks: readonly ChunkRef[], ranges: readonly Range[], f: (c: ChunkRef, i: number) => void): void {
  let i = 0
  for (const [first, last] of ranges) {
    // Gallop from where the last range ended: the next range usually starts a few chunks on.
    let step = 1
    while (i + step < chunks.length && chunks[i + step].last < first) step *= 2
    i = lowerBoundLast(chunks, first, i, Math.min(chunks.length, i + step + 1))
    for (; i < chunks.length && chunks[i].last <= last; i++) {
      if (chunks[i].first >= first) f(chunks[i], i)
    }
  }
}

/** The block ranges the chunks cover, adjacent and overlapping chunks merged (one range for a dense dataset). */
function chunkSpans(chunks: readonly { first: number; last: number }[]): [number, number][] {
  const spans: [number, number][] = []
  for (const c of chunks) {
    const prev = spans.at(-1)
    if (prev && c.first <= prev[1] + 1) prev[1] = Math.max(prev[1], c.last)
    else spans.push([c.first, c.last])
  }
  return spans
}

/** Whether two listings name the same chunks in the same order (a store hands back the refs it knows, so mostly by identity). */
function sameChunks(a: ChunkRef[], b: ChunkRef[]): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i] && a[i].path !== b[i].path) return false
  return true
}
