import { camel, compareCallAddress, ROOT_ORIGIN, signedOrigin } from '../squid-json.js'
import { qualifiedCallName } from './names.js'
import { accountOf, isSidecarCall, rawArg, toSquid } from './values.js'

/*
 * The calls of one extrinsic and the call address of each of its events, from sidecar's decoded
 * call and the extrinsic's events: a port of squid's CallParser (substrate-data 4.2.1 parsing/call).
 *
 * The extrinsic's call is at `[]`, inner calls are derived from args: `Utility.batch`/`batch_all`/
 * `force_batch` (`calls[i]` → `[…, i]`), `Proxy.proxy`/`proxy_announced`, `Multisig.as_multi`/
 * `as_multi_threshold_1`, `Sudo.sudo`/`sudo_unchecked_weight`/`sudo_as`, `Utility.dispatch_as`/
 * `as_derivative` (`call` → `[…, 0]`), recursively. The parser walks the extrinsic's events backwards
 * and uses the closing events (`Utility.ItemCompleted`/`BatchCompleted`/`BatchInterrupted`/
 * `ItemFailed`, `Proxy.ProxyExecuted`, `Multisig.MultisigExecuted`, `Sudo.Sudid`/`SudoAsDone`,
 * `Utility.DispatchedAs`) to give each event the address of the call that emitted it and each call
 * its success, error and origin. As in squid: inner calls that did not run are absent (the calls of a
 * failed extrinsic, batch items after the interrupted one); events before the first batch item (the
 * fee withdrawal) go to item 0 when the runtime emits ItemCompleted; without ItemCompleted (old
 * runtimes, seen as: no ItemCompleted among the extrinsic's events) items are listed but their events
 * stay with the batch. As in squid, the closing `System.ExtrinsicSuccess`/`ExtrinsicFailed` and the
 * events of a failed extrinsic have no call address (null), like the node source's. An opaque (hex)
 * inner call is not decoded (no metadata), and when the events do not fit the algorithm (a missing
 * closing event) the extrinsic falls back to: every derivable inner call with the extrinsic's
 * success, every event at `[]`. Origins as squid: signed `{__kind: "system", value: {__kind:
 * "Signed", value: account}}`, `Root` under sudo, the proxied / multisig / sudo_as account for the
 * inner call, the parent's for batch items; `null` where squid has none (unsigned extrinsics,
 * as_derivative, as_multi_threshold_1, a non-`Id` address, an address that is no account id).
 */

/** An event of the block while its call address is worked out. */
export interface Ev {
  name: string
  /** sidecar's `data` */
  data: unknown
  /** undefined: not assigned (yet) */
  callAddress?: number[] | null
}

export interface CallNode {
  extrinsicIndex: number
  address: number[]
  name: string
  /** sidecar's call object (`{method, args}`) */
  raw: any
  origin?: unknown
  success?: boolean
  error?: unknown
}

/** The events do not fit the call tree (e.g. a closing event is missing). */
class Unparseable extends Error {}

interface CallResult {
  ok: boolean
  error?: unknown
}

type Boundary<T> = (e: Ev) => T | undefined | null | false

/** Field `i` (positional data) or `name` (named data) of an event. */
export function field(e: Ev, i: number, name: string): unknown {
  const d = e.data as any
  if (Array.isArray(d)) return d[i]
  if (d && typeof d === 'object') return d[name] ?? d[camel(name)] ?? d[name.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase())]
  return i === 0 ? d : undefined
}

/** A Result as sidecar gives it (`{ok}` / `{err}`, or a bare bool in old runtimes). */
function resultOf(v: unknown): CallResult {
  if (typeof v === 'boolean') return { ok: v }
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>
    if ('ok' in o || 'Ok' in o) return { ok: true }
    if ('err' in o || 'Err' in o) return { ok: false, error: toSquid(o.err ?? o.Err) }
  }
  throw new Unparseable(`unexpected result ${JSON.stringify(v)?.slice(0, 100)}`)
}

