import { createRequire } from 'node:module'
import type { DuckDBConnection, DuckDBInstance } from '@duckdb/node-api'

/*
 * One DuckDB instance per process. Connections are cheap; each concurrent job takes its own so that
 * statements do not interleave. DuckDB's library is loaded at the first statement, not at import
 * (about 0.3 s of CPU): commands that import this module for its helpers (`router`, `query` to
 * the terminal) never load it.
 */

let instance: Promise<DuckDBInstance> | undefined

type DuckDBApi = typeof import('@duckdb/node-api')
let api: DuckDBApi | undefined

/**
 * DuckDB's JS API, loaded with `require`: imported as an ES module, Node scans each of the package's
 * ~180 CommonJS files for its exports, 0.2–0.3 s of CPU more per process (every ingest, worker and
 * test file) than `require`, which shares the module with any later `import` of it.
 */
export function duckdbApi(): DuckDBApi {
  return (api ??= createRequire(import.meta.url)('@duckdb/node-api') as DuckDBApi)
}

/*
 * jemalloc's background thread purges freed pages when their decay time is up (fast-path.ts sets
 * it); without it a thread's freed pages are purged only when that thread allocates again. Building
 * the local forms of 5 chunks under a 256MB limit, in process: peak RSS 412 MB instead of 580, and
 * 237 MB instead of 398 once done (docs/serving.md, "Memory").
 */
const ALWAYS = { allocator_background_threads: 'true' }

export interface DbOptions {
  threads?: number
  /** DuckDB's `memory_limit` (e.g. `256MB`): its buffer pool, query intermediates and temp tables. */
  memoryLimit?: string
  /** Where DuckDB writes what does not fit under the memory limit (its `temp_directory`; by default `.tmp` in the working folder). */
  spillFolder?: string
  /** The most DuckDB may spill at once (its `max_temp_directory_size`, e.g. `4GB`). */
  spillLimit?: string
}

/*
 * The options only: the instance starts at the first statement. Creating it runs on a DuckDB thread;
 * a command that fails before its first statement (a data folder that does not exist) must not
 * exit while that creation is still under way, or its completion lands in a torn-down thread and
 * aborts the process natively (`terminate called after throwing an instance of 'Napi::Error'`).
 */
let configured: Record<string, string> | undefined

export function configureDb(opts: DbOptions): void {
  if (instance || configured) throw new Error('DuckDB is already configured; configure it once, before first use')
  configured = {
    ...ALWAYS,
    ...(opts.threads ? { threads: String(opts.threads) } : {}),
    ...(opts.memoryLimit ? { memory_limit: opts.memoryLimit } : {}),
    ...(opts.spillFolder ? { temp_directory: opts.spillFolder } : {}),
    ...(opts.spillLimit ? { max_temp_directory_size: opts.spillLimit } : {}),
  }
}

/** An instance nobody configured (a library user's process, a test) takes its threads from `BLOCK_ARCHIVE_DB_THREADS`, as the commands do. */
function unconfigured(): Record<string, string> {
  const threads = Number(process.env.BLOCK_ARCHIVE_DB_THREADS)
  return Number.isInteger(threads) && threads > 0 ? { ...ALWAYS, threads: String(threads) } : ALWAYS
}

export async function getDb(): Promise<DuckDBInstance> {
  if (!instance) instance = Promise.resolve().then(() => duckdbApi().DuckDBInstance.create(':memory:', configured ?? unconfigured()))
  return instance
}

/** Resolves once DuckDB's start, if one is under way, has finished (so the process may exit). */
export async function dbSettled(): Promise<void> {
  await instance?.catch(() => undefined)
}

/** Whether this process has started DuckDB (metrics do not start it). */
export const dbStarted = () => instance !== undefined

export async function connect(): Promise<DuckDBConnection> {
  return (await getDb()).connect()
}

export interface DbSettings {
  memory_limit: string
  threads: number
  temp_directory: string
  max_temp_directory_size: string
}

let settings: Promise<DbSettings> | undefined

/** The resource settings DuckDB runs with, as DuckDB reports them (worker `/status`); read once, they are fixed at start. */
export function dbSettings(): Promise<DbSettings> {
  if (!settings) {
    settings = readSettings()
    settings.catch(() => (settings = undefined))
  }
  return settings
}

async function readSettings(): Promise<DbSettings> {
  const con = await connect()
  try {
    const r = await con.runAndReadAll(
      "SELECT current_setting('memory_limit'), current_setting('threads'), current_setting('temp_directory'), current_setting('max_temp_directory_size')",
    )
    const [memory, threads, temp, maxTemp] = r.getRows()[0]
    return { memory_limit: String(memory), threads: Number(threads), temp_directory: String(temp), max_temp_directory_size: String(maxTemp) }
  } finally {
    con.closeSync()
  }
}

export { ident, lit } from './sql-text.js'

/** Run `body` in one transaction: committed when it returns, rolled back when it throws. */
export async function inTransaction(con: DuckDBConnection, body: () => Promise<void>): Promise<void> {
  await con.run('BEGIN TRANSACTION')
  try {
    await body()
    await con.run('COMMIT')
  } catch (e) {
    await con.run('ROLLBACK').catch(() => undefined)
    throw e
  }
}
