import { appendFileSync } from 'node:fs'
import { parseChunkPath } from '../../src/chunks/layout.js'
import { quantile, type BlockFreshness } from '../../test/helpers/freshness.js'

/*
 * Where a block's lag goes, from the JSON log lines (LOG_LEVEL=debug) of the ingest and of `serve`,
 * lined up with the bench's own sightings: node reports it → the ingest closes the chunk holding it →
 * the chunk is built (its upload starts) → uploaded → head.json written → the router appends it →
 * a worker's download starts → downloaded → the router's /height covers it → answered. Times are
 * this machine's clock (every process runs here).
 */

interface LogRecord {
  time: number
  msg: string
  [k: string]: unknown
}

export class StageLog {
  private readonly records: LogRecord[] = []
  private rest = ''

  /** `raw`: a file that every record is appended to as well (to look at by hand). */
  constructor(private readonly raw?: string) {}

  /** Feed a process's stderr (JSON lines; others are ignored). */
  feed(chunk: Buffer | string): void {
    const lines = (this.rest + chunk).split('\n')
    this.rest = lines.pop()!
    for (const line of lines) {
      if (!line.startsWith('{')) continue
      try {
        const r = JSON.parse(line) as LogRecord
        if (typeof r.time === 'number' && typeof r.msg === 'string') {
          this.records.push(r)
          if (this.raw) appendFileSync(this.raw, line + '\n')
        }
      } catch {
        // not a log record
      }
    }
  }

  /** One row per stage: p50/p90/p99/max (ms) over the blocks where every mark was found. */
  stages(blocks: BlockFreshness[]): { stage: string; ms: number[] }[] {
    const by = (msg: string) => this.records.filter((r) => r.msg === msg)
    const closing = by('ingest: closing a chunk')
    const uploaded = by('chunk uploaded')
    const written = by('chunk written')
    const heads = by('ingest: head.json written')
    const listed = by('router: chunk list changed')
    const seen = by('router: head.json changed')
    const nudged = by('worker: nudged')
    const downloaded = by('cache: chunk downloaded')
    const inChunk = (b: number, p: unknown) => {
      const ref = typeof p === 'string' ? parseChunkPath(p) : undefined
      return !!ref && ref.first <= b && b <= ref.last
    }
    const first = <T>(xs: T[], f: (x: T) => boolean) => xs.find(f)
    const names = ['node → chunk closed (fetch, poll, waiting for the previous upload)', 'closed → built (Parquet, upload starts)', 'upload: files but blocks.parquet, lease check', 'upload: blocks.parquet', 'uploaded → chunk written (loop)', 'written → head.json PUT done', 'head.json → router read it', 'router read it → appended', 'router appended → worker nudged', 'nudged → download starts', 'download (meta.json, then the files)', 'downloaded → router /height', 'router /height → answered']
    const out = names.map((stage) => ({ stage, ms: [] as number[] }))
    for (const blk of blocks) {
      const b = blk.block
      const c = first(closing, (r) => (r.first as number) <= b && b <= (r.last as number))
      const u = first(uploaded, (r) => inChunk(b, r.chunk))
      const w = first(written, (r) => inChunk(b, r.chunk))
      const h = first(heads, (r) => (r.last as number) >= b)
      const l = first(listed, (r) => (r.last as number) >= b)
      const s = first(seen, (r) => (r.last as number) >= b)
      const n = l && first(nudged, (r) => r.time >= l.time)
      const d = first(downloaded, (r) => inChunk(b, r.chunk))
      if (!c || !u || !w || !h || !s || !l || !n || !d) continue
      const uploadStart = u.time - (u.ms as number)
      const restEnd = uploadStart + (u.restMs as number)
      const downloadStart = d.time - (d.ms as number)
      const marks = [blk.seenAt, c.time, uploadStart, restEnd, u.time, w.time, h.time, s.time, l.time, n.time, downloadStart, d.time, blk.seenAt + blk.heightMs, blk.seenAt + blk.answerMs]
      for (let i = 0; i < names.length; i++) out[i].ms.push(marks[i + 1] - marks[i])
    }
    return out
  }

  /** `ms` of each record with this message (the router's periodic listings, the workers' checks of held chunks). */
  durations(msg: string): number[] {
    return this.records.filter((r) => r.msg === msg).map((r) => r.ms as number)
  }
}

export function stageRows(target: string, stages: { stage: string; ms: number[] }[]): (string | number)[][] {
  return stages.filter((s) => s.ms.length).map(({ stage, ms }) => [target, stage, ms.length, ...[0.5, 0.9, 0.99].map((q) => (ms.length ? quantile(ms, q).toFixed(0) : '–')), ms.length ? Math.max(...ms).toFixed(0) : '–'])
}
