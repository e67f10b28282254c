import type { DuckDBDataChunk } from '@duckdb/node-api'
import { createRequire } from 'node:module'
import type { JsonOut } from './json-out.js'
import { eachRowText, varcharVector } from './raw-rows.js'

/*
 * The JSON texts of one answer's rows, as they leave DuckDB. A row is a number (a handle): its
 * bytes lie at [start, end) of one of the answer's buffers. No JS object per row: an answer of 20k
 * rows held as 20k views was the garbage that grew a worker's heap
 * (docs/benchmark-history.md, step 40).
 *
 * On the fast path (src/fast-path.ts makes the answers' RowTexts) the buffers are slabs that later
 * answers reuse once this one is on the socket, filled by a small native addon
 * (native/string-copy.c, built by `npm run build`): `@duckdb/node-bindings` copies each run of
 * string bytes into a new ArrayBuffer, and under a stream of big answers that fresh memory cost a
 * worker page faults and the V8 mark-compacts its external memory starts. Past the process's slab
 * budget an answer fills overflow slabs of its own. Without slabs, and for a row bigger than a
 * slab, a row's buffer is what the answer's text reader gives (the run of strings the bindings
 * copied out, on the fast path).
 *
 * Only the reader of the answer knows when its bytes are no longer read: the worker's HTTP layer
 * says so once the last byte was handed to the socket (`answerSent` of src/fast-path.ts →
 * `recycle()`). A reader that lets each piece go says so (`released`), and the slabs whose rows
 * all went out in those pieces serve the rest of the answer: an uncut answer of 135 MB then fills
 * a few slabs over and over instead of needing 135 MB of them. An answer that is not recycled (an
 * error, say) leaves its slabs to the garbage collector.
 */

interface StringCopy {
  copyStrings(strings: Uint8Array, validity: Uint8Array | null, rows: number, first: number, slab: Uint8Array, at: number, ends: Float64Array): number
}

let native: StringCopy | undefined

/** Loads the native string copy (native/string-copy.c); false when it is not built. */
export function loadStringCopy(): boolean {
  try {
    native ??= createRequire(import.meta.url)('../../../build/string-copy.node') as StringCopy
    return true
  } catch {
    return false
  }
}

/** Where each row of a VARCHAR column lies: `row(buffer, start, end)` in order (NULL → empty). */
export type TextReader = (chunk: DuckDBDataChunk, column: number, row: (buf: Uint8Array, start: number, end: number) => void) => void

export const SLAB_BYTES = 4 * 1024 * 1024
/**
 * Past the budget an answer fills slabs of its own, this size, left to the garbage collector: one
 * native copy per vector instead of a buffer per run of strings the bindings copy out (no slower:
 * 368 against 315 MB/s in one `bench worker` run, no measurable gap timed alone;
 * docs/benchmark-history.md step 41), and a small size wastes little in the last, part-filled one.
 */
export const OVERFLOW_SLAB_BYTES = 1024 * 1024
/** Bytes of slabs a process holds at most, in use and idle (BLOCK_ARCHIVE_SLAB_MB). */
const BUDGET_BYTES = Number(process.env.BLOCK_ARCHIVE_SLAB_MB ?? 48) * 1024 * 1024

/** Slabs made, taken again from the pool, and refused by the budget (an overflow slab instead), since the process started. */
export const slabStats = { slabsMade: 0, slabsReused: 0, refused: 0 }

/** Idle slabs per slab size, and the bytes of all slabs not yet given up to the GC. */
const pools = new Map<number, Uint8Array[]>()
let slabBytesOut = 0

/** Answers dropped without `recycle()` give their slabs' bytes back to the budget when collected. */
const abandoned = new FinalizationRegistry<{ bytes: number }>((held) => {
  slabBytesOut -= held.bytes
})

export class RowTexts {
  /** Buffers the rows point into: slabs, runs the bindings copied out, views handed in. */
  private readonly bufs: Uint8Array[] = []
  private bufOf = new Int32Array(1024)
  private starts = new Int32Array(1024)
  private ends = new Int32Array(1024)
  private count = 0

  private readonly pool: Uint8Array[] | undefined
  /** Bytes of the pool slabs this answer holds (shared with the finalizer). */
  private readonly held = { bytes: 0 }
  /** The slab being filled: its index in `bufs`, and the first free byte. */
  private slab = -1
  private at = 0
  private rowEnds = new Float64Array(2048)
  private recycled = false
  /** Pool slabs of this answer not yet handed back (overflow slabs are not). */
  private readonly own = new Set<Uint8Array>()
  /** Slabs whose rows are all written (the slab being filled is not), waiting for the next `taken`. */
  private written: Uint8Array[] = []
  /** Slabs whose rows all went out in the answer's first `upTo` pieces. */
  private readonly handedOut: { slabs: Uint8Array[]; upTo: number }[] = []
  private piecesTaken = 0

  /**
   * `slabBytes`: the slabs' size (the native copy loaded, `loadStringCopy`); 0: no slabs, each
   * column's rows in the buffers `readTexts` gives.
   */
  constructor(private readonly slabBytes: number, private readonly readTexts: TextReader) {
    if (slabBytes > 0) {
      if (!native) throw new Error('RowTexts: the native string copy is not loaded (npm run build, loadStringCopy)')
      let pool = pools.get(slabBytes)
      if (!pool) pools.set(slabBytes, (pool = []))
      this.pool = pool
      abandoned.register(this, this.held, this)
    }
  }

