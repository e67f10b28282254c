import { chunkTableNames } from '../src/chunks/layout.js'
import { configureDb, connect } from '../src/db.js'
import { blockOrders } from '../src/families/declaration.js'
import { evmFamily } from '../src/families/evm.js'
import type { DatasetView } from '../src/query/types.js'
import { LocalForms } from '../src/storage/local-forms.js'
import { readAnswer } from './lib/answer.js'
import { benchChunk } from './lib/chunk.js'
import { timeInterleaved } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'
import { watchStatements } from './lib/statements.js'

export interface FloorsOptions {
  runs: number
  /** Blocks of the ingest close timed (0: leave the ingest out). */
  closeBlocks: number
}

/** Target 3: 400,000 items/s with the client, the router and both workers on these 2 cores. */
const SYNC_ITEMS_PER_S = 400_000
const SYNC_CORES = 2
const INGEST_MS_PER_BLOCK = 5
const LOGS_TX_MS = 10
const JSON_RATE = 1.5

/**
 * `bench floors`: for each speed target, a part of the work that no change to our code removes,
 * measured alone in the same run as the whole, so that the target's budget can be compared with it.
 * On one chunk's local form, DuckDB on one thread:
 * - the engine's whole answer (as `bench worker` times it);
 * - the engine's DuckDB statements alone: the same SQL run again, results fetched as DuckDB chunks,
 *   nothing read into JS;
 * - their columns alone: each statement with its JSON text expression replaced by the columns that
 *   expression reads, so DuckDB reads and hands over the values and builds no JSON;
 * - `JSON.stringify` of the answer's blocks held as JS objects (target 2's baseline) and
 *   `JSON.parse` of each block's text (what our client's `blocks()` does per block).
 * Then the ingest's chunk close (bench/ingest-close.ts): the three statements that turn spooled RPC
 * answers into Parquet, CPU ms per block.
 */
