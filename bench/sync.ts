import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ArchiveClient } from '../src/client/archive-client.js'
import { ensureDataset } from './lib/dataset.js'
import { fmtRate } from './lib/measure.js'
import { cpuSeconds, deploy, type Deployment } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'
import { reportTarget } from './lib/targets.js'

export interface SyncBenchOptions {
  blocks: number
  workers: number
  shape: string[]
  parallel: number[]
  sdk: boolean
  compression: string
  /** Chunk sources to compare side by side: Parquet read in place, and/or the workers' local forms. */
  storage: string[]
}

/** One timed sync: which query, which chunk source, which client, and its rates. */
interface SyncFigure {
  shape: string
  from: string
  sdk: boolean
  /** The SDK's run with its HTTP library loaded before the timer (`sdk-sync.ts` preload). */
  preloaded?: boolean
  /** Our client's reading: whole answers (`batches()`) or a stream of blocks (`blocks()`). */
  api?: 'batches' | 'blocks'
  blocksPerS: number
  itemsPerS: number
}

/** Timed passes shorter than this get `WARM_UP_MS` of untimed passes first. */
const WARM_UP_BELOW_MS = 100
const WARM_UP_MS = 500

const itemCount = (block: object) =>
  Object.entries(block).reduce((n, [k, v]) => (k !== 'header' && Array.isArray(v) ? n + v.length : n), 0)

/**
 * `bench sync`: a client walking the whole dataset range through router + worker processes (real
 * HTTP; compressed as `--compression` says), the way an indexer syncs: blocks of range per second and items per second.
 */
export async function runSync(o: SyncBenchOptions): Promise<void> {
  const { dir } = await ensureDataset(o.blocks)
  const rows: string[][] = []
  const figures: SyncFigure[] = []
  const forms = await mkdtemp(path.join(tmpdir(), 'ba-bench-forms-'))
  try {
    for (const storage of o.storage) {
      const t0 = performance.now()
      const d = await deploy(dir, o.workers, {
        compression: o.compression,
        localForms: storage === 'local' ? (i) => path.join(forms, `w${i}`) : undefined,
      })
      if (storage === 'local') console.log(`local forms built in ${((performance.now() - t0) / 1000).toFixed(1)} s (router and workers started, chunks copied)`)
      try {
        await syncAll(o, d, dir, storage, rows, figures)
      } finally {
        await d.stop()
      }
    }
  } finally {
    await rm(forms, { recursive: true, force: true })
  }
  reportSyncTargets(o, figures)
  printTable(`full-range sync of ${o.blocks} blocks`, ['query', 'chunks read from', 'client', 'answers', 'blocks returned', 'items', 'time', 'range blocks/s', 'items/s', 'CPU s per pass: client / workers / router'], rows)
}

