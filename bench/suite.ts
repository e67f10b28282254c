import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { USER_HZ, waitedChildrenCpuSeconds } from './lib/procs.js'
import { machine, note, printTable } from './lib/report.js'

/*
 * Where the test suite's time goes (`npm run bench -- suite`). Runs the suite as `npm test` does
 * (test/helpers/run-suite.ts with test/helpers/suite-env.ts, `--concurrency` files at once) while every Node
 * process of the run logs its CPU time as it exits: a `--require` hook in NODE_OPTIONS, which the
 * test files and every command they start inherit. The machine's idle time is read from /proc/stat
 * before and after. Prints each test file's wall time, its own CPU and that of the processes it started, the
 * commands started by kind, and how much of the machine the run left idle. Linux only (/proc).
 */

const DIST_TEST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../test')

/** What each Node process writes as it exits (main thread; every thread's CPU is the process's). */
interface ProcessLog {
  pid: number
  ppid: number
  cpu: number
  wall: number
  end: number
  script: string
  args: string
  runner: boolean
}

/*
 * A process ended by SIGTERM that has no handler of its own (a test node such as chopsticks) would
 * write nothing: the hook handles SIGTERM for it, writes its line and ends it by the signal again.
 * A process with handlers of its own is left to them and writes its line when it exits.
 */
const HOOK = `const fs = require('node:fs')
// Once per process, should NODE_OPTIONS name a hook twice (bench suite run from a test of a run of bench suite).
if (require('node:worker_threads').isMainThread && !globalThis.__blockArchiveSuiteCpu) {
  globalThis.__blockArchiveSuiteCpu = true
  const t0 = Date.now()
  let written = false
  const write = () => {
    if (written) return
    written = true
    const u = process.cpuUsage()
    const line = { pid: process.pid, ppid: process.ppid, cpu: (u.user + u.system) / 1e6, wall: (Date.now() - t0) / 1000, end: Date.now(),
      script: process.argv[1] ?? '', args: process.argv.slice(2, 4).join(' '), runner: process.execArgv.includes('--test') || /run-suite\\.js$/.test(process.argv[1] ?? '') }
    try { fs.appendFileSync(process.env.BLOCK_ARCHIVE_SUITE_CPU_LOG, JSON.stringify(line) + '\\n') } catch {}
  }
  process.on('exit', write)
  process.on('SIGTERM', function onTerm() {
    if (process.listenerCount('SIGTERM') > 1) return
    write()
    process.removeListener('SIGTERM', onTerm)
    process.kill(process.pid, 'SIGTERM')
  })
}
`

/** Idle core-seconds of the machine since boot, every core summed: idle + iowait of /proc/stat. */
function idleCoreSeconds(): number {
  const v = readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number)
  return (v[3] + (v[4] ?? 0)) / USER_HZ
}

export interface SuiteOptions {
  concurrency: number
  top: number
  files?: string[]
}

