// Side by side: the query engine of several builds (their dist folders), interleaved, in one process,
// each with its own DuckDB instance (1 thread). Not part of `npm run bench` (plain JS, run from the source tree):
//   node bench/ab.mjs chunk|range <label>=<dist folder>... -- <shape>...
// chunk: the one-chunk dataset, whole chunk, no budgets; range: the 2,000-block dataset (ROOT=…) at the default budgets.
import os from 'node:os'
import path from 'node:path'
const args = process.argv.slice(2)
const mode = args.shift()
const sep = args.indexOf('--')
const builds = args.slice(0, sep).map((a) => a.split('='))
const shapes = args.slice(sep + 1)
const runs = Number(process.env.RUNS ?? 5)
const engines = []
for (const [label, dist] of builds) {
  const D = path.resolve(dist)
  const { configureDb } = await import(D + '/src/db.js')
  configureDb({ threads: 1 })
  const { evmFamily } = await import(D + '/src/families/evm.js')
  const { prepareQuery, DEFAULT_BUDGETS } = await import(D + '/src/query/engine.js')
  const { listLocalChunks } = await import(D + '/src/chunks/layout.js')
  engines.push({ label, evmFamily, prepareQuery, DEFAULT_BUDGETS, listLocalChunks })
}
const here = path.dirname(new URL(import.meta.url).pathname)
const { shapeByName } = await import(path.join(here, '../dist/bench/lib/shapes.js'))
const benchDir = process.env.BENCH_DIR ?? path.join(os.tmpdir(), 'block-archive-bench')
const root = mode === 'chunk' ? path.join(benchDir, 'synthetic-200-200') : (process.env.ROOT ?? path.join(benchDir, 'synthetic-2000-200'))
const UNCUT = { sizeBytes: 2 ** 40, timeMs: 1e9 }
async function once(e, shape) {
  const refs = await e.listLocalChunks(root)
  let prev = -1
  const chunks = refs.map((r) => { const c = { ...r, coverFrom: prev + 1, dir: path.join(root, r.path) }; prev = r.last; return c })
  const view = { name: 'x', family: e.evmFamily, chunks, height: prev }
  let from = 0, bytes = 0, answers = 0
  while (from <= prev) {
    const s = await e.prepareQuery(view, shape.query(from, prev), mode === 'chunk' ? UNCUT : e.DEFAULT_BUDGETS)
    for await (const p of s.body) bytes += p.length
    answers++
    from = s.stats.lastBlock + 1
  }
  return { bytes, answers, blocks: prev + 1 }
}
const rows = []
for (const name of shapes) {
  const shape = shapeByName(name)
  const t = engines.map(() => [])
  let info
  for (const e of engines) info = await once(e, shape)
  for (let i = 0; i < runs; i++) {
    const order = engines.map((_, j) => j); if (i % 2) order.reverse()
    for (const j of order) { const t0 = performance.now(); await once(engines[j], shape); t[j].push(performance.now() - t0) }
  }
  const med = t.map((x) => x.sort((a, b) => a - b)[Math.floor(x.length / 2)])
  rows.push(`| ${name} | ${info.answers} | ${(info.bytes / 1e6).toFixed(1)} | ` + med.map((m) => m.toFixed(1)).join(' | ') + ' | ' +
    med.slice(1).map((m) => (med[0] / m).toFixed(2) + '×').join(' | ') + ` | ${med.map((m) => Math.round(info.blocks / m * 1000).toLocaleString('en-US')).join(' / ')} |`)
}
console.log(`${mode} (${root}), ${runs} interleaved runs, median ms; speed-up = ${builds[0][0]} / other`)
console.log(`| shape | answers | JSON MB | ${builds.map((b) => b[0]).join(' | ')} | ${builds.slice(1).map((b) => 'speed-up ' + b[0]).join(' | ')} | blocks/s |`)
console.log(rows.join('\n'))
