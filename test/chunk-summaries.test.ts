import assert from 'node:assert/strict'
import { cp, readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Bloom, buildSummary, chunkSummaries, ONE_STATEMENT_ROWS, summaryColumns, summaryKey } from '../src/chunks/chunk-summary.js'
import { listLocalChunks, readChunkMeta, type ChunkMeta } from '../src/chunks/layout.js'
import { duckdbApi, connect, ident, lit } from '../src/db.js'
import { evmFamily } from '../src/families/evm.js'
import { starknetFamily } from '../src/families/starknet.js'
import { substrateFamily } from '../src/families/substrate.js'
import { ingestRecordedStarknet } from '../src/ingest/recorded.js'
import { ingestRecordedSidecar } from '../src/ingest/substrate/sidecar/recorded.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { metaReader, SummaryCache, summaryCache } from '../src/query/summary.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'

const { DuckDBConnection } = duckdbApi()

/*
 * Chunk summaries written at ingest (src/chunks/chunk-summary.ts): every chunk's meta.json holds a
 * Bloom filter per list-filter column, which never misses a value the chunk holds; a worker answers
 * every query exactly as it does over the same chunks without them (it then builds the filters
 * itself), and its first no-match query over them reads no column of any chunk to rule it out.
 * Data: 64 recorded anvil blocks, 8 per chunk.
 */

let seed = 11
const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n
const pick = <T>(xs: readonly T[]): T => xs[rnd(xs.length)]

/** The SQL texts of the statements this process runs while `body` runs. */
async function statements(body: () => Promise<void>): Promise<string[]> {
  const proto = DuckDBConnection.prototype as unknown as Record<string, (...a: unknown[]) => unknown>
  const names = ['run', 'stream', 'runAndReadAll', 'streamAndReadAll', 'prepare']
  const originals = names.map((n) => proto[n])
  const seen: string[] = []
  names.forEach((n, i) => (proto[n] = function (this: unknown, ...a: unknown[]) {
    seen.push(String(a[0]))
    return originals[i].apply(this, a)
  }))
  try {
    await body()
  } finally {
    names.forEach((n, i) => (proto[n] = originals[i]))
  }
  return seen
}

