import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createReadStream, existsSync } from 'node:fs'
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ensureDataset } from './lib/dataset.js'
import { cpuSeconds, startCli, type Proc } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'

/*
 * Local forms on demand against forms of every chunk held, from outside: `block-archive serve` with
 * one worker over the bench dataset, one full sync of all transactions and logs with the CLI (an
 * indexer's sync: every chunk read once), then `--hot-passes` of USDC logs + their transactions over
 * the last two chunks (a chunk read again and again), `--gap-s` apart, then `--idle-s` idle. Per
 * `--forms-after` value (reads count at most once a minute: keep the passes over a minute in all): forms built, the worker's CPU, the cache folder's bytes, each pass's wall
 * and CPU; the outputs of both runs are compared by hash.
 */

export interface FormsBenchOptions {
  blocks: number
  formsAfter: number[]
  hotPasses: number
  gapS: number
  idleS: number
}

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli.js')

/** Run `block-archive query` writing NDJSON into `out`; its exit code must be 0. */
function query(base: string, body: unknown, out: string, parallel: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, 'query', base, JSON.stringify(body), '--parallel', String(parallel), '-o', out], { stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-2000)))
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`query exited with ${code}: ${stderr}`))))
  })
}

function md5(file: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const h = createHash('md5')
    createReadStream(file).on('data', (d) => h.update(d)).on('end', () => resolve(h.digest('hex'))).on('error', reject)
  })
}

/** Bytes of the files under `dir` (0 when there is no such folder: nothing was written into it). */
async function folderBytes(dir: string): Promise<number> {
  if (!existsSync(dir)) return 0
  let n = 0
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) n += (await stat(path.join(e.parentPath, e.name))).size
  }
  return n
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Run {
  formsAfter: number
  built: number
  cpu: number
  cacheMb: number
  full: { wallS: number; cpuS: number }
  hot: { wallS: number; cpuS: number; built: number }[]
  hashes: string[]
}

async function runOne(data: string, name: string, last: number, formsAfter: number, o: FormsBenchOptions, work: string): Promise<Run> {
  const cache = path.join(work, `cache-${formsAfter}`)
  const serve: Proc = await startCli(['serve', '--data', data, '--workers', '1', '--port', '0', '--cache', cache, '--forms-after', String(formsAfter)], 'router')
  try {
    const base = `${serve.url}/datasets/${name}`
    for (;;) {
      const h = await fetch(`${base}/height`).then((r) => r.text(), () => '')
      if (Number(h) === last) break
      await sleep(200)
    }
    const workerUrl = new URL((await (await fetch(`${base}/0/worker`)).text()).trim()).origin
    const forms = async () => ((await (await fetch(`${workerUrl}/status`)).json()) as { local_forms: { built: number } }).local_forms.built
    const cpu = () => cpuSeconds(serve.pid) ?? NaN
    const timed = async (f: () => Promise<void>) => {
      const c0 = cpu()
      const t0 = performance.now()
      await f()
      return { wallS: (performance.now() - t0) / 1000, cpuS: cpu() - c0 }
    }
    const all = shapeByName('all tx+logs').query(0, last)
    const hot = shapeByName('logs+tx').query(Math.max(0, last - 399), last)
    const fullOut = path.join(work, `full-${formsAfter}.ndjson`)
    const hotOut = path.join(work, `hot-${formsAfter}.ndjson`)
    const full = await timed(() => query(base, all, fullOut, 4))
    const passes: Run['hot'] = []
    for (let i = 0; i < o.hotPasses; i++) {
      if (i > 0) await sleep(o.gapS * 1000)
      passes.push({ ...(await timed(() => query(base, hot, hotOut, 1))), built: await forms() })
    }
    await sleep(o.idleS * 1000)
    return { formsAfter, built: await forms(), cpu: cpu(), cacheMb: (await folderBytes(cache)) / 1e6, full, hot: passes, hashes: [await md5(fullOut), await md5(hotOut)] }
  } finally {
    serve.child.kill('SIGTERM')
    await new Promise((r) => serve.child.once('exit', r))
  }
}

export async function runForms(o: FormsBenchOptions): Promise<void> {
  const { dir } = await ensureDataset(o.blocks)
  const name = JSON.parse(await readFile(path.join(dir, 'dataset.json'), 'utf8')).name as string
  const last = o.blocks - 1
  const work = await mkdtemp(path.join(tmpdir(), 'ba-bench-forms-demand-'))
  try {
    console.log(`machine: ${machine()}`)
    console.log(`serve, 1 worker, ${o.blocks} blocks: a full sync of all tx+logs (--parallel 4), then ${o.hotPasses} passes of logs+tx over the last 400 blocks ${o.gapS} s apart, then ${o.idleS} s idle`)
    const runs: Run[] = []
    for (const f of o.formsAfter) runs.push(await runOne(dir, name, last, f, o, work))
    const same = runs.every((r) => r.hashes.join() === runs[0].hashes.join())
    const s = (x: number) => x.toFixed(2)
    printTable('local forms: which chunks get one',
      ['--forms-after', 'forms built', 'worker CPU s in all', 'cache MB', 'full sync wall s', 'full sync worker CPU s', 'hot passes: worker CPU s (forms built after each)'],
      runs.map((r) => [r.formsAfter, r.built, s(r.cpu), r.cacheMb.toFixed(0), s(r.full.wallS), s(r.full.cpuS), r.hot.map((h) => `${s(h.cpuS)} (${h.built})`).join(', ')]))
    console.log(same ? 'outputs identical in every run (MD5 of the full sync and of the last hot pass)' : `OUTPUTS DIFFER: ${runs.map((r) => `${r.formsAfter}: ${r.hashes.join(' ')}`).join('; ')}`)
    if (!same) process.exitCode = 1
  } finally {
    await rm(work, { recursive: true, force: true })
  }
}
