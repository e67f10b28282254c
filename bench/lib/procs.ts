import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'

/*
 * Router and worker processes started through the real CLI (`block-archive router|worker`), so that
 * a benchmark sees what a deployment sees: separate processes, real HTTP, per-process memory.
 * Every process started here is killed by `stop()` (and on exit of the benchmark process).
 */

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src/cli.js')

export interface Proc {
  child: ChildProcess
  url: string
  pid: number
}

const started = new Set<ChildProcess>()
process.once('exit', () => {
  for (const c of started) c.kill('SIGKILL')
})

/**
 * Start `block-archive <args>` and wait for the stdout line `<prefix>: <url>`. `BENCH_NODE_ARGS`
 * adds Node flags to every process (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`, which
 * NODE_OPTIONS refuses; the profiles are written when the processes stop).
 */
export function startCli(args: string[], prefix: string, env: Record<string, string> = {}, timeoutMs = 30_000): Promise<Proc> {
  const nodeArgs = process.env.BENCH_NODE_ARGS?.split(/\s+/).filter(Boolean) ?? []
  const child = spawn(process.execPath, [...nodeArgs, CLI, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn', ...env },
  })
  started.add(child)
  child.once('exit', () => started.delete(child))
  let stderr = ''
  child.stderr!.on('data', (d) => {
    stderr = (stderr + d).slice(-4000)
  })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error(`${args[0]} did not start within ${timeoutMs / 1000} s`)), timeoutMs)
    const fail = (e: Error) => {
      clearTimeout(timer)
      child.kill('SIGKILL')
      reject(new Error(`${e.message}\n${stderr}`))
    }
    child.once('exit', (code) => fail(new Error(`${args[0]} exited with ${code}`)))
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = new RegExp(`^${prefix}: (\\S+)`).exec(line)
      if (!m) return
      clearTimeout(timer)
      child.removeAllListeners('exit')
      child.once('exit', () => started.delete(child))
      resolve({ child, url: m[1], pid: child.pid! })
    })
  })
}

export interface WorkerFlags {
  concurrency?: number
  queue?: number
  dbThreads?: number
  /** `--db-memory` of the workers (default: theirs). */
  dbMemory?: string
  maxResponseBytes?: number
  /** `--compression` of the workers (default auto: none for these loopback clients). */
  compression?: string
  sliceMb?: number
  /** Each worker's `--cache` folder (datasets in object storage); without it workers read `data` in place. */
  cache?: (index: number) => string
  /** Extra environment of every process (e.g. the S3 endpoint). */
  env?: Record<string, string>
  /** Dataset name (default: read from `data`/dataset.json). */
  dataset?: string
  /**
   * Each worker's cache folder for local forms of the chunks it reads in place (`--data` and
   * `--cache`); `deploy` waits until every form is built. Without it workers read the Parquet files.
   */
  localForms?: (index: number) => string
  /** The router's `--missed-heartbeats` (default its own): raise it where a stalled worker must not count as dead. */
  missedHeartbeats?: number
}

export interface Deployment {
  router: Proc
  workers: Proc[]
  /** Dataset base URL for clients. */
  base: string
  stop(): Promise<void>
}

