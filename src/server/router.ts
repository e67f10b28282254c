import type { ChunkRef } from '../chunks/layout.js'
import { DatasetAssignment } from './assignment.js'
import { ApiError } from '../errors.js'
import { log } from '../log.js'
import { routerRelists } from './metrics.js'
import { QueryRate } from './query-rate.js'
import { mergeRanges, rangesContain, type Range } from './ranges.js'
import { ContinuityTracker } from './continuity.js'
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

export interface RouterOptions {
  /** Chunks are held by this many workers (fewer if fewer are alive). */
  replication: number
  /** Interval at which workers are expected to ping. */
  heartbeatMs: number
  /** A worker that has not pinged for this many intervals is dead: not routed to, its chunks reassigned. */
  missedHeartbeats: number
  /** Average consecutive chunks assigned together (default 8; 1: each chunk on its own). */
  groupChunks?: number
}

export const DEFAULT_GROUP_CHUNKS = 8

export interface PingMessage {
  worker_id: string
  worker_url: string
  /** dataset name → merged ranges of chunks the worker holds and can serve. */
  state: Record<string, Range[]>
  /** Queries the worker has answered since it started (for queries/s on the status page). */
  queries?: number
}

/** dataset name → merged ranges of chunks the worker should hold. */
export type DesiredState = Record<string, Range[]>

/** The router's answer to a ping: what to hold, and where each dataset lives. */
export interface PingAnswer {
  desired: DesiredState
  datasets: DatasetAnnouncement[]
}

interface WorkerEntry {
  id: string
  url: string
  lastPing: number
  lastRouted: number
  state: Map<string, Range[]>
  queryRate: QueryRate
}

interface DatasetEntry {
  name: string
  family: string
  url: string
  /** Chunks that may be served: the listing up to the first gap or overlap. */
  chunks: ChunkRef[]
  /** What is wrong with the listing (gaps, overlaps), as last found. */
  problems: string[]
  assignment: DatasetAssignment
  /** Highest block such that every chunk up to it has been served (docs/protocol.md §1); never goes down. */
  height: number
}

export class RouterState {
  private readonly datasets = new Map<string, DatasetEntry>()
  private readonly workers = new Map<string, WorkerEntry>()
  /** Per dataset: the last listing's continuity, so a relisting checks only what is new. */
  private readonly continuity = new Map<string, ContinuityTracker>()
  /** Live worker ids as the assignments know them. */
  private readonly live = new Set<string>()
  private lastLiveScan = -Infinity
  /** Time of the first ping. */
  private firstPing?: number
  /** A worker pinged holding chunks within the settle window: this router was restarted under running workers. */
  private restart = false

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
   * Re-read datasets and chunk lists from storage. Listing errors are logged and the old list kept,
   * except with `strict` (the first listing at start), where they are thrown.
   */
  async relist(strict = false): Promise<void> {
    let infos
    try {
      infos = await this.storage.listDatasets()
    } catch (e) {
      if (strict) throw e
      log.error({ err: e, storage: this.storage.location }, 'router: cannot list datasets')
      return
    }
    for (const info of infos) {
      let chunks: ChunkRef[]
      let problems: string[]
      try {
        let tracker = this.continuity.get(info.name)
        if (!tracker) this.continuity.set(info.name, (tracker = new ContinuityTracker()))
        ;({ servable: chunks, problems } = await tracker.check(await this.storage.listChunks(info.name), (c) => this.storage.chunkMeta(info.name, c)))
      } catch (e) {
        if (strict) throw e
        log.error({ err: e, dataset: info.name }, 'router: cannot list chunks')
        continue
      }
      let ds = this.datasets.get(info.name)
      if (!ds) {
        const assignment = new DatasetAssignment(info.name, { replication: this.opts.replication, groupChunks: this.opts.groupChunks ?? DEFAULT_GROUP_CHUNKS })
        assignment.setLive(this.live)
        ds = { name: info.name, family: info.family.name, url: info.url, chunks: [], problems: [], assignment, height: -1 }
        this.datasets.set(info.name, ds)
        log.info({ dataset: info.name, family: info.family.name, url: info.url }, 'router: new dataset')
      }
      ds.url = info.url
      if (problems.join('\n') !== ds.problems.join('\n')) {
        for (const p of problems) log.error({ dataset: info.name, url: info.url }, `router: ${p}`)
        if (!problems.length) log.info({ dataset: info.name }, 'router: the chunk listing is consistent again')
      }
      ds.problems = problems
      if (chunks.length !== ds.chunks.length || chunks.some((c, i) => c.path !== ds!.chunks[i].path)) {
        ds.assignment.setChunks(chunks)
        ds.chunks = chunks
        log.info({ dataset: info.name, chunks: chunks.length, last: chunks.at(-1)?.last ?? -1 }, 'router: chunk list changed')
      }
    }
    this.advanceHeights()
    routerRelists.inc()
  }