/** Targets 3 and 4 (BENCHMARKS.md): the best timed pass over local forms, against the same over Parquet. */
function reportSyncTargets(o: SyncBenchOptions, figures: SyncFigure[]): void {
  const best = (shape: string, from: string, sdk: boolean, key: 'blocksPerS' | 'itemsPerS', api?: SyncFigure['api'], preloaded = false) => {
    const xs = figures.filter((f) => f.shape === shape && f.from === from && f.sdk === sdk && !!f.preloaded === preloaded && (api === undefined || f.api === api)).map((f) => f[key])
    return xs.length ? Math.max(...xs) : undefined
  }
  const report = (n: number, measure: string, shape: string, sdk: boolean, key: 'blocksPerS' | 'itemsPerS', unit: string, goal: number, api?: SyncFigure['api'], preloaded = false) => {
    const local = best(shape, 'local forms', sdk, key, api, preloaded)
    const parquet = best(shape, 'Parquet', sdk, key, api, preloaded)
    // A no-match answer reads no chunk: a run over Parquet alone (a dataset too big for the forms
    // of every chunk) measures the same code, and is reported without a baseline.
    const now = local ?? (n === 4 ? parquet : undefined)
    if (now === undefined) return
    const base = local === undefined ? undefined : parquet
    const fmt = (x: number) => `${Math.round(x).toLocaleString('en-US')} ${unit}`
    reportTarget({ n, measure, now: `${fmt(now)} (${local === undefined ? 'Parquet' : 'local forms'})`, value: now, baseline: base === undefined ? undefined : `${fmt(base)} (Parquet)`, baselineValue: base,
      goal: `≥ ${goal.toLocaleString('en-US')} ${unit}`, atLeast: goal })
  }
  report(3, `all tx+logs full sync, router + ${o.workers} workers, our client (blocks() stream)`, 'all tx+logs', false, 'itemsPerS', 'items/s', 400_000, 'blocks')
  report(3, `all tx+logs full sync, router + ${o.workers} workers, our client (batches())`, 'all tx+logs', false, 'itemsPerS', 'items/s', 400_000, 'batches')
  report(3, `all tx+logs full sync, router + ${o.workers} workers, @subsquid/evm-processor`, 'all tx+logs', true, 'itemsPerS', 'items/s', 150_000)
  report(4, `a query matching nothing, ${o.blocks.toLocaleString('en-US')} blocks, our client (warm)`, 'logs, no match', false, 'blocksPerS', 'blocks/s', 1_000_000)
  report(4, `a query matching nothing, ${o.blocks.toLocaleString('en-US')} blocks, @subsquid/evm-processor`, 'logs, no match', true, 'blocksPerS', 'blocks/s', 100_000)
  report(4, `the same, the SDK's HTTP library loaded before the timer (its one-time import)`, 'logs, no match', true, 'blocksPerS', 'blocks/s', 100_000, undefined, true)
}

async function syncAll(o: SyncBenchOptions, d: Deployment, dir: string, storage: string, rows: string[][], figures: SyncFigure[]): Promise<void> {
  const base = d.base
  const from = storage === 'local' ? 'local forms' : 'Parquet'
  {
    const client = new ArchiveClient(base)
    const height = await client.getHeight()
    console.log(`machine: ${machine()}`)
    console.log(`dataset ${dir}: blocks 0–${height}; router + ${o.workers} worker processes (default settings, --compression ${o.compression}), chunks read from ${from}`)
    for (const name of o.shape) {
      const shape = shapeByName(name)
      const { fromBlock: _f, toBlock: _t, ...query } = shape.query(0, height)
      // The first pass builds what workers keep per chunk for the next queries (chunk summaries of
      // the filtered columns, boundary headers): reported apart, the timed passes come after it.
      // The router spreads the passes over the workers, so there is one first pass per worker; the
      // first of them is reported.
      const firsts = Array.from({ length: o.workers }, (_, i) => ({ parallel: 1, label: i === 0 ? 'our client, first pass' : undefined, repeat: false }))
      // Each setting twice: `batches()` (the reader holds a whole answer) and `blocks()` (a stream
      // that lets each block go before taking the next).
      const timed = o.parallel.flatMap((p) => (['batches', 'blocks'] as const).map((api) => ({ parallel: p, api, label: `our client, ${api}(), ${p} in flight`, repeat: true })))
      const passes = [...firsts.map((f) => ({ ...f, api: 'batches' as const })), ...timed]
      for (const { parallel, api, label, repeat } of passes) {
        // Passes shorter than a second are repeated (up to 1 s in all) and averaged: one pass of a
        // no-match query takes a few ms, within the noise of this VM.
        let blocks = 0
        let items = 0
        let answers = 0
        const onePass = async () => {
          blocks = items = answers = 0
          const range = { fromBlock: 0, toBlock: height, parallel }
          if (api === 'blocks') {
            for await (const b of client.blocks(query, range)) {
              blocks++
              items += itemCount(b)
            }
          } else {
            for await (const batch of client.batches(query, range)) {
              answers++
              blocks += batch.blocks.length
              for (const b of batch.blocks) items += itemCount(b)
            }
          }
        }
        let runs = 0
        let cpu0 = cpuNow(d)
        let t0 = performance.now()
        await onePass()
        runs++
        if (repeat && performance.now() - t0 < WARM_UP_BELOW_MS) {
          // A pass of a few ms: 0.5 s of untimed passes first, so that the timed ones run code the
          // JIT has optimised by then, as in a worker that has served for a while
          // (docs/benchmark-history.md, step 41: the no-match target's best setting 0.69–1.03 M
          // blocks/s without, 1.07–1.18 M with).
          for (const w0 = performance.now(); performance.now() - w0 < WARM_UP_MS; ) await onePass()
          runs = 0
          cpu0 = cpuNow(d)
          t0 = performance.now()
        }
        while (repeat && (runs === 0 || (performance.now() - t0 < 1000 && runs < 50))) {
          await onePass()
          runs++
        }
        const wall = (performance.now() - t0) / runs
        const cpu = cpuSpent(cpu0, cpuNow(d), runs)
        if (repeat) figures.push({ shape: name, from, sdk: false, api, blocksPerS: (height + 1) / (wall / 1000), itemsPerS: items / (wall / 1000) })
        if (label) rows.push([`${name}`, from, runs > 1 ? `${label} (mean of ${runs})` : label, api === 'blocks' ? '' : String(answers), String(blocks), String(items), `${(wall / 1000).toFixed(3)} s`,
          fmtRate(height + 1, wall), fmtRate(items, wall), cpu])
      }
      // The SDK starts a process per run: 3 runs of a pass under a second (its start dominates), else 1.
      // Such short passes are also run with the SDK's HTTP library loaded before the timer: its
      // first request imports node-fetch, a one-time cost of the SDK's process, not of the archive.
      let short = false
      for (const preloaded of [false, true]) {
        for (let run = 0, runs = 1; o.sdk && run < runs && (!preloaded || short); run++) {
          const cpu0 = cpuNow(d)
          const r = await sdkSync(base, height, name, preloaded)
          const spent = cpuNow(d)
          // The SDK's own CPU in the client's place: this process only waited.
          const cpu = cpuSpent({ ...cpu0, client: 0 }, { ...spent, client: r.cpuMs / 1000 }, 1)
          if (r.ms < 1000) runs = 3
          short = runs > 1
          figures.push({ shape: name, from, sdk: true, preloaded, blocksPerS: (height + 1) / (r.ms / 1000), itemsPerS: r.items / (r.ms / 1000) })
          rows.push([name, from, `@subsquid/evm-processor 1.27.3${preloaded ? ', HTTP library preloaded' : ''}${runs > 1 ? `, run ${run + 1}` : ''}`, '', String(r.blocks), String(r.items), `${(r.ms / 1000).toFixed(3)} s`,
            fmtRate(height + 1, r.ms), fmtRate(r.items, r.ms), cpu])
        }
      }
    }
  }
}

