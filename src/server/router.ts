import type { ChunkRef } from '../chunks/layout.js'
import { ApiError } from '../errors.js'
import { log } from '../log.js'
import { QueryRate } from './query-rate.js'
import { mergeRanges, rangesContain, type Range } from './ranges.js'
import { checkContinuity } from './continuity.js'
import type { ChunkStorage, DatasetAnnouncement } from './storage.js'

/*
 * The router's state: datasets and their chunks (from periodic storage listings), registered workers
 * (from pings), which worker should hold which chunk, and where to send a client for a block.
 *
 * A worker *serves* a chunk when it reports holding it and it is either assigned to it, or no live
 * assigned worker holds it yet (so a chunk moved to another worker stays reachable until the new
 * holder has it). The desired state sent back to a worker is exactly what it should serve or keep.
 */

export interface RouterOptions {
  /** Chunks are held by this many workers (fewer if fewer are alive). */
  replication: number
  /** Interval at which workers are expected to ping. */
  heartbeatMs: number
  /** A worker that has not pinged for this many intervals is dead: not routed to, its chunks reassigned. */
  missedHeartbeats: number
}

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
  /** chunk path → assigned worker ids */
  assigned: Map<string, Set<string>>
  /** Highest block such that every chunk up to it has been served (docs/protocol.md §1); never goes down. */
  height: number
}

