import { ident } from '../db.js'
import type { ChunkPlan, SelectedBlock, SliceRows } from './chunk-plan.js'
import type { ChunkSql } from './chunk-sql.js'
import { cachedHeader, keepHeader } from './header-cache.js'
import type { Sql } from './lazy-connection.js'
import { bigintNumbers, varcharBytes } from '../fast-path.js'
import type { RowTexts } from './row-texts.js'
import { outputFields } from './sql.js'

/*
 * Chunks whose answer holds headers only (a query without item kinds, or a chunk the summaries
 * rule out): the headers' JSON is read with the candidate blocks, or kept between queries
 * (header-cache.ts), and the slices need no statement at all.
 */

export class HeadersPlan implements ChunkPlan {
  constructor(
    readonly candidates: SelectedBlock[],
    readonly headers: Map<number, Uint8Array>,
    private readonly texts: RowTexts,
  ) {}

  async *slice(lo: number, hi: number): AsyncGenerator<SliceRows> {
    const rows = { block: [] as number[], kind: [] as number[], json: [] as number[] }
    for (const b of this.candidates) {
      if (b.number < lo || b.number > hi) continue
      rows.block.push(b.number)
      rows.kind.push(0)
      rows.json.push(this.texts.add(this.headers.get(b.number)!))
    }
    yield rows
  }
}

/**
 * A chunk that no request can match, holding every block of its range: the answer holds at most
 * the range's first and last blocks.
 */
export async function boundaryHeaders(con: Sql, sql: ChunkSql, texts: RowTexts): Promise<HeadersPlan> {
  const numbers = sql.from === sql.to ? [sql.from] : [sql.from, sql.to]
  const json = await readHeaders(con, sql, numbers)
  return new HeadersPlan(
    numbers.map((number, i) => ({ number, weight: json[i].length, items: false })),
    new Map(numbers.map((n, i) => [n, json[i]])),
    texts,
  )
}

/** Header JSON of existing blocks, kept in memory for the next query (see header-cache.ts). */
export async function readHeaders(con: Sql, sql: ChunkSql, blocks: number[]): Promise<Uint8Array[]> {
  const header = sql.plan.family.header
  const dir = sql.chunk.dir
  const fields = outputFields(header, sql.selected(header)).join(',')
  const found = new Map<number, Uint8Array>()
  for (const b of blocks) {
    const json = cachedHeader(dir, b, fields)
    if (json) found.set(b, json)
  }
  const missing = blocks.filter((b) => !found.has(b))
  if (missing.length > 0) {
    const blockCol = ident(sql.blockCol)
    const result = await con.run(
      `SELECT src.${blockCol}::BIGINT, ${sql.headerText('src')} FROM ${sql.file(header.table)} src WHERE src.${blockCol} IN (${missing.join(', ')})`,
    )
    for (const chunk of await result.fetchAllChunks()) {
      const numbers: number[] = []
      const json: Uint8Array[] = []
      bigintNumbers(chunk, 0, numbers)
      varcharBytes(chunk, 1, json)
      numbers.forEach((n, i) => {
        found.set(n, json[i])
        keepHeader(dir, n, fields, json[i])
      })
    }
  }
  return blocks.map((b) => {
    const json = found.get(b)
    if (!json) throw new Error(`block ${b} is not in chunk ${dir}`)
    return json
  })
}
