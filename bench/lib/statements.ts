import { duckdbApi } from '../../src/db.js'

export interface Statement {
  /** The SQL text as the connection was given it. */
  sql: string
  /** From the call to the last row read (a streamed statement also counts the JS work between its chunks). */
  ms: number
}

/**
 * Hands `record` every statement a DuckDB connection of this process runs from now on (`run`,
 * `stream`), as it starts; its `ms` grows as its rows are read. Every build of the engine loaded in
 * the process shares the `@duckdb/node-api` module, so this sees them all. Call it once.
 */
export function watchStatements(record: (s: Statement) => void): void {
  const proto = duckdbApi().DuckDBConnection.prototype as unknown as Record<string, (...a: unknown[]) => Promise<any>>
  for (const name of ['run', 'stream']) {
    const original = proto[name]
    proto[name] = async function (this: unknown, ...a: unknown[]) {
      const t0 = performance.now()
      const result = await original.apply(this, a)
      const entry: Statement = { sql: String(a[0]), ms: performance.now() - t0 }
      record(entry)
      const done = () => (entry.ms = performance.now() - t0)
      for (const read of ['fetchAllChunks', 'fetchChunk']) {
        const f = result[read]?.bind(result)
        if (f) result[read] = async () => {
          const out = await f()
          done()
          return out
        }
      }
      return result
    }
  }
}
