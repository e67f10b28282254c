import { isAscii } from 'node:buffer'

/**
 * Buffers that HTTP bodies are received into, kept for the next bodies once their reader gives them
 * back: a body of many MB is then no fresh allocation, which V8 counts as external memory (its
 * growth brings on full garbage collections) and the system maps in page by page. Used by the
 * HTTP client (src/http-request.ts) for the ingest's RPC client (`RpcClient.releaseBody`) and the archive
 * client (`textOf`).
 */
export class BodyBuffers {
  private free: Buffer[] = []
  private readonly ours = new WeakSet<ArrayBufferLike>()
  private last = 1 << 20
  private idleTimer?: NodeJS.Timeout

  /**
   * At most `keep` buffers are kept; with `largest`, none bigger than that; with `idleMs`, they are
   * dropped that long after the last one came back (a library should not hold memory it no longer uses).
   */
  constructor(
    private readonly keep: number,
    private readonly opts: { largest?: number; idleMs?: number } = {},
  ) {}

  /** A buffer of at least `size` bytes (the largest kept one, else a new one a little larger than the last body). */
  take(size: number): Buffer {
    let best = -1
    for (let i = 0; i < this.free.length; i++) if (best < 0 || this.free[i].length > this.free[best].length) best = i
    if (best >= 0 && this.free[best].length >= size) return this.free.splice(best, 1)[0]
    const b = Buffer.allocUnsafeSlow(Math.max(size, Math.ceil(this.last * 1.25)))
    this.ours.add(b.buffer)
    return b
  }

  /** `body` (a view of a buffer of `take`) is no longer read; its buffer serves again. */
  give(body: Buffer, size: number): void {
    this.last = size
    if (!this.ours.has(body.buffer)) return
    const whole = Buffer.from(body.buffer)
    if (this.free.some((b) => b.buffer === body.buffer) || whole.length > (this.opts.largest ?? Infinity)) return
    this.free.push(whole)
    if (this.free.length > this.keep) this.free.splice(this.free.reduce((m, b, i) => (b.length < this.free[m].length ? i : m), 0), 1)
    if (this.opts.idleMs !== undefined) {
      clearTimeout(this.idleTimer)
      this.idleTimer = setTimeout(() => (this.free = []), this.opts.idleMs).unref()
    }
  }
}

/** Text of a body: ASCII (JSON of hex and numbers, nearly always) as Latin-1, the same characters without UTF-8 decoding. */
export function decodeText(body: Buffer, ascii = isAscii(body)): string {
  return ascii ? body.toString('latin1') : body.toString('utf8')
}
