import { createHash } from 'node:crypto'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { mkdir, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { floorServer, pacedLoad, type PacedLoadFigures } from './lib/paced-load.js'
import { startCli, rss, until, type Proc } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'
import { appendSyntheticIndex, syntheticChunk, syntheticIndex, writeSyntheticFolder } from './lib/synthetic-chunks.js'
import { CHUNK_INDEX_FILE } from '../src/chunks/chunk-index.js'
import { PingSession } from '../src/server/ping-session.js'

/*
 * `bench scaling --part router`: the router over datasets of 1 k, 10 k and 100 k sparse synthetic
 * chunks (`lib/synthetic-chunks.ts`: an empty blocks.parquet and a real meta.json per chunk, every
 * chunk a jump whose meta the router reads), in a folder and in s3rver. Per size: router start to
 * listening and to routable (light HTTP pingers stand in for workers: each reports holding what it
 * was told to hold), RSS, storage requests per relisting and per new chunk, and p99 of `/height`
 * and `/<block>/worker` at a fixed request rate (`lib/paced-load.ts`: evenly spaced, from its own
 * process), beside the floor of that measurement (the same load against a server answering a
 * constant). Datasets are kept in $TMPDIR/block-archive-bench.
 */

export interface RouterScalingOptions {
  chunks: number[]
  s3Chunks: number[]
  pingers: number
  rate: number
  seconds: number
}

const ROOT = path.join(os.tmpdir(), 'block-archive-bench', 'router-scaling')
const HEARTBEAT = 1000
const NEW_CHUNKS = 100

interface Figures {
  storage: string
  chunks: number
  listedMs: number
  routableMs: number
  rssMb: number
  perRelist: number
  perNewChunk: number
  heightP99: number
  workerP99: number
  rates: string
  /** Inside the router during the /worker run (its /metrics). */
  inside: RouterSide
}

/** What the router's own metrics say about a load run: how long it took per request, and what held its event loop. */
interface RouterSide {
  /** Shares of /worker requests the router answered within 1 ms and within 5 ms (its request histogram). */
  within1ms: number
  within5ms: number
  /** Event-loop delay over the run (prom-client's monitorEventLoopDelay, reset at each /metrics read). */
  loopP99Ms: number
  loopMaxMs: number
  /** Relistings during the run and their mean time. */
  relists: number
  relistMeanMs: number
}

export async function runRouterScaling(o: RouterScalingOptions): Promise<void> {
  console.log(`machine: ${machine()} (shared with other jobs while measured: figures are inflated)`)
  const figures: Figures[] = []
  const floor = await measureFloor(o)
  console.log(`floor (a constant answer, the same load): p99 ${floor.p99.toFixed(2)} ms, ${floor.rps.toFixed(0)} answers/s`)
  for (const n of o.chunks.filter((x) => x > 0)) {
    const root = path.join(ROOT, `folder-${n}`)
    const dir = path.join(root, 'sim')
    if (!existsSync(path.join(dir, 'dataset.json.done'))) {
      const t0 = performance.now()
      await rm(root, { recursive: true, force: true })
      await writeSyntheticFolder(dir, 'sim', 0, n)
      await writeFile(path.join(dir, 'dataset.json.done'), '')
      console.log(`folder dataset of ${n} chunks written in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
    } else if (!existsSync(path.join(dir, CHUNK_INDEX_FILE))) {
      await appendSyntheticIndex(dir, 0, n) // a dataset written before the index existed
    }
    await orReport(figures, () => measure('folder', n, root, {}, (from, to) => writeSyntheticFolder(dir, 'sim', from, to), async () => {
      for (let i = n; i < n + NEW_CHUNKS; i++) await rm(path.join(dir, syntheticChunk(i).ref.path), { recursive: true, force: true })
    }, o))
  }
  for (const n of o.s3Chunks.filter((x) => x > 0)) { // 0: none of that storage
    const s3dir = path.join(ROOT, `s3rver-${n}`)
    if (!existsSync(path.join(s3dir, '.done'))) {
      const t0 = performance.now()
      await rm(s3dir, { recursive: true, force: true })
      await writeS3rverFiles(s3dir, 'bench', 'sim', 0, n)
      await writeFile(path.join(s3dir, '.done'), '')
      console.log(`s3rver dataset of ${n} chunks written (as s3rver's files) in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
    }
    if (!existsSync(path.join(s3dir, 'bench', 'sim', `${CHUNK_INDEX_FILE}._S3rver_object`))) await writeS3rverIndex(s3dir, 'bench', 'sim', n)
    const { port, stop } = await startS3rver(s3dir)
    const env = { AWS_ENDPOINT_URL: `http://127.0.0.1:${port}`, AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER' }
    try {
      await orReport(figures, () => measure('s3rver', n, 's3://bench/sim', env, (from, to) => writeS3rverFiles(s3dir, 'bench', 'sim', from, to), async () => {
        for (let i = n; i < n + NEW_CHUNKS; i++) await rm(path.join(s3dir, 'bench', 'sim', syntheticChunk(i).ref.path), { recursive: true, force: true })
      }, o))
    } finally {
      stop()
    }
  }
  printTable(`router over sparse synthetic chunks: ${o.pingers} HTTP pingers as workers (replication 2, heartbeat ${HEARTBEAT} ms), ${o.rate} requests/s per endpoint for ${o.seconds} s, evenly spaced; the same load against a constant answer (the floor): p99 ${floor.p99.toFixed(1)} ms`,
    ['storage', 'chunks', 'start → listening', 'start → routable', 'RSS', 'storage requests / relist', '/ new chunk', '/height p99', '/worker p99', 'requests/s (height, worker)'],
    figures.map((f) => [f.storage, f.chunks.toLocaleString('en'), `${(f.listedMs / 1000).toFixed(2)} s`, `${(f.routableMs / 1000).toFixed(2)} s`, `${f.rssMb.toFixed(0)} MB`,
      f.perRelist.toFixed(1), f.perNewChunk.toFixed(2), `${f.heightP99.toFixed(1)} ms`, `${f.workerP99.toFixed(1)} ms`, f.rates]))
  printTable('inside the router while /worker was asked (its /metrics): answered within 1 / 5 ms of the request reaching it, event-loop delay, relistings (every 1 s)',
    ['storage', 'chunks', '/worker ≤ 1 ms', '/worker ≤ 5 ms', 'event-loop delay p99', 'event-loop delay max', 'relistings', 'relisting, mean'],
    figures.map(({ storage, chunks, inside: r }) => [storage, chunks.toLocaleString('en'), pct(r.within1ms), pct(r.within5ms), `${r.loopP99Ms.toFixed(1)} ms`, `${r.loopMaxMs.toFixed(1)} ms`,
      String(r.relists), `${r.relistMeanMs.toFixed(1)} ms`]))
  const axes: [string, (f: Figures) => number][] = [
    ['start → routable', (f) => f.routableMs],
    ['start → listening', (f) => f.listedMs],
    ['RSS', (f) => f.rssMb],
    ['requests per relist', (f) => Math.max(f.perRelist, 0.5)],
    ['requests per new chunk', (f) => Math.max(f.perNewChunk, 0.5)],
    ['/height p99', (f) => f.heightP99],
    ['/worker p99', (f) => f.workerP99],
  ]
  const rows: string[][] = []
  for (const storage of ['folder', 's3rver']) {
    const fs = figures.filter((f) => f.storage === storage).sort((a, b) => a.chunks - b.chunks)
    if (fs.length < 2) continue
    for (const [name, get] of axes) {
      const growth = fs.slice(1).map((f, i) => Math.pow(get(f) / get(fs[i]), 1 / Math.log10(f.chunks / fs[i].chunks)))
      rows.push([storage, name, growth.map((g) => `×${g.toFixed(2)}`).join(', '), classify(Math.max(...growth))])
    }
  }
  printTable('growth per 10× chunks (between consecutive sizes)', ['storage', 'axis', 'growth', 'verdict'], rows)
}

const pct = (x: number) => `${(x * 100).toFixed(2)} %`

/** A size that fails (a router never routable) is reported, and the other sizes are still measured. */
async function orReport(figures: Figures[], f: () => Promise<Figures>): Promise<void> {
  try {
    figures.push(await f())
  } catch (e) {
    console.log(`FAILED: ${e instanceof Error ? e.message : String(e)}`)
  }
}

/** Per 10× chunks: ≤ ×4 sub-linear, ≤ ×15 linear, more: worse than linear. */
function classify(g: number): string {
  return g <= 4 ? 'sub-linear' : g <= 15 ? 'linear' : 'worse than linear'
}

async function measure(storage: string, n: number, data: string, env: Record<string, string>, addChunks: (from: number, to: number) => Promise<void>, removeAdded: () => Promise<void>, o: RouterScalingOptions): Promise<Figures> {
  await removeAdded()
  const t0 = performance.now()
  const router = await startCli(['router', '--data', data, '--port', '0', '--replication', '2', '--heartbeat-ms', String(HEARTBEAT), '--relist-ms', '1000'], 'router', env, 600_000)
  const listedMs = performance.now() - t0
  const base = `${router.url}/datasets/sim`
  const lastBlock = syntheticChunk(n - 1).ref.last
  const pingers = startPingers(router, o.pingers)
  try {
    await until(async () => Number(await (await fetch(`${base}/height`)).text()) === lastBlock, 600_000, `${storage} ${n}: routable (the height at the last block)`)
    const routableMs = performance.now() - t0
    const rssMb = rss(router.pid).rss / 1e6
    // printed at once: a later phase that times out (a machine under heavy load) leaves these figures
    console.log(`${storage} ${n}: listening after ${(listedMs / 1000).toFixed(2)} s, routable after ${(routableMs / 1000).toFixed(2)} s, RSS ${rssMb.toFixed(0)} MB`)
    // Relistings with nothing new.
    const m0 = await counters(router)
    await until(async () => (await counters(router)).relists >= m0.relists + 5, 120_000, `${storage} ${n}: 5 relistings`)
    const m1 = await counters(router)
    const perRelist = (m1.requests - m0.requests) / (m1.relists - m0.relists)
    // New chunks.
    await addChunks(n, n + NEW_CHUNKS)
    await until(async () => Number(await (await fetch(`${base}/height`)).text()) === syntheticChunk(n + NEW_CHUNKS - 1).ref.last, 120_000, `${storage} ${n}: the new chunks routable`)
    const m2 = await counters(router)
    const perNewChunk = (m2.requests - m1.requests - perRelist * (m2.relists - m1.relists)) / NEW_CHUNKS
    const blocks = Array.from({ length: 256 }, (_, i) => syntheticChunk(Math.floor((i * 7919) % n)).ref.first)
    const u = new URL(base)
    const height = await pacedLoad({ origin: u.origin, paths: [`${u.pathname}/height`], rate: o.rate, seconds: o.seconds })
    const before = await metricsOf(router)
    const worker = await pacedLoad({ origin: u.origin, paths: blocks.map((b) => `${u.pathname}/${b}/worker`), rate: o.rate, seconds: o.seconds })
    const inside = routerSide(before, await metricsOf(router))
    const bad = [height, worker].flatMap((r) => Object.entries(r.statuses).filter(([s]) => s !== '200'))
    if (bad.length) console.log(`${storage} ${n}: statuses other than 200: ${JSON.stringify(bad)}`)
    const f: Figures = {
      storage, chunks: n, listedMs, routableMs, rssMb, perRelist, perNewChunk,
      heightP99: height.p99, workerP99: worker.p99,
      rates: `${height.rps.toFixed(0)}, ${worker.rps.toFixed(0)}`,
      inside,
    }
    console.log(JSON.stringify(f))
    return f
  } finally {
    pingers.stop()
    router.child.kill('SIGTERM')
    await removeAdded()
  }
}

/** The same paced load against a server answering a constant (lib/paced-load.ts): what the client and the machine add. */
async function measureFloor(o: RouterScalingOptions): Promise<PacedLoadFigures> {
  const floor = await floorServer()
  try {
    const paths = Array.from({ length: 256 }, (_, i) => `/datasets/sim/${i * 10}/worker`)
    return await pacedLoad({ origin: floor.origin, paths, rate: o.rate, seconds: o.seconds })
  } finally {
    floor.stop()
  }
}

/** Light fake workers over HTTP: each pings every heartbeat, reporting that it holds what it was last told to hold. */
function startPingers(router: Proc, count: number): { stop(): void } {
  let stopped = false
  for (let i = 0; i < count; i++) {
    void (async () => {
      let held: Record<string, [number, number][]> = {}
      // as a worker pings (src/server/ping-session.ts): once acknowledged, only what changed
      const session = new PingSession()
      await sleep((HEARTBEAT * i) / count)
      while (!stopped) {
        try {
          for (let attempt = 0; attempt < 2; attempt++) {
            const res = await fetch(`${router.url}/ping`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ worker_id: `pinger-${i}`, worker_url: `http://pinger-${i}.invalid:1`, ...session.fields(held) }),
            })
            if (!res.ok) {
              session.reset()
              break
            }
            const desired = session.answered(held, await res.json())
            if (desired) {
              held = desired
              break
            }
          }
        } catch {
          session.reset() // the router is stopping
        }
        await sleep(HEARTBEAT)
      }
    })()
  }
  return { stop: () => void (stopped = true) }
}

type Samples = Map<string, number>

/** The router's /metrics as `name{labels}` → value. */
async function metricsOf(router: Proc): Promise<Samples> {
  const out: Samples = new Map()
  for (const line of (await (await fetch(`${router.url}/metrics`)).text()).split('\n')) {
    if (!line || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    out.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return out
}

/** Sum of the samples whose key matches, or its change from `before` to `after`. */
const total = (samples: Samples, match: (key: string) => boolean) => [...samples].reduce((sum, [k, v]) => (match(k) ? sum + v : sum), 0)
const change = (before: Samples, after: Samples, match: (key: string) => boolean) => total(after, match) - total(before, match)

function routerSide(before: Samples, after: Samples): RouterSide {
  const workerBucket = (le: string) => change(before, after, (k) =>
    k.startsWith('block_archive_http_request_duration_seconds_bucket{') && k.includes('route="/datasets/:name/:block/worker"') && k.includes(`le="${le}"`))
  const answered = workerBucket('+Inf')
  const relists = change(before, after, (k) => k === 'block_archive_router_relist_duration_seconds_count')
  const relistSeconds = change(before, after, (k) => k === 'block_archive_router_relist_duration_seconds_sum')
  return {
    within1ms: answered ? workerBucket('0.001') / answered : NaN,
    within5ms: answered ? workerBucket('0.005') / answered : NaN,
    loopP99Ms: (after.get('nodejs_eventloop_lag_p99_seconds') ?? NaN) * 1000,
    loopMaxMs: (after.get('nodejs_eventloop_lag_max_seconds') ?? NaN) * 1000,
    relists,
    relistMeanMs: relists ? (relistSeconds / relists) * 1000 : NaN,
  }
}

async function counters(router: Proc): Promise<{ requests: number; relists: number }> {
  const m = await metricsOf(router)
  return {
    requests: total(m, (k) => k.startsWith('block_archive_storage_requests_total{')),
    relists: total(m, (k) => k === 'block_archive_router_relists_total'),
  }
}

/**
 * Chunks `from` … `to - 1` written as s3rver's own files (object, metadata, md5 per key): its PUT
 * path stores about 15 objects/s on a busy machine, too slow for 10,000 chunks. Listing and reading
 * go through the S3 protocol as usual.
 */
async function writeS3rverFiles(dir: string, bucket: string, prefix: string, from: number, to: number): Promise<void> {
  const put = s3rverPut(dir, bucket, prefix)
  if (from === 0) await put('dataset.json', JSON.stringify({ name: 'sim', family: 'evm' }))
  let next = from
  await Promise.all(Array.from({ length: 16 }, async () => {
    while (next < to) {
      const { ref, meta } = syntheticChunk(next++)
      await put(`${ref.path}/meta.json`, JSON.stringify(meta))
      await put(`${ref.path}/blocks.parquet`, '')
    }
  }))
}

/** The chunk index of chunks 0 … `to - 1`, as an S3 ingest writes it (chunks added later are not in it until it is rewritten). */
async function writeS3rverIndex(dir: string, bucket: string, prefix: string, to: number): Promise<void> {
  await s3rverPut(dir, bucket, prefix)(CHUNK_INDEX_FILE, syntheticIndex(0, to))
}

function s3rverPut(dir: string, bucket: string, prefix: string): (key: string, body: string) => Promise<void> {
  return async (key: string, body: string) => {
    const parts = `${prefix}/${key}`.split('/')
    const name = parts.pop()!
    const folder = path.join(dir, bucket, ...parts)
    await mkdir(folder, { recursive: true })
    await writeFile(path.join(folder, `${name}._S3rver_object`), body)
    await writeFile(path.join(folder, `${name}._S3rver_object.md5`), createHash('md5').update(body).digest('hex'))
    await writeFile(path.join(folder, `${name}._S3rver_metadata.json`), JSON.stringify({ 'content-type': 'application/octet-stream' }))
  }
}

/**
 * s3rver in a process of its own with OpenSSL's legacy provider: it makes the continuation tokens of
 * listings longer than 1,000 keys with DES, which Node 20's OpenSSL 3 refuses otherwise.
 */
function startS3rver(directory: string): Promise<{ port: number; stop(): void }> {
  const script = `import S3rver from 's3rver'
const s = new S3rver({ port: 0, address: '127.0.0.1', directory: ${JSON.stringify(directory)}, silent: true, configureBuckets: [{ name: 'bench' }] })
const { port } = await s.run()
console.log('port ' + port)`
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
  const child = spawn(process.execPath, ['--openssl-legacy-provider', '--input-type=module', '-e', script], { cwd: repo, stdio: ['ignore', 'pipe', 'inherit'] })
  process.once('exit', () => child.kill('SIGKILL'))
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`s3rver exited with ${code}`)))
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^port (\d+)/.exec(line)
      if (m) resolve({ port: Number(m[1]), stop: () => child.kill('SIGTERM') })
    })
  })
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
