import assert from 'node:assert/strict'
import { mkdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, it } from 'node:test'
import { ndjsonObjectBound } from '../src/chunks/ndjson-bound.js'
import { connect } from '../src/db.js'
import { EvmSpoolWriter } from '../src/ingest/evm/spool-write.js'
import { anvilRecords, freshFolders } from './helpers/dataset.js'

/*
 * The spooled path reads the spool with `read_json`'s `maximum_object_size` bounded by the files'
 * sizes (src/chunks/ndjson-bound.ts) instead of a fixed 1 GiB: an answer longer than DuckDB's default
 * bound must still be read whole. A recorded anvil block whose first transaction's calldata is made
 * 40 MiB long goes through the chunk close's SQL (EvmSpoolWriter, sql-normalize.ts); with a bound of
 * 16 MiB DuckDB refuses it (it reads lines up to its 32 MiB buffer whatever a smaller bound says).
 */

const MIB = 1024 * 1024

describe('read_json bounded by the spool files', () => {
  const folder = freshFolders('ba-ndjson-bound-')

  it('is the largest file\'s size, at least DuckDB\'s default of 16 MiB', async () => {
    const dir = folder()
    await mkdir(dir)
    const small = path.join(dir, 'small.ndjson')
    const big = path.join(dir, 'big.ndjson')
    await writeFile(small, '{"id":1}\n')
    await writeFile(big, `{"id":2,"x":"${'a'.repeat(20 * MIB)}"}\n`)
    assert.equal(await ndjsonObjectBound([small]), 16 * MIB)
    assert.equal(await ndjsonObjectBound([small, big]), 20 * MIB + 16)
  })

  it('an answer of 40 MiB is read whole at the chunk close; DuckDB\'s default bound refuses it', async () => {
    const record = (await anvilRecords()).find((r) => r.block.transactions.length > 0)!
    const block = structuredClone(record.block)
    const input = `0x${'ab'.repeat(20 * MIB)}`
    block.transactions[0].input = input
    const n = parseInt(block.number, 16)
    const dir = folder()
    await mkdir(dir)
    const files = { blocks: path.join(dir, 'spool.blocks.ndjson'), receipts: path.join(dir, 'spool.receipts.ndjson') }
    await writeFile(files.blocks, JSON.stringify({ jsonrpc: '2.0', id: n, result: block }) + '\n')
    await writeFile(files.receipts, JSON.stringify({ jsonrpc: '2.0', id: n, result: record.receipts }) + '\n')

    const con = await connect()
    try {
      const queries = await new EvmSpoolWriter(() => 'eth_getBlockReceipts').prepare(con, [files], n, n, 'bound', false)
      const rows = (await con.runAndReadAll(`SELECT transaction_index, length(input) FROM (${queries.transactions}) ORDER BY 1`)).getRows()
      assert.equal(rows.length, block.transactions.length)
      assert.equal(Number(rows[0][1]), input.length)
      // The same statement with DuckDB's default bound: the answer does not fit.
      const capped = queries.transactions.replace(/maximum_object_size = \d+/g, `maximum_object_size = ${16 * MIB}`)
      await assert.rejects(con.runAndReadAll(`SELECT count(*) FROM (${capped})`), /maximum_object_size|maximum object size/i)
    } finally {
      con.closeSync()
    }
  })
})
