import { chunkTableNames } from '../src/chunks/layout.js'
import path from 'node:path'
import { configureDb, connect } from '../src/db.js'
import { blockOrders } from '../src/families/declaration.js'
import { evmFamily } from '../src/families/evm.js'
import type { DatasetView, QueryBudgets } from '../src/query/types.js'
import { ArchiveStorage, LocalStorage } from '../src/server/storage.js'
import { ChunkCache } from '../src/storage/chunk-cache.js'
import { LocalForms } from '../src/storage/local-forms.js'
import { startWorker } from '../src/server/worker-http.js'
import { readAnswer, UNCUT } from './lib/answer.js'
import { benchChunk } from './lib/chunk.js'
import { until } from './lib/procs.js'
import { mb, ms, timeInterleaved } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { SHAPES, shapeByName } from './lib/shapes.js'
import { reportTarget } from './lib/targets.js'
import { responseObjects, runJson, runRows, type Range } from './lib/sql.js'

export interface WorkerBenchOptions {
  runs: number
  shape?: string[]
  http: boolean
}

/**
 * Uncut, and the whole chunk in one slice, streamed (not under the heavy-slice lock, which would
 * hold the whole answer): the files are read once, but DuckDB holds the whole answer while it
 * orders the rows (not the bounded memory of the default slices).
 */
const WHOLE_CHUNK: QueryBudgets = { ...UNCUT, sliceBytes: 2 ** 40, heavySliceBytes: 2 ** 40 }

/**
 * `bench worker`: the query engine (`prepareQuery`, consuming the whole JSON body) per query shape
 * on one chunk, interleaved with the bare SQL of `bench sql`; ratio = engine / bare SQL. Then the
 * engine's JSON output rate against JSON.stringify of the same answer held as JS objects.
 */
