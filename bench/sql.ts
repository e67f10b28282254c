import { configureDb, connect } from '../src/db.js'
import { benchChunk } from './lib/chunk.js'
import { mb, ms, timeInterleaved } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { SHAPES, shapeByName } from './lib/shapes.js'
import { runJson, runRows, type Range } from './lib/sql.js'

export interface SqlBenchOptions {
  runs: number
  threads: number
  shape?: string[]
}

/**
 * `bench sql`: the engine limit. Hand-written DuckDB SQL for each query shape on one ~200-block
 * chunk, values read into JS rows, and (second column) with the JSON built inside DuckDB.
 */
export async function runSql(o: SqlBenchOptions): Promise<void> {
  configureDb({ threads: o.threads })
  const { dir, meta } = await benchChunk()
  const range: Range = { dir, from: meta.first, to: meta.last }
  const con = await connect()
  const shapes = o.shape?.length ? o.shape.map(shapeByName) : SHAPES
  console.log(`machine: ${machine()}`)
  console.log(`chunk ${dir}: ${meta.blockCount} blocks, ${Object.entries(meta.rows).map(([t, n]) => `${n} ${t}`).join(', ')}`)
  console.log(`DuckDB threads: ${o.threads}; ${o.runs} interleaved runs per variant, median (p10–p90)`)
  const rows: string[][] = []
  for (const shape of shapes) {
    const items = await runRows(con, shape, range)
    const jsonBytes = await runJson(con, shape, range)
    const [r, j] = await timeInterleaved([() => runRows(con, shape, range), () => runJson(con, shape, range)], o.runs, 2)
    rows.push([shape.name, String(items), mb(jsonBytes), `${ms(r.median)} (${ms(r.p10)}–${ms(r.p90)})`, `${ms(j.median)} (${ms(j.p10)}–${ms(j.p90)})`])
  }
  con.closeSync()
  printTable('bare DuckDB SQL per query shape, one chunk (ms)', ['shape', 'rows', 'JSON MB', 'SQL → JS rows', 'SQL → JSON in DuckDB'], rows)
}
