import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { listLocalChunks, readChunkMeta } from '../src/chunks/layout.js'
import { generateDataset } from '../src/bench-data/generate.js'
import { loadTemplates, type BlockTemplate } from '../src/bench-data/templates.js'
import { distinctCopies, templateFor, tileBlock } from '../src/bench-data/tile.js'
import type { DuckDBConnection, DuckDBInstance } from '@duckdb/node-api'
import { duckdbApi, lit } from '../src/db.js'
import { runIngest } from '../src/ingest/loop.js'
import { loadRecordedChain } from '../src/ingest/recorded.js'
import { ReplayServer } from '../src/ingest/replay.js'


/*
 * The synthetic dataset generator: a contiguous chain whose blocks carry the real addresses, topics,
 * sighashes and sizes of the recorded blocks they copy, with fresh hashes and scrambled payloads.
 * Expectations are derived from the fixture blocks themselves.
 */

const BLOCKS = 12
const CHUNK = 5

describe('bench-data generator', { timeout: 600_000 }, () => {
  let dir: string
  let templates: BlockTemplate[]
  let db: DuckDBInstance
  let con: DuckDBConnection
  const all = async (sql: string) => (await con.runAndReadAll(sql)).getRowObjectsJS() as any[]
  const table = async (name: string, order: string) => {
    const chunks = await listLocalChunks(dir)
    const files = chunks.map((c) => lit(path.join(dir, c.path, `${name}.parquet`))).join(', ')
    return all(`SELECT * FROM read_parquet([${files}]) ORDER BY ${order}`)
  }

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'bench-data-test-'))
    templates = loadTemplates()
    await generateDataset({ out: dir, blocks: BLOCKS, chunkBlocks: CHUNK, seed: 'test', force: true, templates })
    db = await duckdbApi().DuckDBInstance.create(':memory:')
    con = await db.connect()
  })
  after(async () => {
    con?.closeSync()
    await rm(dir, { recursive: true, force: true })
  })

  it('writes contiguous chunks of the requested size and a dataset.json', async () => {
    const chunks = await listLocalChunks(dir)
    assert.deepEqual(chunks.map((c) => [c.first, c.last]), [[0, 4], [5, 9], [10, 11]])
    const meta = JSON.parse(await readFile(path.join(dir, 'dataset.json'), 'utf8'))
    assert.deepEqual(meta, { name: path.basename(dir), family: 'evm' })
    for (let i = 1; i < chunks.length; i++) {
      const prev = await readChunkMeta(dir, chunks[i - 1])
      const cur = await readChunkMeta(dir, chunks[i])
      assert.equal(cur.firstParentHash, prev.lastHash, `chunk ${chunks[i].path} continues ${chunks[i - 1].path}`)
    }
  })

  it('links every block to its parent with distinct hashes', async () => {
    const blocks = await table('blocks', 'number')
    assert.deepEqual(blocks.map((b) => Number(b.number)), Array.from({ length: BLOCKS }, (_, i) => i))
    assert.equal(new Set(blocks.map((b) => b.hash)).size, BLOCKS)
    for (let i = 1; i < BLOCKS; i++) assert.equal(blocks[i].parent_hash, blocks[i - 1].hash)
    const times = blocks.map((b) => Number(b.timestamp))
    for (let i = 1; i < BLOCKS; i++) assert.ok(times[i] > times[i - 1], 'timestamps increase')
  })

  it('keeps the transaction and log counts, addresses, topics and sighashes of the template blocks', async () => {
    const txs = await table('transactions', 'block_number, transaction_index')
    const logs = await table('logs', 'block_number, log_index')
    for (let n = 0; n < BLOCKS; n++) {
      const t = templateFor(n, templates)
      const blockTxs = txs.filter((x) => Number(x.block_number) === n)
      assert.equal(blockTxs.length, t.block.transactions.length, `block ${n} transactions`)
      blockTxs.forEach((x, i) => {
        const src = t.block.transactions[i]
        assert.equal(x.from, src.from.toLowerCase())
        assert.equal(x.to, src.to?.toLowerCase() ?? null)
        assert.equal(x.input.length, src.input.length, 'input keeps its size')
        if (src.input.length >= 10) assert.equal(x.sighash, src.input.slice(0, 10).toLowerCase())
        assert.notEqual(x.hash, src.hash.toLowerCase(), 'transaction hash is fresh')
      })
      const srcLogs = t.receipts.flatMap((r: any) => r.logs)
      const blockLogs = logs.filter((l) => Number(l.block_number) === n)
      assert.equal(blockLogs.length, srcLogs.length, `block ${n} logs`)
      blockLogs.forEach((l, i) => {
        assert.equal(l.address, srcLogs[i].address.toLowerCase())
        assert.equal(l.topic0, srcLogs[i].topics[0]?.toLowerCase() ?? null)
        assert.equal(l.data.length, srcLogs[i].data.length, 'log data keeps its size')
        assert.equal(l.transaction_hash, blockTxs[l.transaction_index].hash, 'log points at its tiled transaction')
      })
    }
  })

  it('lays the borrowed traces and state diffs onto the template transactions by position', async () => {
    const traces = await table('traces', 'block_number')
    const diffs = await table('statediffs', 'block_number')
    for (let n = 0; n < BLOCKS; n++) {
      const t = templateFor(n, templates)
      const tx = t.block.transactions.length
      const bt = traces.filter((x) => Number(x.block_number) === n)
      assert.equal(bt.length, t.traces.length, `block ${n} traces`)
      assert.ok(bt.every((x) => x.transaction_index < tx), 'no trace beyond the last transaction')
      const callTo = (rows: any[]) => rows.map((x) => x.call_to).filter(Boolean).sort()
      assert.deepEqual(callTo(bt), callTo(t.traces.map((x: any) => ({ call_to: x.type === 'call' ? x.action.to.toLowerCase() : null }))))
      const bd = diffs.filter((x) => Number(x.block_number) === n)
      const changedAddresses = new Set(
        t.stateDiffs.flatMap((e) => Object.entries<any>(e.stateDiff ?? {})
          .filter(([, acc]) => ['balance', 'code', 'nonce'].some((k) => acc[k] !== '=') || Object.keys(acc.storage ?? {}).length)
          .map(([a]) => a.toLowerCase())),
      )
      assert.deepEqual(new Set(bd.map((d) => d.address)), changedAddresses, `block ${n} state diff addresses`)
    }
  })

  it('scrambles payload bytes but keeps their zero bytes (realistic compression)', () => {
    const t = templates[0]
    const a = tileBlock(t, 0, { seed: 'x' })
    const b = tileBlock(t, 5, { seed: 'x' })
    const src = t.block.transactions.find((x: any) => x.input.length > 200).input as string
    const i = t.block.transactions.findIndex((x: any) => x.input === src)
    const tiled = a.block.transactions[i].input as string
    assert.notEqual(tiled, src)
    assert.notEqual(b.block.transactions[i].input, tiled, 'two copies of the same block differ')
    for (let k = 10; k < src.length; k += 2) {
      assert.equal(tiled.slice(k, k + 2) === '00', src.slice(k, k + 2) === '00', `byte at ${k} keeps its zero-ness`)
    }
  })

  it('is deterministic for a seed', () => {
    const t = templates[1]
    assert.deepEqual(tileBlock(t, 7, { seed: 's' }), tileBlock(t, 7, { seed: 's' }))
    assert.notEqual(tileBlock(t, 7, { seed: 's' }).block.hash, tileBlock(t, 7, { seed: 'other' }).block.hash)
  })

  it('replays distinct copies of recorded blocks as a chain the real ingest writes (replay-rpc --distinct)', async () => {
    const recorded = loadRecordedChain('ethereum').filter((r) => r.number === 18000000 || r.number === 18500000)
    const copies = distinctCopies(recorded, 4, 'test')
    const server = new ReplayServer(copies, { repeat: { times: 2 } })
    await server.start()
    const out = await mkdtemp(path.join(os.tmpdir(), 'bench-data-distinct-'))
    try {
      await runIngest({ rpc: server.url, out, dataset: 'distinct', from: 0, to: 7, progress: 'none', confirmations: 0 })
      const chunks = await listLocalChunks(out)
      const files = chunks.map((c) => lit(path.join(out, c.path, 'transactions.parquet'))).join(', ')
      const txs = await all(`SELECT block_number, transaction_index, input FROM read_parquet([${files}]) ORDER BY block_number, transaction_index`)
      const inputs = (n: number) => txs.filter((t) => Number(t.block_number) === n).map((t) => t.input as string)
      const sources = [...recorded].sort((a, b) => a.number - b.number)
      for (let n = 0; n < 8; n++) {
        const source = sources[(n % 4) % 2].block.transactions.map((t: any) => t.input as string)
        const got = inputs(n)
        assert.equal(got.length, source.length, `block ${n}: the transactions of its recorded block`)
        got.forEach((x, i) => assert.equal(x.length, source[i].length, `block ${n} tx ${i}: calldata length kept`))
      }
      assert.deepEqual(inputs(4), inputs(0), 'the cycle of copies repeats')
      const long = inputs(0).findIndex((x) => x.length > 200)
      assert.notEqual(inputs(2)[long], inputs(0)[long], 'two copies of one recorded block differ')
      assert.notEqual(inputs(0)[long], sources[0].block.transactions[long].input, 'a copy is not the recorded block')
    } finally {
      await server.close()
      await rm(out, { recursive: true, force: true })
    }
  })

  it('refuses to overwrite a non-empty folder without force', async () => {
    const other = await mkdtemp(path.join(os.tmpdir(), 'bench-data-test-'))
    try {
      await writeFile(path.join(other, 'keep.txt'), 'x')
      await assert.rejects(generateDataset({ out: other, blocks: 1, templates }), /not empty/)
      assert.equal(await readFile(path.join(other, 'keep.txt'), 'utf8'), 'x')
    } finally {
      await rm(other, { recursive: true, force: true })
    }
  })
})
