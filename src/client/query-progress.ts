import cliProgress from 'cli-progress'

/*
 * Progress of `block-archive query` on stderr: a cli-progress bar (blocks done/total, blocks/s,
 * items/s, ETA) when stderr is a terminal, a text line every second otherwise, nothing with -q.
 */

export type QueryProgressMode = 'bar' | 'lines' | 'none'

export const defaultProgressMode = (quiet: boolean): QueryProgressMode => (quiet ? 'none' : process.stderr.isTTY && !process.env.CI ? 'bar' : 'lines')

/** Blocks and items of a batch: items are the entries of every list beside the header. */
export function countItems(blocks: readonly Record<string, unknown>[]): number {
  let n = 0
  for (const b of blocks) {
    for (const key in b) {
      const v = b[key]
      if (key !== 'header' && Array.isArray(v)) n += v.length
    }
  }
  return n
}

export class QueryProgress {
  private bars?: cliProgress.MultiBar
  private bar?: cliProgress.SingleBar
  private readonly t0 = performance.now()
  private lastLine = this.t0
  blocks = 0
  items = 0
  last: number

  /**
   * `from`: first block of the range; `start`: where this run starts (after `from` when resuming);
   * `end`: last block, undefined when following.
   */
  constructor(
    private readonly mode: QueryProgressMode,
    private readonly from: number,
    private readonly start: number,
    private readonly end: number | undefined,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {
    this.last = start - 1
  }

  /** A message line (retries, notes), above the bar if there is one. */
  message(line: string): void {
    if (this.mode === 'none') return
    if (this.bars) this.bars.log(line + '\n')
    else this.stream.write(line + '\n')
  }

  /** After each batch: its last block and how many blocks and items it held. */
  update(last: number, blocks: number, items: number): void {
    this.last = last
    this.blocks += blocks
    this.items += items
    if (this.mode === 'none') return
    const now = performance.now()
    const secs = Math.max(0.001, (now - this.t0) / 1000)
    const bps = (last - this.start + 1) / secs
    if (this.mode === 'bar') {
      const done = last - this.from + 1
      const total = this.end !== undefined ? this.end - this.from + 1 : done
      const payload = { bps: bps.toFixed(1), ips: (this.items / secs).toFixed(0) }
      if (!this.bar) {
        this.bars = new cliProgress.MultiBar(
          {
            // The ETA early: a narrow terminal cuts the end of the line.
            format: 'query [{bar}] {percentage}% eta {eta_formatted} | {value}/{total} blocks | {bps} blocks/s | {ips} items/s',
            barsize: 16,
            stream: this.stream,
            etaBuffer: 50,
            fps: 5,
            hideCursor: false,
          },
          cliProgress.Presets.shades_classic,
        )
        this.bar = this.bars.create(total, done, payload)
      } else {
        this.bar.setTotal(total)
        this.bar.update(done, payload)
      }
      return
    }
    if (now - this.lastLine < 1000) return
    this.lastLine = now
    const pct = this.end !== undefined && this.end >= this.from ? ` (${(((last - this.from + 1) / (this.end - this.from + 1)) * 100).toFixed(1)}%)` : ''
    this.stream.write(
      `progress: up to block ${last}${pct}, ${this.blocks} blocks, ${this.items} items, ${bps.toFixed(1)} blocks/s, ${(this.items / secs).toFixed(0)} items/s, ${secs.toFixed(1)} s\n`,
    )
  }

  /** Remove the bar (it stays drawn at its last state). */
  stop(): void {
    this.bars?.stop()
    this.bars = undefined
    this.bar = undefined
  }

  get seconds(): number {
    return (performance.now() - this.t0) / 1000
  }
}