/** A router and `workers` worker processes over the dataset folder `data`, ready to answer. */
export async function deploy(data: string, workers: number, flags: WorkerFlags = {}, heartbeatMs = 300): Promise<Deployment> {
  const procs: Proc[] = []
  const stop = async () => {
    await Promise.all(procs.map((p) => new Promise<void>((resolve) => {
      if (p.child.exitCode !== null) return resolve()
      p.child.once('exit', () => resolve())
      p.child.kill('SIGTERM')
      setTimeout(() => p.child.kill('SIGKILL'), 5000).unref()
    })))
  }
  try {
    const router = await startCli(['router', '--data', data, '--port', '0', '--heartbeat-ms', String(heartbeatMs), '--relist-ms', '1000',
      ...(flags.missedHeartbeats ? ['--missed-heartbeats', String(flags.missedHeartbeats)] : [])], 'router', flags.env)
    procs.push(router)
    const extra: string[] = []
    if (flags.concurrency) extra.push('--concurrency', String(flags.concurrency))
    if (flags.queue !== undefined) extra.push('--queue', String(flags.queue))
    if (flags.dbThreads) extra.push('--db-threads', String(flags.dbThreads))
    if (flags.dbMemory) extra.push('--db-memory', flags.dbMemory)
    if (flags.maxResponseBytes) extra.push('--max-response-bytes', String(flags.maxResponseBytes))
    if (flags.compression) extra.push('--compression', flags.compression)
    if (flags.sliceMb) extra.push('--slice-mb', String(flags.sliceMb))
    // The local forms measured are those of every chunk held, built before the timing starts.
    const forms = flags.localForms ? ['--local-forms', 'duckdb', '--forms-after', '0'] : ['--local-forms', 'off']
    const where = (i: number) => {
      if (flags.cache) return ['--cache', flags.cache(i), '--id', `w${i}`, ...forms]
      if (flags.localForms) return ['--data', data, '--cache', flags.localForms(i), '--id', `w${i}`, ...forms]
      return ['--data', data, ...forms]
    }
    const ws = await Promise.all(Array.from({ length: workers }, (_, i) =>
      startCli(['worker', '--router', router.url, ...where(i), '--heartbeat-ms', String(heartbeatMs), ...extra], 'worker', flags.env)))
    procs.push(...ws)
    const name = flags.dataset ?? (JSON.parse(readFileSync(path.join(data, 'dataset.json'), 'utf8')).name as string)
    await waitReady(router.url, name, workers)
    if (flags.localForms) await waitForms(ws)
    return { router, workers: ws, base: `${router.url}/datasets/${name}`, stop }
  } catch (e) {
    await stop()
    throw e
  }
}

/** Until every worker is alive, holds chunks, and the dataset's height is that of its last chunk. */
async function waitReady(routerUrl: string, dataset: string, workers: number): Promise<void> {
  const deadline = Date.now() + 60_000
  for (;;) {
    const s = (await (await fetch(`${routerUrl}/status`)).json()) as any
    const ds = s.datasets.find((d: any) => d.name === dataset)
    const alive = s.workers.filter((w: any) => w.alive && (w.state[dataset]?.length ?? 0) > 0)
    if (ds && ds.height === ds.lastChunkBlock && ds.height >= 0 && alive.length === workers) return
    if (Date.now() > deadline) throw new Error(`cluster not ready after 60 s: ${JSON.stringify(s).slice(0, 1000)}`)
    await new Promise((r) => setTimeout(r, 200))
  }
}

/** Until every worker has built the local forms of the chunks it holds. */
async function waitForms(workers: Proc[]): Promise<void> {
  const deadline = Date.now() + 30 * 60_000
  for (;;) {
    const states = await Promise.all(workers.map(async (w) => ((await (await fetch(`${w.url}/status`)).json()) as any).local_forms))
    if (states.every((f) => f && f.pending === 0 && f.built > 0)) return
    if (Date.now() > deadline) throw new Error(`local forms not built after 30 min: ${JSON.stringify(states)}`)
    await new Promise((r) => setTimeout(r, 500))
  }
}

/** Resident set size and its peak (kB → bytes) of a process, from /proc (Linux). */
export function rss(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024
  return { rss: kb('VmRSS'), peak: kb('VmHWM') }
}

/** The fields of /proc/<pid>/stat after the command name, from `state` on (Linux). */
function statFields(pid: number | 'self'): string[] {
  return readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ')
}

/** /proc's clock ticks per second (USER_HZ), 100 on Linux. */
export const USER_HZ = 100

/** CPU seconds (user + system, all threads) a process has used so far; undefined once it is gone. */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (!pid) return undefined
  try {
    const fields = statFields(pid)
    return (Number(fields[11]) + Number(fields[12])) / USER_HZ
  } catch {
    return undefined
  }
}

/** CPU seconds of this process's children it has waited for, and of their descendants (cutime + cstime). */
export function waitedChildrenCpuSeconds(): number {
  const fields = statFields('self')
  return (Number(fields[13]) + Number(fields[14])) / USER_HZ
}

/** Until `probe` says yes (a probe that throws counts as not yet), asking every 100 ms; an error naming `what` after `timeoutMs`. */
export async function until(probe: () => Promise<boolean> | boolean, timeoutMs: number, what = 'a condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      if (await probe()) return
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}
