import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { duckdbApi } from '../src/db.js'
import { JsonOut } from '../src/query/json-out.js'
import { Mutex } from '../src/semaphore.js'
import { bigintColumn, eachVarchar, integerColumn, varcharBytes } from '../src/query/raw-rows.js'
import { slabStats, RowTexts } from '../src/query/row-texts.js'
import { slabsEnabled } from '../src/fast-path.js'

const { DuckDBInstance } = duckdbApi()

/*
 * The engine's output plumbing on its own: bytes read straight from DuckDB vectors, the answer's
 * parts (views merged when adjacent, small ones joined), and the heavy-slice lock.
 */

describe('raw rows from DuckDB vectors', () => {
  it('give each VARCHAR byte for byte: inline (≤ 12 bytes) and heap strings, UTF-8, NULL, across chunks', async () => {
    const db = await DuckDBInstance.create(':memory:')
    const con = await db.connect()
    try {
      // 5,000 rows: more than two DuckDB chunks, lengths 0–40 and 1,000+, some multi-byte.
      const sql =
        `SELECT i::BIGINT AS b, (i % 7)::INTEGER AS k, CASE WHEN i % 11 = 0 THEN NULL ` +
        `WHEN i % 5 = 0 THEN repeat('é', i % 9) || i::VARCHAR WHEN i % 3 = 0 THEN repeat('x', 1000 + i % 17) ` +
        `ELSE repeat('a', i % 41) END AS s FROM range(5000) t(i)`
      const expected = (await con.runAndReadAll(sql)).getRows()
      const blocks: number[] = []
      const kinds: number[] = []
      const bytes: Uint8Array[] = []
      for await (const chunk of await con.stream(sql)) {
        blocks.push(...bigintColumn(chunk, 0))
        kinds.push(...integerColumn(chunk, 1))
        varcharBytes(chunk, 2, bytes)
      }
      assert.equal(bytes.length, 5000)
      for (let i = 0; i < expected.length; i++) {
        assert.equal(blocks[i], Number(expected[i][0]))
        assert.equal(kinds[i], expected[i][1])
        assert.equal(Buffer.from(bytes[i]).toString('utf8'), (expected[i][2] as string | null) ?? '', `row ${i}`)
      }
    } finally {
      con.closeSync()
    }
  })
})

