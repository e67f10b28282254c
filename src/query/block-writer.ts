import type { SliceRows } from './chunk-plan.js'
import { JsonOut } from './json-out.js'
import type { RowTexts } from './row-texts.js'
import type { QueryStream } from './types.js'

/*
 * Writes the answer array block by block (`{"header":…,"transactions":[…],…}`) and keeps the
 * stream's stats. Item rows come from DuckDB as `,{…}`: the first of an array drops its comma.
 */
export class BlockWriter {
  private readonly out: JsonOut
  /** `,"<output>":[` per item kind. */
  private readonly opens: string[]

  constructor(outputs: string[], private readonly stats: QueryStream['stats'], pieceBytes: number, private readonly texts: RowTexts) {
    this.opens = outputs.map((k) => `,"${k}":[`)
    this.out = new JsonOut(pieceBytes)
    this.out.put('[')
  }

  /** A piece or more is waiting. */
  get full(): boolean {
    return this.out.full
  }

  /** Everything written so far, as pieces (the row texts count them, `RowTexts.taken`). */
  take(): Uint8Array[] {
    const pieces = this.out.take()
    this.texts.taken(pieces.length)
    return pieces
  }

  /** Closes the array: the rest of the answer. */
  finish(): Uint8Array[] {
    this.out.put(']')
    return this.take()
  }

  /** A block without items: its header and empty item lists. */
  bareBlock(block: number, header: string | Uint8Array): void {
    const before = this.startBlock(header)
    for (const open of this.opens) this.out.put(open + ']')
    this.endBlock(block, before)
  }

  /** One block whose items are read kind by kind, row by row (a block too big for a slice). */
  async *giantBlock(block: number, header: string | Uint8Array, rows: (kindIndex: number) => AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
    const before = this.startBlock(header)
    for (let k = 0; k < this.opens.length; k++) {
      this.out.put(this.opens[k])
      let first = true
      for await (const row of rows(k)) {
        this.out.putFrom(row, first ? 1 : 0)
        first = false
        if (this.out.full) yield* this.take()
      }
      this.out.put(']')
    }
    this.endBlock(block, before)
  }

  /**
   * Writes the blocks of `want` from a slice's ordered rows as they come; with `stream` false,
   * hands nothing on until the rows are read. Returns true when `over()` held before a block: the
   * answer ends at the block before it (it has at least one block).
   */
  async *slice(rows: AsyncIterable<SliceRows>, want: Set<number>, over: () => boolean, stream: boolean): AsyncGenerator<Uint8Array, boolean> {
    let cur = -1
    let before = 0
    /** Kind whose list is open (0: none yet). */
    let open = 0
    let first = true
    const closeLists = (upTo: number) => {
      if (open > 0) this.out.put(']')
      for (let x = open + 1; x <= upTo; x++) this.out.put(this.opens[x - 1] + ']')
    }
    for await (const r of rows) {
      for (let n = 0; n < r.kind.length; n++) {
        const b = r.block[n]
        const k = r.kind[n]
        if (k === 0) {
          if (cur >= 0) {
            closeLists(this.opens.length)
            this.endBlock(cur, before)
            cur = -1
          }
          if (!want.has(b)) continue
          if (this.stats.blocks > 0 && over()) return true
          before = this.startBlock(r.json[n])
          cur = b
          open = 0
          continue
        }
        if (b !== cur) continue
        if (k !== open) {
          closeLists(k - 1)
          this.out.put(this.opens[k - 1])
          open = k
          first = true
        }
        this.texts.put(this.out, r.json[n], first ? 1 : 0)
        first = false
      }
      if (stream && this.out.full) yield* this.take()
    }
    if (cur >= 0) {
      closeLists(this.opens.length)
      this.endBlock(cur, before)
    }
    return false
  }

  /** Returns the output size before the block. `header`: its JSON, or a row of the answer's texts. */
  private startBlock(header: string | Uint8Array | number): number {
    const before = this.out.total
    this.out.put(this.stats.blocks > 0 ? ',{"header":' : '{"header":')
    if (typeof header === 'number') this.texts.put(this.out, header)
    else this.out.put(header)
    return before
  }

  private endBlock(block: number, before: number): void {
    this.out.put('}')
    this.stats.blocks++
    this.stats.bytes += this.out.total - before
    this.stats.lastBlock = block
  }
}
