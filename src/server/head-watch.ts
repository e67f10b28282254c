import { readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { HEAD_FILE, parseDatasetHead, type DatasetHead } from '../chunks/head-file.js'
import { log } from '../log.js'
import { DEFAULT_HEAD_WATCH } from './defaults.js'
import { getTextIfChanged, isS3Url, joinKey, parseS3Url } from '../storage/s3.js'

/*
 * The router's watch on the datasets' head files (src/chunks/head-file.ts): a folder's is `stat`ed
 * every `folderMs` and read when it changed; an object's is fetched every `s3Ms` with
 * `If-None-Match` (no body while unchanged). Each new head goes to `onHead`, which appends the chunks
 * it names (docs/serving.md, "Freshness"). `check()` looks at every dataset at once (an ingest's
 * `POST /notify`).
 */

export interface HeadWatchOptions {
  /** Datasets in a folder: how often the head file is checked (0: only when `check` is called). */
  folderMs: number
  /** Datasets in object storage: how often (0: only when `check` is called). */
  s3Ms: number
}


/** Time limit of one read of an object's head file: a few intervals, at least 1 s. */
export const headReadLimitMs = (s3Ms: number): number => Math.max(1000, 4 * s3Ms)

interface Watched {
  url: string
  /** What identifies the version last read: a file's inode, mtime and size, an object's ETag. */
  version?: string
  nextAt: number
  busy?: Promise<void>
}

export class HeadWatch {
  private readonly watched = new Map<string, Watched>()
  private timer?: NodeJS.Timeout
  private stopped = false
  /** Checks made and heads found changed (status, tests). */
  readonly counts = { checks: 0, changes: 0 }

  constructor(
    private readonly datasets: () => { name: string; url: string }[],
    private readonly onHead: (dataset: string, head: DatasetHead) => Promise<void>,
    private readonly o: HeadWatchOptions = DEFAULT_HEAD_WATCH,
  ) {}

  start(): void {
    const tickMs = Math.min(...[this.o.folderMs, this.o.s3Ms].filter((ms) => ms > 0))
    if (!Number.isFinite(tickMs)) return
    const loop = () => {
      if (this.stopped) return
      this.timer = setTimeout(() => {
        void this.check(false).finally(loop)
      }, tickMs)
      this.timer.unref()
    }
    loop()
  }

  stop(): void {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
  }

  /** Check the datasets whose interval has passed (`all`: every dataset now); resolves when done. */
  async check(all = true): Promise<void> {
    const now = Date.now()
    const jobs: Promise<void>[] = []
    for (const { name, url } of this.datasets()) {
      let w = this.watched.get(name)
      if (!w || w.url !== url) this.watched.set(name, (w = { url, nextAt: 0 }))
      const every = isS3Url(url) ? this.o.s3Ms : this.o.folderMs
      if (!all && (every <= 0 || now < w.nextAt)) continue
      if (w.busy) {
        // One check at a time per dataset; one asked for meanwhile comes at the next tick.
        if (all) w.nextAt = 0
        continue
      }
      w.nextAt = now + every
      const entry = w
      entry.busy = this.checkOne(name, entry).finally(() => (entry.busy = undefined))
      jobs.push(entry.busy)
    }
    await Promise.all(jobs)
  }

  private async checkOne(name: string, w: Watched): Promise<void> {
    this.counts.checks++
    let text: string | undefined
    try {
      if (isS3Url(w.url)) {
        const loc = parseS3Url(w.url)
        // A read that meets the ingest's write can stall (s3rver rewrites objects in place): give up
        // and read again at the next check rather than wait for the socket timeout meanwhile.
        const r = await getTextIfChanged(loc.bucket, joinKey(loc.prefix, HEAD_FILE), w.version, AbortSignal.timeout(headReadLimitMs(this.o.s3Ms)))
        if (r === 'unchanged' || r === undefined) return
        text = r.text
        w.version = r.etag
      } else {
        const file = path.join(w.url, HEAD_FILE)
        const s = await stat(file).catch((e) => (e.code === 'ENOENT' ? undefined : Promise.reject(e)))
        const version = s && `${s.ino}:${s.mtimeMs}:${s.size}`
        if (!s || version === w.version) return
        text = await readFile(file, 'utf8')
        w.version = version
      }
    } catch (e) {
      log.warn({ dataset: name, url: w.url, err: e instanceof Error ? e.message : String(e) }, `router: cannot read ${HEAD_FILE}`)
      return
    }
    const head = parseDatasetHead(text)
    if (!head) {
      // Read again at the next check (a store whose writes are not atomic may show a partial file).
      w.version = undefined
      log.debug({ dataset: name, url: w.url }, `router: ${HEAD_FILE} is not a head file; ignored`)
      return
    }
    this.counts.changes++
    log.debug({ dataset: name, last: head.last }, `router: ${HEAD_FILE} changed`)
    try {
      await this.onHead(name, head)
    } catch (e) {
      // Read again at the next check.
      w.version = undefined
      log.warn({ dataset: name, err: e instanceof Error ? e.message : String(e) }, `router: cannot use ${HEAD_FILE}`)
    }
  }
}