export async function runFloors(o: FloorsOptions): Promise<void> {
  configureDb({ threads: 1 })
  const { root, dir, meta } = await benchChunk()
  const forms = new LocalForms({ file: `${root}-forms/local-forms.duckdb`, label: 'bench' })
  if (!(await forms.build('bench', dir, await chunkTableNames(dir), blockOrders(evmFamily)))) throw new Error('could not build the local form')
  const view: DatasetView = {
    name: 'bench',
    family: evmFamily,
    chunks: [{ top: 0, first: meta.first, last: meta.last, hash: '', path: '', coverFrom: 0, dir, local: forms.acquire('bench') }],
    height: meta.last,
  }
  const con = await connect()
  const statements: string[] = []
  watchStatements((s) => statements.push(s.sql))
  console.log(`machine: ${machine()}`)
  const rows: string[][] = []
  const floors: string[][] = []
  try {
    for (const name of ['logs+tx', 'all tx+logs']) {
      const query = shapeByName(name).query(meta.first, meta.last)
      const parts: Buffer[] = []
      // Warm: the first answer over a chunk also reads its statistics (then cached); not part of the floor.
      await readAnswer(view, query)
      statements.length = 0
      await readAnswer(view, query, undefined, (p) => parts.push(Buffer.from(p)))
      const sqls = statements.filter((s) => /^\s*(SELECT|WITH)\b/i.test(s))
      const columns = sqls.map(columnsOnly)
      const text = Buffer.concat(parts).toString()
      const blocks = JSON.parse(text) as Record<string, unknown>[]
      const blockTexts = blocks.map((b) => JSON.stringify(b))
      const items = blocks.reduce((n, b) => n + ((b.transactions as unknown[] | undefined)?.length ?? 0) + ((b.logs as unknown[] | undefined)?.length ?? 0), 0)
      const runAll = async (list: string[]) => {
        let rows = 0
        for (const sql of list) {
          const result = await con.stream(sql)
          for (let c = await result.fetchChunk(); c && c.rowCount > 0; c = await result.fetchChunk()) rows += c.rowCount
        }
        return rows
      }
      const [sqlRows, columnRows] = [await runAll(sqls), await runAll(columns)]
      if (sqlRows !== columnRows) throw new Error(`${name}: the columns-only statements gave ${columnRows} rows, the engine's ${sqlRows}`)
      const [e, s, c, j, p] = await timeInterleaved([
        () => readAnswer(view, query),
        () => runAll(sqls),
        () => runAll(columns),
        () => blocks.reduce((n, b) => n + JSON.stringify(b).length, 0),
        () => blockTexts.reduce((n, t) => n + (JSON.parse(t) ? 1 : 0), 0),
      ], name === 'all tx+logs' ? Math.min(o.runs, 9) : o.runs, 2)
      const mb = text.length / 1e6
      const ms = (x: number) => x.toFixed(1)
      const us = (x: number) => ((x * 1000) / items).toFixed(2)
      rows.push([name, mb.toFixed(2), String(items), String(sqls.length), ms(e.median), ms(s.median), ms(c.median), ms(j.median), ms(p.median), us(p.median)])
      // DuckDB reading the answer's rows: the cheaper of the statements as they are and of their columns alone.
      const read = Math.min(s.median, c.median)
      const readWhat = "DuckDB reading the answer's rows (the cheaper of the two columns above)"
      if (name === 'logs+tx') {
        floors.push(['1: logs+tx over one chunk, in process', `${LOGS_TX_MS} ms`, `${ms(read)} ms`, readWhat, ms(LOGS_TX_MS - read) + ' ms', `${ms(e.median)} ms`])
      } else {
        // The answer at 150 % of JSON.stringify's rate over the same bytes.
        const budget = j.median / JSON_RATE
        floors.push(['2: JSON rate ≥ 150 % of JSON.stringify, all tx+logs', `${ms(budget)} ms for ${mb.toFixed(1)} MB`, `${ms(read)} ms`,
          readWhat, `${ms(budget - read)} ms`, `${ms(e.median)} ms (${((j.median / e.median) * 100).toFixed(0)} %)`])
        const perItem = (SYNC_CORES * 1e6) / SYNC_ITEMS_PER_S
        const floor = ((p.median + read) * 1000) / items
        floors.push(['3: full sync ≥ 400,000 items/s, client + router + 2 workers on 2 cores', `${perItem.toFixed(2)} CPU µs per item`, `${floor.toFixed(2)} µs`,
          "the client's JSON.parse per block + the workers' DuckDB reads", `${(perItem - floor).toFixed(2)} µs`, ''])
      }
    }
  } finally {
    con.closeSync()
    await forms.close()
  }
  printTable('one 200-block chunk, local form, DuckDB on 1 thread: the whole answer and its parts alone (medians, ms)',
    ['shape', 'answer MB', 'items', 'statements', 'engine, whole answer', 'its statements alone', 'their columns alone, no JSON', 'JSON.stringify per block', 'JSON.parse per block', 'JSON.parse µs per item'], rows)
  if (o.closeBlocks > 0) {
    const costs = await (await import('./ingest-close.js')).closeStages(o.closeBlocks)
    const all = costs.find((c) => c.table === 'all three')!
    floors.push(['5: ingest ≤ 5 CPU ms per block', `${INGEST_MS_PER_BLOCK} ms`, `${all.whole.toFixed(2)} ms`, "DuckDB's chunk close alone (read_json, normalise, sort, zstd Parquet)",
      `${(INGEST_MS_PER_BLOCK - all.whole).toFixed(2)} ms`, ''])
  }
  printTable('each target\'s budget against a floor measured in this run (a negative "left" means the floor alone misses the target)',
    ['target', 'budget', 'floor', 'what the floor is', 'left for the rest', 'whole, this run'], floors)
}

/**
 * A statement with each `<JSON text> AS j` part of a UNION ALL replaced by the columns the JSON
 * text reads (`src."…"`), each part's under names of its own, joined `BY NAME` (so a part has NULL
 * in the others' columns): the same rows, the values without their JSON. Statements of another
 * form (the keys and sizes) are kept as they are.
 */
export function columnsOnly(sql: string): string {
  const parts = sql.split(' UNION ALL ').map((part, k) => {
    const m = /^SELECT (.*) AS j (FROM .*)$/s.exec(part)
    if (!m) return undefined
    const cols = [...new Set([...m[1].matchAll(/src\."([^"]+)"/g)].map((x) => x[1]))]
    return `SELECT src.rowid AS "${k}.rowid", ${cols.map((c) => `src."${c}" AS "${k}.${c}"`).join(', ')} ${m[2]}`
  })
  return parts.every((p) => p !== undefined) ? parts.join(' UNION ALL BY NAME ') : sql
}
