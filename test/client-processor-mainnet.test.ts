import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ingestRecorded, loadRecordedChain, type RecordedChainName } from '../src/ingest/recorded.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { stallTolerant, tempDir } from './helpers/dataset.js'
import {
  ALL_FIELDS, blocksOf, clean, expectedHeader, expectedLogs, expectedTraces, expectedTransactions, runProcessor, TRANSFER, type SourceBlock,
} from './helpers/processor-expect.js'

/*
 * The real `@subsquid/evm-processor@1.27.3` against router + workers over recorded mainnet blocks
 * (Ethereum 1000000, 4369999, 18000000, 18500000 with receipts; 1000000 and 18500000 with their
 * recorded `trace_block`; Polygon 50000000; Arbitrum 150000000), ingested through the replay
 * server. These datasets are sparse (docs/protocol.md §3.5): the processor walks from 0 across the gaps.
 * What the handler got is compared field by field with the recorded RPC answers.
 */

function sources(chain: RecordedChainName, withTraces = false): SourceBlock[] {
  return loadRecordedChain(chain)
    .filter((r) => r.block && r.receipts && (!withTraces || r.traceBlock))
    .map((r) => ({ number: r.number, block: r.block, receipts: r.receipts!, parityTraces: withTraces ? r.traceBlock : undefined }))
}

describe('@subsquid/evm-processor over recorded mainnet blocks', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster

  before(async () => {
    tmp = await tempDir()
    await ingestRecorded(path.join(tmp.dir, 'ethereum'), 'ethereum')
    await ingestRecorded(path.join(tmp.dir, 'ethereum-traces'), 'ethereum-traces', { traces: 'trace_block' })
    await ingestRecorded(path.join(tmp.dir, 'polygon'), 'polygon', { chain: 'polygon' })
    await ingestRecorded(path.join(tmp.dir, 'arbitrum'), 'arbitrum', { chain: 'arbitrum' })
    cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 2, replication: 1, ...stallTolerant(200), budgets: { sizeBytes: 300_000 } })
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  for (const [dataset, chain, withTraces] of [
    ['ethereum', 'ethereum', false],
    ['ethereum-traces', 'ethereum', true],
    ['polygon', 'polygon', false],
    ['arbitrum', 'arbitrum', false],
  ] as const) {
    it(`${dataset}: every block, transaction, log${withTraces ? ', trace' : ''} with every selected field as recorded`, async () => {
      const source = sources(chain, withTraces)
      assert.ok(source.length > 0)
      const run = await runProcessor(tmp.dir, dataset, {
        gateway: cluster.datasets.get(dataset)!,
        from: 0,
        to: source.at(-1)!.number,
        includeAllBlocks: true,
        transactions: [{}],
        logs: [{}],
        ...(withTraces ? { traces: [{}] } : {}),
        fields: ALL_FIELDS,
      })
      assert.equal(run.code, 0, run.stderr)
      const blocks = blocksOf(run)
      assert.deepEqual(blocks.map((b) => b.header.height), source.map((r) => r.number))
      let items = 0
      for (const b of blocks) {
        const r = source.find((s) => s.number === b.header.height)!
        const where = `${dataset} block ${r.number}`
        assert.deepEqual(clean(b.header), clean(expectedHeader(r)), `${where} header`)
        assert.deepEqual(clean(b.transactions), clean(expectedTransactions(r)), `${where} transactions`)
        assert.deepEqual(clean(b.logs), clean(expectedLogs(r)), `${where} logs`)
        if (withTraces) assert.deepEqual(clean(b.traces), clean(expectedTraces(r)), `${where} traces`)
        items += b.transactions.length + b.logs.length + b.traces.length
      }
      // The comparison covered every recorded item (counted from the source, not from the server).
      const want = source.reduce((n, r) => n + r.block.transactions.length + expectedLogs(r).length + (withTraces ? r.parityTraces!.length : 0), 0)
      assert.ok(want > 0)
      assert.equal(items, want)
    })
  }

  it('ethereum: Transfer logs with their transactions on an open range, across the gaps', async () => {
    const source = sources('ethereum')
    const height = source.at(-1)!.number
    const run = await runProcessor(tmp.dir, 'open', {
      gateway: cluster.datasets.get('ethereum')!,
      from: 0,
      logs: [{ topic0: [TRANSFER], transaction: true }],
      fields: { log: { topics: true, address: true }, transaction: { hash: true } },
    }, height)
    const blocks = blocksOf(run)
    assert.equal(blocks.at(-1)?.header.height, height, run.stderr)
    const got: string[] = []
    const gotTx = new Set<string>()
    for (const b of blocks) {
      const r = source.find((s) => s.number === b.header.height)!
      for (const l of b.logs) {
        assert.equal(l._tx, l.transactionIndex, 'log not linked to its transaction')
        got.push(`${r.number}:${l.logIndex}`)
      }
      for (const tx of b.transactions) {
        assert.equal(tx.hash, r.block.transactions[tx.transactionIndex].hash.toLowerCase())
        gotTx.add(`${r.number}:${tx.transactionIndex}`)
      }
    }
    const want = source.flatMap((r) => expectedLogs(r).filter((l: any) => l.topics[0] === TRANSFER).map((l: any) => `${r.number}:${l.logIndex}`))
    const wantTx = new Set(source.flatMap((r) => expectedLogs(r).filter((l: any) => l.topics[0] === TRANSFER).map((l: any) => `${r.number}:${l.transactionIndex}`)))
    assert.ok(want.length > 100)
    assert.deepEqual(got.sort(), want.sort())
    assert.deepEqual([...gotTx].sort(), [...wantTx].sort())
  })
})