/** CPU seconds used so far by this process (the client), the workers and the router. */
function cpuNow(d: Deployment): { client: number; workers: number; router: number } {
  const u = process.cpuUsage()
  return {
    client: (u.user + u.system) / 1e6,
    workers: d.workers.reduce((sum, w) => sum + (cpuSeconds(w.pid) ?? 0), 0),
    router: cpuSeconds(d.router.pid) ?? 0,
  }
}

/** Where a pass's CPU went (the share per process of the target-3 profile), per pass. */
function cpuSpent(a: ReturnType<typeof cpuNow>, b: ReturnType<typeof cpuNow>, runs: number): string {
  const f = (x: number) => (x / runs).toFixed(runs > 1 ? 3 : 1)
  return `${f(b.client - a.client)} / ${f(b.workers - a.workers)} / ${f(b.router - a.router)}`
}

/** Run the real SDK processor over the range in a child process (it calls process.exit itself). */
function sdkSync(base: string, to: number, shape: string, preload: boolean): Promise<{ blocks: number; items: number; ms: number; cpuMs: number }> {
  const script = path.join(path.dirname(fileURLToPath(import.meta.url)), 'lib', 'sdk-sync.js')
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, base, String(to), shape, ...(preload ? ['preload'] : [])], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout!.on('data', (d) => (out += d))
    child.on('exit', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('RESULT '))
      if (!line) return reject(new Error(`SDK run exited with ${code} without a result:\n${out.slice(-2000)}`))
      resolve(JSON.parse(line.slice(7)))
    })
  })
}
