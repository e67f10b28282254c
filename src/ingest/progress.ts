import cliProgress from 'cli-progress'
import { log, setActiveLine } from '../log.js'

/*
 * Ingest progress: a cli-progress bar (blocks/s, rows/s, ETA) when stderr is a terminal, a pino
 * log line every few seconds otherwise (CI, files, pipes).
 */

export type ProgressMode = 'auto' | 'bar' | 'log' | 'none'

export interface ProgressState {
  /** Last block written into a chunk builder. */
  block: number
  blocks: number
  rows: number
  /** Block the ingest is heading to (the `--to` block or the confirmed head); undefined if unknown. */
  target?: number
  /** Block the ingest started from (for the total of the bar). */
  start: number
}

export class IngestProgress {
  private readonly mode: Exclude<ProgressMode, 'auto'>
  private bar?: cliProgress.SingleBar
  private readonly t0 = performance.now()
  private lastLog = 0

  constructor(mode: ProgressMode = 'auto', private readonly intervalMs = 5000) {
    this.mode = mode === 'auto' ? (process.stderr.isTTY && !process.env.CI ? 'bar' : 'log') : mode
  }

  update(s: ProgressState): void {
    if (this.mode === 'none') return
    const secs = Math.max(0.001, (performance.now() - this.t0) / 1000)
    const bps = s.blocks / secs
    const total = s.target != null ? Math.max(s.target - s.start + 1, s.blocks) : s.blocks
    const done = s.target != null ? Math.min(total, s.block - s.start + 1) : s.blocks
    if (this.mode === 'bar') {
      const payload = { bps: bps.toFixed(1), rps: (s.rows / secs).toFixed(0), block: s.block }
      if (!this.bar) {
        this.bar = new cliProgress.SingleBar(
          {
            format: 'ingest [{bar}] {percentage}% | block {block} | {value}/{total} | {bps} blocks/s | {rps} rows/s | eta {eta_formatted}',
            stream: process.stderr,
            etaBuffer: 50,
            fps: 5,
            // redrawn after each log line even when unchanged (see setActiveLine below)
            forceRedraw: true,
          },
          cliProgress.Presets.shades_classic,
        )
        this.bar.start(total, done, payload)
        if (this.bar.isActive && process.stderr.isTTY) {
          const bar = this.bar
          // Log lines go above the bar: erase it and turn line wrapping back on (the bar turns it off)
          // for the line to be written whole; then wrapping off again, the cursor saved at the start of
          // the bar's new line (the bar's stop() returns there) and the bar drawn again.
          setActiveLine({
            clear: () => process.stderr.write('\r\x1b[2K\x1b[?7h'),
            redraw: () => (process.stderr.write('\x1b[?7l\x1b7'), bar.render()),
          })
        }
      } else {
        this.bar.setTotal(total)
        this.bar.update(done, payload)
      }
      return
    }
    const now = performance.now()
    if (now - this.lastLog < this.intervalMs) return
    this.lastLog = now
    const left = s.target != null ? s.target - s.block : undefined
    log.info(
      {
        block: s.block,
        blocks: s.blocks,
        rows: s.rows,
        blocksPerSec: Number(bps.toFixed(1)),
        rowsPerSec: Math.round(s.rows / secs),
        ...(s.target != null ? { target: s.target, etaSec: left != null && bps > 0 ? Math.round(left / bps) : null } : {}),
      },
      'ingest progress',
    )
  }

  stop(): void {
    if (this.bar) setActiveLine(undefined)
    this.bar?.stop()
    this.bar = undefined
  }
}
