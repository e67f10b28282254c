import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { loadavg, tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseDatasetHead } from '../src/chunks/head-file.js'
import { getText, getTextIfChanged, putText } from '../src/storage/s3.js'
import { startAnvil, type Anvil } from '../test/helpers/anvil.js'
import { CLI, startCli, until } from '../test/helpers/cli.js'
import { finalizedHead, measureFreshness, quantile, type FreshnessRun } from '../test/helpers/freshness.js'
import { freePort } from '../test/helpers/http.js'
import { setEnv } from '../test/helpers/s3.js'
import { resetS3Client } from '../src/storage/s3.js'
import { machine, printTable } from './lib/report.js'
import { StageLog, stageRows } from './lib/freshness-stages.js'

/*
 * `bench freshness`: how long a block takes from the node to the archive's clients at the defaults.
 * anvil mines a block a second (`--block-time 1`, a plain transfer or two in each); `ingest --follow`
 * and `serve` run as separate processes with no timing flag, over a folder and over s3rver. The lag
 * of each block runs from the moment the node first reports it as finalized (the finality an ingest
 * follows by default; its finalized tag polled every 20 ms)
 * to the router's /height covering it, and to a worker answering it through the router
 * (`/<block>/worker`, then the query) with the node's hash.
 */

export interface FreshnessBenchOptions {
  seconds: number
  targets: string[]
  /** Transfers sent per second while measuring. */
  txs: number
  /** The ingest's --normalizer (default: its own default). */
  normalizer?: string
  /** Also break each block's lag into stages, from the processes' debug logs. */
  stages?: boolean
  /** With `stages`: also append every log record to this file. */
  stagesLog?: string
}

