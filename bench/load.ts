import { ensureDataset } from './lib/dataset.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'
import { overloadProblems, runOverload, type RunFigures } from '../test/helpers/overload.js'
import { rng } from '../test/helpers/walk.js'

export interface LoadBenchOptions {
  seconds: number
  connections: number
  concurrency: number
  queue: number
  blocks: number
  shape: string
  span: number
  routerConnections: number
  routerRate: number
  /** Queries per second over all connections (0: none, each connection sends again at once). */
  rate: number
}

const mib = (b: number) => (b / 2 ** 20).toFixed(0)

/**
 * `bench load`: overload a router + one worker process on loopback (test/helpers/overload.ts):
 * `--connections` autocannon connections sending `--shape` queries of `--span` blocks at random
 * places straight to the worker (`--concurrency`, `--queue`), and the router's `/height` and
 * `/<block>/worker` asked at the same time. Prints answers/s, statuses, p50/p99 of the 200s and of
 * the refusals, errors, timeouts, closed connections and the worker's RSS; exits with 1 when a
 * property of test/load.test.ts does not hold (other 5xx, timeouts, resets, no Retry-After).
 */
export async function runLoadBench(o: LoadBenchOptions): Promise<void> {
  const { dir } = await ensureDataset(o.blocks)
  const shape = shapeByName(o.shape)
  const r = rng(7)
  const bodies = Array.from({ length: 64 }, () => {
    const from = r.int(Math.max(1, o.blocks - o.span))
    return JSON.stringify(shape.query(from, Math.min(o.blocks - 1, from + o.span - 1)))
  })
  console.log(`machine: ${machine()}`)
  console.log(`dataset: ${o.blocks} synthetic blocks (${dir}); "${o.shape}" over ${o.span} blocks; worker --concurrency ${o.concurrency} --queue ${o.queue}; ` +
    `${o.connections} connections for ${o.seconds} s${o.rate ? ` at ${Math.max(o.rate, o.connections)} queries/s in all` : ', each sending again as soon as answered'}; router ${o.routerRate}/s per endpoint`)
  const f = await runOverload({
    data: dir,
    seconds: o.seconds,
    connections: o.connections,
    concurrency: o.concurrency,
    queue: o.queue,
    bodies,
    blocks: Array.from({ length: 64 }, () => r.int(o.blocks)),
    routerConnections: o.routerConnections,
    routerRate: o.routerRate,
    rate: o.rate,
  })
  const row = (name: string, x: RunFigures) => [
    name,
    x.answers,
    x.rps.toFixed(0),
    Object.entries(x.statuses).map(([s, n]) => `${s}: ${n}`).join(', '),
    x.ok.count ? `${x.ok.p50.toFixed(0)} / ${x.ok.p99.toFixed(0)}` : '-',
    x.refused.count ? `${x.refused.p50.toFixed(0)} / ${x.refused.p99.toFixed(0)}` : '-',
    `${x.errors} / ${x.timeouts} / ${x.reconnects}`,
    x.missingRetryAfter,
  ]
  printTable(`overload for ${f.seconds} s: ${o.connections} connections to a worker with --concurrency ${o.concurrency} --queue ${o.queue}, ${o.routerConnections} + ${o.routerConnections} to the router`, [
    'target', 'answers', 'answers/s', 'statuses', '200s p50 / p99 ms', 'refusals p50 / p99 ms', 'errors / timeouts / closed', 'refusals without Retry-After',
  ], [row(`worker "${o.shape}"`, f.worker), row('router /height', f.height), row('router /<block>/worker', f.routing)])
  printTable('memory (MiB) and CPU', ['process', 'RSS idle', 'RSS max (sampled)', 'RSS peak (VmHWM)', 'CPU s during the load'], [
    ['worker', mib(f.rss.idle), mib(f.rss.max), mib(f.rss.peak), f.cpu.worker.toFixed(1)],
    ['router', '-', '-', mib(f.rss.routerPeak), f.cpu.router.toFixed(1)],
  ])
  console.log(`200 answers: ${(f.worker.bytesOk / 1e6 / f.seconds).toFixed(1)} MB/s of JSON; after the load: a query answered ${f.after.status}, ${f.after.active} running, ${f.after.queued} queued`)
  const problems = overloadProblems(f, 4 * 2 ** 30, o.connections > o.concurrency + o.queue)
  if (problems.length) {
    console.log(`problems:\n- ${problems.join('\n- ')}`)
    process.exitCode = 1
  } else console.log('no 5xx other than 503, no timeout, no closed connection, every refusal with Retry-After')
}
