import { DuckDBConnection, DuckDBInstance } from '@duckdb/node-api'

/*
 * One DuckDB instance per process. Connections are cheap; each concurrent job takes its own so that
 * statements do not interleave.
 */

let instance: Promise<DuckDBInstance> | undefined

export interface DbOptions {
  threads?: number
  memoryLimit?: string
}

export function configureDb(opts: DbOptions): void {
  if (instance) throw new Error('DuckDB is already started; configure it before first use')
  instance = DuckDBInstance.create(':memory:', {
    ...(opts.threads ? { threads: String(opts.threads) } : {}),
    ...(opts.memoryLimit ? { memory_limit: opts.memoryLimit } : {}),
  })
}

export async function getDb(): Promise<DuckDBInstance> {
  if (!instance) instance = DuckDBInstance.create(':memory:')
  return instance
}

/** Whether this process has started DuckDB (metrics do not start it). */
export const dbStarted = () => instance !== undefined

export async function connect(): Promise<DuckDBConnection> {
  return (await getDb()).connect()
}

/** Quote a SQL identifier (column names such as `from`, `to`, `key` are keywords). */
export const ident = (name: string) => `"${name.replace(/"/g, '""')}"`

/** Quote a SQL string literal. */
export const lit = (value: string) => `'${value.replace(/'/g, "''")}'`

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
