/*
 * The answer's bytes as a list of parts for the HTTP layer, without copying row JSON: rows are
 * views into the buffers taken from DuckDB, and rows lying back to back there (most of them, and
 * they carry their separating comma) merge into one part. Framing text goes into small buffers.
 */

const TEXT_BYTES = 16 * 1024
/** Parts at least this big are handed on as they are. */
const BIG_PART = 16 * 1024

export class JsonOut {
  private parts: Uint8Array[] = []
  private pending = 0
  private text = Buffer.allocUnsafe(TEXT_BYTES)
  private textAt = 0
  /** Bytes written so far. */
  total = 0

  constructor(private readonly pieceBytes: number) {}

  put(part: string | Uint8Array): void {
    if (typeof part === 'string') {
      const n = Buffer.byteLength(part)
      if (n > this.text.length - this.textAt) {
        this.text = Buffer.allocUnsafe(Math.max(TEXT_BYTES, n))
        this.textAt = 0
      }
      this.text.write(part, this.textAt)
      this.append(this.text.subarray(this.textAt, this.textAt + n))
      this.textAt += n
    } else {
      this.append(part)
    }
  }

  /** At least `pieceBytes` are waiting. */
  get full(): boolean {
    return this.pending >= this.pieceBytes
  }

  /**
   * Everything written since the last call. Parts under `BIG_PART` are joined into pieces of about
   * `pieceBytes`: compressing streams handle each write apart, and thousands of small writes cost
   * more than the copy (brotli on a 4.4 MB answer of sparse blocks: 230 ms more).
   */
  take(): Buffer[] {
    const out: Buffer[] = []
    let small: Uint8Array[] = []
    let smallBytes = 0
    const join = () => {
      if (small.length > 0) out.push(small.length === 1 ? asBuffer(small[0]) : Buffer.concat(small, smallBytes))
      small = []
      smallBytes = 0
    }
    for (const part of this.parts) {
      if (part.length >= BIG_PART) {
        join()
        out.push(asBuffer(part))
      } else {
        small.push(part)
        smallBytes += part.length
        if (smallBytes >= this.pieceBytes) join()
      }
    }
    join()
    this.parts = []
    this.pending = 0
    return out
  }

  private append(view: Uint8Array): void {
    if (view.length === 0) return
    const last = this.parts[this.parts.length - 1]
    if (last && last.buffer === view.buffer && last.byteOffset + last.length === view.byteOffset) {
      this.parts[this.parts.length - 1] = new Uint8Array(last.buffer, last.byteOffset, last.length + view.length)
    } else {
      this.parts.push(view)
    }
    this.pending += view.length
    this.total += view.length
  }
}

/** A Buffer over the same memory (the HTTP layer and zlib take Buffers). */
const asBuffer = (view: Uint8Array): Buffer => Buffer.isBuffer(view) ? view : Buffer.from(view.buffer, view.byteOffset, view.length)