export class RouterState {
  private readonly datasets = new Map<string, DatasetEntry>()
  private readonly workers = new Map<string, WorkerEntry>()
  /** Live worker ids at the last scheduling; scheduling runs again when this changes. */
  private scheduledFor = ''

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
    let changed = false
    for (const info of infos) {
      let chunks: ChunkRef[]
      let problems: string[]
      try {
        ;({ servable: chunks, problems } = await checkContinuity(await this.storage.listChunks(info.name), (c) => this.storage.chunkMeta(info.name, c)))
      } catch (e) {
        if (strict) throw e
        log.error({ err: e, dataset: info.name }, 'router: cannot list chunks')
        continue
      }
      let ds = this.datasets.get(info.name)
      if (!ds) {
        ds = { name: info.name, family: info.family.name, url: info.url, chunks: [], problems: [], assigned: new Map(), height: -1 }
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
        const known = new Set(chunks.map((c) => c.path))
        for (const p of ds.assigned.keys()) if (!known.has(p)) ds.assigned.delete(p)
        ds.chunks = chunks
        changed = true
        log.info({ dataset: info.name, chunks: chunks.length, last: chunks.at(-1)?.last ?? -1 }, 'router: chunk list changed')
      }
    }
    if (changed) this.schedule()
    this.advanceHeights()
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
    this.scheduleIfLiveSetChanged(now)
    this.advanceHeights(now)
    const desired = this.desiredFor(w, now)
    if (registering && Object.values(desired).every((r) => r.length === 0)) {
      const chunks = [...this.datasets.values()].reduce((n, d) => n + d.chunks.length, 0)
      log.warn(
        { worker: w.id, datasets: this.datasets.size, chunks, liveWorkers: this.liveWorkers(now).length, replication: this.opts.replication },
        chunks === 0 ? 'router: a worker registered, but there are no chunks to serve yet' : 'router: a worker registered with nothing to serve (every chunk already has its replicas)',
      )
    }
    return { desired, datasets: [...this.datasets.values()].map((d) => ({ name: d.name, family: d.family, url: d.url })) }
  }

  /** Called periodically: notices dead workers even when nobody pings or queries. */
  tick(now = Date.now()): void {
    this.scheduleIfLiveSetChanged(now)
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
    const chunk = ds.chunks[lowerBoundLast(ds.chunks, block)]
    const candidates = chunk ? this.servers(ds, chunk, now) : []
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
        spans: chunkSpans(ds.chunks),
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

  /** Live workers that hold the chunk and are meant to serve it (see the comment at the top). */
  private servers(ds: DatasetEntry, c: ChunkRef, now: number): WorkerEntry[] {
    const holders = [...this.workers.values()].filter((w) => this.isAlive(w, now) && this.holds(w, ds, c))
    const assigned = ds.assigned.get(c.path)
    const assignedHolders = holders.filter((w) => assigned?.has(w.id))
    return assignedHolders.length > 0 ? assignedHolders : holders
  }

  private desiredFor(w: WorkerEntry, now: number): DesiredState {
    const out: DesiredState = {}
    for (const ds of this.datasets.values()) {
      const keep = ds.chunks.filter((c) => ds.assigned.get(c.path)?.has(w.id) || (this.holds(w, ds, c) && this.servers(ds, c, now).includes(w)))
      out[ds.name] = mergeRanges(keep)
    }
    return out
  }

  private advanceHeights(now = Date.now()): void {
    for (const ds of this.datasets.values()) {
      let i = lowerBoundLast(ds.chunks, ds.height + 1)
      while (i < ds.chunks.length && this.servers(ds, ds.chunks[i], now).length > 0) {
        ds.height = ds.chunks[i].last
        i++
      }
    }
  }

  private scheduleIfLiveSetChanged(now: number): void {
    const key = this.liveWorkers(now).sort().join('\n')
    if (key !== this.scheduledFor) this.schedule(now)
  }

  private assignedCount(id: string): number {
    let n = 0
    for (const ds of this.datasets.values()) for (const set of ds.assigned.values()) if (set.has(id)) n++
    return n
  }

  /**
   * Assign every chunk to `replication` live workers, dataset by dataset: keep live assignees, then
   * top up, preferring workers that already hold the chunk, then the workers of the previous chunk
   * while they are under their fair share of the dataset (so each worker gets long contiguous
   * ranges), then the least loaded. Finally move chunks from the most to the least loaded worker
   * until the dataset's loads differ by less than 2.
   */
  private schedule(now = Date.now()): void {
    const live = this.liveWorkers(now).sort()
    this.scheduledFor = live.join('\n')
    const liveSet = new Set(live)
    const want = Math.min(this.opts.replication, live.length)
    /** Across datasets: breaks ties so that the odd chunks of several datasets go to different workers. */
    const total = new Map(live.map((id) => [id, 0]))
    for (const ds of this.datasets.values()) {
      const load = new Map(live.map((id) => [id, 0]))
      for (const c of ds.chunks) {
        const set = new Set([...(ds.assigned.get(c.path) ?? [])].filter((id) => liveSet.has(id)))
        ds.assigned.set(c.path, set)
        for (const id of set) load.set(id, load.get(id)! + 1)
      }
      const fairShare = live.length ? Math.ceil((ds.chunks.length * want) / live.length) : 0
      let prev = new Set<string>()
      for (const c of ds.chunks) {
        const set = ds.assigned.get(c.path)!
        while (set.size < want) {
          const rank = (id: string) => [
            this.holdsId(id, ds, c) ? 0 : 1,
            prev.has(id) && load.get(id)! < fairShare ? 0 : 1,
            load.get(id)!,
            total.get(id)!,
          ]
          const pick = live.filter((id) => !set.has(id)).sort((a, b) => compareTuples(rank(a), rank(b)))[0]
          set.add(pick)
          load.set(pick, load.get(pick)! + 1)
        }
        prev = set
      }
      this.rebalance(ds, live, load, total)
      for (const [id, n] of load) total.set(id, total.get(id)! + n)
    }
    log.info({ live, load: Object.fromEntries(total) }, 'router: chunks assigned')
  }

  private rebalance(ds: DatasetEntry, live: string[], load: Map<string, number>, total: Map<string, number>): void {
    if (live.length < 2) return
    const order = (a: string, b: string) => load.get(a)! - load.get(b)! || total.get(a)! - total.get(b)!
    for (;;) {
      const byLoad = [...live].sort(order)
      const min = byLoad[0]
      const max = byLoad[byLoad.length - 1]
      if (load.get(max)! - load.get(min)! < 2 || !this.moveOne(ds, max, min)) return
      load.set(max, load.get(max)! - 1)
      load.set(min, load.get(min)! + 1)
    }
  }

  /**
   * Move one chunk assigned to `from` and not to `to`: preferably the latest one `to` already holds
   * (a worker back after missing heartbeats gets its own chunks back instead of fetching others),
   * else the latest one (earlier ranges stay where they are).
   */
  private moveOne(ds: DatasetEntry, from: string, to: string): boolean {
    for (const mustHold of [true, false]) {
      for (let i = ds.chunks.length - 1; i >= 0; i--) {
        const set = ds.assigned.get(ds.chunks[i].path)!
        if (set.has(from) && !set.has(to) && (!mustHold || this.holdsId(to, ds, ds.chunks[i]))) {
          set.delete(from)
          set.add(to)
          return true
        }
      }
    }
    return false
  }

  private holdsId(id: string, ds: DatasetEntry, c: ChunkRef): boolean {
    const w = this.workers.get(id)
    return !!w && this.holds(w, ds, c)
  }
}

/** Index of the first chunk whose `last` is ≥ block (chunks.length when none). */
export function lowerBoundLast(chunks: readonly { last: number }[], block: number): number {
  let lo = 0
  let hi = chunks.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (chunks[mid].last < block) lo = mid + 1
    else hi = mid
  }
  return lo
}

function compareTuples(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] - b[i]
  return 0
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
