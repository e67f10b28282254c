import { readFile } from 'node:fs/promises'
import type { DuckDBConnection } from '@duckdb/node-api'
import { ident } from '../../db.js'
import type { SpoolWriter } from '../../chunks/writer.js'
import { BadRpcAnswer, MalformedRpcData } from '../source.js'
import { lowerHexDeep, normalizeEvmBlock } from './normalize.js'
import { checkBlock } from './source.js'
import { jsonToLower, SPOOLED_TABLES, spoolToTables } from './sql-normalize.js'

/*
 * The chunk writer's side of the EVM spool (spool-fetch.ts): at chunk close the spooled answers
 * become the blocks, transactions and logs temp tables (sql-normalize.ts). When a check fails (or
 * DuckDB cannot read an answer as the declared types), the chunk's answers are read again in JS,
 * block by block, through the checks of today's JS path (`checkBlock`, `normalizeEvmBlock`), so the
 * ingest stops with the same error naming the block and the method as without a spool.
 */

export class EvmSpoolWriter implements SpoolWriter {
  readonly tables = SPOOLED_TABLES

  /** `methodOf`: the RPC method a normaliser complaint is about (fetch.ts). */
  constructor(private readonly methodOf: (message: string) => string) {}

  async build(con: DuckDBConnection, files: Record<string, string>[], first: number, last: number, prefix: string, checked: boolean): Promise<Record<string, string>> {
    const input = { blockFiles: files.map((f) => f.blocks), receiptFiles: files.map((f) => f.receipts), first, last, checked }
    let result: Awaited<ReturnType<typeof spoolToTables>>
    try {
      result = await spoolToTables(con, input, prefix)
    } catch (e: any) {
      throw (await this.explain(files, first, last)) ?? new Error(`blocks ${first}-${last}: DuckDB could not read the spooled RPC answers: ${e?.message ?? e}`)
    }
    if (result.bad.length) {
      await this.drop(con, result.tables)
      const { block, what } = result.bad[0]
      const method = what === 'logs' || what === 'receipts' ? this.methodOf('receipt') : 'eth_getBlockByNumber'
      throw (await this.explain(files, first, last)) ?? new BadRpcAnswer(block, method, `the ${what} fail a check of the SQL normaliser (sql-normalize.ts)`)
    }
    for (const fix of checked ? await jsonToLower(con, result.tables) : []) {
      const text = JSON.stringify(lowerHexDeep(JSON.parse(fix.text)))
      await con.run(`UPDATE ${result.tables[fix.table]} SET ${ident(fix.column)} = $1 WHERE rowid = $2`, [text, fix.rowid])
    }
    return result.tables
  }

  async drop(con: DuckDBConnection, tables: Record<string, string>): Promise<void> {
    for (const t of Object.values(tables)) await con.run(`DROP TABLE IF EXISTS ${t}`)
  }

  /** The first block of the range that the JS checks reject, as the error they raise (one file pair in memory at a time). */
  private async explain(files: Record<string, string>[], first: number, last: number): Promise<Error | undefined> {
    for (const f of files) {
      const lines = async (file: string): Promise<{ id: number; result: any }[]> => (await readFile(file, 'utf8')).split('\n').filter((x) => x).map((x) => JSON.parse(x))
      const blocks = await lines(f.blocks)
      const receipts = new Map<number, any[]>((await lines(f.receipts)).map((a) => [a.id, a.result]))
      for (const { id, result } of blocks.sort((a, b) => a.id - b.id)) {
        if (id < first || id > last) continue
        try {
          checkBlock(id, result)
          normalizeEvmBlock({ block: result, receipts: receipts.get(id) ?? [] })
        } catch (e: any) {
          return e instanceof MalformedRpcData ? new BadRpcAnswer(id, this.methodOf(e.message), e.message) : e
        }
      }
    }
    return undefined
  }
}
