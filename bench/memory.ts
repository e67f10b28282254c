import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { ensureDataset } from './lib/dataset.js'
import { runLoad } from './lib/load.js'
import { deploy, rss } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'
import { mb } from './lib/measure.js'
import { reportTarget } from './lib/targets.js'

export interface MemoryBenchOptions {
  blocks: number
  clients: number
  seconds: number
  shape: string
  compression: string
  /** Chunk sources to compare side by side: Parquet read in place, and/or the worker's local forms. */
  storage: string[]
  /** Worker `--db-memory` values to compare side by side; `default` leaves the worker's own. */
  dbMemory: string[]
  /** `DUCKDB_JE_MALLOC_CONF` values of the worker to compare side by side; `default` leaves src/fast-path.ts's. */
  mallocConf: string[]
}

/**
 * `bench memory`: RSS of one worker process while `clients` clients keep sending a query whose
 * answer hits the size budget (20 MiB of JSON by default), with the default limits (extra queries
 * wait in the queue or get 503) and with every query admitted at once (`--concurrency = clients`).
 */
export async function runMemory(o: MemoryBenchOptions): Promise<void> {
  const { dir } = await ensureDataset(o.blocks)
  console.log(`machine: ${machine()}`)
  const rows: string[][] = []
  const peaks: Peak[] = []
  const forms = await mkdtemp(path.join(tmpdir(), 'ba-bench-forms-'))
  try {
    for (const storage of o.storage) {
      for (const dbMemory of o.dbMemory) {
        for (const conf of o.mallocConf) {
          await measure(o, dir, storage === 'local' ? path.join(forms, storage) : undefined, dbMemory === 'default' ? undefined : dbMemory,
            conf === 'default' ? undefined : conf, rows, peaks)
        }
      }
    }
  } finally {
    await rm(forms, { recursive: true, force: true })
  }
  // The target is for the default limits (extra queries wait or get 503) and the worker's own DuckDB limit.
  const peak = (from: string) => {
    const of = peaks.filter((x) => x.from === from && x.label === 'default limits' && !x.dbMemory && !x.mallocConf).map((x) => x.peak)
    return of.length ? Math.max(...of) : undefined
  }
  const now = peak('local forms')
  if (now !== undefined) {
    const base = peak('Parquet')
    reportTarget({ n: 6, measure: `worker peak RSS, ${o.clients} clients with budget-size answers, default limits (MB)`, now: `${mb(now)} (local forms)`, value: now / 1e6,
      baseline: base === undefined ? undefined : `${mb(base)} (Parquet)`, baselineValue: base === undefined ? undefined : base / 1e6, goal: '≤ 512 MB', atMost: 512 })
  }
  printTable(`worker memory, ${o.clients} concurrent "${o.shape}" queries for ${o.seconds} s, --compression ${o.compression} (MB)`,
    ['worker', 'chunks read from', '--db-memory', 'jemalloc', 'RSS peak before the load (forms built)', 'RSS idle', 'RSS max (sampled)', 'RSS peak (VmHWM)', 'answers', 'rejected/retried', 'MB per answer', 'MB/s served'], rows)
}

type Peak = { from: string; label: string; dbMemory?: string; mallocConf?: string; peak: number }

async function measure(o: MemoryBenchOptions, dir: string, forms: string | undefined, dbMemory: string | undefined, mallocConf: string | undefined, rows: string[][], peaks: Peak[]): Promise<void> {
  const shape = shapeByName(o.shape)
  const from = forms ? 'local forms' : 'Parquet'
  for (const [label, flags] of [
    ['default limits', { compression: o.compression }],
    [`all ${o.clients} admitted`, { concurrency: o.clients, queue: o.clients, compression: o.compression }],
  ] as const) {
    // A fresh forms folder per deployment: the forms are built (and their memory counted) each time.
    const d = await deploy(dir, 1, {
      ...flags, dbMemory, env: mallocConf ? { DUCKDB_JE_MALLOC_CONF: mallocConf } : undefined,
      localForms: forms ? (i) => path.join(forms, `${label}-${dbMemory ?? 'default'}-${mallocConf ?? 'default'}-${i}`.replace(/\W+/g, '-')) : undefined,
    })
    try {
      const pid = d.workers[0].pid
      const { rss: idle, peak: built } = rss(pid)
      const height = Number(await (await fetch(`${d.base}/height`)).text())
      let max = 0
      const sampler = setInterval(() => (max = Math.max(max, rss(pid).rss)), 100)
      const load = await runLoad({ base: d.base, height, clients: o.clients, durationMs: o.seconds * 1000, query: shape.query, gzip: true })
      clearInterval(sampler)
      const peak = rss(pid).peak
      peaks.push({ from, label, dbMemory, mallocConf, peak })
      rows.push([label, from, dbMemory ?? 'default', mallocConf ?? 'default', mb(built), mb(idle), mb(max), mb(peak), String(load.answers), String(load.rejected),
        load.answers ? mb(load.bytes / load.answers) : '-', (load.bytes / 1e6 / (load.wallMs / 1000)).toFixed(1)])
      if (load.errors.length) console.log(`${label}: errors: ${load.errors.join(' | ')}`)
    } finally {
      await d.stop()
    }
  }
}