const ITEM_COMPLETED: Boundary<boolean> = (e) => e.name === 'Utility.ItemCompleted'

/**
 * squid's CallParser for one extrinsic (substrate-data 4.2.1 parsing/call/*.ts), over the
 * extrinsic's own events.
 */
class CallTreeParser {
  readonly calls: CallNode[] = []
  private pos: number
  private address?: number[]
  private boundary?: Boundary<unknown>

  constructor(private readonly events: Ev[], private readonly hasItemCompleted: boolean, private readonly strict: boolean) {
    this.pos = events.length - 1
  }

  parse(root: CallNode): void {
    const last = this.next()
    switch (last.name) {
      case 'System.ExtrinsicSuccess':
        this.visitCall(root)
        break
      case 'System.ExtrinsicFailed':
        this.visitFailedCall(root, toSquid(field(last, 0, 'dispatchError')))
        this.takeEvents()
        break
      default:
        throw new Unparseable(`the extrinsic's last event is ${last.name}`)
    }
  }

  /** Fallback: every derivable inner call, all with the extrinsic's success. */
  unwrapAll(root: CallNode, success: boolean, error: unknown): void {
    if (success) this.unwrap(root, true)
    else this.visitFailedCall(root, error)
  }

  private subcall(parent: CallNode, raw: unknown, index: number, origin: unknown): CallNode | undefined {
    if (!isSidecarCall(raw)) {
      if (this.strict) throw new Unparseable(`${parent.name}: inner call ${index} is not decoded`)
      return undefined
    }
    const r = raw as any
    return {
      extrinsicIndex: parent.extrinsicIndex,
      address: [...parent.address, index],
      name: qualifiedCallName(r.method),
      raw: r,
      origin: origin ?? undefined,
    }
  }

  /** The wrapped call (`call`, or `proposal` of old sudo) at [..., 0]; origin undefined: the parent's. */
  private getSubcall(call: CallNode, origin?: unknown, argName = 'call'): CallNode | undefined {
    return this.subcall(call, rawArg(call.raw, argName), 0, origin === undefined ? call.origin : origin)
  }

  private getSubcalls(call: CallNode): CallNode[] {
    const list = rawArg(call.raw, 'calls')
    if (!Array.isArray(list)) {
      if (this.strict) throw new Unparseable(`${call.name}: no calls`)
      return []
    }
    return list.map((x, i) => this.subcall(call, x, i, call.origin)).filter((x): x is CallNode => x != null)
  }

  private sudoSubcall(call: CallNode, origin: unknown): CallNode | undefined {
    const argName = rawArg(call.raw, 'call') !== undefined ? 'call' : 'proposal'
    return this.getSubcall(call, origin, argName)
  }

  private visitCall(call: CallNode): void {
    call.success = true
    this.calls.push(call)
    const parent = this.address
    this.address = call.address
    switch (call.name) {
      case 'Multisig.as_multi':
        this.visitAsMulti(call)
        break
      case 'Multisig.as_multi_threshold_1':
      case 'Utility.as_derivative':
      case 'Utility.as_sub':
      case 'Utility.as_limited_sub': {
        const sub = this.getSubcall(call, null)
        if (sub) this.visitCall(sub)
        break
      }
      case 'Utility.batch':
        this.visitBatch(call)
        break
      case 'Utility.batch_all':
        this.get((e) => e.name === 'Utility.BatchCompleted')
        this.visitBatchItems(this.getSubcalls(call))
        break
      case 'Utility.force_batch':
        this.visitForceBatch(call)
        break
      case 'Utility.dispatch_as': {
        const sub = this.getSubcall(call, toSquid(rawArg(call.raw, 'asOrigin')))
        if (sub) this.visitSubcall(sub, (e) => (e.name === 'Utility.DispatchedAs' ? resultOf(field(e, 0, 'result')) : undefined))
        break
      }
      case 'Proxy.proxy':
      case 'Proxy.proxy_announced': {
        const real = accountOf(rawArg(call.raw, 'real'))
        const sub = this.getSubcall(call, real ? signedOrigin(real) : null)
        if (sub) this.visitSubcall(sub, (e) => (e.name === 'Proxy.ProxyExecuted' ? resultOf(field(e, 0, 'result')) : undefined))
        break
      }
      case 'Sudo.sudo':
      case 'Sudo.sudo_unchecked_weight':
      case 'Sudo.sudo_as': {
        let origin: unknown = ROOT_ORIGIN
        if (call.name === 'Sudo.sudo_as') {
          const who = accountOf(rawArg(call.raw, 'who'))
          origin = who ? signedOrigin(who) : null
        }
        const sub = this.sudoSubcall(call, origin)
        if (sub) this.visitSubcall(sub, (e) => (e.name === 'Sudo.Sudid' || e.name === 'Sudo.SudoAsDone' ? resultOf(field(e, 0, 'sudoResult')) : undefined))
        break
      }
    }
    this.takeEvents()
    this.address = parent
  }