describe('an answer\'s row texts (src/query/row-texts.ts)', () => {
  // Rows of 0–40 bytes, UTF-8, NULLs, and rows of 1,000+ bytes, over more than two DuckDB chunks.
  const sql =
    `SELECT CASE WHEN i % 11 = 0 THEN NULL WHEN i % 5 = 0 THEN repeat('é', i % 9) || i::VARCHAR ` +
    `WHEN i % 3 = 0 THEN repeat('x', 1000 + i % 17) ELSE repeat(chr((97 + i % 26)::INTEGER), i % 41) END AS s FROM range(5000) t(i)`
  const text = (texts: RowTexts, rows: number[]) => rows.map((r) => Buffer.from(texts.view(r)).toString('utf8'))

  async function withDb(f: (read: (texts: RowTexts) => Promise<number[]>, expected: string[]) => Promise<void>): Promise<void> {
    const db = await DuckDBInstance.create(':memory:')
    const con = await db.connect()
    try {
      const plain: Uint8Array[] = []
      for await (const chunk of await con.stream(sql)) varcharBytes(chunk, 0, plain)
      const read = async (texts: RowTexts) => {
        const rows: number[] = []
        for await (const chunk of await con.stream(sql)) texts.copyColumn(chunk, 0, rows)
        return rows
      }
      await f(read, plain.map((r) => Buffer.from(r).toString('utf8')))
    } finally {
      con.closeSync()
    }
  }

  it('without slabs: each row byte for byte as the plain copy, and written through JsonOut as one text', async () => {
    await withDb(async (read, expected) => {
      const texts = new RowTexts(0, eachVarchar)
      const rows = await read(texts)
      assert.deepEqual(text(texts, rows), expected)
      const out = new JsonOut(1 << 30)
      for (const r of rows) texts.put(out, r)
      assert.equal(Buffer.concat(out.take()).toString('utf8'), expected.join(''))
    })
  })

  it('through slabs (native/string-copy.c): the same bytes across slab ends and rows bigger than a slab; slabs reused only after recycle()', { skip: !slabsEnabled && 'the native string copy is not built here (no C compiler)' }, async () => {
    await withDb(async (read, expected) => {
      // Tiny slabs (100 bytes): rows fill them often; rows of 1,000+ bytes are bigger than one.
      const first = new RowTexts(100, eachVarchar)
      const made = slabStats.slabsMade
      const rows = await read(first)
      assert.deepEqual(text(first, rows), expected)
      assert.ok(slabStats.slabsMade - made > 100, 'rows went through many slabs')
      // Written through JsonOut without their first byte (an item row's leading comma): the same text.
      const skip = (r: number) => (first.view(r).length > 0 ? 1 : 0)
      const out = new JsonOut(1 << 30)
      for (const r of rows) first.put(out, r, skip(r))
      assert.equal(Buffer.concat(out.take()).toString('utf8'), rows.map((r) => Buffer.from(first.view(r).subarray(skip(r))).toString('utf8')).join(''))

      // A second answer while the first is held takes fresh slabs: the first's bytes stay as they are.
      const reused = slabStats.slabsReused
      const second = new RowTexts(100, eachVarchar)
      assert.deepEqual(text(second, await read(second)), expected)
      assert.equal(slabStats.slabsReused, reused, 'no slab of an answer still held was taken')
      assert.deepEqual(text(first, rows), expected)
      // Once recycled, the next answer writes into the first one's slabs.
      first.recycle()
      const third = new RowTexts(100, eachVarchar)
      assert.deepEqual(text(third, await read(third)), expected)
      assert.ok(slabStats.slabsReused > reused, 'the recycled slabs were taken again')
      await assert.rejects(read(first), /after recycle/)
    })
  })

  it('through slabs, read piece by piece: slabs whose pieces the reader let go serve the next slices; pieces not let go keep their bytes', { skip: !slabsEnabled && 'the native string copy is not built here (no C compiler)' }, async () => {
    await withDb(async (read, expected) => {
      // Three "slices" of the same rows, each written and taken as the engine does (sliceDone, then take).
      const slice = async (texts: RowTexts, out: JsonOut) => {
        for (const r of await read(texts)) texts.put(out, r)
        texts.sliceDone()
        const pieces = out.take()
        texts.taken(pieces.length)
        return pieces
      }
      const whole = expected.join('')
      // A reader that keeps every piece: nothing is reused, every piece keeps its bytes.
      const keeping = new RowTexts(1000, eachVarchar)
      const out1 = new JsonOut(1 << 30)
      let reused = slabStats.slabsReused
      let made = slabStats.slabsMade
      const kept = [await slice(keeping, out1)]
      const perSlice = slabStats.slabsMade - made
      assert.ok(perSlice > 20, `a slice fills many slabs (${perSlice})`)
      kept.push(await slice(keeping, out1), await slice(keeping, out1))
      assert.equal(slabStats.slabsReused, reused, 'no slab was reused while its pieces were held')
      for (const pieces of kept) assert.equal(Buffer.concat(pieces).toString('utf8'), whole)

      // A reader that lets each slice's pieces go: the next slices write into the same slabs.
      const letting = new RowTexts(1000, eachVarchar)
      const out2 = new JsonOut(1 << 30)
      made = slabStats.slabsMade
      reused = slabStats.slabsReused
      let taken = 0
      for (let i = 0; i < 3; i++) {
        const pieces = await slice(letting, out2)
        assert.equal(Buffer.concat(pieces).toString('utf8'), whole, `slice ${i}`)
        letting.released((taken += pieces.length))
      }
      assert.ok(slabStats.slabsReused - reused >= 2 * (perSlice - 1), `slabs were reused within the answer (${slabStats.slabsReused - reused})`)
      assert.ok(slabStats.slabsMade - made <= perSlice + 2, `at most one slice's slabs were made (${slabStats.slabsMade - made} for ${perSlice})`)
      keeping.recycle()
      letting.recycle()
    })
  })
})

