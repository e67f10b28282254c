import { spawn } from 'node:child_process'
import { rm } from 'node:fs/promises'
import { cpus, loadavg } from 'node:os'
import { cpuSeconds, rss } from './lib/procs.js'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import path from 'node:path'
import { listLocalChunks, nextTop, readChunkMeta, type ChunkRef } from '../src/chunks/layout.js'
import { ChunkBuilder } from '../src/chunks/writer.js'
import { evmFamily } from '../src/families/evm.js'
import { bundleTables, normalizeEvmBlock } from '../src/ingest/evm/normalize.js'
import { loadTemplates } from '../src/bench-data/templates.js'
import { templateFor, tileBlock } from '../src/bench-data/tile.js'
import { benchRoot } from './lib/dataset.js'
import { reportTarget } from './lib/targets.js'
import { fmtRate, mb, ms } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { progress } from '../src/bench-data/progress.js'

export interface IngestBenchOptions {
  blocks: number
  chunkBlocks: number
  traces: boolean
  /** Blocks for the end-to-end run through `block-archive replay-rpc` + `block-archive ingest` (0: none). */
  replayBlocks: number
  /** Blocks of the spooled path's chunk close timed statement by statement (0: none; bench/ingest-close.ts). */
  closeBlocks: number
}

/**
 * `bench ingest`: (1) throughput of the write path, stage by stage and without overlap: RPC JSON →
 * rows (normalizeEvmBlock), rows → open chunk (ChunkBuilder.addBlock), rows → sorted zstd Parquet
 * (ChunkBuilder.finish: JS sort, DuckDB Appender, Parquet). The RPC JSON comes from the tiler (its
 * time is shown apart); `--blocks 0` skips this part. (2) With `--close-blocks N` (default 200), the
 * spooled path's chunk close statement by statement (bench/ingest-close.ts). (3) With
 * `--replay-blocks N` (default 1000), the full path replay-rpc → `block-archive ingest` end to end
 * (see `replayIngest`).
 */
export async function runIngest(o: IngestBenchOptions): Promise<void> {
  if (o.blocks > 0) await writePathStages(o)
  if (o.closeBlocks > 0) await (await import('./ingest-close.js')).closeStages(o.closeBlocks)
  if (o.replayBlocks > 0) await replayIngest(o.replayBlocks)
}

