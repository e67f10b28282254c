import assert from 'node:assert/strict'
import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks } from '../src/chunks/layout.js'
import { connect, lit } from '../src/db.js'
import { evmFamily } from '../src/families/evm.js'
import { runIngest, type IngestResult } from '../src/ingest/loop.js'
import { ingestRecorded, loadRecordedChain, RECORDED_CHAINS, type RecordedChainName } from '../src/ingest/recorded.js'
import { ReplayServer, type RecordedBlock, type ReplayOptions } from '../src/ingest/replay.js'
import { anvilRecords, tempDir } from './helpers/dataset.js'
import { FaultProxy } from './helpers/fault-proxy.js'

/*
 * The SQL normaliser (raw answers spooled, normalised in DuckDB at chunk close: `--normalizer sql`)
 * against the JS normaliser (`--normalizer js`), and the default `auto` (spooled, small chunks
 * normalised in JS at their close, bigger ones in SQL): the same recorded blocks ingested each way
 * must give the same chunks (paths, meta.json row counts and summaries) and, table by table, the
 * same rows in the same order (the same columns and types, and the files' rows in file order). Covers every recorded EVM chain
 * (Ethereum 1000000 / 4369999 / 18000000 / 18500000: type 0 and 2 transactions, access lists,
 * withdrawals; Polygon; Arbitrum's l1BlockNumber; Tempo 0x76 transactions with calls, fee payer
 * signatures and key authorizations; Stable's per-transaction log indexes; Cronos receipts the node
 * lacks, with --missing-receipts null), the anvil dev chain (contract creations, an empty
 * block, 48 consecutive blocks cut into chunks and batches that do not line up), and answers
 * with upper-case hex (which the SQL path must lower-case like the JS path).
 */

type Run = (out: string, normalizer: 'sql' | 'js' | 'auto') => Promise<IngestResult>

