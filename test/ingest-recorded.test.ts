import assert from 'node:assert/strict'
import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, it } from 'node:test'
import { listLocalChunks, readChunkMeta } from '../src/chunks/layout.js'
import { evmFamily } from '../src/families/evm.js'
import { callTracerRows, parityTraceRows, prestateDiffRows, replayStateDiffRows } from '../src/ingest/evm/normalize.js'
import { BadRpcAnswer, EvmRpcSource } from '../src/ingest/evm/source.js'
import { ReorgError, runIngest } from '../src/ingest/loop.js'
import { ingestRecorded, loadRecordedChain, type RecordedChainName } from '../src/ingest/recorded.js'
import { ReplayServer, type RecordedBlock } from '../src/ingest/replay.js'
import { RpcClient, RpcUnavailable } from '../src/ingest/rpc.js'
import {
  assertHexColumns, canon, compareRows, expectCallTraces, expectParityTraces, expectPrestateDiffs, expectReplayDiffs, expectTables, readTable, type NodeBlock,
} from './helpers/ingest-expect.js'
import { freshFolders } from './helpers/dataset.js'

/*
 * Recorded mainnet (and odd-chain) node answers, served by the replay server, through the real
 * ingest; the chunk files are read back with DuckDB and compared field by field with the answers.
 */

const out = freshFolders('ba-ingest-rec-')

/** Node answers of the recorded blocks, receipts lined up with transactions as the node would give them one by one. */
function nodeBlocks(recorded: RecordedBlock[], numbers: number[], parts: { traces?: boolean; callTraces?: boolean } = {}): NodeBlock[] {
  return numbers.map((num) => {
    const r = recorded.find((x) => x.number === num)!
    const own = [...(r.receipts ?? []), ...(r.txReceipts ?? [])].filter((x) => x.blockHash === r.block.hash)
    const receipts = r.block.transactions.map((t: any) => own.find((x) => x.transactionHash === t.hash) ?? null)
    return { block: r.block, receipts, traces: parts.traces ? r.traceBlock : undefined, callTraces: parts.callTraces ? r.callTraces : undefined }
  })
}

async function compareDataset(dir: string, expected: NodeBlock[], tables = ['blocks', 'transactions', 'logs']): Promise<number> {
  const want: Record<string, any[]> = {}
  for (const b of expected) for (const [t, rows] of Object.entries(expectTables(b))) (want[t] ??= []).push(...rows)
  let values = 0
  for (const t of tables) values += compareRows(t, want[t] ?? [], await readTable(dir, t))
  // The engine writes `hex` fields between quotes without escaping: the ingest must have checked them.
  assert.ok((await assertHexColumns(dir, evmFamily, tables)) > 0)
  return values
}

