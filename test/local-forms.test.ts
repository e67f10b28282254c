import assert from 'node:assert/strict'
import { rename } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { chunkTableNames, type ChunkRef } from '../src/chunks/layout.js'
import { connect, lit } from '../src/db.js'
import { blockOrders } from '../src/families/declaration.js'
import { evmFamily } from '../src/families/evm.js'
import { BY_BLOCK_SUFFIX, formIdle, LocalForms } from '../src/storage/local-forms.js'
import { ArchiveStorage, LocalStorage } from '../src/server/storage.js'
import { formReads } from '../src/server/worker.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { ChunkCache } from '../src/storage/chunk-cache.js'
import { until } from './helpers/cli.js'
import { registrySum } from './helpers/metrics.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { ALL_FIELDS, fullQuery } from './helpers/reference-evm.js'

/*
 * A worker's local forms (src/storage/local-forms.ts) over a real EVM dataset (64 recorded anvil
 * blocks with traces and state diffs, 16 per chunk): built in the background, answers byte for byte
 * those read from the Parquet files (relations included: related rows are found by row number),
 * reused after a restart, dropped with their chunk, and not built when the cache limit has no room;
 * on demand, only chunks queries read again get one, and they may take the room of idle forms.
 * The fuzz test (fuzz-property.test.ts) answers every family from local forms as well.
 */

const QUERIES = [
  fullQuery(0, 63),
  fullQuery(21, 50),
  { fromBlock: 0, logs: [{ transaction: true, transactionLogs: true, transactionTraces: true }], fields: ALL_FIELDS },
  { fromBlock: 5, transactions: [{ logs: true, traces: true, stateDiffs: true }], fields: ALL_FIELDS },
  { fromBlock: 0, traces: [{ parents: true, subtraces: true, transaction: true, transactionLogs: true }], fields: ALL_FIELDS },
  { fromBlock: 0, stateDiffs: [{ kind: ['*', '+'], transaction: true }], fields: ALL_FIELDS },
]

