import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { stallTolerant, anvilRecords, tempDir, writeDataset, type AnvilRecord } from './helpers/dataset.js'
import {
  assertMatchesSource, fullSync, blocksOf, clean, expectedHeader, expectedLogs, runProcessor, TRANSFER,
} from './helpers/processor-expect.js'

/*
 * The real `@subsquid/evm-processor@1.27.3` (in a child process: it exits when done) against a router
 * and two workers over the recorded anvil chain. What its handler got is compared, field by field,
 * with the raw RPC answers the chunks were built from (receipts, parity traces, replay state diffs),
 * transformed the way the SDK documents (quantities → bigint, timestamp × 1000, defaults for nulls).
 */


describe('@subsquid/evm-processor against router + workers', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let cluster: Cluster
  let gateway: string

  before(async () => {
    tmp = await tempDir()
    records = await anvilRecords()
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    // A small size budget makes the processor walk the range in many steps, across both workers.
    cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 2, replication: 1, ...stallTolerant(200), budgets: { sizeBytes: 200_000 } })
    gateway = cluster.datasets.get('anvil')!
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('delivers every block, transaction, log, trace and state diff with every selected field as in the source', async () => {
    const run = await runProcessor(tmp.dir, 'full', fullSync(gateway, records))
    assert.equal(run.code, 0, run.stderr)
    assert.ok(run.batches.length > 1, 'expected several batches')
    assertMatchesSource(blocksOf(run), records)
  })

  it('honours filters and the transaction relation on an open range (no toBlock)', async () => {
    const height = records.at(-1)!.number
    const run = await runProcessor(tmp.dir, 'open', {
      gateway,
      from: 0,
      logs: [{ topic0: [TRANSFER], transaction: true }],
      traces: [{ type: ['create'], transaction: true }],
      fields: { log: { topics: true, address: true }, transaction: { hash: true, from: true }, trace: { createFrom: true } },
    }, height)
    const blocks = blocksOf(run)
    assert.ok(blocks.length > 0, run.stderr)
    assert.equal(blocks.at(-1).header.height, height)
    const heights = blocks.map((b) => b.header.height)
    assert.deepEqual(heights, [...new Set(heights)].sort((a, b) => a - b))
    const got = { logs: new Set<string>(), traces: new Set<string>(), txs: new Set<string>() }
    for (const b of blocks) {
      const r = records[b.header.height]
      for (const l of b.logs) {
        assert.equal(l.topics[0], TRANSFER)
        assert.equal(l._tx, l.transactionIndex, 'log not linked to its transaction')
        got.logs.add(`${r.number}:${l.logIndex}`)
      }
      for (const t of b.traces) {
        assert.equal(t.type, 'create')
        assert.equal(t._tx, t.transactionIndex, 'trace not linked to its transaction')
        assert.equal(t.action.from, r.parityTraces.find((p: any) => p.transactionPosition === t.transactionIndex && p.traceAddress.join() === t.traceAddress.join()).action.from.toLowerCase())
        got.traces.add(`${r.number}:${t.transactionIndex}:${t.traceAddress.join('.')}`)
      }
      for (const tx of b.transactions) {
        assert.equal(tx.hash, r.block.transactions[tx.transactionIndex].hash.toLowerCase())
        got.txs.add(`${r.number}:${tx.transactionIndex}`)
      }
    }
    const want = { logs: new Set<string>(), traces: new Set<string>(), txs: new Set<string>() }
    for (const r of records) {
      for (const l of expectedLogs(r)) {
        if (l.topics[0] !== TRANSFER) continue
        want.logs.add(`${r.number}:${l.logIndex}`)
        want.txs.add(`${r.number}:${l.transactionIndex}`)
      }
      for (const t of r.parityTraces) {
        if (t.type !== 'create') continue
        want.traces.add(`${r.number}:${t.transactionPosition}:${t.traceAddress.join('.')}`)
        want.txs.add(`${r.number}:${t.transactionPosition}`)
      }
    }
    assert.ok(want.logs.size > 0 && want.traces.size > 0)
    assert.deepEqual([...got.logs].sort(), [...want.logs].sort())
    assert.deepEqual([...got.traces].sort(), [...want.traces].sort())
    assert.deepEqual([...got.txs].sort(), [...want.txs].sort())
  })

  it('resumes from a stored height after checking its hash', async () => {
    const stored = records[60]
    const run = await runProcessor(tmp.dir, 'resume', {
      gateway,
      from: 0,
      to: 100,
      resume: { height: stored.number, hash: stored.block.hash },
      includeAllBlocks: true,
      fields: { block: { timestamp: true } },
    })
    assert.equal(run.code, 0, run.stderr)
    const blocks = blocksOf(run)
    assert.deepEqual(blocks.map((b) => b.header.height), records.slice(61, 101).map((r) => r.number))
    for (const b of blocks) {
      const { height, hash, parentHash, timestamp } = expectedHeader(records[b.header.height])
      assert.deepEqual(clean(b.header), { height, hash, parentHash, timestamp })
    }
  })

  it('refuses to resume when the stored hash is not on the chain', async () => {
    const run = await runProcessor(tmp.dir, 'fork', {
      gateway,
      from: 0,
      to: 100,
      resume: { height: 60, hash: records[61].block.hash },
      includeAllBlocks: true,
      fields: { block: { timestamp: true } },
    })
    assert.notEqual(run.code, 0)
    assert.equal(blocksOf(run).length, 0)
  })
})