  private visitAsMulti(call: CallNode): void {
    const executed: Boundary<{ result: CallResult; multisig: unknown }> = (e) =>
      e.name === 'Multisig.MultisigExecuted' ? { result: resultOf(field(e, 4, 'result')), multisig: field(e, 2, 'multisig') } : undefined
    if (!this.isPresent(executed)) return
    const { result, multisig } = this.get(executed)
    const account = accountOf(multisig)
    const sub = this.getSubcall(call, account ? signedOrigin(account) : null)
    if (!sub) return
    if (result.ok) this.visitCall(sub)
    else this.visitFailedCall(sub, result.error)
  }

  private visitBatch(call: CallNode): void {
    const items = this.getSubcalls(call)
    const result = this.get<{ ok: boolean; failed?: number; error?: unknown }>((e) => {
      if (e.name === 'Utility.BatchCompleted') return { ok: true }
      if (e.name === 'Utility.BatchInterrupted') return { ok: false, failed: Number(field(e, 0, 'index')), error: toSquid(field(e, 1, 'error')) }
    })
    if (result.ok) return this.visitBatchItems(items)
    const failed = result.failed!
    if (!Number.isSafeInteger(failed) || failed < 0 || failed >= items.length) throw new Unparseable(`BatchInterrupted at item ${failed} of ${items.length}`)
    this.visitFailedCall(items[failed], result.error)
    this.visitBatchItems(items.slice(0, failed))
  }

  private visitBatchItems(items: CallNode[]): void {
    if (items.length === 0) return
    if (this.hasItemCompleted) {
      for (let i = items.length - 1; i >= 0; i--) {
        this.get(ITEM_COMPLETED)
        if (i > 0) this.withBoundary(ITEM_COMPLETED, () => this.visitCall(items[i]))
        else this.visitCall(items[i])
      }
    } else {
      for (const item of items) this.unwrap(item, true)
    }
  }

  private visitForceBatch(call: CallNode): void {
    this.get((e) => e.name === 'Utility.BatchCompleted' || e.name === 'Utility.BatchCompletedWithErrors')
    const items = this.getSubcalls(call)
    const itemEnd: Boundary<CallResult> = (e) => {
      if (e.name === 'Utility.ItemCompleted') return { ok: true }
      if (e.name === 'Utility.ItemFailed') return { ok: false, error: toSquid(field(e, 0, 'error')) }
    }
    for (let i = items.length - 1; i >= 0; i--) {
      const result = this.get(itemEnd)
      if (result.ok) {
        if (i > 0) this.withBoundary(itemEnd, () => this.visitCall(items[i]))
        else this.visitCall(items[i])
      } else {
        this.visitFailedCall(items[i], result.error)
      }
    }
  }

  private visitSubcall(call: CallNode, boundary: Boundary<CallResult>): void {
    const result = this.get(boundary)
    if (result.ok) this.visitCall(call)
    else this.visitFailedCall(call, result.error)
  }