  /** Register or refresh a worker; answer its desired state and the datasets' locations. */
  ping(msg: PingMessage, now = Date.now()): PingAnswer {
    let w = this.workers.get(msg.worker_id)
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
    w.state = new Map(Object.entries(msg.state).filter(([name]) => this.datasets.has(name)))
    w.queryRate.report(msg.queries, now)
    this.firstPing ??= now
    if (!this.restart && this.inWindow(now) && [...w.state.values()].some((r) => r.length > 0)) this.restart = true
    // A newcomer changes the live set at once; workers that went silent are found at most every
    // quarter heartbeat (and by `tick`), not at each of many workers' pings.
    if (!this.live.has(w.id) || now - this.lastLiveScan >= this.opts.heartbeatMs / 4) this.updateLive(now)
    this.advanceHeights(now)
    const desired = this.desiredFor(w, now)
    const chunks = [...this.datasets.values()].reduce((n, d) => n + d.chunks.length, 0)
    // While settling nobody is told to fetch: an empty answer then says nothing about replicas.
    if (registering && (chunks === 0 || !this.settling(now)) && Object.values(desired).every((r) => r.length === 0)) {
      log.warn(
        { worker: w.id, datasets: this.datasets.size, chunks, liveWorkers: this.liveWorkers(now).length, replication: this.opts.replication },
        chunks === 0 ? 'router: a worker registered, but there are no chunks to serve yet' : 'router: a worker registered with nothing to serve (every chunk already has its replicas)',
      )
    }
    return { desired, datasets: [...this.datasets.values()].map((d) => ({ name: d.name, family: d.family, url: d.url })) }
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
    if (block > ds.height) {
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
    return {
      datasets: [...this.datasets.values()].map((ds) => ({
        name: ds.name,
        family: ds.family,
        url: ds.url,
        height: ds.height,
        chunks: ds.chunks.length,
        problems: ds.problems,
        lastChunkBlock: ds.chunks.at(-1)?.last ?? -1,
      })),
      workers: [...this.workers.values()].map((w) => ({
        id: w.id,
        url: w.url,
        alive: this.isAlive(w, now),
        lastPingMsAgo: now - w.lastPing,
        state: Object.fromEntries(w.state),
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

  /** Settling: workers came back holding chunks right after this router started (a restart). */
  private settling(now: number): boolean {
    return this.restart && this.inWindow(now)
  }

  private inWindow(now: number): boolean {
    return this.firstPing !== undefined && now - this.firstPing < SETTLE_HEARTBEATS * this.opts.heartbeatMs
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
      // The usual case: the worker holds exactly its assignment.
      if (!settling && sameRanges(held, ds.assignment.rangesOf(w.id))) {
        out[ds.name] = ds.assignment.rangesOf(w.id)
        continue
      }
      const keep: ChunkRef[] = []
      forEachHeld(ds.chunks, held, (c, i) => {
        if (ds.assignment.isAssigned(i, w.id) ? settling : !this.hasAssignedHolder(ds, i, now)) keep.push(c)
      })
      const mine = settling ? [] : ds.assignment.rangesOf(w.id)
      out[ds.name] = keep.length === 0 ? mine : mergeRanges([...mine.map(([first, last]) => ({ first, last })), ...keep])
    }
    return out
  }

  private advanceHeights(now = Date.now()): void {
    for (const ds of this.datasets.values()) {
      let i = lowerBoundLast(ds.chunks, ds.height + 1)
      while (i < ds.chunks.length && this.servers(ds, i, now).length > 0) {
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

function sameRanges(a: readonly Range[], b: readonly Range[]): boolean {
  return a.length === b.length && a.every((r, i) => r[0] === b[i][0] && r[1] === b[i][1])
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

/** Index of the first chunk in `[from, to)` whose `last` is ≥ block (`to` when none). */
export function lowerBoundLast(chunks: readonly { last: number }[], block: number, from = 0, to = chunks.length): number {
  let lo = from
  let hi = to
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (chunks[mid].last < block) lo = mid + 1
    else hi = mid
  }
  return lo
}