export async function runFreshness(o: FreshnessBenchOptions): Promise<void> {
  const dir = await mkdtemp(path.join(tmpdir(), 'ba-bench-fresh-'))
  let anvil: Anvil | undefined
  let s3: { env: Record<string, string>; stop(): Promise<void> } | undefined
  const procs: ChildProcess[] = []
  try {
    // a finalized head two blocks below the latest (anvil's default, two epochs of 32 slots, is 64)
    anvil = await startAnvil(['--block-time', '1', '--slots-in-an-epoch', '1'])
    if (o.targets.includes('s3')) s3 = await startS3Process(path.join(dir, 's3'))
    const env = s3?.env ?? {}
    const [alice, bob] = await anvil.rpc('eth_accounts')
    let sending = true
    const a = anvil
    const sender = (async () => {
      for (let i = 0; sending; i++) {
        if (o.txs > 0) await a.rpc('eth_sendTransaction', [{ from: alice, to: bob, value: '0x' + (i + 1).toString(16) }]).catch(() => undefined)
        await new Promise((r) => setTimeout(r, o.txs > 0 ? 1000 / o.txs : 1000))
      }
    })()
    const rows: (string | number)[][] = []
    const stages: (string | number)[][] = []
    const notes: string[] = []
    const load0 = loadavg()[0]
    for (const target of o.targets) {
      const out = target === 's3' ? `s3://fresh/bench-${Date.now()}` : path.join(dir, `folder-${Date.now()}`)
      const stageLog = o.stages ? new StageLog(o.stagesLog) : undefined
      const logEnv: Record<string, string> = stageLog ? { LOG_LEVEL: 'debug', LOG_FORMAT: 'json' } : {}
      const ingest = spawn(process.execPath, [CLI, 'ingest', '--rpc', anvil.url, '--dataset', 'fresh', '--out', out, '--follow', '--progress', 'none', ...(o.normalizer ? ['--normalizer', o.normalizer] : [])], {
        stdio: ['ignore', 'ignore', stageLog ? 'pipe' : 'inherit'],
        env: { ...process.env, LOG_LEVEL: 'warn', ...env, ...logEnv },
      })
      ingest.stderr?.on('data', (d) => stageLog!.feed(d))
      procs.push(ingest)
      await until('the ingest\'s first chunk', async () => ((await readHead(out))?.chunks.length ? true : undefined), 60_000)
      const serve = await startCli(['serve', '--data', out, '--port', '0', '--cache', path.join(dir, `cache-${target}`)], ['router'], { ...env, ...logEnv }, 180_000)
      serve.child.stderr!.on('data', (d) => stageLog?.feed(d))
      procs.push(serve.child)
      const router = serve.lines.get('router')![0]
      await until('a first height', async () => (Number(await (await fetch(`${router}/datasets/fresh/height`)).text()) >= 0 ? true : undefined), 60_000)
      const requests0 = await storageRequests(router)
      const probing = { on: true }
      const probe = out.startsWith('s3://') ? probeS3(probing) : undefined
      const run = await measureFreshness({ anvil, head: () => finalizedHead(a), router, dataset: 'fresh', seconds: o.seconds, drainMs: 60_000, storageLast: async () => (await readHead(out))?.last, storagePollMs: out.startsWith('s3://') ? 250 : 50 })
      if (run.mismatches.length || run.unanswered.length) throw new Error(`${target}: ${run.mismatches.length} hash mismatches, unanswered blocks ${run.unanswered}`)
      const requests1 = await storageRequests(router)
      notes.push(`${target}: storage requests of \`serve\` (router and workers) while measuring, per block: ${[...requests1].map(([op, n]) => `${op} ${((n - (requests0.get(op) ?? 0)) / Math.max(1, run.blocks.length)).toFixed(1)}`).join(', ')}`)
      const loop = await (await fetch(`${router}/metrics`)).text()
      const gauge = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(loop)?.[1]) * 1000
      notes.push(`${target}: event loop delay of \`serve\` over the run: p50 ${gauge('nodejs_eventloop_lag_p50_seconds').toFixed(0)} ms, p99 ${gauge('nodejs_eventloop_lag_p99_seconds').toFixed(0)} ms, max ${gauge('nodejs_eventloop_lag_max_seconds').toFixed(0)} ms`)
      probing.on = false
      const probed = await probe
      rows.push(...summarize(target, run))
      if (probed) rows.push(lineOf(target, '(s3rver alone: a 2 KB PUT)', probed.put), lineOf(target, '(s3rver alone: a 2 KB GET)', probed.get))
      if (stageLog) stages.push(...stageRows(target, [
        ...stageLog.stages(run.blocks),
        { stage: '(the router\'s periodic listing, each)', ms: stageLog.durations('router: storage listed') },
        { stage: '(a worker\'s check of its held chunks, each pass)', ms: stageLog.durations('worker: held chunks checked') },
      ]))
      await Promise.all([stop(serve.child), stop(ingest)])
    }
    sending = false
    await sender
    console.log(`machine: ${machine()}; 1-min load average ${load0.toFixed(1)} at the start, ${loadavg()[0].toFixed(1)} at the end (the processes measured add about 1)`)
    printTable(`block lag at the defaults${o.normalizer ? ` (but ingest --normalizer ${o.normalizer})` : ''}: node reports it → router /height covers it → answered through the router (${o.seconds} s per target, anvil --block-time 1, ${o.txs} transfer(s)/s)`,
      ['storage', 'stage', 'blocks', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms'], rows)
    for (const n of notes) console.log(n)
    if (stages.length) printTable('where the lag goes, stage by stage (from the debug logs; blocks whose every mark was found)', ['storage', 'stage', 'blocks', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms'], stages)
  } finally {
    await Promise.all(procs.map(stop))
    await anvil?.stop()
    await s3?.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

/**
 * s3rver in a process of its own (not in this one, whose polling would share its event loop), with
 * the bucket `fresh`; this process's S3 client pointed at it.
 */
async function startS3Process(dir: string): Promise<{ env: Record<string, string>; stop(): Promise<void> }> {
  const port = await freePort()
  const bin = path.join(path.dirname(fileURLToPath(import.meta.url)), '../../node_modules/s3rver/bin/s3rver.js')
  const child = spawn(process.execPath, [bin, '-d', dir, '-a', '127.0.0.1', '-p', String(port), '-s', '--configure-bucket', 'fresh'], { stdio: 'ignore' })
  const env = { AWS_ENDPOINT_URL: `http://127.0.0.1:${port}`, AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER' }
  const restore = setEnv(env)
  resetS3Client()
  await until('s3rver', async () => ((await fetch(`${env.AWS_ENDPOINT_URL}/fresh`).catch(() => undefined))?.status ? true : undefined), 60_000)
  return {
    env,
    async stop() {
      restore()
      resetS3Client()
      await stop(child)
    },
  }
}

const lineOf = (target: string, stage: string, xs: number[]): (string | number)[] => [target, stage, xs.length, ...[0.5, 0.9, 0.99].map((q) => quantile(xs, q).toFixed(0)), Math.max(...xs).toFixed(0)]

/**
 * s3rver's own latency meanwhile, from this process: a 2 KB object (about a one-block chunk's
 * meta.json or head.json) PUT and read back every 500 ms, until `probing.on` is false.
 */
async function probeS3(probing: { on: boolean }): Promise<{ put: number[]; get: number[] }> {
  const put: number[] = []
  const get: number[] = []
  const body = 'x'.repeat(2048)
  for (let i = 0; probing.on; i++) {
    const key = `probe/${i % 10}`
    let t0 = performance.now()
    await putText('fresh', key, body)
    put.push(performance.now() - t0)
    t0 = performance.now()
    await getText('fresh', key)
    get.push(performance.now() - t0)
    await new Promise((r) => setTimeout(r, 500))
  }
  return { put, get }
}

function summarize(target: string, run: FreshnessRun): (string | number)[][] {
  const line = (stage: string, xs: number[]) => lineOf(target, stage, xs)
  return [
    line('node → in storage (head.json)', run.blocks.flatMap((b) => (b.publishedMs === undefined ? [] : [b.publishedMs]))),
    line('node → router /height', run.blocks.map((b) => b.heightMs)),
    line('node → answered', run.blocks.map((b) => b.answerMs)),
  ]
}

/** `block_archive_storage_requests_total` of a `serve` process by operation. */
async function storageRequests(router: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${router}/metrics`)).text()
  const out = new Map<string, number>()
  for (const m of text.matchAll(/^block_archive_storage_requests_total\{([^}]*)\} (\S+)$/gm)) {
    const op = /op="([^"]*)"/.exec(m[1])?.[1] ?? '?'
    out.set(op, (out.get(op) ?? 0) + Number(m[2]))
  }
  return out
}

async function readHead(out: string) {
  // One GET with a time limit, no retries: a read that meets the ingest's write (s3rver rewrites the
  // object in place) is given up and made again at the next poll, as the router does.
  const got = out.startsWith('s3://') ? await getTextIfChanged('fresh', `${out.slice('s3://fresh/'.length)}/head.json`, undefined, AbortSignal.timeout(1000)) : undefined
  const text = out.startsWith('s3://')
    ? (got === 'unchanged' ? undefined : got?.text)
    : await readFile(path.join(out, 'head.json'), 'utf8').catch(() => undefined)
  return text === undefined ? undefined : parseDatasetHead(text)
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    child.once('exit', () => resolve())
    child.kill('SIGTERM')
    setTimeout(() => child.kill('SIGKILL'), 10_000).unref()
  })
}