  private visitFailedCall(call: CallNode, error: unknown): void {
    call.success = false
    call.error = error
    this.calls.push(call)
  }

  private unwrap(call: CallNode, success: boolean): void {
    this.calls.push(call)
    call.success = success
    const parent = this.address
    this.address = call.address
    const sub = (s: CallNode | undefined) => s && this.unwrap(s, success)
    switch (call.name) {
      case 'Utility.batch':
      case 'Utility.batch_all':
      case 'Utility.force_batch':
        for (const s of this.getSubcalls(call)) this.unwrap(s, success)
        break
      case 'Utility.dispatch_as':
        sub(this.getSubcall(call, toSquid(rawArg(call.raw, 'asOrigin'))))
        break
      case 'Utility.as_derivative':
      case 'Utility.as_sub':
      case 'Utility.as_limited_sub':
      case 'Multisig.as_multi':
      case 'Multisig.as_multi_threshold_1':
        sub(this.getSubcall(call, null))
        break
      case 'Proxy.proxy':
      case 'Proxy.proxy_announced': {
        const real = accountOf(rawArg(call.raw, 'real'))
        sub(this.getSubcall(call, real ? signedOrigin(real) : null))
        break
      }
      case 'Sudo.sudo':
      case 'Sudo.sudo_unchecked_weight':
        sub(this.sudoSubcall(call, ROOT_ORIGIN))
        break
      case 'Sudo.sudo_as': {
        const who = accountOf(rawArg(call.raw, 'who'))
        sub(this.sudoSubcall(call, who ? signedOrigin(who) : null))
        break
      }
    }
    this.address = parent
  }

  private withBoundary<T>(boundary: Boundary<unknown>, cb: () => T): T {
    const current = this.boundary
    this.boundary = boundary
    try {
      return cb()
    } finally {
      this.boundary = current
    }
  }

  private get<T>(boundary: Boundary<T>): T {
    for (;;) {
      const e = this.next()
      e.callAddress = this.address
      const match = boundary(e)
      if (match) return match
    }
  }

  private isPresent(boundary: Boundary<unknown>): boolean {
    const pos = this.pos
    try {
      let e: Ev | undefined
      while ((e = this.maybeNext())) {
        if (this.boundary?.(e)) return false
        if (boundary(e)) return true
      }
      return false
    } finally {
      this.pos = pos
    }
  }

  private takeEvents(): void {
    let e: Ev | undefined
    while ((e = this.maybeNext())) {
      if (this.boundary?.(e)) {
        this.pos += 1
        return
      }
      e.callAddress = this.address
    }
  }

  private next(): Ev {
    const e = this.maybeNext()
    if (!e) throw new Unparseable('missing required event')
    return e
  }

  private maybeNext(): Ev | undefined {
    return this.pos >= 0 ? this.events[this.pos--] : undefined
  }
}

/**
 * The calls of extrinsic `root` in address order, setting `callAddress` of its events `evs`;
 * `success`/`error`: the extrinsic's, for the fallback when the events do not fit.
 */
export function extrinsicCallTree(root: CallNode, evs: Ev[], success: boolean, error: unknown): CallNode[] {
  const hasItemCompleted = evs.some((e) => e.name === 'Utility.ItemCompleted')
  let tree: CallNode[]
  try {
    const p = new CallTreeParser(evs, hasItemCompleted, true)
    p.parse({ ...root })
    tree = p.calls
  } catch (e) {
    if (!(e instanceof Unparseable)) throw e
    // The events do not fit the parser: every event goes to the extrinsic's own call.
    const p = new CallTreeParser(evs, hasItemCompleted, false)
    p.unwrapAll({ ...root }, success, error)
    tree = p.calls
    for (const ev of evs) ev.callAddress = []
  }
  return tree.sort((a, b) => compareCallAddress(a.address, b.address))
}
