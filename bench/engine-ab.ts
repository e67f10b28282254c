import { copyFile, mkdir, rm } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { PerformanceObserver } from 'node:perf_hooks'
import { chunkTableNames } from '../src/chunks/layout.js'
import { benchChunk } from './lib/chunk.js'
import { summarize } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { SHAPES, shapeByName } from './lib/shapes.js'
import { watchStatements, type Statement } from './lib/statements.js'

export interface EngineAbOptions {
  baseline: string
  runs: number
  shape?: string[]
  storage: 'local' | 'parquet'
  stages: boolean
}

/** One build's engine, loaded from its `dist` folder (its own DuckDB instance, 1 thread). */
interface Build {
  name: string
  run(query: unknown): Promise<{ wall: number; cpu: number; gc: number; body: Buffer; statements: Statement[] }>
  close(): Promise<void>
}

let statements: Statement[] | undefined
let gcMs = 0

/** Times every statement either build runs, and sums GC pauses. */
function watchStatementsAndGc(): void {
  watchStatements((s) => statements?.push(s))
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcMs += e.duration
  }).observe({ entryTypes: ['gc'] })
}

const configured = new Set<string>()

async function loadBuild(dist: string, name: string, formsFile: string, storage: EngineAbOptions['storage']): Promise<Build> {
  const load = (p: string) => import(path.join(dist, p))
  if (!configured.has(dist)) {
    const { configureDb } = await load('src/db.js')
    configureDb({ threads: 1 })
    configured.add(dist)
  }
  const { evmFamily } = await load('src/families/evm.js')
  const { prepareQuery } = await load('src/query/engine.js')
  const { LocalForms } = await load('src/storage/local-forms.js')
  // Builds before step 34 (docs/benchmark-history.md) have no block-ordered copies (and no blockOrders).
  const { blockOrders } = await load('src/families/declaration.js')
  const { dir, meta } = await benchChunk()
  const forms = new LocalForms({ file: formsFile, label: name })
  if (!(await forms.build('bench', dir, await chunkTableNames(dir), blockOrders?.(evmFamily)))) throw new Error(`${name}: could not open the local form`)
  const chunk = { top: 0, first: meta.first, last: meta.last, hash: '', path: '', coverFrom: 0, dir, local: storage === 'local' ? forms.acquire('bench') : undefined }
  const view = { name: 'bench', family: evmFamily, chunks: [chunk], height: meta.last }
  return {
    name,
    async run(query) {
      statements = []
      const g0 = gcMs
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      const s = await prepareQuery(view, query, { sizeBytes: 2 ** 40, timeMs: 600_000 })
      const parts: Buffer[] = []
      for await (const piece of s.body) parts.push(Buffer.from(piece))
      const wall = performance.now() - t0
      const c = process.cpuUsage(c0)
      const out = { wall, cpu: (c.user + c.system) / 1000, gc: gcMs - g0, body: Buffer.concat(parts), statements }
      statements = undefined
      return out
    },
    close: () => forms.close(),
  }
}

const ms = (v: number) => v.toFixed(1)

/**
 * `bench engine-ab --baseline <dist>`: this build's query engine against another build's (its
 * `dist` folder, e.g. a `git worktree` of the commit before) in one process, alternating query by
 * query, per shape on the one-chunk dataset. Each build reads its own copy of one local form (the
 * same bytes: forms built apart differ in layout, and that alone moved timings by ~10 %). Reports
 * wall and CPU (process, all threads) medians and p10, checks the answers are the same bytes;
 * `--stages` adds each statement's median, the time outside statements and GC.
 */
export async function runEngineAb(o: EngineAbOptions): Promise<void> {
  const { root } = await benchChunk()
  const folder = `${root}-forms-ab`
  await rm(folder, { recursive: true, force: true })
  await mkdir(folder, { recursive: true })
  const thisDist = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
  const files = [path.join(folder, 'baseline.duckdb'), path.join(folder, 'this.duckdb')]
  // One form, copied: build it with this build, then open both copies.
  const first = await loadBuild(thisDist, 'this build', files[1], o.storage)
  await first.close()
  await copyFile(files[1], files[0])
  watchStatementsAndGc()
  const builds = [await loadBuild(path.resolve(o.baseline), 'baseline', files[0], o.storage), await loadBuild(thisDist, 'this build', files[1], o.storage)]
  console.log(`machine: ${machine()}`)
  console.log(`baseline ${path.resolve(o.baseline)}, this build ${thisDist}; ${o.storage === 'local' ? 'local form' : 'Parquet'}; DuckDB threads 1; ${o.runs} alternating runs`)
  const rows: string[][] = []
  const stageRows: string[][] = []
  try {
    for (const shape of o.shape?.length ? o.shape.map(shapeByName) : SHAPES) {
      const { meta } = await benchChunk()
      const query = shape.query(meta.first, meta.last)
      const first = await Promise.all(builds.map((b) => b.run(query)))
      const same = first[0].body.equals(first[1].body)
      const runs = shape.name === 'all tx+logs' ? Math.min(o.runs, 7) : o.runs
      const samples = builds.map(() => [] as Awaited<ReturnType<Build['run']>>[])
      for (let i = 0; i < runs; i++) {
        const order = i % 2 ? [1, 0] : [0, 1]
        for (const j of order) samples[j].push(await builds[j].run(query))
      }
      const [a, b] = samples.map((s) => ({ wall: summarize(s.map((r) => r.wall)), cpu: summarize(s.map((r) => r.cpu)) }))
      rows.push([shape.name, same ? 'yes' : 'NO', ms(a.wall.median), ms(b.wall.median), `${(b.wall.median / a.wall.median).toFixed(2)}×`,
        ms(a.wall.p10), ms(b.wall.p10), `${(b.wall.p10 / a.wall.p10).toFixed(2)}×`, ms(a.cpu.median), ms(b.cpu.median)])
      if (o.stages) {
        builds.forEach((build, j) => {
          const s = samples[j]
          const n = Math.max(...s.map((r) => r.statements.length))
          const median = (f: (r: (typeof s)[number]) => number) => summarize(s.map(f)).median
          for (let k = 0; k < n; k++) {
            stageRows.push([shape.name, build.name, `statement ${k + 1}`, ms(median((r) => r.statements[k]?.ms ?? 0)), s[0].statements[k]?.sql.slice(0, 60) ?? ''])
          }
          stageRows.push([shape.name, build.name, 'outside statements (JS, GC)', ms(median((r) => r.wall - r.statements.reduce((t, x) => t + x.ms, 0))), ''])
          stageRows.push([shape.name, build.name, 'GC (mean; a pause may fall in the other build\'s query)', ms(s.reduce((t, r) => t + r.gc, 0) / s.length), ''])
        })
      }
    }
  } finally {
    for (const b of builds) await b.close()
  }
  printTable('query engine, this build against the baseline, in one process (ms)',
    ['shape', 'same answer', 'baseline median', 'this median', 'this / baseline', 'baseline p10', 'this p10', 'p10 ratio', 'baseline CPU', 'this CPU'], rows)
  if (o.stages) printTable('statements of each build (medians, ms)', ['shape', 'build', 'stage', 'ms', 'SQL'], stageRows)
}
