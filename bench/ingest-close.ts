import { mkdir, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { loadTemplates } from '../src/bench-data/templates.js'
import { templateFor, tileBlock } from '../src/bench-data/tile.js'
import { parquetOptions, sortOrder } from '../src/chunks/writer.js'
import { duckdbApi, lit } from '../src/db.js'
import { evmFamily } from '../src/families/evm.js'
import { spoolQueriesOver } from '../src/ingest/evm/sql-normalize.js'
import { benchRoot } from './lib/dataset.js'
import { cpuClock, timeInterleaved } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'

const { DuckDBInstance } = duckdbApi()

/*
 * `bench ingest --close-blocks N`: where the CPU of the spooled path's chunk close goes (the
 * statements that turn a chunk's spooled RPC answers into its blocks, transactions and logs
 * files, src/ingest/evm/sql-normalize.ts). N distinct tiled blocks are written as a spool (NDJSON
 * answers in files of 20 blocks, as the fetch workers write them), then per table, on one DuckDB
 * thread (the ingest's default on 2 cores), the best of `RUNS` of: the statement the ingest runs
 * (read, normalise, sort, write zstd Parquet); the normalised rows into a temp table; those rows
 * sorted and written; and written unsorted. CPU of the process, which holds DuckDB's thread.
 */

const RUNS = 3
const FILE_BLOCKS = 20

/** CPU ms per block of the close's statements, per table and for all three (the statement the ingest runs, then its parts). */
export interface CloseCost {
  table: string
  whole: number
  normalise: number
  sort: number
  write: number
}

export async function closeStages(blocks: number): Promise<CloseCost[]> {
  const dir = path.join(benchRoot(), `ingest-close-${process.pid}`)
  await rm(dir, { recursive: true, force: true })
  await mkdir(dir, { recursive: true })
  const db = await DuckDBInstance.create(':memory:', { threads: '1' })
  const con = await db.connect()
  try {
    const templates = loadTemplates()
    const blockFiles: string[] = []
    const receiptFiles: string[] = []
    for (let first = 0; first < blocks; first += FILE_BLOCKS) {
      const b: string[] = []
      const r: string[] = []
      for (let n = first; n < Math.min(blocks, first + FILE_BLOCKS); n++) {
        const t = tileBlock(templateFor(n, templates), n, { seed: 'bench-ingest-close' })
        b.push(JSON.stringify({ jsonrpc: '2.0', id: n, result: t.block }))
        r.push(JSON.stringify({ jsonrpc: '2.0', id: n, result: t.receipts }))
      }
      blockFiles.push(path.join(dir, `blocks-${first}.ndjson`))
      receiptFiles.push(path.join(dir, `receipts-${first}.ndjson`))
      await writeFile(blockFiles.at(-1)!, b.join('\n') + '\n')
      await writeFile(receiptFiles.at(-1)!, r.join('\n') + '\n')
    }
    const queries = await spoolQueriesOver({ blockFiles, receiptFiles, first: 0, last: blocks - 1, checked: false })
    /** CPU ms of the statement's fastest of RUNS runs. */
    const best = async (sql: string) => (await timeInterleaved([() => con.run(sql)], RUNS, 0, cpuClock))[0].min
    const costs: CloseCost[] = []
    const total = { whole: 0, normalise: 0, sortWrite: 0, write: 0 }
    for (const name of ['blocks', 'transactions', 'logs'] as const) {
      const table = evmFamily.tables.find((t) => t.name === name)!
      const out = lit(path.join(dir, `${name}.parquet`))
      const options = parquetOptions(evmFamily, table)
      const whole = await best(`COPY (SELECT * FROM (${queries[name]}) ORDER BY ${sortOrder(table)}) TO ${out} ${options}`)
      const normalise = await best(`CREATE OR REPLACE TEMP TABLE close_rows AS ${queries[name]}`)
      const sortWrite = await best(`COPY (SELECT * FROM close_rows ORDER BY ${sortOrder(table)}) TO ${out} ${options}`)
      const write = await best(`COPY (SELECT * FROM close_rows) TO ${out} ${options}`)
      Object.assign(total, { whole: total.whole + whole, normalise: total.normalise + normalise, sortWrite: total.sortWrite + sortWrite, write: total.write + write })
      costs.push({ table: name, whole: whole / blocks, normalise: normalise / blocks, sort: (sortWrite - write) / blocks, write: write / blocks })
    }
    costs.push({ table: 'all three', whole: total.whole / blocks, normalise: total.normalise / blocks, sort: (total.sortWrite - total.write) / blocks, write: total.write / blocks })
    console.log(`machine: ${machine()}`)
    const f = (ms: number) => ms.toFixed(2)
    printTable(`the spooled path's chunk close, ${blocks} distinct tiled blocks, DuckDB on 1 thread, CPU ms per block (best of ${RUNS})`,
      ['table', 'the statement the ingest runs', 'read + normalise (into a temp table)', 'sort', 'write zstd Parquet'],
      costs.map((c) => [c.table, f(c.whole), f(c.normalise), f(c.sort), f(c.write)]))
    return costs
  } finally {
    con.closeSync()
    await rm(dir, { recursive: true, force: true })
  }
}