async function answer(w: WorkerServer, query: unknown): Promise<string> {
  const res = await fetch(`${w.url}/datasets/anvil/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(query) })
  const text = await res.text()
  assert.equal(res.status, 200, text.slice(0, 300))
  return text
}

const formsOf = (w: WorkerServer) => w.node!.localForms()

/** Block-ordered copies in the local forms databases this process has attached. */
async function copyTables(): Promise<number> {
  const con = await connect()
  try {
    const r = await con.runAndReadAll(`SELECT count(*) FROM duckdb_tables() WHERE suffix(table_name, ${lit(BY_BLOCK_SUFFIX)})`)
    return Number(r.getRows()[0][0])
  } finally {
    con.closeSync()
  }
}

describe('local forms of a worker', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let data: string
  let chunks: ChunkRef[]
  let parquet: WorkerServer
  const running: WorkerServer[] = []
  const common = { heartbeatMs: 200, dropGraceMs: 200, concurrency: 2, queue: 8, queueTimeoutMs: 10_000, budgets: { sizeBytes: 1 << 30, timeMs: 60_000 } }

  /** `formsAfterReads` 0 (every chunk held gets a form) unless a test asks for forms on demand. */
  async function start(label: string, cache: string, limitBytes?: number, formsAfterReads = 0): Promise<{ w: WorkerServer; cache: ChunkCache }> {
    const c = new ChunkCache({ root: cache, label, limitBytes, formsAfterReads })
    const w = new WorkerServer({ ...common, storage: new ArchiveStorage({ roots: [data], cache: c }), id: label })
    running.push(w)
    await w.start('127.0.0.1', 0)
    return { w, cache: c }
  }

  before(async () => {
    tmp = await tempDir('ba-local-forms-')
    data = path.join(tmp.dir, 'anvil')
    chunks = await writeDataset(data, 'anvil', (await anvilRecords()).slice(0, 64), 16)
    // The reference worker lists its chunks once, at start: its answers never need a change of the
    // folder (the chunk the first test moves away lies past the blocks it is asked for then), and
    // a listing every 200 ms for the whole file cost more CPU than its queries.
    parquet = new WorkerServer({ ...common, heartbeatMs: 3_600_000, storage: new LocalStorage(data) })
    running.push(parquet)
    await parquet.start('127.0.0.1', 0)
  })

  after(async () => {
    for (const w of running) await w.stop()
    await tmp?.cleanup()
  })

  it('are built in the background, answer exactly like the Parquet files, and are reused after a restart', async () => {
    const cacheDir = path.join(tmp.dir, 'cache-a')
    const { w, cache } = await start('lf-a', cacheDir)
    await until('forms built', async () => (formsOf(w).pending === 0 && formsOf(w).built === chunks.length) || undefined, 30_000)
    assert.equal(await registrySum('block_archive_worker_local_form_builds_total', { worker: 'lf-a' }), chunks.length)
    assert.ok(cache.forms!.bytes > 0)
    assert.equal(await registrySum('block_archive_worker_local_form_bytes', { worker: 'lf-a' }), cache.forms!.bytes)
    const status = (await (await fetch(`${w.url}/status`)).json()) as { local_forms: unknown }
    assert.deepEqual(status.local_forms, { built: chunks.length, pending: 0 })
    // Each chunk's four item tables (sorted by filter keys in the files) have a block-ordered copy.
    assert.equal(await copyTables(), 4 * chunks.length)
    const expected: string[] = []
    for (const q of QUERIES) {
      const want = await answer(parquet, q)
      expected.push(want)
      assert.ok(want.length > 1000, 'a real answer')
      assert.equal(await answer(w, q), want, JSON.stringify(q).slice(0, 200))
    }

    // Restart on the same cache: the forms are found, none is built again.
    await w.stop()
    const again = await start('lf-a2', cacheDir)
    await until('forms found', async () => (formsOf(again.w).pending === 0 && formsOf(again.w).built === chunks.length) || undefined, 30_000)
    assert.equal(await registrySum('block_archive_worker_local_form_builds_total', { worker: 'lf-a2' }), 0)
    for (const [i, q] of QUERIES.entries()) assert.equal(await answer(again.w, q), expected[i])

    // A chunk that leaves the dataset loses its form once no query reads it.
    const before = again.cache.forms!.bytes
    const last = chunks[chunks.length - 1]
    await rename(path.join(data, last.path), path.join(tmp.dir, 'moved-away'))
    try {
      await until('form dropped', async () => (formsOf(again.w).built === chunks.length - 1 && again.cache.forms!.bytes < before) || undefined, 30_000)
      assert.equal(await answer(again.w, fullQuery(0, 47)), await answer(parquet, fullQuery(0, 47)))
    } finally {
      await rename(path.join(tmp.dir, 'moved-away'), path.join(data, last.path))
    }
    await again.w.stop() // its heartbeats would only add background CPU to the next tests
  })

  it('get block-ordered copies of the tables that ask for one; a form built without them is built again', async () => {
    const dir = path.join(data, chunks[0].path)
    const tables = await chunkTableNames(dir)
    const forms = new LocalForms({ file: path.join(tmp.dir, 'copies', 'forms.duckdb'), label: 'copies' })
    try {
      assert.ok(await forms.build('c0', dir, tables))
      const plain = forms.acquire('c0')!
      assert.equal(plain.byBlock('logs'), undefined)
      forms.release('c0')
      const before = forms.bytes
      const orders = blockOrders(evmFamily)
      assert.deepEqual(Object.keys(orders).sort(), ['logs', 'statediffs', 'traces', 'transactions'])
      assert.ok(await forms.build('c0', dir, tables, orders))
      assert.ok(forms.bytes > before, `${forms.bytes} > ${before} bytes`)
      const local = forms.acquire('c0')!
      const con = await connect()
      try {
        // The same rows, in block and log index order.
        const rows = (sql: string) => con.runAndReadAll(sql).then((r) => r.getRows().map((row) => row.map(String).join()))
        const copy = await rows(`SELECT block_number, log_index, data FROM ${local.byBlock('logs')} ORDER BY rowid`)
        assert.ok(copy.length > 0)
        assert.deepEqual(copy, await rows(`SELECT block_number, log_index, data FROM ${local('logs')} ORDER BY block_number, log_index`))
        assert.notDeepEqual(copy, await rows(`SELECT block_number, log_index, data FROM ${local('logs')} ORDER BY rowid`), 'the file is in another order')
      } finally {
        con.closeSync()
        forms.release('c0')
      }
      // Dropped with the form (other tests' workers may still hold theirs).
      const copies = await copyTables()
      await forms.drop('c0')
      assert.equal(await copyTables(), copies - 4)
    } finally {
      await forms.close()
    }
  })

  it('are not built when the cache limit leaves no room; queries read the Parquet files', async () => {
    const { w, cache } = await start('lf-full', path.join(tmp.dir, 'cache-b'), 1024)
    await until('worker ready', async () => w.node!.readiness().ready || undefined, 30_000)
    // Two passes after the first fetch: still nothing built.
    await new Promise((r) => setTimeout(r, 3 * common.heartbeatMs))
    assert.deepEqual(formsOf(w), { built: 0, pending: chunks.length })
    assert.equal(cache.forms!.bytes, 0)
    assert.equal(await registrySum('block_archive_worker_local_form_builds_total', { worker: 'lf-full' }), 0)
    assert.equal(await answer(w, QUERIES[2]), await answer(parquet, QUERIES[2]))
  })

  it('on demand: only chunks that queries read again get a form, and answers stay the same', async () => {
    const { w } = await start('lf-demand', path.join(tmp.dir, 'cache-c'), undefined, 2)
    await until('worker ready', async () => w.node!.readiness().ready || undefined, 30_000)
    // Passes after the fetch: nothing is due a form yet.
    await new Promise((r) => setTimeout(r, 3 * common.heartbeatMs))
    assert.deepEqual(formsOf(w), { built: 0, pending: 0 })
    // Blocks 16..31: the second chunk only.
    const q = fullQuery(16, 31)
    const want = await answer(parquet, q)
    assert.equal(await answer(w, q), want)
    // Within a minute of the first, another read is the same client continuing: it does not count.
    assert.equal(await answer(w, q), want)
    await new Promise((r) => setTimeout(r, 2 * common.heartbeatMs))
    assert.deepEqual(formsOf(w), { built: 0, pending: 0 }, 'read once: still no form')
    const window = formReads.windowMs
    formReads.windowMs = 0
    try {
      assert.equal(await answer(w, q), want)
    } finally {
      formReads.windowMs = window
    }
    await until('the form of the chunk read twice', async () => (formsOf(w).built === 1 && formsOf(w).pending === 0) || undefined, 60_000)
    assert.equal(await registrySum('block_archive_worker_local_form_builds_total', { worker: 'lf-demand' }), 1)
    assert.equal(await answer(w, q), want, 'from the form')
    await w.stop()
  })

  it('on demand, take the room of forms no query has read for a while', async () => {
    const dirOf = (i: number) => path.join(data, chunks[i].path)
    const room = { bytes: Number.MAX_SAFE_INTEGER }
    const forms = new LocalForms({ file: path.join(tmp.dir, 'evict', 'forms.duckdb'), label: 'evict', room: () => room.bytes })
    const orders = blockOrders(evmFamily)
    const idle = formIdle.ms
    try {
      assert.ok(await forms.build('c0', dirOf(0), await chunkTableNames(dirOf(0)), orders, { evictIdle: true }))
      // Room for about one form and a half.
      room.bytes = Math.round(forms.bytes * 1.5)
      // c0 was just built: not idle, so c1 gets no room.
      assert.equal(await forms.build('c1', dirOf(1), await chunkTableNames(dirOf(1)), orders, { evictIdle: true }), false)
      assert.ok(forms.has('c0') && !forms.has('c1'))
      // Without evictIdle an idle form stays too.
      formIdle.ms = 0
      assert.equal(await forms.build('c1', dirOf(1), await chunkTableNames(dirOf(1)), orders), false)
      assert.ok(forms.has('c0'))
      // A form in use is never dropped.
      assert.ok(forms.acquire('c0'))
      assert.equal(await forms.build('c1', dirOf(1), await chunkTableNames(dirOf(1)), orders, { evictIdle: true }), false)
      assert.ok(forms.has('c0'))
      forms.release('c0')
      // Idle and unused: it makes room.
      assert.ok(await forms.build('c1', dirOf(1), await chunkTableNames(dirOf(1)), orders, { evictIdle: true }))
      assert.ok(!forms.has('c0') && forms.has('c1'))
      assert.ok(forms.bytes <= room.bytes, `${forms.bytes} ≤ ${room.bytes}`)
    } finally {
      formIdle.ms = idle
      await forms.close()
    }
  })
})
