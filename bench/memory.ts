import { ensureDataset } from './lib/dataset.js'
import { runLoad } from './lib/load.js'
import { deploy, rss } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'
import { mb } from './lib/measure.js'

export interface MemoryBenchOptions {
  blocks: number
  clients: number
  seconds: number
  shape: string
  compression: string
}

/**
 * `bench memory`: RSS of one worker process while `clients` clients keep sending a query whose
 * answer hits the size budget (20 MiB of JSON by default), with the default limits (extra queries
 * wait in the queue or get 503) and with every query admitted at once (`--concurrency = clients`).
 */
export async function runMemory(o: MemoryBenchOptions): Promise<void> {
  const { dir } = await ensureDataset(o.blocks)
  const shape = shapeByName(o.shape)
  console.log(`machine: ${machine()}`)
  const rows: string[][] = []
  for (const [label, flags] of [
    ['default limits', { compression: o.compression }],
    [`all ${o.clients} admitted`, { concurrency: o.clients, queue: o.clients, compression: o.compression }],
  ] as const) {
    const d = await deploy(dir, 1, flags)
    try {
      const pid = d.workers[0].pid
      const idle = rss(pid).rss
      const height = Number(await (await fetch(`${d.base}/height`)).text())
      let max = 0
      const sampler = setInterval(() => (max = Math.max(max, rss(pid).rss)), 100)
      const load = await runLoad({ base: d.base, height, clients: o.clients, durationMs: o.seconds * 1000, query: shape.query, gzip: true })
      clearInterval(sampler)
      const peak = rss(pid).peak
      rows.push([label, mb(idle), mb(max), mb(peak), String(load.answers), String(load.rejected),
        load.answers ? mb(load.bytes / load.answers) : '-', (load.bytes / 1e6 / (load.wallMs / 1000)).toFixed(1)])
      if (load.errors.length) console.log(`${label}: errors: ${load.errors.join(' | ')}`)
    } finally {
      await d.stop()
    }
  }
  printTable(`worker memory, ${o.clients} concurrent "${o.shape}" queries for ${o.seconds} s, --compression ${o.compression} (MB)`,
    ['worker', 'RSS idle', 'RSS max (sampled)', 'RSS peak (VmHWM)', 'answers', 'rejected/retried', 'MB per answer', 'MB/s served'], rows)
}
