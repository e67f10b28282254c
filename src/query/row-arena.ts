import type { DuckDBDataChunk } from '@duckdb/node-api'
import bindings from '@duckdb/node-bindings'
import { createRequire } from 'node:module'
import { copyRuns } from './raw-rows.js'

/*
 * Where one answer's row JSON bytes land when they leave DuckDB: slabs that later answers reuse
 * once this one is on the socket. `@duckdb/node-bindings` copies each run of string bytes into a
 * new ArrayBuffer; under a stream of big answers that fresh memory cost a worker page faults and
 * the V8 mark-compacts its external memory starts (BENCHMARKS.md, step 40). The copy into a slab
 * is a small native addon (native/string-copy.c, built by `npm run build`); without it (no C
 * compiler, or BLOCK_ARCHIVE_NATIVE=off) rows are copied as before.
 *
 * Only the owner of the whole answer knows when its bytes are no longer read: the worker's HTTP
 * layer calls `recycle()` once the last byte was handed to the socket. An answer that is not
 * recycled (an error, an in-process reader) leaves its slabs to the garbage collector. The slabs of
 * a process, in use and idle, stay within a byte budget; past it rows are copied as before.
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

/** Whether the native copy is built and loaded. */
export const nativeCopyBuilt = native !== undefined
/** Whether answers' rows go through slabs: for now only with BLOCK_ARCHIVE_NATIVE=on (BENCHMARKS.md, step 40). */
export const arenaAvailable = nativeCopyBuilt && process.env.BLOCK_ARCHIVE_NATIVE === 'on'

export const SLAB_BYTES = 4 * 1024 * 1024
/** Bytes of slabs a process holds at most, in use and idle (BLOCK_ARCHIVE_SLAB_MB). */
const BUDGET_BYTES = Number(process.env.BLOCK_ARCHIVE_SLAB_MB ?? 48) * 1024 * 1024

/** Slabs made, taken again from the pool, and refused by the budget, since the process started. */
export const arenaStats = { slabsMade: 0, slabsReused: 0, refused: 0 }

/** Idle slabs per slab size, and the bytes of all slabs not yet given up to the GC. */
const pools = new Map<number, Uint8Array[]>()
let slabBytesOut = 0

/** Arenas dropped without `recycle()` give their slabs' bytes back to the budget when collected. */
const abandoned = new FinalizationRegistry<{ bytes: number }>((held) => {
  slabBytesOut -= held.bytes
})

const EMPTY = new Uint8Array(0)

export class RowArena {
  private readonly pool: Uint8Array[]
  private readonly slabs: Uint8Array[] = []
  /** Bytes of `slabs`, shared with the finalizer. */
  private readonly held = { bytes: 0 }
  private slab: Uint8Array | undefined
  private at = 0
  private ends = new Float64Array(2048)
  private recycled = false

  constructor(private readonly slabBytes = SLAB_BYTES) {
    if (!native) throw new Error('RowArena: the native string copy is not built (npm run build)')
    let pool = pools.get(slabBytes)
    if (!pool) pools.set(slabBytes, (pool = []))
    this.pool = pool
    abandoned.register(this, this.held, this)
  }

  /**
   * Bytes of each row of a VARCHAR column (NULL → empty), appended to `out` as views into this
   * answer's slabs. A row bigger than a slab, and rows past the budget, get buffers of their own.
   */
  copyColumn(chunk: DuckDBDataChunk, column: number, out: Uint8Array[]): void {
    const rows = chunk.rowCount
    const vector = bindings.data_chunk_get_vector(chunk.chunk, column)
    const strings = bindings.vector_get_data(vector, rows * 16)
    const validity = bindings.vector_get_validity(vector, Math.ceil(rows / 64) * 8)
    if (this.ends.length < rows) this.ends = new Float64Array(rows)
    const ends = this.ends
    let first = 0
    while (first < rows) {
      const slab = (this.slab ??= this.take())
      if (!slab) return copyRuns(strings, validity, rows, first, out)
      const n = native!.copyStrings(strings, validity, rows, first, slab, this.at, ends)
      let start = this.at
      for (let i = first; i < first + n; i++) {
        const end = ends[i]
        out.push(end === start ? EMPTY : slab.subarray(start, end))
        start = end
      }
      this.at = start
      first += n
      if (first === rows) break
      // Row `first` does not fit: a slab of its own size would not hold it either, or the next slab will.
      const len = new DataView(strings.buffer, strings.byteOffset + first * 16, 4).getUint32(0, true)
      if (len > this.slabBytes) {
        copyRuns(strings, validity, first + 1, first, out)
        first++
      } else {
        this.slab = undefined
      }
    }
  }

  /** The answer's bytes are no longer read: its slabs go back to the pool. Idempotent. */
  recycle(): void {
    if (this.recycled) return
    this.recycled = true
    abandoned.unregister(this)
    this.pool.push(...this.slabs)
    this.slabs.length = 0
    this.slab = undefined
  }

  /** A slab to fill: an idle one, a new one within the budget, or none. */
  private take(): Uint8Array | undefined {
    if (this.recycled) throw new Error('RowArena used after recycle()')
    let s = this.pool.pop()
    if (s) arenaStats.slabsReused++
    else if (slabBytesOut + this.slabBytes <= BUDGET_BYTES) {
      s = new Uint8Array(this.slabBytes)
      slabBytesOut += this.slabBytes
      arenaStats.slabsMade++
    } else {
      arenaStats.refused++
      return undefined
    }
    this.slabs.push(s)
    this.held.bytes += this.slabBytes
    this.at = 0
    return s
  }
}
