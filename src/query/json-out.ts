/*
 * The answer's bytes, gathered into pieces of about `pieceBytes` for the HTTP layer. Row JSON comes
 * from DuckDB as bytes and is copied once, into a piece; framing text is written next to it.
 */
export class JsonOut {
  private buf: Buffer
  private len = 0
  private ready: Uint8Array[] = []
  private readyBytes = 0
  /** Bytes written so far. */
  total = 0

  constructor(private readonly pieceBytes: number) {
    this.buf = Buffer.allocUnsafe(pieceBytes)
  }

  put(part: string | Uint8Array): void {
    if (typeof part === 'string') {
      const n = Buffer.byteLength(part)
      if (n > this.buf.length - this.len) this.close(n)
      this.len += this.buf.write(part, this.len)
      this.total += n
    } else if (part.length > this.pieceBytes) {
      // Bigger than a piece: handed on as it is.
      this.close(0)
      this.ready.push(Buffer.from(part.buffer, part.byteOffset, part.length))
      this.readyBytes += part.length
      this.total += part.length
    } else {
      if (part.length > this.buf.length - this.len) this.close(part.length)
      this.buf.set(part, this.len)
      this.len += part.length
      this.total += part.length
    }
  }

  /** At least a piece is waiting. */
  get full(): boolean {
    return this.readyBytes + this.len >= this.pieceBytes
  }

  /** Everything written since the last call. */
  take(): Uint8Array[] {
    this.close(0)
    const out = this.ready
    this.ready = []
    this.readyBytes = 0
    return out
  }

  /** Ends the current piece and starts one with room for at least `need` bytes. */
  private close(need: number): void {
    if (this.len > 0) {
      this.ready.push(this.buf.subarray(0, this.len))
      this.readyBytes += this.len
      this.buf = Buffer.allocUnsafe(Math.max(this.pieceBytes, need))
      this.len = 0
    } else if (need > this.buf.length) {
      this.buf = Buffer.allocUnsafe(need)
    }
  }
}
