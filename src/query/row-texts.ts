import type { DuckDBDataChunk } from '@duckdb/node-api'
import bindings from '@duckdb/node-bindings'
import { createRequire } from 'node:module'
import type { JsonOut } from './json-out.js'
import { eachRowText } from './raw-rows.js'

/*
 * The JSON texts of one answer's rows, as they leave DuckDB. A row is a number (a handle): its
 * bytes lie at [start, end) of one of the answer's buffers. No JS object per row: an answer of 20k
 * rows held as 20k views was the garbage that grew a worker's heap (BENCHMARKS.md, step 40).
 *
 * The buffers are slabs that later answers reuse once this one is on the socket, filled by a small
 * native addon (native/string-copy.c, built by `npm run build`): `@duckdb/node-bindings` copies
 * each run of string bytes into a new ArrayBuffer, and under a stream of big answers that fresh
 * memory cost a worker page faults and the V8 mark-compacts its external memory starts. Without
 * the addon (no C compiler, or BLOCK_ARCHIVE_NATIVE=off), or past the process's slab budget, a row's
 * buffer is the run of strings the bindings copied out, as before.
 *
 * Only the owner of the whole answer knows when its bytes are no longer read: the worker's HTTP
 * layer calls `recycle()` once the last byte was handed to the socket. An answer that is not
 * recycled (an error, an in-process reader) leaves its slabs to the garbage collector.
 */

interface StringCopy {
  copyStrings(strings: Uint8Array, validity: Uint8Array | null, rows: number, first: number, slab: Uint8Array, at: number, ends: Float64Array): number
}

function loadNative(): StringCopy | undefined {
  if (process.env.BLOCK_ARCHIVE_NATIVE === 'off') return undefined
  try {
    return createRequire(import.meta.url)('../../../build/string-copy.node') as StringCopy
  } catch {
    return undefined
  }
}

const native = loadNative()

/** Whether rows are copied into reused slabs (the native copy is built, and not turned off). */
export const slabsEnabled = native !== undefined

export const SLAB_BYTES = 4 * 1024 * 1024
/** Bytes of slabs a process holds at most, in use and idle (BLOCK_ARCHIVE_SLAB_MB). */
const BUDGET_BYTES = Number(process.env.BLOCK_ARCHIVE_SLAB_MB ?? 48) * 1024 * 1024

/** Slabs made, taken again from the pool, and refused by the budget, since the process started. */
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
  /** Slabs taken by this answer, and their bytes (shared with the finalizer). */
  private readonly slabs: Uint8Array[] = []
  private readonly held = { bytes: 0 }
  /** The slab being filled: its index in `bufs`, and the first free byte. */
  private slab = -1
  private at = 0
  private rowEnds = new Float64Array(2048)
  private recycled = false

  /** `slabBytes`: the slabs' size; 0 copies rows as the bindings do (no slabs). */
  constructor(private readonly slabBytes = slabsEnabled ? SLAB_BYTES : 0) {
    if (slabBytes > 0) {
      if (!native) throw new Error('RowTexts: the native string copy is not built (npm run build)')
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
    const rows = chunk.rowCount
    const vector = bindings.data_chunk_get_vector(chunk.chunk, column)
    const strings = bindings.vector_get_data(vector, rows * 16)
    const validity = bindings.vector_get_validity(vector, Math.ceil(rows / 64) * 8)
    if (this.slabBytes === 0) return this.copyRuns(strings, validity, rows, 0, out)
    if (this.rowEnds.length < rows) this.rowEnds = new Float64Array(rows)
    const ends = this.rowEnds
    let first = 0
    while (first < rows) {
      if (this.slab < 0 && !this.takeSlab()) return this.copyRuns(strings, validity, rows, first, out)
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
      if (new DataView(strings.buffer, strings.byteOffset + first * 16, 4).getUint32(0, true) > this.slabBytes) {
        this.copyRuns(strings, validity, first + 1, first, out)
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
    this.bufs.length = 0
    this.count = 0
    if (slab) {
      this.bufs.push(slab)
      this.slab = 0
    }
  }

  /** The answer's bytes are no longer read: its slabs go back to the pool. Idempotent. */
  recycle(): void {
    if (this.recycled) return
    this.recycled = true
    if (!this.pool) return
    abandoned.unregister(this)
    this.pool.push(...this.slabs)
    this.slabs.length = 0
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

  /** A slab to fill: an idle one, or a new one within the budget. False: none. */
  private takeSlab(): boolean {
    let s = this.pool!.pop()
    if (s) slabStats.slabsReused++
    else if (slabBytesOut + this.slabBytes <= BUDGET_BYTES) {
      // Not zeroed: a row only ever points at bytes the copy wrote.
      s = Buffer.allocUnsafeSlow(this.slabBytes)
      slabBytesOut += this.slabBytes
      slabStats.slabsMade++
    } else {
      slabStats.refused++
      return false
    }
    this.slabs.push(s)
    this.held.bytes += this.slabBytes
    this.bufs.push(s)
    this.slab = this.bufs.length - 1
    this.at = 0
    return true
  }

  /** Rows `first`… of a vector without slabs: in the buffers the bindings copy them into. */
  private copyRuns(strings: Uint8Array, validity: Uint8Array | null, rows: number, first: number, out: number[]): void {
    let last: Uint8Array | undefined
    eachRowText(strings, validity, rows, first, (buf, start, end) => {
      if (buf !== last) {
        this.bufs.push(buf)
        last = buf
      }
      out.push(this.push(this.bufs.length - 1, start, end))
    })
  }
}

