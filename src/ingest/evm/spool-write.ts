import { readFile } from 'node:fs/promises'
import type { DuckDBConnection } from '@duckdb/node-api'
import { ident } from '../../sql-text.js'
import type { BlockRows, Row } from '../../chunks/rows.js'
import type { SpoolWriter } from '../../chunks/writer.js'
import { BadRpcAnswer, MalformedRpcData } from '../source.js'
import { lowerHexDeep, normalizeEvmBlock } from './normalize.js'
import { checkBlock } from './source.js'
import { jsonToLower, SPOOLED_TABLES, spoolCheckFailure, spoolQueriesOver } from './sql-normalize.js'

/*
 * The chunk writer's side of the EVM spool (spool-fetch.ts): at chunk close the spooled answers
 * become the blocks, transactions and logs temp tables (sql-normalize.ts). When a check fails (or
 * DuckDB cannot read an answer as the declared types), the chunk's answers are read again in JS,
 * block by block, through the checks of today's JS path (`checkBlock`, `normalizeEvmBlock`), so the
 * ingest stops with the same error naming the block and the method as without a spool.
 *
 * A small chunk (its answers at most `jsBelowBytes`, `--normalizer auto`) is normalised in JS at its
 * close instead, through the same checks and normaliser: the statements cost about 70 ms of planning
 * and setting up each however few rows they read, the JS path a few ms per small block.
 */

/**
 * `--normalizer auto`: chunks with at most this many bytes of answers are normalised in JS at close.
 * CPU per chunk of mainnet blocks (0.79 MB of answers each), SQL against JS, one DuckDB thread: 1 block
 * 218–249 / 63–93 ms, 4 blocks 266–373 / 181–216, 8 blocks 375–503 / 232–277, 16 blocks 511–546 /
 * 421–466, 32 blocks 696–769 / 862–985 (docs/ingest.md, "Small chunks"). Below the crossover, with a
 * margin for the close's time on the loop's thread, which the statements leave free.
 */
export const JS_BELOW_BYTES = 4 * 1024 * 1024

export class EvmSpoolWriter implements SpoolWriter {
  readonly tables = SPOOLED_TABLES

  /**
   * `methodOf`: the RPC method a normaliser complaint is about (fetch.ts). `jsBelowBytes`: chunks with
   * at most this many bytes of answers are normalised in JS (0: every chunk in SQL).
   */
  constructor(private readonly methodOf: (message: string) => string, private readonly jsBelowBytes = 0) {}

  /** A small chunk's rows, normalised in JS (block order; the writer sorts them); undefined: the SQL way. */
  async rows(files: Record<string, string>[], first: number, last: number, bytes: number): Promise<Record<string, Row[]> | undefined> {
    if (bytes > this.jsBelowBytes) return undefined
    const out: Record<string, Row[]> = Object.fromEntries(this.tables.map((t) => [t, []]))
    const failed = await this.eachBlock(files, first, last, (rows) => {
      for (const t of this.tables) for (const r of rows[t] ?? []) out[t].push(r)
    })
    if (failed) throw failed
    return out
  }

  /**
   * The tables' SELECTs over the spool. Checked (some answer had upper-case hex): the rows go into temp
   * tables first, so that JSON-valued columns with upper-case hex can be rewritten lower-cased (rare).
   */
  async prepare(con: DuckDBConnection, files: Record<string, string>[], first: number, last: number, prefix: string, checked: boolean): Promise<Record<string, string>> {
    const queries = await spoolQueriesOver({ blockFiles: files.map((f) => f.blocks), receiptFiles: files.map((f) => f.receipts), first, last, checked })
    if (!checked) return queries
    const tables: Record<string, string> = {}
    for (const [table, select] of Object.entries(queries)) {
      tables[table] = `temp.main.${ident(`${prefix}_${table}`)}`
      await con.run(`CREATE TEMP TABLE ${ident(`${prefix}_${table}`)} AS ${select}`)
    }
    for (const fix of await jsonToLower(con, tables)) {
      const text = JSON.stringify(lowerHexDeep(JSON.parse(fix.text)))
      await con.run(`UPDATE ${tables[fix.table]} SET ${ident(fix.column)} = $1 WHERE rowid = $2`, [text, fix.rowid])
    }
    return Object.fromEntries(Object.entries(tables).map(([t, name]) => [t, `SELECT * FROM ${name}`]))
  }

  async release(con: DuckDBConnection, prefix: string): Promise<void> {
    for (const table of this.tables) await con.run(`DROP TABLE IF EXISTS temp.main.${ident(`${prefix}_${table}`)}`)
  }

  /**
   * A failed check (or DuckDB unable to read an answer as the declared types): the chunk's answers are
   * read again in JS and the first block the JS checks reject gives the error; else the check's own.
   */
  async failure(error: unknown, files: Record<string, string>[], first: number, last: number): Promise<unknown> {
    const message = error instanceof Error ? error.message : String(error)
    const check = spoolCheckFailure(message)
    if (!check && !/Conversion Error|Invalid Input Error|JSON|Malformed/i.test(message)) return error
    const explained = await this.explain(files, first, last)
    if (explained) return explained
    if (!check) return new Error(`blocks ${first}-${last}: DuckDB could not read the spooled RPC answers: ${message}`)
    const method = check.what === 'logs' ? this.methodOf('receipt') : 'eth_getBlockByNumber'
    return new BadRpcAnswer(check.block, method, `the ${check.what} fail a check of the SQL normaliser (src/ingest/evm/sql-normalize.ts)`)
  }

  /** The first block of the range that the JS checks reject, as the error they raise (one file pair in memory at a time). */
  private explain(files: Record<string, string>[], first: number, last: number): Promise<Error | undefined> {
    return this.eachBlock(files, first, last, () => undefined)
  }

  /**
   * Each block of `first`..`last` in the files through the JS checks and normaliser, in block order
   * per file pair (one pair in memory at a time); the first block they reject ends it, as the error
   * they raise.
   */
  private async eachBlock(files: Record<string, string>[], first: number, last: number, each: (rows: BlockRows) => void): Promise<Error | undefined> {
    for (const f of files) {
      const lines = async (file: string): Promise<{ id: number; result: any }[]> => (await readFile(file, 'utf8')).split('\n').filter((x) => x).map((x) => JSON.parse(x))
      const blocks = await lines(f.blocks)
      const receipts = new Map<number, any[]>((await lines(f.receipts)).map((a) => [a.id, a.result]))
      for (const { id, result } of blocks.sort((a, b) => a.id - b.id)) {
        if (id < first || id > last) continue
        try {
          checkBlock(id, result)
          each(normalizeEvmBlock({ block: result, receipts: receipts.get(id) ?? [] }))
        } catch (e: any) {
          return e instanceof MalformedRpcData ? new BadRpcAnswer(id, this.methodOf(e.message), e.message) : e
        }
      }
    }
    return undefined
  }
}