async function writePathStages(o: IngestBenchOptions): Promise<void> {
  const out = path.join(benchRoot(), `ingest-${process.pid}`)
  await rm(out, { recursive: true, force: true })
  const templates = loadTemplates()
  const t = { tile: 0, normalize: 0, add: 0, finish: 0, sort: 0, append: 0, parquet: 0 }
  const rowCount: Record<string, number> = {}
  let inputBytes = 0
  let rowBytes = 0
  const written: ChunkRef[] = []
  const bar = progress('ingest', o.blocks)
  try {
    let builder: ChunkBuilder | undefined
    for (let n = 0; n < o.blocks; n++) {
      let t0 = performance.now()
      const bundle = tileBlock(templateFor(n, templates), n, { seed: 'bench-ingest' })
      if (!o.traces) {
        delete bundle.traces
        delete bundle.stateDiffs
      }
      t.tile += performance.now() - t0
      if (n < 25) inputBytes += JSON.stringify(bundle).length // JSON size of the first blocks, extrapolated below
      t0 = performance.now()
      const rows = normalizeEvmBlock(bundle)
      t.normalize += performance.now() - t0
      for (const [table, list] of Object.entries(rows)) rowCount[table] = (rowCount[table] ?? 0) + list.length
      t0 = performance.now()
      builder ??= new ChunkBuilder(evmFamily, out, bundleTables(bundle))
      const before = builder.bytes
      await builder.addBlock(n, bundle.block.hash, bundle.block.parentHash, rows)
      rowBytes += builder.bytes - before
      t.add += performance.now() - t0
      if (builder.blockCount >= o.chunkBlocks || n === o.blocks - 1) {
        t0 = performance.now()
        written.push(await builder.finish(nextTop(written, builder.first, 500)))
        t.finish += performance.now() - t0
        t.sort += builder.times.sortMs
        t.append += builder.times.appendMs
        t.parquet += builder.times.parquetMs
        builder = undefined
      }
      bar.update(n + 1)
    }
  } finally {
    bar.stop()
    await rm(out, { recursive: true, force: true })
  }
  inputBytes = (inputBytes / Math.min(25, o.blocks)) * o.blocks
  const rows = Object.values(rowCount).reduce((a, b) => a + b, 0)
  const line = (stage: string, msTotal: number, bytes?: number) => [
    stage, `${(msTotal / 1000).toFixed(2)} s`, fmtRate(o.blocks, msTotal), fmtRate(rows, msTotal),
    bytes == null ? '' : (bytes / 1e6 / (msTotal / 1000)).toFixed(0),
  ]
  console.log(`machine: ${machine()}`)
  console.log(`${o.blocks} blocks in ${written.length} chunks of ${o.chunkBlocks}; rows: ` +
    Object.entries(rowCount).map(([k, v]) => `${v} ${k}`).join(', ') +
    `; RPC JSON ≈ ${mb(inputBytes)} MB, rows ≈ ${mb(rowBytes)} MB as NDJSON; DuckDB default threads`)
  printTable('ingest stages (one process, no overlap)', ['stage', 'time', 'blocks/s', 'rows/s', 'MB/s'], [
    line('tile real blocks (benchmark input, not ingest)', t.tile),
    line('normalise: RPC JSON → rows', t.normalize, inputBytes),
    line('ChunkBuilder.addBlock: rows → open chunk', t.add, rowBytes),
    line('ChunkBuilder.finish: rows → sorted zstd Parquet', t.finish, rowBytes),
    line('  finish: sort (JS)', t.sort, rowBytes),
    line('  finish: rows → DuckDB (Appender)', t.append, rowBytes),
    line('  finish: DuckDB → zstd Parquet', t.parquet, rowBytes),
    line('write path (addBlock + finish)', t.add + t.finish, rowBytes),
    line('normalise + write', t.normalize + t.add + t.finish, inputBytes),
  ])
  console.log(`per block: normalise ${ms(t.normalize / o.blocks)} ms, addBlock ${ms(t.add / o.blocks)} ms, finish ${ms(t.finish / o.blocks)} ms`)
}

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli.js')
/** Blocks/s target of the end-to-end ingest (BENCHMARKS.md, "Targets", 5). */
const TARGET = 400
/** Distinct blocks the replay server repeats: a chunk's worth, so no copy shares a row group or a compression window with its repeat. */
const DISTINCT = 200
/** CPU per block that lets 2 cores ingest TARGET blocks/s. */
const CPU_TARGET_MS = 2000 / TARGET

interface E2eRun {
  build: string
  wallMs: number
  blocks: number
  rows: Record<string, number>
  /** CPU seconds (user + system, all threads) of the ingest process and of the replay server. */
  ingestCpuS?: number
  serverCpuS?: number
  /** Peak resident set of the ingest process (its VmHWM, read every 100 ms until it exits). */
  peakRss?: number
  /** The ingest's `ingest stages` log record (builds that have it). */
  stages?: Record<string, number>
}

/** utime + stime of a process in seconds (Linux /proc; undefined elsewhere). */

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

