import { ensureDataset } from './lib/dataset.js'
import { runLoad } from './lib/load.js'
import { deploy } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'
import { ms, summarize } from './lib/measure.js'

export interface ScalingBenchOptions {
  blocks: number
  workers: number[]
  clients: number
  seconds: number
  shape: string[]
  compression: string
}

/**
 * `bench scaling`: throughput of 1, 2, 4 worker processes under the same client load (queries
 * with random fromBlock through the router). On a machine with fewer cores than workers the
 * curve flattens at the core count; the figure shows whether a worker leaves cores idle.
 */
export async function runScaling(o: ScalingBenchOptions): Promise<void> {
  const { dir } = await ensureDataset(o.blocks)
  console.log(`machine: ${machine()}`)
  const rows: string[][] = []
  for (const workers of o.workers) {
    const d = await deploy(dir, workers, { compression: o.compression })
    try {
      const height = Number(await (await fetch(`${d.base}/height`)).text())
      for (const name of o.shape) {
        const shape = shapeByName(name)
        const load = await runLoad({ base: d.base, height, clients: o.clients, durationMs: o.seconds * 1000, query: shape.query, gzip: true })
        const lat = summarize(load.latencies.length ? load.latencies : [NaN])
        rows.push([String(workers), name, String(load.answers), String(load.rejected),
          (load.answers / (load.wallMs / 1000)).toFixed(1), (load.bytes / 1e6 / (load.wallMs / 1000)).toFixed(1),
          ms(lat.median), ms(lat.p90)])
        if (load.errors.length) console.log(`${workers} workers, ${name}: errors: ${load.errors.join(' | ')}`)
      }
    } finally {
      await d.stop()
    }
  }
  printTable(`scaling: ${o.clients} clients, ${o.seconds} s per point, gzip accepted, --compression ${o.compression}`, ['workers', 'query', 'answers', 'rejected', 'answers/s', 'JSON MB/s', 'latency p50 ms', 'p90 ms'], rows)
}
