import { subtractRanges, type Range } from './ranges.js'

/*
 * A worker's side of pings that carry only what changed (docs/serving.md, "Pings"). A worker of a
 * sparse dataset holds thousands of ranges; sending them all at every heartbeat, and getting its
 * desired state back in full, is what saturates a router with many workers. Once a router has
 * acknowledged a state (its answer's `state_version`), the next ping sends the ranges added and
 * removed since (`delta`), and the version of the desired state last received
 * (`desired_version`): the router leaves `desired` out of its answer when it is unchanged. A router
 * that does not know the state a delta is based on (it restarted, or an answer was lost) answers
 * `resync`, and the worker pings again at once with its full state.
 */

export type WorkerState = Record<string, Range[]>

export interface PingDelta {
  /** The router's `state_version` this delta applies to. */
  base: string
  /** Per dataset, block ranges held now that were not at `base` / held at `base` that are not now. */
  added: WorkerState
  removed: WorkerState
}

/** The fields of a ping that say what the worker holds. */
export interface PingStateFields {
  state?: WorkerState
  delta?: PingDelta
  desired_version?: string
}

/** The fields of a ping's answer this file is about. */
export interface PingAnswerFields {
  desired?: WorkerState
  state_version?: string
  desired_version?: string
  resync?: boolean
}

export class PingSession {
  private acked?: { version: string; state: WorkerState }
  private desired?: { version: string; state: WorkerState }

  /** The fields of the next ping reporting `state`. */
  fields(state: WorkerState): PingStateFields {
    const desiredVersion = this.desired ? { desired_version: this.desired.version } : {}
    if (!this.acked) return { state, ...desiredVersion }
    return { delta: { base: this.acked.version, ...stateDelta(this.acked.state, state) }, ...desiredVersion }
  }

  /**
   * The router answered a ping built by `fields(state)`: the desired state (the last one received
   * when the answer leaves it out), or undefined when the router asks for the full state (ping again).
   */
  answered(state: WorkerState, answer: PingAnswerFields): WorkerState | undefined {
    if (answer.resync || (!answer.desired && (!this.desired || answer.desired_version !== this.desired.version))) {
      this.reset()
      return undefined
    }
    this.acked = answer.state_version === undefined ? undefined : { version: answer.state_version, state }
    if (answer.desired) this.desired = answer.desired_version === undefined ? undefined : { version: answer.desired_version, state: answer.desired }
    return answer.desired ?? this.desired!.state
  }

  /** Forget what the router acknowledged (a failed ping: the next one sends everything). */
  reset(): void {
    this.acked = undefined
    this.desired = undefined
  }
}

/** Ranges added and removed from `before` to `after`, per dataset (datasets without change left out). */
export function stateDelta(before: WorkerState, after: WorkerState): { added: WorkerState; removed: WorkerState } {
  const added: WorkerState = {}
  const removed: WorkerState = {}
  for (const name of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const a = before[name] ?? []
    const b = after[name] ?? []
    if (sameRanges(a, b)) continue
    const plus = subtractRanges(b, a)
    const minus = subtractRanges(a, b)
    if (plus.length) added[name] = plus
    if (minus.length) removed[name] = minus
  }
  return { added, removed }
}

export function sameRanges(a: readonly Range[], b: readonly Range[]): boolean {
  return a.length === b.length && a.every((r, i) => r[0] === b[i][0] && r[1] === b[i][1])
}
