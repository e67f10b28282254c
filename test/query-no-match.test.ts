import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { duckdbApi } from '../src/db.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'

const { DuckDBConnection, DuckDBInstance } = duckdbApi()

/*
 * A query that no chunk can match (docs/protocol.md §3.7): the chunk summaries rule every chunk
 * out, and the answer is the range's first and last block only. Once a worker has seen the chunks,
 * such an answer runs no DuckDB statement and opens no connection at all (boundary headers are kept in memory per header
 * field selection, src/query/header-cache.ts), and still gives the headers the query asks for.
 * Data: 64 recorded anvil blocks, 16 per chunk.
 */

const NO_SUCH_ADDRESS = '0x' + '00'.repeat(19) + '01'

/**
 * Counts the DuckDB statements, and the connections opened, of this process (the worker runs in
 * it) while `body` runs.
 */
async function countStatements(body: () => Promise<void>): Promise<number> {
  const counted: [Record<string, (...a: unknown[]) => unknown>, string[]][] = [
    [DuckDBConnection.prototype as unknown as Record<string, (...a: unknown[]) => unknown>, ['run', 'stream', 'runAndReadAll', 'streamAndReadAll', 'prepare']],
    [DuckDBInstance.prototype as unknown as Record<string, (...a: unknown[]) => unknown>, ['connect']],
  ]
  const originals = counted.map(([proto, names]) => names.map((n) => proto[n]))
  let count = 0
  counted.forEach(([proto, names], j) => names.forEach((n, i) => {
    proto[n] = function (this: unknown, ...a: unknown[]) {
      count++
      return originals[j][i].apply(this, a)
    }
  }))
  try {
    await body()
  } finally {
    counted.forEach(([proto, names], j) => names.forEach((n, i) => (proto[n] = originals[j][i])))
  }
  return count
}

describe('a query no chunk can match', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let worker: WorkerServer

  before(async () => {
    tmp = await tempDir('ba-no-match-')
    const data = path.join(tmp.dir, 'anvil')
    await writeDataset(data, 'anvil', (await anvilRecords()).slice(0, 64), 16)
    worker = new WorkerServer({
      storage: new LocalStorage(data), heartbeatMs: 60_000, dropGraceMs: 60_000, concurrency: 2, queue: 8, queueTimeoutMs: 10_000,
      budgets: { sizeBytes: 1 << 30, timeMs: 60_000 },
    })
    await worker.start('127.0.0.1', 0)
  })

  after(async () => {
    await worker?.stop()
    await tmp?.cleanup()
  })

  const ask = async (q: unknown) => {
    const res = await postJson(`${worker.url}/datasets/anvil/query`, q)
    assert.equal(res.status, 200, res.text.slice(0, 300))
    return JSON.parse(res.text) as { header: Record<string, unknown>; logs?: unknown[] }[]
  }

  it('answers the range boundaries with the header fields asked for, and runs no statement (opens no connection) once warm', async () => {
    const selections = [
      { number: true, hash: true },
      { timestamp: true, miner: true, gasUsed: true },
      { parentHash: true, stateRoot: true },
    ]
    for (const [fromBlock, toBlock] of [[3, 50], [0, 63], [16, 31], [40, 40]]) {
      for (const block of selections) {
        const fields = { block, log: { address: true } }
        // The same headers as read by a query that cannot be ruled out.
        const all = await ask({ fromBlock, toBlock, includeAllBlocks: true, fields: { block } })
        const expected = [...new Set([all[0], all[all.length - 1]])].map((b) => ({ header: b.header, logs: [] }))
        const q = { fromBlock, toBlock, logs: [{ address: [NO_SUCH_ADDRESS] }], fields }
        assert.deepEqual(await ask(q), expected, `blocks ${fromBlock}–${toBlock}, fields ${Object.keys(block)}`)
        let again: unknown
        const statements = await countStatements(async () => {
          again = await ask(q)
        })
        assert.deepEqual(again, expected)
        assert.equal(statements, 0, `a warm no-match answer over blocks ${fromBlock}–${toBlock} ran ${statements} statements or connections`)
      }
    }
  })
})