/**
 * End to end through the real ingest: `block-archive replay-rpc` serves a chain of distinct blocks
 * tiled from the recorded mainnet blocks 18000000 and 18500000 (with receipts; `--distinct`, a
 * cycle of `DISTINCT` copies, so no block compresses against a repeat of itself within a chunk),
 * and `block-archive ingest` (JSON-RPC client, batching, normalisation, chunk writer) writes them
 * with its default flags, each in its own process. Blocks, transactions and logs only.
 * `BENCH_INGEST_RUNS` runs (default 3); with `BENCH_INGEST_BASELINE=<other build>/dist/src/cli.js`
 * that build's replay server + ingest run too, alternating with this one, so both see the same
 * machine load; `BENCH_INGEST_WORKERS0=1` adds this build with `--workers 0` (no fetch workers);
 * `BENCH_INGEST_VARIANT="<ingest flags>"` adds this build with those flags, and
 * `BENCH_INGEST_VARIANT_ENV="NAME=value …"` this build with those variables in the ingest's environment;
 * `BENCH_INGEST_TWO_BLOCKS=1` adds this build over the two recorded blocks repeated as they are.
 */
async function replayIngest(blocks: number): Promise<void> {
  const runs = Math.max(1, Number(process.env.BENCH_INGEST_RUNS ?? 3))
  const builds: [string, string, string[], boolean, Record<string, string>?][] = [['this build', CLI, [], true]]
  const variantEnv = process.env.BENCH_INGEST_VARIANT_ENV?.split(' ').filter(Boolean)
  if (variantEnv?.length) builds.unshift([`this build, ${variantEnv.join(' ')}`, CLI, [], true, Object.fromEntries(variantEnv.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]))])
  if (process.env.BENCH_INGEST_WORKERS0) builds.unshift(['this build, --workers 0', CLI, ['--workers', '0'], true])
  const variant = process.env.BENCH_INGEST_VARIANT?.split(' ').filter(Boolean)
  if (variant?.length) builds.unshift([`this build, ${variant.join(' ')}`, CLI, variant, true])
  if (process.env.BENCH_INGEST_TWO_BLOCKS) builds.unshift(['this build, the 2 blocks repeated', CLI, [], false])
  if (process.env.BENCH_INGEST_BASELINE) builds.unshift(['baseline', path.resolve(process.env.BENCH_INGEST_BASELINE), [], true])
  const results: E2eRun[] = []
  for (let r = 0; r < runs; r++) {
    for (const [build, cli, args, distinct, env] of builds) results.push(await replayIngestOnce(build, cli, args, blocks, r, distinct, env))
  }
  const fmt = (x: number | undefined, d = 1) => (x == null ? '—' : x.toFixed(d))
  const total = (x: E2eRun) => Object.values(x.rows).reduce((a, b) => a + b, 0)
  printTable(`end to end: replay-rpc → block-archive ingest (default flags: batch 20, concurrency 4, chunks of ≤ 10,000 blocks / 256 MiB of RPC answers on the spooled path, of rows otherwise), ${blocks} blocks tiled from mainnet 18000000/18500000 (a cycle of ${DISTINCT} distinct copies), each run`,
    ['build', 'wall', 'blocks/s', 'rows/s', 'ingest CPU s', 'replay server CPU s', 'CPU ms per block (both)', 'ingest peak RSS'],
    results.map((x) => [x.build, `${(x.wallMs / 1000).toFixed(2)} s`, fmtRate(x.blocks, x.wallMs), fmtRate(total(x), x.wallMs),
      fmt(x.ingestCpuS), fmt(x.serverCpuS), x.ingestCpuS == null ? '—' : ((1000 * (x.ingestCpuS + (x.serverCpuS ?? 0))) / x.blocks).toFixed(1),
      x.peakRss == null ? '—' : `${mb(x.peakRss)} MB`]))
  printTable(`medians of ${runs} runs (target ≥ ${TARGET.toLocaleString('en-US')} blocks/s)`, ['build', 'blocks/s', 'rows/s', 'of target', 'CPU ms per block (ingest + server)'],
    builds.map(([build]) => {
      const xs = results.filter((x) => x.build === build)
      const bps = median(xs.map((x) => x.blocks / (x.wallMs / 1000)))
      const rps = median(xs.map((x) => total(x) / (x.wallMs / 1000)))
      const cpu = xs.every((x) => x.ingestCpuS != null) ? median(xs.map((x) => (1000 * (x.ingestCpuS! + (x.serverCpuS ?? 0))) / x.blocks)).toFixed(1) : '—'
      return [build, bps.toFixed(1), rps.toFixed(0), `${((100 * bps) / TARGET).toFixed(1)} %`, cpu]
    }))
  const ours = results.filter((x) => x.build === 'this build')
  const base = results.filter((x) => x.build === 'baseline')
  const bps = (xs: E2eRun[]) => (xs.length ? median(xs.map((x) => x.blocks / (x.wallMs / 1000))) : undefined)
  const cpuMs = (xs: E2eRun[]) => (xs.length && xs.every((x) => x.ingestCpuS != null) ? median(xs.map((x) => (1000 * (x.ingestCpuS! + (x.serverCpuS ?? 0))) / x.blocks)) : undefined)
  const now = bps(ours)
  if (now !== undefined) {
    const b = bps(base)
    reportTarget({ n: 5, measure: 'ingest of recorded mainnet blocks from replay-rpc (median)', now: `${now.toFixed(1)} blocks/s`, value: now,
      baseline: b === undefined ? undefined : `${b.toFixed(1)} blocks/s (BENCH_INGEST_BASELINE)`, baselineValue: b, goal: `≥ ${TARGET} blocks/s`, atLeast: TARGET })
  }
  const cpu = cpuMs(ours)
  if (cpu !== undefined) {
    const b = cpuMs(base)
    reportTarget({ n: 5, measure: 'ingest CPU per block, ingest + replay server (median)', now: `${cpu.toFixed(1)} ms`, value: cpu,
      baseline: b === undefined ? undefined : `${b.toFixed(1)} ms (BENCH_INGEST_BASELINE)`, baselineValue: b, goal: `≤ ${CPU_TARGET_MS} ms`, atMost: CPU_TARGET_MS })
  }
  const mine = results.filter((x) => x.build === 'this build' && x.stages).sort((a, b) => a.wallMs - b.wallMs)
  const mid = mine[Math.floor((mine.length - 1) / 2)]
  if (mid?.stages) {
    const s = mid.stages
    const wall = mid.wallMs
    const row = (stage: string, v: number | undefined, note = '') => [stage, v == null ? '—' : `${(v / 1000).toFixed(2)} s`, v == null ? '' : `${((100 * v) / wall).toFixed(0)} %`, note]
    // the spooled path (EVM default) has stages of its own: no parsing or rows in JS, the chunk close in SQL
    const spooled = (s.spooledBlocks ?? 0) > 0
    // Both paths wait for fetched blocks and for a close to end; what lies between is their own.
    const own = spooled
      ? [
        row('JSON.parse of answers the key scan could not vouch for', s.parseMs, 'fetch workers (summed)'),
        row('ChunkBuilder.addBlock (note the spool files)', s.addBlockMs, 'main thread'),
        row('close: temp tables (answers with upper-case hex only)', s.appendMs, 'DuckDB'),
        row('close: read_json → normaliser (SQL) → ORDER BY → zstd Parquet, a statement per table', s.parquetMs, 'DuckDB (--db-threads), overlaps fetching'),
      ]
      : [
        row('JSON.parse of the answers', s.parseMs, 'fetch workers (summed)'),
        row('normalise: RPC JSON → rows', s.normalizeMs, 'fetch workers (summed)'),
        row('ChunkBuilder.addBlock (keep rows, size them)', s.addBlockMs, 'main thread'),
        row('finish: sort rows (JS)', s.sortMs, 'main thread'),
        row('finish: rows → DuckDB (Appender)', s.appendMs, 'main thread, interleaved with taking fetched blocks'),
        row('finish: DuckDB → zstd Parquet', s.parquetMs, 'DuckDB threads, overlaps fetching'),
      ]
    printTable(`stages of the median run of this build (ingest wall ${(wall / 1000).toFixed(2)} s; ${spooled ? 'spooled path; ' : ''}stages run in parallel threads and overlap)`, ['stage', 'time', 'share of wall', ''], [
      row('main thread: waiting for fetched blocks', s.fetchWaitMs, `fetch workers: HTTP, ${spooled ? 'key scan, spool files' : 'parse, normalise'}`),
      ...own,
      row('main thread: waiting for a close to end before closing the next (--closes at once)', s.finishWaitMs),
      row('ingest process CPU (all threads)', s.cpuMs),
    ])
  }
  console.log(`machine load (1/5/15 min): ${loadavg().map((x) => x.toFixed(2)).join(' ')} on ${cpus().length} cores`)
}

