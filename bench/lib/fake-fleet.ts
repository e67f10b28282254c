import type { ChunkRef } from '../../src/chunks/layout.js'
import { lowerBoundLast } from '../../src/chunks/search.js'
import type { DesiredState, RouterState } from '../../src/server/router.js'
import type { Range } from '../../src/server/ranges.js'
import { PingSession } from '../../src/server/ping-session.js'

/*
 * Many light fake workers pinging routers in process (`RouterState.ping` with a simulated clock):
 * each holds at once what it was last told to hold (an instant download), so the routers' desired
 * states settle in two rounds. Used to measure how many chunks move when workers join or leave.
 */

interface FakeWorker {
  id: string
  held: Record<string, Range[]>
  alive: boolean
  /** With `deltas`: per router (by index), what it acknowledged. */
  sessions: PingSession[]
}

export class FakeFleet {
  readonly workers = new Map<string, FakeWorker>()
  now: number
  /** The last desired state of each live worker, as the first router answered. */
  desired = new Map<string, DesiredState>()

  /** With `countBytes`: bytes of the pings sent and the answers received (as JSON), for comparing full pings with deltas. */
  bytes = { pings: 0, answers: 0 }
  /** Pings whose answer differed from the worker's previous desired state. */
  private changes = 0
  readonly deltas: boolean
  private readonly countBytes: boolean

  /**
   * With `deltas`, workers ping as a real worker does (src/server/ping-session.ts): only what
   * changed. `countBytes` adds up `bytes` (each ping and answer serialised: costly with many workers).
   */
  constructor(
    readonly routers: RouterState[],
    readonly heartbeatMs: number,
    opts: { start?: number; deltas?: boolean; countBytes?: boolean } = {},
  ) {
    this.now = opts.start ?? 1_000_000
    this.deltas = opts.deltas ?? false
    this.countBytes = opts.countBytes ?? false
  }

  add(id: string, held: Record<string, Range[]> = {}): void {
    this.workers.set(id, { id, held, alive: true, sessions: [] })
  }

  /** The worker stops pinging (it is dead once the routers miss its heartbeats). */
  stop(id: string): void {
    this.workers.get(id)!.alive = false
    this.desired.delete(id)
  }

  /** One heartbeat: every live worker pings every router; with `download`, it then holds what it was told to. */
  round(download = true): void {
    this.now += this.heartbeatMs
    for (const w of this.workers.values()) {
      if (!w.alive) continue
      this.pingOne(w.id, download)
    }
  }

  /** One worker pings every router now (the clock does not move); with `download`, it then holds what it was told to. */
  pingOne(id: string, download = true): DesiredState {
    const w = this.workers.get(id)!
    let first: DesiredState | undefined
    this.routers.forEach((r, i) => {
      const desired = this.deltas ? this.pingWithSession(r, w, (w.sessions[i] ??= new PingSession())) : this.send(r, { worker_id: w.id, worker_url: `http://${w.id}.invalid`, state: w.held }).desired!
      first ??= desired
    })
    const before = this.desired.get(w.id)
    if (!before || !sameDesired(before, first!)) this.changes++
    this.desired.set(w.id, first!)
    if (download) w.held = first!
    return first!
  }

  private pingWithSession(r: RouterState, w: FakeWorker, session: PingSession): DesiredState {
    for (let attempt = 0; attempt < 2; attempt++) {
      const desired = session.answered(w.held, this.send(r, { worker_id: w.id, worker_url: `http://${w.id}.invalid`, ...session.fields(w.held) }))
      if (desired) return desired
    }
    throw new Error('the router asked for the full state twice in a row')
  }

  private send(r: RouterState, msg: Parameters<RouterState['ping']>[0]): ReturnType<RouterState['ping']> {
    const answer = r.ping(msg, this.now)
    if (this.countBytes) {
      this.bytes.pings += JSON.stringify(msg).length
      this.bytes.answers += JSON.stringify(answer).length
    }
    return answer
  }

  /**
   * Rounds until the desired states stop changing (at most `max`); at least `min` rounds, so that a
   * router that has just started is past the heartbeats in which it orders no download.
   */
  settle(max = 20, min = 3): number {
    for (let i = 0; i < min; i++) this.round()
    for (let i = 1; i <= max; i++) {
      const before = this.changes
      this.round()
      if (this.changes === before) return i
    }
    throw new Error(`desired states still changing after ${max} rounds`)
  }

  /** chunk index → sorted ids of the live workers whose desired state holds it. */
  holders(dataset: string, chunks: readonly ChunkRef[]): string[][] {
    const out: string[][] = chunks.map(() => [])
    for (const [id, d] of this.desired) {
      for (const [first, last] of d[dataset] ?? []) {
        for (let i = lowerBoundLast(chunks, first); i < chunks.length && chunks[i].last <= last; i++) out[i].push(id)
      }
    }
    for (const ids of out) ids.sort()
    return out
  }
}

function sameDesired(a: DesiredState, b: DesiredState): boolean {
  const names = Object.keys(a)
  if (names.length !== Object.keys(b).length) return false
  return names.every((n) => {
    const x = a[n]
    const y = b[n]
    return y !== undefined && x.length === y.length && x.every(([f, l], i) => f === y[i][0] && l === y[i][1])
  })
}

/** Chunks whose holders differ between two `holders` results. */
export function moved(a: string[][], b: string[][]): number {
  let n = 0
  for (let i = 0; i < a.length; i++) if (a[i].join() !== b[i]?.join()) n++
  return n
}