describe('answer parts', () => {
  it('merge views that lie back to back, keep others apart, and join small parts into pieces', () => {
    const out = new JsonOut(64)
    const big = Buffer.alloc(100_000, 'a')
    out.put(big.subarray(0, 20_000))
    out.put(big.subarray(20_000, 50_000)) // adjacent: merged
    out.put(',')
    out.put(big.subarray(60_000, 90_000)) // not adjacent: a part of its own
    const small = Array.from({ length: 100 }, (_, i) => `"${i}"`)
    for (const x of small) out.put(Buffer.from(x)) // small parts: joined
    out.put('é')
    assert.equal(out.total, 20_000 + 30_000 + 1 + 30_000 + small.join('').length + 2)
    assert.ok(out.full)
    const parts = out.take()
    assert.equal(parts[0].length, 50_000, 'the adjacent views became one part')
    assert.equal(parts[0].buffer, big.buffer, 'without a copy')
    const text = Buffer.concat(parts).toString('utf8')
    assert.equal(text, 'a'.repeat(50_000) + ',' + 'a'.repeat(30_000) + small.join('') + 'é')
    // 50,000 | ',' | 30,000 | the small parts in pieces of about 64 bytes
    assert.ok(parts.length <= 3 + Math.ceil(392 / 64) + 1, `${parts.length} parts`)
    assert.deepEqual(parts.slice(0, 3).map((p) => p.length), [50_000, 1, 30_000])
    assert.ok(parts.slice(3, -1).every((p) => p.length >= 64), `small parts were joined: ${parts.map((p) => p.length)}`)
    assert.equal(out.take().length, 0)
  })
})

describe('answer parts, random writes', () => {
  it('give back exactly the bytes written: adjacent and scattered views of shared buffers, skipped commas, text, small and big', () => {
    let seed = 7
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    const pool = Buffer.from(Array.from({ length: 200_000 }, (_, i) => 97 + (i % 26)))
    for (const pieceBytes of [64, 1000, 64 * 1024]) {
      const out = new JsonOut(pieceBytes)
      const expected: Buffer[] = []
      const taken: Buffer[] = []
      let at = 0
      for (let i = 0; i < 3000; i++) {
        const what = rand(5)
        if (what === 0) {
          const text = ['[', ',{"header":', '}', ']', 'é', ',"logs":['][rand(6)]
          out.put(text)
          expected.push(Buffer.from(text))
        } else {
          // Mostly the bytes right after the last view (rows back to back), sometimes elsewhere; now and then big.
          const n = rand(10) === 0 ? 16_000 + rand(20_000) : 1 + rand(300)
          if (what === 1 || at + n > pool.length) at = rand(pool.length - n)
          const view = pool.subarray(at, at + n)
          at += n
          const skip = what === 2 && n > 1 ? 1 : 0
          out.putFrom(view, skip)
          expected.push(view.subarray(skip))
        }
        if (out.full && rand(3) === 0) taken.push(...out.take())
      }
      taken.push(...out.take())
      const want = Buffer.concat(expected)
      assert.equal(out.total, want.length)
      assert.ok(Buffer.concat(taken).equals(want), `pieces of ${pieceBytes}`)
    }
  })
})

describe('the heavy-slice lock', () => {
  it('lets one holder in at a time, in the order they came', async () => {
    const lock = new Mutex()
    const log: string[] = []
    const holder = async (name: string, ms: number) => {
      const unlock = await lock.lock()
      log.push(`+${name}`)
      await new Promise((r) => setTimeout(r, ms))
      log.push(`-${name}`)
      unlock()
    }
    await Promise.all([holder('a', 20), holder('b', 1), holder('c', 5)])
    assert.deepEqual(log, ['+a', '-a', '+b', '-b', '+c', '-c'])
  })
})
