import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import { mkdir, readdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { after, before, describe, it } from 'node:test'
import { configureDb, connect, dbSettings } from '../src/db.js'
import { workerDbThreads } from '../src/commands/serve.js'
import { DEAR_FAULT_MICROS, KEEPING_MALLOC_CONF, LEAN_MALLOC_CONF, mallocConfFor } from '../src/fast-path.js'
import { spillFolder } from '../src/storage/chunk-cache.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { STALL_TOLERANT_ROUTER, killChildren, runCli, startCli, until } from './helpers/cli.js'
import { fullQuery } from './helpers/reference-evm.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'

/*
 * DuckDB's resources as a worker runs with them: its memory limit (smaller by default with local
 * forms) and its spill folder in the cache folder, read back from DuckDB itself (worker `/status`
 * → `duckdb`, from `current_setting`), and DuckDB really spilling into that folder; a query that
 * finds DuckDB's memory taken is refused with a retryable 503, and the worker goes on.
 */

// This file checks the defaults: the workers it starts must not inherit the suite's one DuckDB thread
// nor its jemalloc decay times (helpers/suite-env.ts).
delete process.env.BLOCK_ARCHIVE_DB_THREADS
delete process.env.DUCKDB_JE_MALLOC_CONF

/** A pid no process has (above Linux's largest pid_max). */
const GONE = 2 ** 31 - 2

describe('DuckDB resources of a worker', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let spillRoot: string
  let folder: string

  before(async () => {
    tmp = await tempDir('ba-duckdb-resources-')
    // What earlier processes left: one no longer running, and one with this process's pid.
    spillRoot = path.join(tmp.dir, 'in-process')
    for (const pid of [GONE, process.pid]) {
      await mkdir(path.join(spillRoot, `.duckdb-spill-${pid}`), { recursive: true })
      await writeFile(path.join(spillRoot, `.duckdb-spill-${pid}`, 'duckdb_temp_storage_DEFAULT-0.tmp'), Buffer.alloc(4096))
    }
    folder = spillFolder(spillRoot)
    // This test process's own DuckDB, configured before anything starts it.
    configureDb({ spillFolder: folder, spillLimit: '1GB' })
    await writeDataset(path.join(tmp.dir, 'data', 'anvil'), 'anvil', (await anvilRecords()).slice(0, 32), 16)
  })

  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  it('spills what does not fit under the memory limit into the spill folder, after removing what gone processes left there', async () => {
    assert.deepEqual(await readdir(spillRoot), [], 'left-over spill folders are removed, and ours is not created before DuckDB needs it')
    assert.equal(folder, path.join(spillRoot, `.duckdb-spill-${process.pid}`))
    const { temp_directory, max_temp_directory_size } = await dbSettings()
    assert.deepEqual({ temp_directory, max_temp_directory_size }, { temp_directory: folder, max_temp_directory_size: '953.6 MiB' })
    const con = await connect()
    const limit = (await con.runAndReadAll("SELECT current_setting('memory_limit')")).getRows()[0][0]
    try {
      // About 100 MB of rows in a temporary table, under a 64 MB limit.
      await con.run("SET memory_limit = '64MB'")
      await con.run(`CREATE TEMP TABLE big AS SELECT i, repeat('x', 100) || i AS s FROM range(1000000) t(i)`)
      const files = (await con.runAndReadAll('SELECT path FROM duckdb_temporary_files()')).getRows().map(([p]) => String(p))
      assert.ok(files.length > 0, 'DuckDB spilled nothing')
      for (const f of files) assert.equal(path.dirname(f), folder)
      assert.ok((await readdir(folder)).length > 0)
      assert.equal(Number((await con.runAndReadAll('SELECT count(*) FROM big')).getRows()[0][0]), 1_000_000)
    } finally {
      await con.run('DROP TABLE IF EXISTS big').catch(() => undefined)
      await con.run(`SET memory_limit = '${limit}'`)
      con.closeSync()
    }
  })

  it('a worker process with local forms runs DuckDB with the smaller default limit and spills into its cache folder; --db-memory and --db-spill set them', async () => {
    const router = await startCli(['router', '--data', path.join(tmp.dir, 'data'), '--port', '0', ...STALL_TOLERANT_ROUTER], ['router'])
    const routerUrl = router.lines.get('router')![0]
    const cache = path.join(tmp.dir, 'cache')
    await mkdir(path.join(cache, `.duckdb-spill-${GONE}`), { recursive: true })
    const worker = async (...flags: string[]) => workerWith({}, ...flags)
    const workerWith = async (env: Record<string, string>, ...flags: string[]) => {
      const w = await startCli(['worker', '--router', routerUrl, '--port', '0', '--heartbeat-ms', '200', ...flags], ['worker'], env)
      const url = w.lines.get('worker')![0]
      return { pid: w.child.pid!, stderr: w.stderr, status: async () => (await (await fetch(`${url}/status`)).json()) as any }
    }

    const forms = await worker('--cache', cache, '--forms-after', '0')
    const s = await forms.status()
    // DuckDB's jemalloc decay, chosen by what a page fault costs on this machine (src/fast-path.ts);
    // the serving thread reports what the main thread measured and set.
    assert.equal(s.node.thread, 'serving')
    assert.ok(typeof s.node.page_fault_us === 'number' && s.node.page_fault_us >= 0, `page_fault_us: ${s.node.page_fault_us}`)
    assert.equal(s.node.jemalloc, mallocConfFor(s.node.page_fault_us))
    // DuckDB threads: the cores left beside the worker's 2 queries at once (its default --concurrency), at least 1.
    assert.equal(workerDbThreads(2), Math.max(1, availableParallelism() - 1))
    assert.deepEqual(s.duckdb, { memory_limit: '183.1 MiB', threads: workerDbThreads(2), temp_directory: path.join(cache, `.duckdb-spill-${forms.pid}`), max_temp_directory_size: '3.7 GiB' })
    assert.ok(!existsSync(path.join(cache, `.duckdb-spill-${GONE}`)), 'the spill folder of a process no longer running is removed at start')
    // It serves from its cache folder as before (the spill folder is not taken for a dataset).
    await until('forms built', async () => ((await forms.status()).local_forms?.built === 2 ? true : undefined), 30_000)

    const set = await worker('--cache', path.join(tmp.dir, 'cache-2'), '--db-memory', '300MB', '--db-spill', '1GB', '--db-threads', '3')
    assert.equal((await set.status()).duckdb.memory_limit, '286.1 MiB')
    assert.equal((await set.status()).duckdb.threads, 3)
    assert.equal((await set.status()).duckdb.max_temp_directory_size, '953.6 MiB')

    // A jemalloc setting of the user's is kept as it is, and nothing is measured; the start line says which.
    const ownWorker = await workerWith({ DUCKDB_JE_MALLOC_CONF: 'dirty_decay_ms:500,muzzy_decay_ms:0', LOG_LEVEL: 'info', LOG_FORMAT: 'json' })
    const own = (await ownWorker.status()).node
    assert.deepEqual([own.jemalloc, own.page_fault_us], ['dirty_decay_ms:500,muzzy_decay_ms:0', null])
    const listening = ownWorker.stderr().split('\n').filter((l) => l.includes('"worker listening"')).map((l) => JSON.parse(l))
    assert.equal(listening.length, 1, ownWorker.stderr())
    assert.deepEqual([listening[0].jemalloc, listening[0].pageFaultUs], ['dirty_decay_ms:500,muzzy_decay_ms:0', null])

    // Without a cache folder there are no forms: DuckDB's own limit (80 % of RAM) and spill folder.
    const plain = (await (await worker()).status()).duckdb
    assert.notEqual(plain.memory_limit, '183.1 MiB')
    assert.equal(plain.temp_directory, '.tmp')
    assert.equal(plain.max_temp_directory_size, '3.7 GiB')

    const bad = await runCli(['worker', '--router', routerUrl, '--db-memory', 'lots'])
    assert.notEqual(bad.code, 0)
    assert.match(bad.stderr, /--db-memory/)
    assert.match(bad.stderr, /512MB/)
  })

  it('returns freed memory to the system after 250 ms only where a page fault is cheap', () => {
    assert.equal(mallocConfFor(0.3), LEAN_MALLOC_CONF)
    assert.equal(mallocConfFor(DEAR_FAULT_MICROS - 0.01), LEAN_MALLOC_CONF)
    assert.equal(mallocConfFor(DEAR_FAULT_MICROS), KEEPING_MALLOC_CONF)
    assert.equal(mallocConfFor(13), KEEPING_MALLOC_CONF)
  })

  it('a process that configures no DuckDB of its own (the engine as a library) takes its threads from BLOCK_ARCHIVE_DB_THREADS', () => {
    const db = pathToFileURL(fileURLToPath(new URL('../src/db.js', import.meta.url))).href
    const script = `import { dbSettings } from ${JSON.stringify(db)}; console.log((await dbSettings()).threads)`
    const threads = (value?: string) => {
      const env = { ...process.env }
      if (value === undefined) delete env.BLOCK_ARCHIVE_DB_THREADS
      else env.BLOCK_ARCHIVE_DB_THREADS = value
      return Number(execFileSync(process.execPath, ['--input-type=module', '-e', script], { env, encoding: 'utf8' }).trim())
    }
    const cores = threads()
    assert.ok(cores >= 1, `DuckDB's own default: ${cores}`)
    assert.equal(threads('3'), 3)
    assert.equal(threads('1'), 1)
    // Not a positive whole number: DuckDB's own default.
    assert.equal(threads('0'), cores)
    assert.equal(threads('two'), cores)
  })

  it('a query that finds the memory limit taken gets a retryable 503 naming --db-memory, and the next one is answered', async () => {
    const w = new WorkerServer({
      id: 'oom', storage: new LocalStorage(path.join(tmp.dir, 'data', 'anvil')), heartbeatMs: 3_600_000, dropGraceMs: 1000,
      concurrency: 2, queue: 8, queueTimeoutMs: 10_000, budgets: { sizeBytes: 1 << 30, timeMs: 60_000 },
    })
    await w.start('127.0.0.1', 0)
    const con = await connect()
    const limit = String((await con.runAndReadAll("SELECT current_setting('memory_limit')")).getRows()[0][0])
    const ask = () => fetch(`${w.url}/datasets/anvil/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(fullQuery(0, 31)) })
    try {
      await until('worker ready', async () => w.node!.readiness().ready || undefined, 30_000)
      // The memory limit of this process's DuckDB (the worker's), far below what a query needs.
      await con.run("SET memory_limit = '1MB'")
      const refused = await ask()
      assert.equal(refused.status, 503)
      assert.equal(refused.headers.get('retry-after'), '1')
      const body = (await refused.json()) as { error: string; message: string }
      assert.equal(body.error, 'busy')
      assert.match(body.message, /--db-memory/)
      await con.run(`SET memory_limit = '${limit}'`)
      const answered = await ask()
      assert.equal(answered.status, 200)
      assert.equal(((await answered.json()) as unknown[]).length, 32)
    } finally {
      await con.run(`SET memory_limit = '${limit}'`)
      con.closeSync()
      await w.stop()
    }
  })
})
