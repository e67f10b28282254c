import { configureDb, connect } from '../src/db.js'
import { benchChunk } from './lib/chunk.js'
import { mb, ms, timeInterleaved } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'
import { responseObjects, runJson, type Range } from './lib/sql.js'

export interface StringifyBenchOptions {
  runs: number
  shape: string[]
}

/**
 * `bench stringify`: how fast one core turns a response (already as JS objects) into JSON text with
 * JSON.stringify — the baseline the worker's output rate is compared with — next to how fast one
 * DuckDB thread builds the same JSON from the Parquet files.
 */
export async function runStringify(o: StringifyBenchOptions): Promise<void> {
  configureDb({ threads: 1 })
  const { dir, meta } = await benchChunk()
  const range: Range = { dir, from: meta.first, to: meta.last }
  const con = await connect()
  console.log(`machine: ${machine()}`)
  console.log(`response objects of each shape on one ${meta.blockCount}-block chunk; ${o.runs} interleaved runs, median`)
  const rows: string[][] = []
  for (const name of o.shape) {
    const shape = shapeByName(name)
    const blocks = await responseObjects(con, shape, range)
    const bytes = JSON.stringify(blocks).length
    const [whole, perBlock, duck] = await timeInterleaved([
      () => JSON.stringify(blocks),
      () => {
        let n = 0
        for (const b of blocks) n += JSON.stringify(b).length + 1
        return n
      },
      () => runJson(con, shape, range),
    ], o.runs, 1)
    const mbps = (t: number) => (bytes / 1e6 / (t / 1000)).toFixed(0)
    rows.push([
      shape.name, String(blocks.length), mb(bytes),
      `${ms(whole.median)} ms = ${mbps(whole.median)} MB/s`,
      `${ms(perBlock.median)} ms = ${mbps(perBlock.median)} MB/s`,
      `${ms(duck.median)} ms = ${mbps(duck.median)} MB/s`,
    ])
  }
  con.closeSync()
  printTable('JSON output rate, one core', ['shape', 'blocks', 'JSON MB', 'JSON.stringify(all)', 'JSON.stringify per block', 'DuckDB SQL → JSON (incl. reading Parquet)'], rows)
}
