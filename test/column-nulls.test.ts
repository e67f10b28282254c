import assert from 'node:assert/strict'
import { cp, readFile, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { DuckDBConnection } from '@duckdb/node-api'
import { connect, lit } from '../src/db.js'
import { footerNulls } from '../src/chunks/chunk-nulls.js'
import { chunkTableNames, listLocalChunks, readChunkMeta, readDatasetMeta } from '../src/chunks/layout.js'
import { familyByName } from '../src/families/index.js'
import { columnNulls } from '../src/query/column-nulls.js'
import { itemJsonSql } from '../src/query/sql.js'
import { tempDir } from './helpers/dataset.js'
import { familyDatasets } from './helpers/family-datasets.js'

/*
 * A row's JSON text built with what a chunk's Parquet statistics say of its columns' NULLs
 * (src/query/column-nulls.ts, `itemJsonSql`) is byte for byte the text built without: every item
 * and header of real recorded EVM, Starknet and Moonbeam chunks, every field selected. And the
 * statistics are read as they are (a column with NULLs in some rows, none, or every row), written
 * into meta.json by the ingest, and read from the footers for a chunk without them.
 */

/** The connection, counting the statements `columnNulls` runs (`ran`). */
function countingStatements(con: DuckDBConnection) {
  const counting = {
    ran: 0,
    runAndReadAll: (...a: Parameters<DuckDBConnection['runAndReadAll']>) => (counting.ran++, con.runAndReadAll(...a)),
    run: con.run.bind(con),
    stream: con.stream.bind(con),
  }
  return counting
}

describe('row texts from the chunks\' NULL statistics', () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  const roots: string[] = []

  before(async () => {
    tmp = await tempDir('ba-column-nulls-')
    roots.push(...(await familyDatasets(tmp.dir)))
  })
  after(async () => tmp?.cleanup())

  it('the statistics of a recorded EVM chunk: some, none and all NULL, written into meta.json by the ingest', async () => {
    const con = await connect()
    try {
      const chunk = (await listLocalChunks(roots[0]))[0]
      const dir = path.join(roots[0], chunk.path)
      const file = lit(path.join(dir, 'transactions.parquet'))
      // Blocks 0–15 of the anvil chain deploy contracts (no `to`) and call them (a `to`).
      const [[withTo, rows, l1Fee]] = (await con.runAndReadAll(`SELECT count("to")::INTEGER, count(*)::INTEGER, count(l1_fee)::INTEGER FROM read_parquet(${file})`)).getRows() as number[][]
      assert.ok(withTo > 0 && withTo < rows, `${withTo} of ${rows} transactions with a recipient`)
      assert.equal(l1Fee, 0)
      const footers = (await footerNulls(con, dir, ['transactions'])).transactions
      assert.ok(!footers.none.includes('to') && !footers.all.includes('to'), 'to: some NULL')
      assert.ok(footers.none.includes('hash'))
      assert.ok(footers.all.includes('l1_fee'))
      assert.deepEqual((await readChunkMeta(roots[0], chunk)).nulls?.transactions, footers, 'meta.json holds what the footers say')
      // Read from meta.json: no statement; then kept.
      const counting = countingStatements(con)
      const nulls = (await columnNulls(counting, dir, ['transactions', 'blocks'])).get('transactions')!
      assert.equal(counting.ran, 0)
      assert.equal(nulls.get('to'), undefined)
      assert.equal(nulls.get('hash'), 'none')
      assert.equal(nulls.get('l1_fee'), 'all')
      assert.equal((await columnNulls(counting, dir, ['transactions'])).get('transactions'), nulls)
      assert.equal(counting.ran, 0)
    } finally {
      con.closeSync()
    }
  })

  it('a chunk written without them: read from its footers; a missing file: nothing known, asked again next time', async () => {
    const con = await connect()
    try {
      const src = (await listLocalChunks(roots[0]))[1]
      const dir = path.join(tmp.dir, 'copy')
      await cp(path.join(roots[0], src.path), dir, { recursive: true })
      const meta = JSON.parse(await readFile(path.join(dir, 'meta.json'), 'utf8'))
      const written = meta.nulls
      delete meta.nulls
      await writeFile(path.join(dir, 'meta.json'), JSON.stringify(meta))
      const counting = countingStatements(con)
      const blocks = (await columnNulls(counting, dir, ['blocks'])).get('blocks')!
      assert.equal(counting.ran, 1, 'one statement')
      assert.deepEqual([...blocks].sort(), [...written.blocks.none.map((c: string) => [c, 'none']), ...written.blocks.all.map((c: string) => [c, 'all'])].sort())
      await rm(path.join(dir, 'logs.parquet'))
      const first = await columnNulls(con, dir, ['logs', 'transactions'])
      assert.equal(first.get('logs')!.size, 0)
      assert.equal(first.get('transactions')!.size, 0)
      // Now one at a time: the transactions are read.
      assert.equal((await columnNulls(con, dir, ['transactions'])).get('transactions')!.get('hash'), 'none')
    } finally {
      con.closeSync()
    }
  })

  it('every item and header, every field: the same bytes as without the statistics', async () => {
    const con = await connect()
    try {
      let compared = 0
      let simpler = 0
      for (const root of roots) {
        const family = familyByName((await readDatasetMeta(root))!.family)
        for (const chunk of await listLocalChunks(root)) {
          const dir = path.join(root, chunk.path)
          const tables = await chunkTableNames(dir)
          const items = [family.header, ...family.items].filter((i) => tables.includes(i.table))
          const nulls = await columnNulls(con, dir, items.map((i) => i.table))
          for (const item of items) {
            const fields = Object.keys(item.fields)
            const known = nulls.get(item.table)!
            const plain = itemJsonSql(item, fields, 't', ',')
            const withNulls = itemJsonSql(item, fields, 't', ',', undefined, (c) => known.get(c) ?? 'some')
            if (withNulls.length < plain.length) simpler++
            const file = `read_parquet(${lit(path.join(dir, `${item.table}.parquet`))}) t`
            const rows = await con.runAndReadAll(`SELECT ${plain} = ${withNulls}, ${plain}, ${withNulls} FROM ${file}`)
            for (const [same, a, b] of rows.getRows()) {
              assert.equal(same, true, `${root} ${chunk.path} ${item.table}:\n${a}\n${b}`)
              compared++
            }
          }
        }
      }
      console.log(`# ${compared} rows compared, ${simpler} item texts simpler with the statistics`)
      assert.ok(compared > 1000 && simpler > 10, `${compared} rows, ${simpler} simpler texts`)
    } finally {
      con.closeSync()
    }
  })
})
