import autocannon, { type Options, type Result } from 'autocannon'
import { readFileSync } from 'node:fs'
import { deploy, rss, type WorkerFlags } from '../../bench/lib/procs.js'

/*
 * Overload on loopback (test/load.test.ts and `npm run bench -- load`): a router and one worker
 * PROCESS (the real CLI) admitting `concurrency` queries and `queue` waiting ones, and autocannon
 * with more connections than that sending queries straight to the worker, while two more autocannon
 * runs ask the router for `/height` and `/<block>/worker`. Every answer is counted by status; a 503
 * or 429 must carry Retry-After; the worker's RSS is sampled and its peak (VmHWM) read at the end.
 */

export interface OverloadOptions {
  /** Dataset folder (one dataset). */
  data: string
  seconds: number
  /** Connections sending queries to the worker. */
  connections: number
  /** Queries per second over all those connections (default: none, each sends again at once). */
  rate?: number
  concurrency: number
  queue: number
  /** Query bodies (JSON), sent in turn by every connection. */
  bodies: string[]
  /** Blocks to ask the router's `/<block>/worker` for. */
  blocks: number[]
  /** Connections of each router run (default 4). */
  routerConnections?: number
  /** Requests per second of each router run (default 100: the router is checked, not measured). */
  routerRate?: number
  /** Heartbeat of router and worker (default 1000 ms; the router drops a worker after 3 missed). */
  heartbeatMs?: number
  /** autocannon's timeout per request, seconds (default 10). */
  timeoutSec?: number
  /** More worker flags. */
  flags?: WorkerFlags
}

export interface Latency {
  count: number
  p50: number
  p99: number
  max: number
}

export interface RunFigures {
  /** Answers per second. */
  rps: number
  answers: number
  /** status → count */
  statuses: Record<string, number>
  /** Latency of the 200s, ms. */
  ok: Latency
  /** Latency of the refusals (503/429), ms. */
  refused: Latency
  errors: number
  timeouts: number
  /** Connections opened again after the first (the server closed one, or a timeout). */
  reconnects: number
  /** 503/429 answers without a numeric Retry-After. */
  missingRetryAfter: number
  /** Bytes of the 200 answers. */
  bytesOk: number
  /** The first body of each status other than 200, 503 and 429 (and of a 503 from the router). */
  samples: Record<string, string>
}

export interface OverloadFigures {
  seconds: number
  worker: RunFigures
  height: RunFigures
  routing: RunFigures
  rss: { idle: number; max: number; peak: number; routerPeak: number }
  /** CPU seconds (user + system) the worker and the router used during the load. */
  cpu: { worker: number; router: number }
  /** After the load: a query answered (status) and the worker's limiter idle again. */
  after: { status: number; active: number; queued: number }
}

/** CPU seconds (user + system) of a process so far, from /proc (Linux; clock ticks of 10 ms). */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

function latency(values: number[]): Latency {
  const v = [...values].sort((a, b) => a - b)
  const at = (q: number) => (v.length ? v[Math.min(v.length - 1, Math.floor(q * v.length))] : 0)
  return { count: v.length, p50: at(0.5), p99: at(0.99), max: v.length ? v[v.length - 1] : 0 }
}

/** One autocannon run, every answer counted and timed by status. */
export function run(opts: Options, sampleRefusals = false): Promise<{ result: Result; figures: RunFigures }> {
  const statuses: Record<string, number> = {}
  const ok: number[] = []
  const refused: number[] = []
  let bytesOk = 0
  let reconnects = 0
  let missingRetryAfter = 0
  const samples: Record<string, string> = {}
  const requests = (opts.requests ?? [{}]).map((r) => ({
    ...r,
    onResponse: (status: number, body: string, _ctx: unknown, headers: Record<string, string>) => {
      if ((status === 503 || status === 429) && !/^\d+$/.test(headers['retry-after'] ?? '')) missingRetryAfter++
      if (status !== 200 && samples[status] === undefined && (sampleRefusals || (status !== 503 && status !== 429))) samples[status] = String(body).slice(0, 300)
    },
  }))
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        ...opts,
        requests,
        setupClient: (client: any) => {
          // Count connections opened after the first one of each client.
          const connect = client._connect
          let n = 0
          client._connect = function (this: unknown) {
            if (n++ > 0) reconnects++
            return connect.call(this)
          }
        },
      },
      (err, result) => {
        if (err) return reject(err)
        const answers = ok.length + refused.length + Object.entries(statuses).filter(([s]) => s !== '200' && s !== '503' && s !== '429').reduce((n, [, c]) => n + c, 0)
        resolve({
          result,
          figures: {
            rps: answers / result.duration,
            answers,
            statuses,
            ok: latency(ok),
            refused: latency(refused),
            errors: result.errors,
            timeouts: result.timeouts,
            reconnects: reconnects - result.timeouts,
            missingRetryAfter,
            bytesOk,
            samples,
          },
        })
      },
    )
    instance.on('response', (_client: unknown, status: number, bytes: number, ms: number) => {
      statuses[status] = (statuses[status] ?? 0) + 1
      if (status === 200) {
        ok.push(ms)
        bytesOk += bytes
      } else if (status === 503 || status === 429) refused.push(ms)
    })
  })
}