describe('chunk summaries written at ingest', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let withSummaries: string
  let without: string
  const workers: WorkerServer[] = []
  /** Per summarised column, the values found in the dataset. */
  const present = new Map<string, string[]>()

  before(async () => {
    tmp = await tempDir('ba-summaries-')
    withSummaries = path.join(tmp.dir, 'with', 'anvil')
    without = path.join(tmp.dir, 'without', 'anvil')
    await writeDataset(withSummaries, 'anvil', (await anvilRecords()).slice(0, 64), 8)
    await cp(withSummaries, without, { recursive: true })
    for (const c of await listLocalChunks(without)) {
      const file = path.join(without, c.path, 'meta.json')
      const { summaries: _s, ...rest } = JSON.parse(await readFile(file, 'utf8')) as ChunkMeta
      await writeFile(file, JSON.stringify(rest))
    }
  })

  after(async () => {
    for (const w of workers) await w.stop()
    await tmp?.cleanup()
  })

  async function startWorker(dir: string): Promise<WorkerServer> {
    const w = new WorkerServer({
      storage: new LocalStorage(dir), heartbeatMs: 60_000, dropGraceMs: 60_000, concurrency: 2, queue: 8, queueTimeoutMs: 10_000,
      budgets: { sizeBytes: 1 << 30, timeMs: 60_000 },
    })
    await w.start('127.0.0.1', 0)
    workers.push(w)
    return w
  }

  it('every chunk has a filter per list-filter column of its tables, and no filter misses a value its chunk holds', async () => {
    const con = await connect()
    try {
      let checked = 0
      for (const c of await listLocalChunks(withSummaries)) {
        const meta = await readChunkMeta(withSummaries, c)
        for (const { table, column } of summaryColumns(evmFamily)) {
          if (!meta.tables.includes(table)) continue
          const written = meta.summaries?.[summaryKey(table, column)]
          assert.equal(typeof written, 'string', `${c.path} ${table}.${column}`)
          const bloom = Bloom.fromBase64(written!)!
          const r = await con.runAndReadAll(`SELECT DISTINCT ${ident(column)} FROM read_parquet(${lit(path.join(withSummaries, c.path, `${table}.parquet`))}) WHERE ${ident(column)} IS NOT NULL`)
          for (const v of (r.getColumnsJS()[0] ?? []).map(String)) {
            assert.ok(bloom.mayContain(v), `${c.path} ${table}.${column}: ${v}`)
            const key = summaryKey(table, column)
            if (!present.has(key)) present.set(key, [])
            present.get(key)!.push(v)
            checked++
          }
        }
      }
      assert.ok(checked > 100, `values checked: ${checked}`)
    } finally {
      con.closeSync()
    }
  })

  it('the filters written from the rows in JS, or in one statement per chunk, are those a query builds column by column', async () => {
    const con = await connect()
    try {
      let compared = 0
      for (const c of await listLocalChunks(withSummaries)) {
        const meta = await readChunkMeta(withSummaries, c)
        const dir = path.join(withSummaries, c.path)
        assert.ok(Object.values(meta.rows).every((n) => n <= ONE_STATEMENT_ROWS), `${c.path}: small tables (those not written from rows in JS are read in one statement)`)
        const huge = Object.fromEntries(meta.tables.map((t) => [t, ONE_STATEMENT_ROWS + 1]))
        assert.deepEqual(await chunkSummaries(con, dir, evmFamily, meta.tables, huge), meta.summaries, `${c.path}: column by column`)
        for (const { table, column } of summaryColumns(evmFamily)) {
          if (!meta.tables.includes(table)) continue
          assert.equal((await buildSummary(con, dir, table, column))?.toBase64(), meta.summaries![summaryKey(table, column)], `${c.path} ${table}.${column}`)
          compared++
        }
      }
      assert.ok(compared >= 8 * 21, `filters compared: ${compared}`)
    } finally {
      con.closeSync()
    }
  })

  it('Starknet and Substrate chunks: the filters written from the rows are those a query builds column by column', async () => {
    const starknet = path.join(tmp.dir, 'starknet')
    const moonbeam = path.join(tmp.dir, 'moonbeam')
    await ingestRecordedStarknet(starknet, 'starknet')
    await ingestRecordedSidecar(moonbeam, 'moonbeam', 'moonbeam', { workers: 0 })
    const con = await connect()
    try {
      for (const [root, family] of [[starknet, starknetFamily], [moonbeam, substrateFamily]] as const) {
        let compared = 0
        for (const c of await listLocalChunks(root)) {
          const meta = await readChunkMeta(root, c)
          const dir = path.join(root, c.path)
          const huge = Object.fromEntries(meta.tables.map((t) => [t, ONE_STATEMENT_ROWS + 1]))
          const built = await chunkSummaries(con, dir, family, meta.tables, huge)
          assert.deepEqual(meta.summaries, built, `${family.name} ${c.path}`)
          compared += Object.keys(built).length
        }
        assert.ok(compared >= 5, `${family.name}: filters compared: ${compared}`)
      }
    } finally {
      con.closeSync()
    }
  })

  it('answers random queries (matching and not) exactly as without the written filters', async () => {
    const a = await startWorker(withSummaries)
    const b = await startWorker(without)
    const values = (key: string) => present.get(key) ?? []
    const absent = () => '0x' + rnd(2 ** 31).toString(16).padStart(40, '0')
    const some = (key: string) => (values(key).length && rnd(3) > 0 ? [pick(values(key))] : [absent()])
    const head = (await anvilRecords()).slice(0, 64)
    const first = Number(head[0].number ?? head[0].block.number)
    const last = Number(head[63].number ?? head[63].block.number)
    for (let i = 0; i < 60; i++) {
      const fromBlock = first + rnd(last - first + 1)
      const toBlock = fromBlock + rnd(last - fromBlock + 1)
      const q = pick([
        () => ({ logs: [{ address: some('logs.address'), topic0: rnd(2) ? some('logs.topic0') : undefined }] }),
        () => ({ transactions: [{ to: some('transactions.to') }] }),
        () => ({ transactions: [{ sighash: some('transactions.sighash').map((s) => s.slice(0, 10)) }] }),
        () => ({ logs: [{ topic0: some('logs.topic0') }], transactions: [{ from: some('transactions.from') }] }),
      ])()
      const query = { fromBlock, toBlock, ...q, fields: { block: { number: true, hash: true }, log: { address: true, topics: true }, transaction: { hash: true, to: true } } }
      const [ra, rb] = await Promise.all([a, b].map((w) => postJson(`${w.url}/datasets/anvil/query`, query)))
      assert.equal(ra.status, 200, ra.text.slice(0, 300))
      assert.equal(ra.text, rb.text, JSON.stringify(query))
    }
  })

  it('keeps the filters within their byte budget, and reads an evicted one from meta.json again', async () => {
    const dir = path.join(tmp.dir, 'budget', 'anvil')
    await cp(withSummaries, dir, { recursive: true })
    const w = await startWorker(dir)
    const [chunk] = await listLocalChunks(dir)
    const meta = await readChunkMeta(dir, chunk)
    const address = meta.summaries && Object.keys(meta.summaries).includes(summaryKey('logs', 'address')) ? '0x' + '00'.repeat(19) + '02' : ''
    assert.ok(address, 'the chunks have address summaries')
    // two columns consulted per chunk: an address no chunk holds, then a topic0 none holds
    const queries = [
      { fromBlock: 0, logs: [{ address: [address] }], fields: { log: { address: true } } },
      { fromBlock: 0, logs: [{ topic0: ['0x' + 'ab'.repeat(32)] }], fields: { log: { address: true } } },
    ]
    const answers = async () => {
      const out: string[] = []
      for (const q of queries) {
        const r = await postJson(`${w.url}/datasets/anvil/query`, q)
        assert.equal(r.status, 200, r.text.slice(0, 300))
        out.push(r.text)
      }
      return out
    }
    const budget = summaryCache.budgetBytes
    try {
      summaryCache.budgetBytes = 2000
      let small: string[] = []
      const sqls = await statements(async () => void (small = await answers()))
      assert.ok(summaryCache.stats().bytes <= 2000, JSON.stringify(summaryCache.stats()))
      // 8 chunks and 2 columns: 16 filters asked for, fewer kept
      assert.ok(summaryCache.stats().entries >= 1 && summaryCache.stats().entries < 16, JSON.stringify(summaryCache.stats()))
      const again = await statements(async () => void (small = await answers()))
      assert.equal([...sqls, ...again].filter((x) => x.includes('SELECT DISTINCT')).length, 0, 'evicted filters are read from meta.json, not built')
      summaryCache.budgetBytes = budget
      assert.deepEqual(await answers(), small, 'the same answers with every filter kept')
    } finally {
      summaryCache.budgetBytes = budget
    }
  })

  it('a query reads a chunk\'s meta.json once for its tables and every column it filters on', async () => {
    const [ref] = await listLocalChunks(withSummaries)
    const dir = path.join(tmp.dir, 'reader', ref.path)
    await cp(path.join(withSummaries, ref.path), dir, { recursive: true })
    const file = path.join(dir, 'meta.json')
    const written = JSON.parse(await readFile(file, 'utf8')) as ChunkMeta
    const meta = metaReader(dir)
    assert.deepEqual(meta(), written)
    await writeFile(file, JSON.stringify({ ...written, tables: [] }))
    assert.deepEqual(meta(), written, 'asked again: the first read')
    assert.deepEqual(metaReader(dir)()?.tables, [], 'a new reader reads the file again')
    await writeFile(file, '{"family": ')
    const broken = metaReader(dir)
    assert.throws(() => broken(), SyntaxError)
    assert.throws(() => broken(), SyntaxError, 'invalid JSON throws every time it is asked for')
    assert.equal(metaReader(path.join(dir, 'nowhere'))(), undefined, 'no meta.json: undefined')
    // a meta.json of several times the reader's first buffer (filters of big chunks are up to 128 KiB each), then a small one again
    const big = { ...written, summaries: { ...written.summaries, 'logs.data': 'A'.repeat(300_000) } }
    await writeFile(file, JSON.stringify(big))
    assert.deepEqual(metaReader(dir)(), big, 'read whole')
    await writeFile(file, JSON.stringify(written))
    assert.deepEqual(metaReader(dir)(), written, 'nothing of the bigger file read before')
  })

  it('a first no-match query over chunks with written filters reads no column to rule them out', async () => {
    const q = { fromBlock: 0, logs: [{ address: ['0x' + '00'.repeat(19) + '01'] }], fields: { log: { address: true } } }
    const distinct = (sqls: string[]) => sqls.filter((s) => s.includes('SELECT DISTINCT')).length
    // copies in new folders: what workers keep per chunk is keyed by its folder
    const copy = async (from: string, name: string) => {
      const to = path.join(tmp.dir, name, 'anvil')
      await cp(from, to, { recursive: true })
      return to
    }
    const fresh = await startWorker(await copy(withSummaries, 'with-2'))
    const withFilters = await statements(async () => void (await postJson(`${fresh.url}/datasets/anvil/query`, { ...q, fromBlock: 5 })))
    const freshWithout = await startWorker(await copy(without, 'without-2'))
    const withoutFilters = await statements(async () => void (await postJson(`${freshWithout.url}/datasets/anvil/query`, { ...q, fromBlock: 5 })))
    assert.equal(distinct(withFilters), 0, withFilters.join('\n'))
    assert.ok(distinct(withoutFilters) > 0, 'without written filters the worker builds them')
  })
})