describe('recorded mainnet blocks round-trip field by field', () => {
  const eth = loadRecordedChain('ethereum')

  it('Ethereum 1000000, 4369999, 18000000, 18500000: blocks, transactions, receipts and logs', async () => {
    const dir = out()
    const r = await ingestRecorded(dir, 'ethereum-mainnet')
    assert.equal(r.blocks, 4)
    assert.deepEqual(JSON.parse(await readFile(path.join(dir, 'dataset.json'), 'utf8')), { name: 'ethereum-mainnet', family: 'evm' })
    const chunks = await listLocalChunks(dir)
    assert.deepEqual(chunks.map((c) => c.path), ['0001000000/0001000000-0018500000-80ce6bb0'])
    const meta = await readChunkMeta(dir, chunks[0])
    assert.deepEqual(meta.tables, ['blocks', 'transactions', 'logs'])
    assert.equal(meta.blockCount, 4)
    const files = (await readdir(path.join(dir, chunks[0].path))).sort()
    assert.deepEqual(files, ['blocks.parquet', 'logs.parquet', 'meta.json', 'transactions.parquet'])
    const values = await compareDataset(dir, nodeBlocks(eth, [1000000, 4369999, 18000000, 18500000]))
    assert.ok(values > 20_000, `compared ${values} values`)
    // a second run finds everything in place and fetches nothing
    const again = await ingestRecorded(dir, 'ethereum-mainnet')
    assert.equal(again.blocks, 0)
    assert.equal((await listLocalChunks(dir)).length, 1)
  })

  it('Ethereum 1000000 and 18500000 with trace_block, 1000000 with callTracer (same block, both formats)', async () => {
    const parity = out()
    const r = await ingestRecorded(parity, 'eth-traces', { traces: 'trace_block' })
    assert.equal(r.blocks, 2)
    assert.equal(r.rows.traces, 4 + 876)
    const [c] = await listLocalChunks(parity)
    assert.deepEqual((await readChunkMeta(parity, c)).tables, ['blocks', 'transactions', 'logs', 'traces'])
    await compareDataset(parity, nodeBlocks(eth, [1000000, 18500000], { traces: true }), ['blocks', 'transactions', 'logs', 'traces'])

    const geth = out()
    await ingestRecorded(geth, 'eth-calltracer', { traces: 'callTracer' })
    await compareDataset(geth, nodeBlocks(eth, [1000000], { callTraces: true }), ['transactions', 'traces'])
    // the two trace formats of the same block give the same call tree
    // (except the `to` of a CALLCODE: parity reports the executing contract, geth the code's address)
    const pick = (rows: any[]) => rows.filter((t) => t.block_number === '1000000' && t.type !== 'reward')
      .map((t) => JSON.stringify([t.transaction_index, t.trace_address, t.type, t.call_type, t.call_from, t.call_type === 'callcode' ? '-' : t.call_to, t.call_value, t.call_input, t.subtraces])).sort()
    const gethRows = await readTable(geth, 'traces')
    const parityRows = await readTable(parity, 'traces')
    assert.deepEqual(pick(gethRows), pick(parityRows))
    const callcode = (rows: any[]) => rows.find((t) => t.block_number === '1000000' && t.call_type === 'callcode').call_to
    assert.equal(callcode(parityRows), '0xc083e9947cf02b8ffc7d3090ae9aea72df98fd47')
    assert.equal(callcode(gethRows), '0x273930d21e01ee25e4c219b63259d214872220a2')
  })

  for (const [chain, why] of [
    ['polygon', '564 transactions incl. state-sync'],
    ['arbitrum', 'L2: l1BlockNumber, tx type 0x6a'],
    ['tempo-mainnet', 'tx type 0x76 with calls, signature, fee token'],
    ['stable-testnet', 'tx type 0x3f'],
  ] as [RecordedChainName, string][]) {
    it(`${chain} (${why})`, async () => {
      const recorded = loadRecordedChain(chain)
      const numbers = recorded.filter((b) => b.block && b.receipts).map((b) => b.number)
      const dir = out()
      const r = await ingestRecorded(dir, chain, { chain, blocks: numbers })
      assert.equal(r.blocks, numbers.length)
      await compareDataset(dir, nodeBlocks(recorded, numbers))
      if (chain === 'arbitrum') assert.ok((await readTable(dir, 'blocks')).every((b) => b.l1_block_number != null))
      if (chain === 'tempo-mainnet') assert.ok((await readTable(dir, 'transactions')).some((t) => t.type === '118' && t.calls != null))
      if (chain === 'stable-testnet') assert.ok((await readTable(dir, 'transactions')).some((t) => t.type === '63'))
    })
  }

  it('Cronos blocks whose receipts are missing: an error by default, null receipt fields with --missing-receipts null', async () => {
    const cronos = loadRecordedChain('cronos')
    const numbers = cronos.map((b) => b.number)
    await assert.rejects(ingestRecorded(out(), 'cronos', { chain: 'cronos', blocks: numbers }), (e: any) => {
      assert.ok(e instanceof BadRpcAnswer, e.message)
      // 6541's only transaction was retried in 6542; the node's receipt for it is 6542's
      assert.match(e.message, /block 6541: .*no receipt for transaction 0 \(0x5395ae4b9ee2816929fa0076f14e51a1f7d3c1427d0552d7d8792a84034c9442\).*from block 0x198e/)
      return true
    })
    const dir = out()
    const r = await ingestRecorded(dir, 'cronos', { chain: 'cronos', blocks: numbers, missingReceipts: 'null' })
    assert.equal(r.blocks, numbers.length)
    const expected = nodeBlocks(cronos, numbers)
    // 68216's second receipt is missing from eth_getBlockReceipts but eth_getTransactionReceipt has it
    assert.ok(expected.find((b) => b.block.number === '0x10a78')!.receipts.every((x) => x != null))
    await compareDataset(dir, expected)
    const txs = await readTable(dir, 'transactions')
    const noReceipt = txs.filter((t) => t.gas_used == null).map((t) => `${t.block_number}/${t.transaction_index}`).sort()
    assert.deepEqual(noReceipt, ['131465/1', '6541/0'])
  })

  it('17073191/17073192 (no recorded headers): trace_block, replay and prestate diffs through the RPC source', async () => {
    const server = new ReplayServer(eth)
    await server.start()
    try {
      const source = new EvmRpcSource(new RpcClient({ url: server.url }), { batchSize: 2 })
      const recorded = eth.filter((b) => b.number === 17073191 || b.number === 17073192)
      const ctx = recorded.map((b) => ({ number: b.number, hash: b.traceBlock![0].blockHash.toLowerCase(), txHashes: b.replay!.map((e: any) => e.transactionHash.toLowerCase()) }))
      const [parity, replay, prestate] = await Promise.all([source.fetchParityTraces(ctx), source.fetchReplayDiffs(ctx), source.fetchPrestateDiffs(ctx)])
      let rows = 0
      recorded.forEach((b, i) => {
        const txs = ctx[i].txHashes.length
        const cmp = (a: any[], e: any[]) => {
          assert.deepEqual(canon(a), canon(e))
          rows += a.length
        }
        cmp(parityTraceRows(b.number, parity[i], txs), expectParityTraces(b.number, b.traceBlock!, txs))
        cmp(replayStateDiffRows(b.number, replay[i]), expectReplayDiffs(b.number, b.replay!))
        cmp(prestateDiffRows(b.number, prestate[i]), expectPrestateDiffs(b.number, b.prestate!))
      })
      assert.ok(rows > 3000, `${rows} rows`)
      // callTracer answers of 1000000 through the same source
      const b = eth.find((x) => x.number === 1000000)!
      const calls = await new EvmRpcSource(new RpcClient({ url: server.url })).fetchCallTraces([{ number: 1000000, hash: b.block.hash, txHashes: b.block.transactions.map((t: any) => t.hash) }])
      assert.deepEqual(canon(callTracerRows(1000000, calls[0])), canon(expectCallTraces(1000000, b.callTraces!)))
    } finally {
      await server.close()
    }
  })
})

