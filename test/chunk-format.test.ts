import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { generateDataset } from '../src/bench-data/generate.js'
import { loadTemplates } from '../src/bench-data/templates.js'
import { chunkTableNames, listLocalChunks, type ChunkRef } from '../src/chunks/layout.js'
import { PARQUET_BEFORE, PARQUET_DEFAULTS } from '../src/chunks/writer.js'
import { connect, lit } from '../src/db.js'
import { blockOrders } from '../src/families/declaration.js'
import { evmFamily } from '../src/families/evm.js'
import { prepareQuery } from '../src/query/engine.js'
import type { DatasetView } from '../src/query/types.js'
import { LocalForms } from '../src/storage/local-forms.js'
import { SHAPES } from '../bench/lib/shapes.js'
import { tempDir } from './helpers/dataset.js'
import { fullQuery } from './helpers/reference-evm.js'

/*
 * The chunk format the writer makes (`PARQUET_DEFAULTS`) against the one it made
 * before (`PARQUET_BEFORE`): the same blocks (mainnet-like blocks tiled from the recorded ones in
 * fixtures/, by the bench-data generator with one seed) written both ways, and every query shape of
 * the benchmarks (bench/lib/shapes.ts) plus whole-range queries of every kind answered from each,
 * byte for byte; and from a worker's local form of the new chunk.
 */

/**
 * Blocks of the fixture: 16 fill more than one row group in the traces and statediffs files (row 10,240
 * of the traces is in block 12: the range 5–13 below reads across that border).
 */
const BLOCKS = 16

describe('chunk format: the new writer settings answer byte for byte as the old', { timeout: 300_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  const roots = { before: '', now: '' }
  const chunks: Record<keyof typeof roots, ChunkRef[]> = { before: [], now: [] }
  let forms: LocalForms

  const view = (which: keyof typeof roots, local = false): DatasetView => ({
    name: which,
    family: evmFamily,
    height: BLOCKS - 1,
    chunks: chunks[which].map((c) => ({
      ...c, coverFrom: c.first, dir: path.join(roots[which], c.path), local: local ? forms.acquire(c.path) : undefined,
    })),
  })
  const answer = async (v: DatasetView, query: unknown): Promise<Buffer> => {
    const s = await prepareQuery(v, query, { sizeBytes: 2 ** 40, timeMs: 600_000 })
    const parts: Buffer[] = []
    for await (const piece of s.body) parts.push(Buffer.from(piece))
    return Buffer.concat(parts)
  }

  before(async () => {
    tmp = await tempDir('ba-chunk-format-')
    const templates = loadTemplates()
    roots.before = path.join(tmp.dir, 'before')
    roots.now = path.join(tmp.dir, 'now')
    await generateDataset({ out: roots.before, blocks: BLOCKS, chunkBlocks: BLOCKS, seed: 'format', templates, parquet: PARQUET_BEFORE })
    await generateDataset({ out: roots.now, blocks: BLOCKS, chunkBlocks: BLOCKS, seed: 'format', templates })
    for (const k of ['before', 'now'] as const) chunks[k] = await listLocalChunks(roots[k])
    forms = new LocalForms({ file: path.join(tmp.dir, 'forms.duckdb'), label: 'test' })
    for (const c of chunks.now) {
      const dir = path.join(roots.now, c.path)
      assert.ok(await forms.build(c.path, dir, await chunkTableNames(dir), blockOrders(evmFamily)))
    }
  })
  after(async () => {
    await forms?.close()
    await tmp?.cleanup()
  })

  it('writes the same rows in other files', async () => {
    assert.deepEqual(chunks.now.map((c) => c.path), chunks.before.map((c) => c.path))
    const con = await connect()
    let filled = 0
    try {
      for (const table of ['transactions', 'logs', 'traces', 'statediffs']) {
        const file = (k: keyof typeof roots) => path.join(roots[k], chunks[k][0].path, `${table}.parquet`)
        const layout = async (k: keyof typeof roots) =>
          (await con.runAndReadAll(`SELECT count(DISTINCT row_group_id), max(row_group_num_rows) FROM parquet_metadata(${lit(file(k))})`)).getRows()[0].map(Number)
        const [groups, rows] = await layout('now')
        filled += groups > 1 ? 1 : 0
        // DuckDB fills row groups by whole 2,048-row vectors
        assert.ok(rows <= Math.ceil(PARQUET_DEFAULTS.rowGroupSize / 2048) * 2048, `${table}: ${rows} rows in a row group`)
        assert.ok(!(await readFile(file('now'))).equals(await readFile(file('before'))), `${table}: the files differ`)
        const differ = await con.runAndReadAll(
          `SELECT count(*) FROM (SELECT * FROM read_parquet(${lit(file('now'))}) EXCEPT ALL SELECT * FROM read_parquet(${lit(file('before'))}))`,
        )
        assert.equal(Number(differ.getRows()[0][0]), 0, `${table}: the same rows`)
      }
    } finally {
      con.closeSync()
    }
    assert.ok(filled > 0, 'a table of the fixture fills more than one row group')
    const meta = JSON.parse(await readFile(path.join(roots.now, chunks.now[0].path, 'meta.json'), 'utf8'))
    assert.equal(meta.blockCount, BLOCKS)
  })

  const queries = () => [
    ...SHAPES.map((s) => ({ name: s.name, query: s.query(0, BLOCKS - 1) })),
    { name: 'everything, whole range', query: fullQuery(0, BLOCKS - 1) },
    { name: 'everything, blocks 5–13', query: fullQuery(5, 13) },
  ]

  /** The old format's answers, computed once: both tests compare with them. */
  let wanted: Promise<Buffer[]> | undefined
  const wants = () => (wanted ??= (async () => {
    const out: Buffer[] = []
    for (const { query } of queries()) out.push(await answer(view('before'), query))
    return out
  })())

  it('answers every benchmark shape and whole-range query byte for byte as the old format', async () => {
    let nonEmpty = 0
    const all = await wants()
    for (const [i, { name, query }] of queries().entries()) {
      const want = all[i]
      const got = await answer(view('now'), query)
      assert.ok(got.equals(want), `${name}: ${got.length} bytes against ${want.length}`)
      if (want.length > 2000) nonEmpty++
    }
    assert.ok(nonEmpty >= 5, `${nonEmpty} of the queries have items in the fixture`)
  })

  it('answers the same from a local form of the new chunk', async () => {
    const all = await wants()
    for (const [i, { name, query }] of queries().entries()) {
      const want = all[i]
      const got = await answer(view('now', true), query)
      assert.ok(got.equals(want), `${name} (local form): ${got.length} bytes against ${want.length}`)
    }
  })
})
