import { rename, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { HEAD_FILE, HEAD_RECENT_CHUNKS, type DatasetHead } from '../chunks/head-file.js'
import type { ChunkRef } from '../chunks/layout.js'
import { log } from '../log.js'
import { httpRequest } from '../http-request.js'
import { isS3Url, joinKey, parseS3Url, putText } from '../storage/s3.js'

/*
 * A following ingest keeps the dataset's `head.json` (src/chunks/head-file.ts) up to date: after
 * each chunk is published (in object storage: after its blocks.parquet is uploaded) and when the
 * node's head moves (at most once a second for that alone). Writes are coalesced, one at a time, the newest state winning; a failed
 * write is logged and retried with the next change, never stopping the ingest. With `notify` URLs
 * (routers), each write that adds a chunk is followed by a `POST <url>/notify` so those routers look
 * at once instead of at their next watch tick.
 */

/** Writes for the node's head alone, at most one per this many ms. */
const NODE_ONLY_WRITE_MS = 1000

export interface HeadWriterOptions {
  /** `--out`: a folder or `s3://bucket/prefix`. */
  out: string
  dataset: string
  /** Chunks in the dataset when the ingest starts, ascending. */
  written: ChunkRef[]
  /** Router base URLs told of each new chunk. */
  notify?: string[]
}

export class HeadWriter {
  private readonly head: DatasetHead
  /** Confirmed heads read and when, while above the last published block (for `behind`). */
  private readonly sightings: { confirmed: number; at: number }[] = []
  private writing?: Promise<void>
  private again = false
  private notifyNext = false
  private closed = false
  private lastWriteAt = 0
  private nodeTimer?: NodeJS.Timeout

  constructor(private readonly o: HeadWriterOptions) {
    this.head = {
      dataset: o.dataset,
      chunks: o.written.slice(-HEAD_RECENT_CHUNKS).map((c) => c.path),
      last: o.written.at(-1)?.last ?? -1,
      publishedAt: null,
      node: null,
      behind: null,
      writtenAt: 0,
    }
  }

  /** The node's head was read. Written when it moved. */
  node(head: number, confirmed: number): void {
    const moved = this.head.node?.head !== head || this.head.node?.confirmed !== confirmed
    const now = Date.now()
    if (confirmed > this.head.last && confirmed > (this.sightings.at(-1)?.confirmed ?? -1)) this.sightings.push({ confirmed, at: now })
    this.head.node = { head, confirmed, at: now }
    this.updateBehind()
    if (moved) this.writeNodeSoon()
  }

  /**
   * A change of the node's head alone (what routers show as the lag) is written at most every
   * NODE_ONLY_WRITE_MS; a chunk's write carries it at once. On a chain with a block a second that
   * is about one write per block instead of two: fewer writes for the chunk's write to wait behind,
   * and, on a store that rewrites objects in place, fewer a router's read can meet.
   */
  private writeNodeSoon(): void {
    if (this.nodeTimer || this.closed) return
    const wait = this.lastWriteAt + NODE_ONLY_WRITE_MS - Date.now()
    if (wait <= 0) return this.write(false)
    this.nodeTimer = setTimeout(() => {
      this.nodeTimer = undefined
      this.write(false)
    }, wait)
    this.nodeTimer.unref()
  }

  /** A chunk is in place for readers. */
  published(ref: ChunkRef): void {
    this.head.chunks = [...this.head.chunks, ref.path].slice(-HEAD_RECENT_CHUNKS)
    this.head.last = Math.max(this.head.last, ref.last)
    this.head.publishedAt = Date.now()
    while (this.sightings.length && this.sightings[0].confirmed <= this.head.last) this.sightings.shift()
    this.updateBehind()
    this.write(true)
  }

  /** A reorg deleted the newest chunks: the file names what is left (routers list the dataset again). */
  rewound(written: ChunkRef[]): void {
    this.head.chunks = written.slice(-HEAD_RECENT_CHUNKS).map((c) => c.path)
    this.head.last = written.at(-1)?.last ?? -1
    this.sightings.length = 0
    this.updateBehind()
    this.write(true)
  }

  /** Write what is pending and wait for it. */
  async close(): Promise<void> {
    if (this.nodeTimer) this.write(false)
    while (this.writing) await this.writing
    this.closed = true
  }

  private updateBehind(): void {
    const first = this.sightings[0]
    this.head.behind = first ? { block: this.head.last + 1, since: first.at } : null
  }

  private write(notify: boolean): void {
    if (this.closed) return
    clearTimeout(this.nodeTimer) // this write carries the node's head too
    this.nodeTimer = undefined
    this.notifyNext ||= notify
    if (this.writing) {
      this.again = true
      return
    }
    this.writing = (async () => {
      do {
        this.again = false
        const notifying = this.notifyNext
        this.notifyNext = false
        this.head.writtenAt = this.lastWriteAt = Date.now()
        const text = JSON.stringify(this.head) + '\n'
        try {
          await writeHeadFile(this.o.out, text)
          log.debug({ last: this.head.last, writtenAt: this.head.writtenAt }, `ingest: ${HEAD_FILE} written`)
        } catch (e) {
          log.warn({ err: e instanceof Error ? e.message : String(e), out: this.o.out }, `ingest: cannot write ${HEAD_FILE} (routers learn of new chunks at their next listing instead)`)
        }
        if (notifying) for (const url of this.o.notify ?? []) void notifyRouter(url, this.o.dataset)
      } while (this.again && !this.closed)
    })().finally(() => {
      this.writing = undefined
    })
  }
}

/** Replace the head file atomically: a folder's through a temp file and rename, an object with one PUT. */
async function writeHeadFile(out: string, text: string): Promise<void> {
  if (isS3Url(out)) {
    const loc = parseS3Url(out)
    await putText(loc.bucket, joinKey(loc.prefix, HEAD_FILE), text)
    return
  }
  // `.tmp-*`: what a killed ingest leaves is removed at the next start (target.ts)
  const tmp = path.join(out, `.tmp-${HEAD_FILE}.${process.pid}`)
  await writeFile(tmp, text)
  await rename(tmp, path.join(out, HEAD_FILE))
}

/** Tell a router a chunk was published (it then reads the head files at once); failures are only logged. */
async function notifyRouter(url: string, dataset: string): Promise<void> {
  try {
    const res = await httpRequest(`${url.replace(/\/+$/, '')}/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ dataset }),
      timeoutMs: 5000,
    })
    if (res.status < 200 || res.status >= 300) log.warn({ router: url, status: res.status }, 'ingest: the router did not take the notification')
  } catch (e) {
    log.warn({ router: url, err: e instanceof Error ? e.message : String(e) }, 'ingest: cannot notify the router')
  }
}