describe('recorded data: errors and retries', () => {
  const eth = loadRecordedChain('ethereum')

  async function withServer<T>(recorded: RecordedBlock[], opts: ConstructorParameters<typeof ReplayServer>[1], fn: (url: string) => Promise<T>): Promise<T> {
    const s = new ReplayServer(recorded, opts)
    await s.start()
    try {
      return await fn(s.url)
    } finally {
      await s.close()
    }
  }

  it('a malformed receipt stops the ingest with the block and method named; nothing is written', async () => {
    const dir = out()
    const mutate = (method: string, params: any[], result: any) => {
      if (method === 'eth_getBlockReceipts' && params[0] === '0x112a880') result[3].logs = 'oops'
      return result
    }
    await withServer(eth, { mutate }, async (url) => {
      await assert.rejects(runIngest({ rpc: url, dataset: 'x', out: dir, blocks: [18000000, 18500000], progress: 'none' }), (e: any) => {
        assert.ok(e instanceof BadRpcAnswer)
        assert.match(e.message, /^block 18000000: eth_getBlockReceipts returned malformed data: .*receipt without a logs array/)
        return true
      })
    })
    assert.deepEqual(await listLocalChunks(dir), [])
    assert.deepEqual((await readdir(dir)).filter((f) => f.startsWith('.tmp-')), [])
  })

  it('a malformed trace_block answer names the block and trace_block', async () => {
    const mutate = (method: string, params: any[], result: any) => (method === 'trace_block' && params[0] === '0x11a49a0' ? { traces: result } : result)
    await withServer(eth, { mutate }, async (url) => {
      await assert.rejects(
        runIngest({ rpc: url, dataset: 'x', out: out(), blocks: [18500000], traces: 'trace_block', progress: 'none' }),
        /^Error: block 18500000: trace_block returned malformed data: expected an array/,
      )
    })
  })

  it('HTTP failures are retried with back-off; a node that keeps failing is reported after the attempts', async () => {
    const dir = out()
    const r = await withServer(eth, { failRequest: (i) => (i % 2 === 0 ? 503 : undefined) }, (url) =>
      runIngest({ rpc: url, dataset: 'x', out: dir, blocks: [1000000, 4369999, 18000000, 18500000], batchSize: 1, backoffMs: 5, progress: 'none' }))
    assert.equal(r.blocks, 4)
    assert.ok(r.rpc.retries >= 3, `${r.rpc.retries} retries`)
    await compareDataset(dir, nodeBlocks(eth, [1000000, 4369999, 18000000, 18500000]))

    await withServer(eth, { failRequest: () => 503 }, async (url) => {
      await assert.rejects(runIngest({ rpc: url, dataset: 'x', out: out(), blocks: [18000000], attempts: 3, backoffMs: 5, progress: 'none' }), (e: any) => {
        assert.ok(e instanceof RpcUnavailable)
        assert.match(e.message, /eth_blockNumber\(\) at http:\/\/127\.0\.0\.1:\d+ failed 3 times; last error: HTTP 503/)
        return true
      })
    })
  })

  it('continuity is checked between consecutive recorded blocks (Cronos 6541→6542), not across gaps', async () => {
    const cronos = loadRecordedChain('cronos')
    const broken = '0x' + 'ab'.repeat(32)
    const mutate = (method: string, params: any[], result: any) => {
      if (method === 'eth_getBlockByNumber' && params[0] === '0x198e') result.parentHash = broken
      return result
    }
    await withServer(cronos, { mutate }, async (url) => {
      await assert.rejects(
        runIngest({ rpc: url, dataset: 'c', out: out(), blocks: [6541, 6542, 10000], missingReceipts: 'null', progress: 'none' }),
        (e: any) => {
          assert.ok(e instanceof ReorgError)
          assert.match(e.message, new RegExp(`block 6542 \\(0xc0fd1533\\w+\\) has parent hash ${broken}, but block 6541 has hash 0x2392df5b\\w+`))
          return true
        },
      )
      // 10000 and 68215 follow gaps: no check, both are written
      const dir = out()
      const r = await runIngest({ rpc: url, dataset: 'c', out: dir, blocks: [6541, 10000, 68215], missingReceipts: 'null', progress: 'none' })
      assert.equal(r.blocks, 3)
    })
  })
})
