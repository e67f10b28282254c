import { createHash } from 'node:crypto'

/*
 * Deterministic randomness for the synthetic dataset: the same seed and block number always give
 * the same bytes, so a generated dataset (and every benchmark on it) is reproducible.
 */

const HEX = '0123456789abcdef'
const HEX_CODES = Uint8Array.from(HEX, (c) => c.charCodeAt(0))
const ZERO = 48 // '0'

/** sfc32: a small, fast 32-bit PRNG (good enough for filler bytes; not for cryptography). */
export class Rng {
  private a: number
  private b: number
  private c: number
  private d: number
  private readonly pool = new Uint8Array(1 << 16)
  private pos = this.pool.length

  constructor(seed: string) {
    const h = createHash('sha256').update(seed).digest()
    this.a = h.readUInt32LE(0)
    this.b = h.readUInt32LE(4)
    this.c = h.readUInt32LE(8)
    this.d = h.readUInt32LE(12) | 1
    for (let i = 0; i < 12; i++) this.next()
  }

  next(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0
    this.d = (this.d + 1) | 0
    this.a = this.b ^ (this.b >>> 9)
    this.b = (this.c + (this.c << 3)) | 0
    this.c = (this.c << 21) | (this.c >>> 11)
    this.c = (this.c + t) | 0
    return t >>> 0
  }

  /** One random byte in 1..255 (non-zero, so that zero bytes of a template stay the only zeros). */
  private nonZeroByte(): number {
    if (this.pos >= this.pool.length) this.refill()
    const b = this.pool[this.pos++]
    return b === 0 ? 1 : b
  }

  private refill(): void {
    const view = new DataView(this.pool.buffer)
    for (let i = 0; i < this.pool.length; i += 4) view.setUint32(i, this.next())
    this.pos = 0
  }

  /** `0x` + `bytes` random bytes. */
  hash(bytes = 32): string {
    const out = Buffer.allocUnsafe(2 + bytes * 2)
    out[0] = ZERO
    out[1] = 120 // 'x'
    for (let i = 2; i < out.length; i += 2) {
      const b = this.nonZeroByte()
      out[i] = HEX_CODES[b >> 4]
      out[i + 1] = HEX_CODES[b & 15]
    }
    return out.toString('latin1')
  }

  /**
   * Same length and the same zero bytes as `hex`, every other byte random. The first `keepChars`
   * hex digits after `0x` stay as they are (a 4-byte sighash is 8). ABI encoding pads with zeros,
   * so keeping them keeps the compression ratio of real calldata and log data; randomising the rest
   * stops the tiled copies of a block from compressing against each other.
   */
  scramble(hex: string | null | undefined, keepChars = 0): string | null | undefined {
    if (typeof hex !== 'string' || hex.length <= 2 + keepChars) return hex
    const out = Buffer.from(hex, 'latin1')
    for (let i = 2 + keepChars; i + 1 < out.length; i += 2) {
      if (out[i] === ZERO && out[i + 1] === ZERO) continue
      const b = this.nonZeroByte()
      out[i] = HEX_CODES[b >> 4]
      out[i + 1] = HEX_CODES[b & 15]
    }
    return out.toString('latin1')
  }
}

/** Hash of block `n` of a synthetic chain: depends only on the seed and the number. */
export function syntheticBlockHash(seed: string, n: number): string {
  return '0x' + createHash('sha256').update(`${seed}/block/${n}`).digest('hex')
}

export const toQuantity = (n: number) => '0x' + n.toString(16)