/** Deploy, overload, measure, stop. */
export async function runOverload(o: OverloadOptions): Promise<OverloadFigures> {
  const d = await deploy(o.data, 1, { ...o.flags, concurrency: o.concurrency, queue: o.queue }, o.heartbeatMs ?? 1000)
  try {
    const worker = d.workers[0]
    const routed = await fetch(`${d.base}/${o.blocks[0]}/worker`)
    const queryUrl = new URL((await routed.text()).trim())
    if (!routed.ok) throw new Error(`the router routes nowhere: ${routed.status}`)
    // One query first: a worker's first one loads DuckDB and compiles the engine's code, which on a
    // starved machine took longer than the whole storm, so that none was answered during it.
    const warm = await fetch(queryUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: o.bodies[0] })
    if (warm.status !== 200) throw new Error(`the worker did not answer a first query: ${warm.status} ${await warm.text()}`)
    await warm.arrayBuffer()
    const base = new URL(d.base)
    const idle = rss(worker.pid).rss
    const cpu0 = { worker: cpuSeconds(worker.pid), router: cpuSeconds(d.router.pid) }
    let max = idle
    const sampler = setInterval(() => {
      try {
        max = Math.max(max, rss(worker.pid).rss)
      } catch {
        // the process is gone: the peak read below says so
      }
    }, 100)
    const timeout = o.timeoutSec ?? 10
    const routerConnections = o.routerConnections ?? 4
    const overallRate = Math.max(routerConnections, o.routerRate ?? 100)
    const [w, h, r] = await Promise.all([
      run({
        url: queryUrl.origin,
        connections: o.connections,
        ...(o.rate ? { overallRate: Math.max(o.rate, o.connections) } : {}),
        duration: o.seconds,
        timeout,
        excludeErrorStats: true,
        requests: o.bodies.map((body) => ({ method: 'POST', path: queryUrl.pathname + queryUrl.search, headers: { 'content-type': 'application/json' }, body })),
      }),
      run({ url: `${d.base}/height`, connections: routerConnections, overallRate, duration: o.seconds, timeout }, true),
      run({
        url: base.origin,
        connections: routerConnections,
        overallRate,
        duration: o.seconds,
        timeout,
        requests: o.blocks.map((b) => ({ method: 'GET', path: `${base.pathname}/${b}/worker` })),
      }, true),
    ])
    clearInterval(sampler)
    const cpu = { worker: cpuSeconds(worker.pid) - cpu0.worker, router: cpuSeconds(d.router.pid) - cpu0.router }
    const peak = rss(worker.pid).peak
    const routerPeak = rss(d.router.pid).peak
    // Afterwards, once the worker has drained what it admitted during the storm (on a busy machine
    // that can outlast the storm, and a query sent meanwhile is refused, rightly), a query is
    // answered and nothing is left running or queued.
    const drained = async () => {
      let status: any = {}
      for (let i = 0; i < 200; i++) {
        status = await (await fetch(`${worker.url}/status`)).json()
        if (status.queries?.active === 0 && status.queries?.queued === 0) break
        await new Promise((res) => setTimeout(res, 50))
      }
      return status
    }
    await drained()
    const answer = await fetch(queryUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: o.bodies[0] })
    await answer.arrayBuffer()
    const status = await drained()
    return {
      seconds: w.result.duration,
      worker: w.figures,
      height: h.figures,
      routing: r.figures,
      rss: { idle, max, peak, routerPeak },
      cpu,
      after: { status: answer.status, active: status.queries?.active, queued: status.queries?.queued },
    }
  } finally {
    await d.stop()
  }
}

/** What must hold of an overload run; the problems found (empty: none). */
export function overloadProblems(f: OverloadFigures, maxRssBytes: number, expectRefusals = true): string[] {
  const out: string[] = []
  const { worker: w } = f
  const other = Object.keys(w.statuses).filter((s) => s !== '200' && s !== '503' && s !== '429')
  if (other.length) out.push(`worker statuses other than 200, 503, 429: ${other.map((s) => `${s} ×${w.statuses[s]} (${w.samples[s] ?? ''})`).join(', ')}`)
  if (!w.statuses['200']) out.push('no query answered 200')
  if (expectRefusals && !w.statuses['503'] && !w.statuses['429']) out.push('the excess was not refused (no 503 or 429)')
  if (w.missingRetryAfter) out.push(`${w.missingRetryAfter} refusals without Retry-After`)
  for (const [name, r] of [['worker', w], ['router /height', f.height], ['router /<block>/worker', f.routing]] as const) {
    if (r.errors || r.timeouts) out.push(`${name}: ${r.errors} errors, ${r.timeouts} timeouts`)
    if (r.reconnects > 0) out.push(`${name}: ${r.reconnects} connections closed by the server`)
  }
  for (const [name, r] of [['router /height', f.height], ['router /<block>/worker', f.routing]] as const) {
    const bad = Object.keys(r.statuses).filter((s) => s !== '200')
    if (bad.length) out.push(`${name}: statuses ${bad.map((s) => `${s} ×${r.statuses[s]} (${r.samples[s] ?? ''})`).join(', ')}`)
    if (!r.statuses['200']) out.push(`${name}: nothing answered`)
  }
  if (f.rss.peak > maxRssBytes) out.push(`worker RSS peak ${(f.rss.peak / 2 ** 20).toFixed(0)} MiB above ${(maxRssBytes / 2 ** 20).toFixed(0)} MiB`)
  if (f.after.status !== 200) out.push(`after the load a query answered ${f.after.status}`)
  if (f.after.active !== 0 || f.after.queued !== 0) out.push(`after the load the worker counts ${f.after.active} running and ${f.after.queued} queued queries`)
  return out
}
