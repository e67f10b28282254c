import type { DuckDBConnection } from '@duckdb/node-api'
import { connect } from '../db.js'

/** What the engine asks of a DuckDB connection. */
export type Sql = Pick<DuckDBConnection, 'run' | 'stream' | 'runAndReadAll'>

/**
 * A connection opened at its first statement. A warm answer that the chunk summaries and the
 * header cache settle runs none, and a connection costs ≈ 0.2 ms of CPU and 0.3 ms of wall to open
 * and close (docs/benchmark-history.md, step 31): a query over 10 ruled-out chunks opened two.
 */
export class LazyConnection implements Sql {
  private con?: Promise<DuckDBConnection>
  private closed = false

  private open(): Promise<DuckDBConnection> {
    if (this.closed) throw new Error('the connection is closed')
    return (this.con ??= connect())
  }

  run: DuckDBConnection['run'] = async (...a) => (await this.open()).run(...a)
  stream: DuckDBConnection['stream'] = async (...a) => (await this.open()).stream(...a)
  runAndReadAll: DuckDBConnection['runAndReadAll'] = async (...a) => (await this.open()).runAndReadAll(...a)

  /** Closes it once opened (at once, or when its opening ends). */
  closeSync(): void {
    this.closed = true
    this.con?.then((c) => c.closeSync(), () => undefined)
  }
}