  /** A row's bytes as a view (copy it to keep it beyond the answer). */
  view(row: number): Uint8Array {
    return this.bufs[this.bufOf[row]].subarray(this.starts[row], this.ends[row])
  }

  /** Writes a row's bytes from byte `skip` on (an item row without its leading comma). */
  put(out: JsonOut, row: number, skip = 0): void {
    out.putSlice(this.bufs[this.bufOf[row]], this.starts[row] + skip, this.ends[row])
  }

  /** A row for bytes held elsewhere (a header kept between queries, say). */
  add(view: Uint8Array): number {
    this.bufs.push(view)
    return this.push(this.bufs.length - 1, 0, view.length)
  }

  /** Each row of a VARCHAR column (NULL → empty) as a row of this answer, appended to `out`. */
  copyColumn(chunk: DuckDBDataChunk, column: number, out: number[]): void {
    if (this.recycled) throw new Error('RowTexts used after recycle()')
    if (this.slabBytes === 0) return this.readRows((row) => this.readTexts(chunk, column, row), out)
    const { strings, validity, rows } = varcharVector(chunk, column)
    if (this.rowEnds.length < rows) this.rowEnds = new Float64Array(rows)
    const ends = this.rowEnds
    let first = 0
    while (first < rows) {
      if (this.slab < 0) this.takeSlab()
      const slab = this.bufs[this.slab]
      const n = native!.copyStrings(strings, validity, rows, first, slab, this.at, ends)
      let start = this.at
      for (let i = first; i < first + n; i++) {
        out.push(this.push(this.slab, start, ends[i]))
        start = ends[i]
      }
      this.at = start
      first += n
      if (first === rows) break
      // Row `first` does not fit: the next slab holds it, unless it is bigger than a slab.
      if (new DataView(strings.buffer, strings.byteOffset + first * 16, 4).getUint32(0, true) > Math.min(this.slabBytes, OVERFLOW_SLAB_BYTES)) {
        this.readRows((row) => eachRowText(strings, validity, first + 1, first, row), out)
        first++
      } else {
        this.slab = -1
      }
    }
  }

  /**
   * The rows handed out so far are written (a slice is done): forget them, so that the buffers the
   * bindings copied them into live only as long as the answer's pieces need them. An answer that
   * reaches past the slabs' budget stays bounded however long it is.
   */
  sliceDone(): void {
    const slab = this.slab >= 0 ? this.bufs[this.slab] : undefined
    for (const b of this.bufs) if (b !== slab && this.own.has(b)) this.written.push(b)
    this.bufs.length = 0
    this.count = 0
    if (slab) {
      this.bufs.push(slab)
      this.slab = 0
    }
  }

  /**
   * `pieces` more pieces of the answer were taken from its JsonOut (all it held). The slabs of
   * the rows written before (`sliceDone`) are in those pieces or earlier ones.
   */
  taken(pieces: number): void {
    this.piecesTaken += pieces
    if (this.written.length === 0) return
    this.handedOut.push({ slabs: this.written, upTo: this.piecesTaken })
    this.written = []
  }

  /** The reader no longer reads the answer's first `pieces` pieces: the slabs only they held go back to the pool. */
  released(pieces: number): void {
    if (this.recycled || !this.pool) return
    while (this.handedOut.length > 0 && this.handedOut[0].upTo <= pieces) {
      for (const s of this.handedOut.shift()!.slabs) {
        this.own.delete(s)
        this.held.bytes -= this.slabBytes
        this.pool.push(s)
      }
    }
  }

  /** The answer's bytes are no longer read: its slabs go back to the pool. Idempotent. */
  recycle(): void {
    if (this.recycled) return
    this.recycled = true
    if (!this.pool) return
    abandoned.unregister(this)
    this.pool.push(...this.own)
    this.own.clear()
    this.held.bytes = 0
  }

  private push(buf: number, start: number, end: number): number {
    if (this.count === this.starts.length) {
      const grow = (a: Int32Array) => {
        const b = new Int32Array(a.length * 2)
        b.set(a)
        return b
      }
      this.bufOf = grow(this.bufOf)
      this.starts = grow(this.starts)
      this.ends = grow(this.ends)
    }
    this.bufOf[this.count] = buf
    this.starts[this.count] = start
    this.ends[this.count] = end
    return this.count++
  }

  /** A slab to fill: an idle one, a new one within the budget, else an overflow slab. */
  private takeSlab(): void {
    // Not zeroed: a row only ever points at bytes the copy wrote.
    let s = this.pool!.pop()
    let pooled = true
    if (s) slabStats.slabsReused++
    else if (slabBytesOut + this.slabBytes <= BUDGET_BYTES) {
      s = Buffer.allocUnsafeSlow(this.slabBytes)
      slabBytesOut += this.slabBytes
      slabStats.slabsMade++
    } else {
      slabStats.refused++
      s = Buffer.allocUnsafeSlow(OVERFLOW_SLAB_BYTES)
      pooled = false
    }
    if (pooled) {
      this.own.add(s)
      this.held.bytes += this.slabBytes
    }
    this.bufs.push(s)
    this.slab = this.bufs.length - 1
    this.at = 0
  }

  /** Rows without slabs: in the buffers `each` gives them in. */
  private readRows(each: (row: (buf: Uint8Array, start: number, end: number) => void) => void, out: number[]): void {
    let last: Uint8Array | undefined
    each((buf, start, end) => {
      if (buf !== last) {
        this.bufs.push(buf)
        last = buf
      }
      out.push(this.push(this.bufs.length - 1, start, end))
    })
  }
}