export async function runSuite(o: SuiteOptions): Promise<void> {
  const files = o.files?.length ? o.files.map((f) => path.resolve(f)) : (await readdir(DIST_TEST)).filter((f) => f.endsWith('.test.js')).sort().map((f) => path.join(DIST_TEST, f))
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ba-bench-suite-'))
  const hook = path.join(dir, 'cpu-hook.cjs')
  const log = path.join(dir, 'cpu.ndjson')
  await writeFile(hook, HOOK)
  await writeFile(log, '')
  const cores = os.availableParallelism()
  console.log(`${files.length} test files, ${o.concurrency} at once, on ${cores} cores; the suite's own output is summed up at the end`)

  const cpu0 = waitedChildrenCpuSeconds()
  const t0 = Date.now()
  const idle0 = idleCoreSeconds()
  // A runner started from a test file would report to it in the runner's internal format (NODE_TEST_CONTEXT).
  const { NODE_TEST_CONTEXT: _, ...env } = process.env
  const child = spawn(process.execPath, ['--import', path.join(DIST_TEST, 'helpers/suite-env.js'), path.join(DIST_TEST, 'helpers/run-suite.js'), '--concurrency', String(o.concurrency), ...files], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...env, NODE_OPTIONS: `${env.NODE_OPTIONS ?? ''} --require ${hook}`.trim(), BLOCK_ARCHIVE_SUITE_CPU_LOG: log },
  })
  let tail = ''
  let failed: string[] = []
  child.stdout!.on('data', (d: Buffer) => {
    const text = tail + d.toString()
    const lines = text.split('\n')
    tail = lines.pop()!
    failed = failed.concat(lines.filter((l) => /^not ok /.test(l)))
    for (const l of lines) if (/^# (tests|pass|fail|cancelled|skipped) /.test(l)) console.log(l)
  })
  const progress = setInterval(() => process.stderr.write(`  ${Math.round((Date.now() - t0) / 1000)} s\r`), 10_000)
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)))
  clearInterval(progress)
  const wall = (Date.now() - t0) / 1000
  const idle = idleCoreSeconds() - idle0
  const total = waitedChildrenCpuSeconds() - cpu0

  const procs: ProcessLog[] = (await readFile(log, 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l))
  await rm(dir, { recursive: true, force: true })
  const byPid = new Map(procs.map((p) => [p.pid, p]))
  const isTestFile = (p: ProcessLog) => !p.runner && p.script.endsWith('.test.js')
  const fileOf = (p: ProcessLog | undefined): string => {
    for (let hops = 0; p && hops < 20; hops++, p = byPid.get(p.ppid)) if (isTestFile(p)) return path.basename(p.script, '.test.js')
    return '(runner, or a parent that logged nothing)'
  }
  const rows = new Map<string, { wall: number; own: number; started: number; n: number }>()
  const kinds = new Map<string, { cpu: number; n: number }>()
  for (const p of procs) {
    const file = fileOf(p)
    const row = rows.get(file) ?? { wall: 0, own: 0, started: 0, n: 0 }
    rows.set(file, row)
    if (isTestFile(p) || (p.runner && !byPid.has(p.ppid))) {
      row.own += p.cpu
      row.wall = Math.max(row.wall, p.wall)
    } else {
      row.started += p.cpu
      row.n++
      const kind = `${path.basename(p.script)} ${p.script.endsWith('cli.js') ? p.args.split(' ')[0] : ''}`.trim()
      const k = kinds.get(kind) ?? { cpu: 0, n: 0 }
      k.cpu += p.cpu
      k.n++
      kinds.set(kind, k)
    }
  }

  // Time in which fewer test files ran than the runner allows (a free slot), over the run.
  const spans = procs.filter(isTestFile).map((p) => [p.end - p.wall * 1000, p.end])
  const events = spans.flatMap(([s, e]) => [[s, 1], [e, -1]]).sort((a, b) => a[0] - b[0])
  let running = 0
  let at = t0
  let freeSlot = 0
  for (const [t, d] of [...events, [t0 + wall * 1000, 0]]) {
    if (running < o.concurrency) freeSlot += Math.max(0, t - at)
    running += d
    at = Math.max(at, t)
  }

  const logged = procs.reduce((a, p) => a + p.cpu, 0)
  const s = (x: number) => x.toFixed(1)
  const sorted = [...rows.entries()].sort((a, b) => b[1].own + b[1].started - (a[1].own + a[1].started))
  printTable(
    `test files by CPU (the ${Math.min(o.top, sorted.length)} highest of ${sorted.length})`,
    ['file', 'wall s', 'CPU s, its process', 'CPU s, processes it started', 'processes started'],
    sorted.slice(0, o.top).map(([f, r]) => [f, s(r.wall), s(r.own), s(r.started), r.n]),
  )
  printTable(
    'processes the tests started, by command',
    ['command', 'processes', 'CPU s'],
    [...kinds.entries()].sort((a, b) => b[1].cpu - a[1].cpu).map(([k, v]) => [k, v.n, s(v.cpu)]),
  )
  printTable('the run', ['measure', 'value'], [
    ['wall', `${s(wall)} s`],
    ['CPU of the runner and every process under it', `${s(total)} s (${s(total / wall)} cores on average)`],
    ['of which Node processes that logged theirs as they exited', `${s(logged)} s`],
    ['not logged: processes killed (SIGKILL), native binaries (anvil, chromium)', `${s(Math.max(0, total - logged))} s`],
    ['idle core-seconds of the machine meanwhile', `${s(idle)} of ${s(cores * wall)}`],
    [`time with fewer than ${o.concurrency} test files running`, `${s(freeSlot / 1000)} s`],
    ['runner exit code', String(code)],
  ])
  if (failed.length) note(`Failed: ${failed.join('; ')}`)
  note(`Machine: ${machine()}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`)
  note('CPU of a process counts all its threads (DuckDB, V8\'s compiler and GC). A process killed with SIGKILL writes no line; its CPU is in "not logged".')
}