export async function runWorker(o: WorkerBenchOptions): Promise<void> {
  configureDb({ threads: 1 })
  const { root, dir, meta } = await benchChunk()
  const range: Range = { dir, from: meta.first, to: meta.last }
  const name = path.basename(root)
  const view: DatasetView = {
    name,
    family: evmFamily,
    chunks: [{ top: 0, first: meta.first, last: meta.last, hash: '', path: path.relative(root, dir), coverFrom: 0, dir }],
    height: meta.last,
  }
  const con = await connect()
  // The same chunk in a worker's local form (built once, kept next to the dataset).
  const forms = new LocalForms({ file: `${root}-forms/local-forms.duckdb`, label: 'bench' })
  const tables = await chunkTableNames(dir)
  const t0 = performance.now()
  if (!(await forms.build('bench', dir, tables, blockOrders(evmFamily)))) throw new Error('could not build the local form')
  const buildMs = performance.now() - t0
  const local: DatasetView = { ...view, chunks: view.chunks.map((c) => ({ ...c, local: forms.acquire('bench') })) }
  const workerOpts = { heartbeatMs: 60_000, dropGraceMs: 60_000, concurrency: 1, queue: 4, queueTimeoutMs: 60_000, budgets: UNCUT }
  const worker = o.http ? await startWorker({ storage: new LocalStorage(root), ...workerOpts }) : undefined
  // A worker as `serve` runs one: its cache holds the chunk's local form (built before timing, kept beside the dataset).
  const formsStorage = o.http
    ? new ArchiveStorage({ roots: [root], cache: new ChunkCache({ root: `${root}-forms-http`, label: 'bench-forms', localForms: true, formsAfterReads: 0 }) })
    : undefined
  const formsWorker = formsStorage ? await startWorker({ storage: formsStorage, ...workerOpts }) : undefined
  if (formsStorage) await until(() => formsStorage.hasLocalForm(name, view.chunks[0]), 10 * 60_000, "the worker's local form")
  const engine = (query: unknown, budgets: QueryBudgets = UNCUT, v: DatasetView = view) => readAnswer(v, query, budgets)
  const overHttp = async (query: unknown, url = worker!.url) => {
    const res = await fetch(`${url}/datasets/${name}/query`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'accept-encoding': 'identity' }, body: JSON.stringify(query),
    })
    const text = await res.text()
    if (!res.ok) throw new Error(`worker answered ${res.status}: ${text.slice(0, 300)}`)
    return text.length
  }
  console.log(`machine: ${machine()}`)
  console.log(`one chunk, ${meta.blockCount} blocks; DuckDB threads 1; ${o.runs} interleaved runs, medians in ms`)
  console.log(`local form: ${(forms.bytes / 1e6).toFixed(1)} MB (${buildMs > 100 ? `built in ${buildMs.toFixed(0)} ms` : 'built earlier'})`)
  try {
    const rows: string[][] = []
    for (const shape of o.shape?.length ? o.shape.map(shapeByName) : SHAPES) {
      const query = shape.query(meta.first, meta.last)
      const engineBytes = await engine(query)
      const sqlJsonBytes = await runJson(con, shape, range)
      if ((await engine(query, UNCUT, local)) !== engineBytes) throw new Error(`${shape.name}: the local form gives another answer size`)
      const variants = [() => engine(query), () => engine(query, UNCUT, local), () => runRows(con, shape, range), () => runJson(con, shape, range)]
      if (worker && formsWorker) variants.push(() => overHttp(query), () => overHttp(query, formsWorker.url))
      const [e, l, r, j, h, hl] = await timeInterleaved(variants, o.runs, 2)
      const best = Math.min(r.median, j.median)
      if (shape.name === 'logs+tx') {
        reportTarget({ n: 1, measure: 'USDC logs + their transactions, one 200-block chunk, in process', now: `${ms(l.median)} ms (local form)`, value: l.median,
          baseline: `${ms(e.median)} ms (Parquet)`, baselineValue: e.median, goal: '≤ 10 ms', atMost: 10 })
        if (h && hl) {
          reportTarget({ n: 1, measure: 'the same over HTTP: a worker as `serve` runs one, one query at a time', now: `${ms(hl.median)} ms (local form)`, value: hl.median,
            baseline: `${ms(h.median)} ms (Parquet)`, baselineValue: h.median, goal: '≤ 15 ms', atMost: 15 })
        }
      }
      rows.push([
        shape.name, mb(engineBytes), mb(sqlJsonBytes), ms(e.median), ms(l.median), `${(e.median / l.median).toFixed(2)}×`, ms(r.median), ms(j.median),
        `${(e.median / best).toFixed(2)}×${e.median / best <= 1.5 ? '' : ' ✗'}`, `${(l.median / best).toFixed(2)}×`,
        h ? ms(h.median) : '',
        hl ? ms(hl.median) : '',
      ])
    }
    printTable('engine latency vs bare SQL (over Parquet), one chunk; engine over Parquet and over the local form',
      ['shape', 'engine JSON MB', 'SQL JSON MB', 'engine (Parquet)', 'engine (local form)', 'Parquet / local', 'SQL → JS rows', 'SQL → JSON', 'engine / best SQL', 'local / best SQL', 'worker over HTTP (Parquet)', 'worker over HTTP (local form)'], rows)

    const out: string[][] = []
    for (const shape of [shapeByName('all tx+logs'), shapeByName('traces by callTo')]) {
      const query = shape.query(meta.first, meta.last)
      const objects = await responseObjects(con, shape, range)
      const bytes = await engine(query)
      const stringifyBytes = JSON.stringify(objects).length
      const [e, el, w, s] = await timeInterleaved([() => engine(query), () => engine(query, UNCUT, local), () => engine(query, WHOLE_CHUNK), () => {
        let n = 0
        for (const b of objects) n += JSON.stringify(b).length + 1
        return n
      }], o.runs, 1)
      const eRate = bytes / 1e6 / (e.median / 1000)
      const lRate = bytes / 1e6 / (el.median / 1000)
      const wRate = bytes / 1e6 / (w.median / 1000)
      const sRate = stringifyBytes / 1e6 / (s.median / 1000)
      const pct = (r: number) => `${((r / sRate) * 100).toFixed(0)} %`
      if (shape.name === 'all tx+logs') {
        reportTarget({ n: 2, measure: 'engine JSON rate with bounded memory, all tx+logs, % of JSON.stringify', now: `${pct(lRate)} (local form)`, value: (lRate / sRate) * 100,
          baseline: `${pct(eRate)} (Parquet)`, baselineValue: (eRate / sRate) * 100, goal: '≥ 150 %', atLeast: 150 })
      }
      out.push([shape.name, mb(bytes), `${eRate.toFixed(0)}`, `${lRate.toFixed(0)}`, `${wRate.toFixed(0)}`, `${sRate.toFixed(0)}`, pct(eRate), pct(lRate), pct(wRate)])
    }
    printTable('JSON output rate with bounded memory (16 MiB slices): engine over Parquet and over the local form vs JSON.stringify of the answer held as JS objects, one core',
      ['shape', 'JSON MB', 'engine MB/s (Parquet)', 'engine MB/s (local form)', 'engine MB/s (Parquet, one slice per chunk)', 'JSON.stringify MB/s', 'Parquet / stringify', 'local / stringify', 'one slice / stringify'], out)
  } finally {
    await forms.close()
    con.closeSync()
    await worker?.stop()
    await formsWorker?.stop()
  }
}