describe('SQL normaliser = JS normaliser, on recorded blocks', { timeout: 900_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let n = 0
  before(async () => {
    tmp = await tempDir('ba-sql-normalizer-')
  })
  after(async () => {
    await tmp?.cleanup()
  })

  /**
   * Ingest both ways (or the spooled way only, against a JS ingest given); assert equal chunks and
   * rows; returns both results. `spooled`: `sql` (every chunk's statements) or `auto` (small chunks
   * normalised in JS at their close, `JS_BELOW_BYTES`).
   */
  const same = async (run: Run, given?: { js: IngestResult; dir: string }, spooled: 'sql' | 'auto' = 'sql') => {
    const dirs = { js: given?.dir ?? path.join(tmp.dir, `js${++n}`), sql: path.join(tmp.dir, `sql${given ? ++n : n}`) }
    const js = given?.js ?? (await run(dirs.js, 'js'))
    const sql = await run(dirs.sql, spooled)
    assert.ok(js.stages.normalizeMs > 0, 'the JS path normalised in JS')
    assert.equal(js.stages.spooledBlocks, 0, 'the JS path spooled nothing')
    assert.equal(sql.stages.spooledBlocks, sql.blocks, 'every block spooled')
    if (spooled === 'sql') {
      assert.equal(sql.stages.normalizeMs, 0, 'the SQL path did not normalise in JS')
      assert.equal(sql.stages.closedInJsBlocks, 0)
    }
    assert.deepEqual(sql.rows, js.rows)
    await assertSameDatasets(dirs.js, dirs.sql)
    return { js, sql, jsDir: dirs.js }
  }

  for (const chain of RECORDED_CHAINS) {
    // Cronos: receipts the node lacks; Stable: no receipts recorded at all (the node has no eth_getBlockReceipts)
    const missingReceipts = chain === 'cronos' || chain === 'stable' ? 'null' as const : undefined
    it(`${chain}: every recorded block with its receipts${missingReceipts ? ', and those without (--missing-receipts null)' : ''}`, async () => {
      const recorded = loadRecordedChain(chain)
      const blocks = recorded.filter((b) => b.block && (b.receipts || missingReceipts)).map((b) => b.number)
      const run: Run = (out, normalizer) => ingestRecorded(out, chain, { chain: chain as RecordedChainName, blocks, normalizer, missingReceipts })
      const { sql, js, jsDir } = await same(run)
      assert.equal(sql.blocks, blocks.length)
      // the default, --normalizer auto: the same spooled answers normalised in JS at the close of these small chunks
      const auto = await same(run, { js, dir: jsDir }, 'auto')
      assert.equal(auto.sql.stages.closedInJsBlocks, blocks.length)
    })
  }

  // The chain's first 48 blocks: the empty block 0, the deployments of blocks 1–7, then its 3-block cycle of transfers (the blocks above repeat it); 7 chunks.
  it('anvil dev chain: 48 consecutive blocks, chunks of 7, batches of 5 (files shared by two chunks), fetch workers and none, 1 and 4 chunks closing at once', async () => {
    const chain: RecordedBlock[] = (await anvilRecords()).slice(0, 48).map((r) => ({ number: r.number, block: r.block, receipts: r.receipts }))
    const s = new ReplayServer(chain)
    await s.start()
    try {
      const last = chain[chain.length - 1].number
      // One JS ingest (no fetch workers, one chunk closing at a time) is what both SQL ingests must equal.
      let reference: { js: IngestResult; dir: string } | undefined
      for (const [workers, closes] of [[0, 1], [1, 4]]) {
        const run: Run = (out, normalizer) => runIngest({ rpc: s.url, dataset: 'anvil', out, from: chain[0].number, to: last, chunkBlocks: 7, batchSize: 5, workers, closes, normalizer, progress: 'none' })
        const both = await same(run, reference)
        reference ??= { js: both.js, dir: both.jsDir }
        const { sql } = both
        assert.equal(sql.blocks, chain.length)
        // placed in block order, one after another, whatever order their writes ended in
        assert.deepEqual(sql.chunks.map((c) => c.first), sql.chunks.map((_, i) => (i === 0 ? chain[0].number : sql.chunks[i - 1].last + 1)))
        assert.equal(sql.chunks.at(-1)!.last, last)
        assert.ok(sql.rows.transactions > 100 && sql.rows.logs > 100, JSON.stringify(sql.rows))
        // the default, --normalizer auto: these small chunks are spooled and normalised in JS at their close
        const auto = await same(run, reference, 'auto')
        assert.equal(auto.sql.stages.closedInJsBlocks, chain.length)
      }
      const [[creations]] = await rows(tmp.dir, `sql${n}`, 'transactions', 'count(*) FILTER (contract_address IS NOT NULL)')
      assert.ok(Number(creations) > 0, 'contract creations')
      const [[empty]] = await rows(tmp.dir, `sql${n}`, 'blocks', `count(*) FILTER (transactions_root = '0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421')`)
      assert.ok(Number(empty) > 0, 'empty blocks')
    } finally {
      await s.close()
    }
  })

  it('Ethereum mainnet blocks repeated as one chain (chunks closed by the byte bound in the middle of a batch)', async () => {
    const eth = loadRecordedChain('ethereum').filter((b) => b.block)
    const s = new ReplayServer(eth, { repeat: { times: 6, seed: 'sql-normalizer' } })
    await s.start()
    try {
      const run = (chunkBytes: number): Run => (out, normalizer) => runIngest({ rpc: s.url, dataset: 'eth', out, from: 0, to: 23, chunkBytes, batchSize: 7, normalizer, progress: 'none' })
      const small = await same(run(2_000_000))
      // --normalizer auto (the default): chunks of at most 4 MiB of answers are normalised in JS at their close, bigger ones in SQL
      const auto = await same(run(2_000_000), { js: small.js, dir: small.jsDir }, 'auto')
      assert.ok(auto.sql.chunks.length >= 4, `${auto.sql.chunks.length} chunks`)
      assert.equal(auto.sql.stages.closedInJsBlocks, 24, 'every chunk below 4 MiB closed in JS')
      assert.ok(auto.sql.stages.normalizeMs > 0)
      const whole = await same(run(64_000_000), undefined, 'auto')
      assert.equal(whole.sql.chunks.length, 1)
      assert.equal(whole.sql.stages.closedInJsBlocks, 0, 'a chunk of more than 4 MiB of answers closed in SQL')
      assert.equal(whole.sql.stages.normalizeMs, 0)
    } finally {
      await s.close()
    }
  })

  it('answers laid out otherwise (pretty-printed, members in another order, a batch answered in reverse) take the parsed way to the same rows', async () => {
    const eth = loadRecordedChain('ethereum').filter((b) => b.block)
    const node = new ReplayServer(eth, { repeat: { times: 4, seed: 'layout' } })
    await node.start()
    const proxy = new FaultProxy(node.url)
    await proxy.start()
    const reorder = (body: Buffer) => {
      const answers = JSON.parse(body.toString('utf8'))
      return JSON.stringify(answers.reverse().map((a: any) => ({ id: a.id, result: a.result, jsonrpc: a.jsonrpc })))
    }
    try {
      const { sql } = await same(async (out, normalizer) => {
        proxy.setRules([
          { name: 'pretty', fault: 'replace', method: 'POST', body: /eth_getBlockByNumber/, rewrite: (body) => JSON.stringify(JSON.parse(body.toString('utf8')), null, 2), times: 2 },
          { name: 'reordered', fault: 'replace', method: 'POST', body: /eth_getBlockReceipts/, rewrite: reorder, times: 2 },
        ])
        proxy.hits.clear()
        return runIngest({ rpc: proxy.url, dataset: 'eth', out, from: 0, to: 15, batchSize: 4, chunkBlocks: 6, workers: 0, normalizer, progress: 'none' })
      })
      assert.equal(proxy.hitCount('pretty'), 2)
      assert.equal(proxy.hitCount('reordered'), 2)
      assert.ok(sql.rpc.parseMs > 0, 'the rewritten answers were parsed')
    } finally {
      await proxy.close()
      await node.close()
    }
  })

  it('answers with upper-case hex (values, JSON-valued fields, log data) are lower-cased as the JS path does', async () => {
    const eth = loadRecordedChain('ethereum').filter((b) => b.number === 18000000 || b.number === 4369999)
    const upper = (v: unknown) => (typeof v === 'string' && /^0x[0-9a-f]+$/.test(v) ? '0x' + v.slice(2).toUpperCase() : v)
    const mutate: ReplayOptions['mutate'] = (method, _params, result: any) => {
      if (method === 'eth_getBlockByNumber' && result) {
        result.miner = upper(result.miner)
        for (const t of result.transactions.slice(0, 5)) {
          t.to = upper(t.to)
          t.input = upper(t.input)
          for (const a of t.accessList ?? []) a.address = upper(a.address)
        }
      }
      if (method === 'eth_getBlockReceipts') for (const r of result.slice(0, 5)) for (const l of r.logs) (l.data = upper(l.data), (l.topics = l.topics.map(upper)))
      return result
    }
    const s = new ReplayServer(eth, { mutate })
    await s.start()
    try {
      await same((out, normalizer) => runIngest({ rpc: s.url, dataset: 'eth', out, blocks: eth.map((b) => b.number), normalizer, progress: 'none' }))
    } finally {
      await s.close()
    }
  })
})