describe('the summaries kept in memory', () => {
  // a filter of the smallest size (1,024 bits), as the ingest writes it
  const filter = () => Bloom.fromBase64(Buffer.alloc(128).toString('base64'))!
  const keep = async (cache: SummaryCache, key: string) => {
    let computed = false
    await cache.get('/chunk', key, async () => ((computed = true), filter()))
    return computed
  }

  it('go oldest first past the budget, but one asked for again gets a second chance', async () => {
    const cache = new SummaryCache(1 << 20)
    assert.equal(await keep(cache, 'a'), true)
    const one = cache.stats().bytes
    cache.budgetBytes = 3 * one
    for (const key of ['b', 'c']) assert.equal(await keep(cache, key), true)
    assert.equal(await keep(cache, 'a'), false, 'a kept')
    assert.equal(await keep(cache, 'd'), true)
    assert.deepEqual(cache.stats(), { entries: 3, bytes: 3 * one })
    assert.equal(await keep(cache, 'a'), false, 'a asked for again: kept')
    assert.equal(await keep(cache, 'c'), false, 'c kept')
    assert.equal(await keep(cache, 'b'), true, 'b, the oldest not asked for again, went first')
  })

  it('a failure is not kept: the next query reads the filter again', async () => {
    const cache = new SummaryCache()
    assert.equal(await cache.get('/chunk', 'x', async () => { throw new Error('unreadable') }), null)
    assert.deepEqual(cache.stats(), { entries: 0, bytes: 0 })
    assert.equal(await keep(cache, 'x'), true)
  })
})