async function replayIngestOnce(build: string, cli: string, args: string[], blocks: number, run: number, distinct: boolean, env: Record<string, string> = {}): Promise<E2eRun> {
  const out = path.join(benchRoot(), `ingest-replay-${process.pid}-${run}`)
  await rm(out, { recursive: true, force: true })
  const source = distinct ? ['--distinct', String(DISTINCT), '--repeat', String(Math.ceil(blocks / DISTINCT))] : ['--repeat', String(Math.ceil(blocks / 2))]
  const rpc = spawn(process.execPath, [cli, 'replay-rpc', '--only', '18000000,18500000', ...source, '--port', '0'],
    { stdio: ['ignore', 'pipe', 'inherit'] })
  try {
    const url = await new Promise<string>((resolve, reject) => {
      rpc.once('exit', (code) => reject(new Error(`replay-rpc exited with ${code}`)))
      createInterface({ input: rpc.stdout! }).on('line', (line) => {
        const m = /^rpc: (\S+)/.exec(line)
        if (m) resolve(m[1])
      })
    })
    const server0 = cpuSeconds(rpc.pid) ?? 0
    const t0 = performance.now()
    let ingestCpuS: number | undefined
    let peakRss: number | undefined
    let stages: Record<string, number> | undefined
    await new Promise<void>((resolve, reject) => {
      const child = spawn(process.execPath, [cli, 'ingest', '--rpc', url, '--dataset', 'replay', '--out', out, '--from', '0', '--to', String(blocks - 1),
        '--progress', 'none', ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info', ...env } })
      const poll = setInterval(() => {
        ingestCpuS = cpuSeconds(child.pid) ?? ingestCpuS
        try {
          peakRss = Math.max(peakRss ?? 0, rss(child.pid!).peak) // an exiting process reads 0
        } catch {} // exited between two polls
      }, 100)
      let err = ''
      createInterface({ input: child.stderr! }).on('line', (line) => {
        err = (err + line + '\n').slice(-3000)
        if (line.includes('"ingest stages"')) {
          const rec = JSON.parse(line)
          stages = Object.fromEntries(Object.entries(rec).filter(([, v]) => typeof v === 'number')) as Record<string, number>
        }
      })
      child.on('exit', (code) => {
        clearInterval(poll)
        if (code === 0) resolve()
        else reject(new Error(`ingest exited with ${code}: ${err}`))
      })
    })
    const wallMs = performance.now() - t0
    const serverCpuS = cpuSeconds(rpc.pid)
    if (stages?.cpuMs != null) ingestCpuS = stages.cpuMs / 1000 // exact, measured by the process itself
    const rows: Record<string, number> = {}
    for (const ref of await listLocalChunks(out)) {
      const meta = await readChunkMeta(out, ref)
      for (const [k, v] of Object.entries(meta.rows)) rows[k] = (rows[k] ?? 0) + v
    }
    console.log(`${build} run ${run + 1}: ${blocks} blocks in ${(wallMs / 1000).toFixed(2)} s = ${(blocks / (wallMs / 1000)).toFixed(1)} blocks/s`)
    return { build, wallMs, blocks, rows, ingestCpuS, peakRss, serverCpuS: serverCpuS == null ? undefined : serverCpuS - server0, stages }
  } finally {
    rpc.kill('SIGTERM')
    await rm(out, { recursive: true, force: true })
  }
}