async function rows(dir: string, dataset: string, table: string, select: string): Promise<unknown[][]> {
  const con = await connect()
  try {
    return (await con.runAndReadAll(`SELECT ${select} FROM read_parquet(${lit(path.join(dir, dataset, '*', '*', `${table}.parquet`))})`)).getRows()
  } finally {
    con.closeSync()
  }
}

/** Same chunk paths, tables and row counts; per table the same columns and types, the same rows in the same order in every file, in as many row groups. */
async function assertSameDatasets(a: string, b: string): Promise<void> {
  const chunksA = await listLocalChunks(a)
  const chunksB = await listLocalChunks(b)
  assert.deepEqual(chunksB.map((c) => c.path), chunksA.map((c) => c.path))
  const con = await connect()
  try {
    for (const c of chunksA) {
      const metaA = JSON.parse(await readFile(path.join(a, c.path, 'meta.json'), 'utf8'))
      const metaB = JSON.parse(await readFile(path.join(b, c.path, 'meta.json'), 'utf8'))
      assert.deepEqual(metaB.rows, metaA.rows, `${c.path}: row counts`)
      assert.deepEqual(metaB.summaries, metaA.summaries, `${c.path}: the summaries (from the rows in JS, and read by a statement)`)
      assert.deepEqual(metaB.tables, metaA.tables)
      assert.deepEqual(Object.keys(metaB.files), Object.keys(metaA.files))
      assert.deepEqual((await readdir(path.join(b, c.path))).sort(), (await readdir(path.join(a, c.path))).sort())
      for (const table of evmFamily.tables.filter((t) => metaA.tables.includes(t.name))) {
        const fa = lit(path.join(a, c.path, `${table.name}.parquet`))
        const fb = lit(path.join(b, c.path, `${table.name}.parquet`))
        const one = async (sql: string) => (await con.runAndReadAll(sql)).getRows()[0]
        const where = `${c.path}/${table.name}`
        const schema = async (f: string) => (await con.runAndReadAll(`DESCRIBE SELECT * FROM read_parquet(${f})`)).getRows().map((r) => [r[0], r[1]])
        const columns = await schema(fa)
        assert.deepEqual(await schema(fb), columns, `${where}: columns and types`)
        for (const col of table.columns) assert.ok(columns.some(([name]) => name === col.name), `${where}: column ${col.name}`)
        // Every row as JSON (every column, by name), in file order: equal digests and counts are the same rows in the same order.
        const digest = (f: string) => one(`SELECT count(*), md5(string_agg(md5(to_json(t)::VARCHAR), '' ORDER BY file_row_number)) FROM read_parquet(${f}, file_row_number = true) t`)
        assert.deepEqual(await digest(fb), await digest(fa), `${where}: the rows in file order`)
        const layout = (f: string) => one(`SELECT count(DISTINCT row_group_id), string_agg(DISTINCT compression, ','), string_agg(DISTINCT type, ',' ORDER BY type) FROM parquet_metadata(${f})`)
        assert.deepEqual(await layout(fb), await layout(fa), `${where}: row groups, compression, types`)
      }
    }
  } finally {
    con.closeSync()
  }
}
