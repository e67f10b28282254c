import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { parseChunkPath, resolvedOrThrow, type ChunkMeta, type ChunkRef, type DatasetMeta } from '../chunks/layout.js'
import { log } from '../log.js'
import { abortMultipartUploads, deleteObjects, downloadObject, getText, joinKey, listObjects, parseS3Url, putText, s3Url, uploadFile, type S3Location } from '../storage/s3.js'
import { mapLimit } from '../semaphore.js'
import { S3Lease, type LeaseOptions } from './s3-lease.js'
import { alive } from '../pid.js'
import { readBlockHashes } from './reorg.js'
import { ClaimHolder, type CloseOptions, type IngestTarget, type UploadStats } from './target.js'
import { sleep } from '../retry.js'
import { S3Claims, overlaps, type ClaimOptions, type ClaimRange, type ClaimRecord } from './range-claims.js'
import { CHUNK_INDEX_FILE, chunkIndexLine } from '../chunks/chunk-index.js'

/*
 * Ingest into `s3://bucket/prefix`. Chunks are built in a local staging folder, then uploaded: the
 * Parquet files but blocks.parquet (a few at a time), meta.json, and blocks.parquet last. As in a
 * local folder, a chunk exists for readers exactly when its blocks.parquet does, so a reader never
 * sees a partial chunk and a killed upload leaves a folder without blocks.parquet, which the next
 * ingest deletes. The loop publishes one chunk at a time, in order.
 */

export interface S3TargetOptions {
  lease?: LeaseOptions
  claim?: ClaimOptions
  /** Files of one chunk uploaded at once (default 3). */
  uploadConcurrency?: number
}

/** A chunk folder found in the bucket: its objects, and whether blocks.parquet is among them. */
interface ChunkObjects {
  ref: ChunkRef
  keys: string[]
  complete: boolean
}

export class S3IngestTarget implements IngestTarget {
  readonly where: string
  buildRoot = ''
  readonly upload: UploadStats = { chunks: 0, bytes: 0, ms: 0 }
  private readonly loc: S3Location
  private readonly lease: S3Lease
  private readonly concurrency: number
  private readonly claimHolder: ClaimHolder
  /** Holds the dataset's lease (an ingest up to the head), not only a range claim. */
  private leased = false
  /** Lines of the dataset's chunk index (src/chunks/chunk-index.ts) this run added: the chunks it published. */
  private indexMine: string[] = []
  /** Lines of the index object when last read or written, plus this run's added since. */
  private indexLines = 0
  /** Lines added since the index object was last written. */
  private indexUnwritten = 0

  constructor(url: string, o: S3TargetOptions = {}) {
    this.loc = parseS3Url(url)
    this.where = s3Url(this.loc)
    this.lease = new S3Lease(this.loc.bucket, this.key('.ingest-lease.json'), this.where, o.lease)
    this.claimHolder = new ClaimHolder(new S3Claims(this.loc, this.where), { settleMs: o.lease?.settleMs, ...o.claim })
    this.concurrency = Math.max(1, o.uploadConcurrency ?? 3)
  }

  async open(want: DatasetMeta, o: { bounded?: boolean } = {}): Promise<void> {
    await this.ensureDatasetMeta(want)
    if (!o.bounded) {
      await this.lease.acquire()
      this.leased = true
    }
    try {
      await this.removeLeftovers(await this.claimHolder.others())
      await removeStaleStaging()
      this.indexLines = ((await getText(this.loc.bucket, this.key(CHUNK_INDEX_FILE))) ?? '').split('\n').length - 1
      this.buildRoot = await mkdtemp(path.join(tmpdir(), `ba-ingest-s3-${process.pid}-`))
    } catch (e) {
      if (this.leased) await this.lease.release()
      this.leased = false
      throw e
    }
  }

  get claimOwner(): string | undefined {
    return this.claimHolder.owner
  }

  /** The claim of an ingest up to the head has the owner id of its lease (one name in messages). */
  claim(range: ClaimRange, owner?: string): Promise<void> {
    return this.claimHolder.claim(range, this.leased ? this.lease.owner : owner)
  }

  releaseClaim(complete: boolean): Promise<void> {
    return this.claimHolder.release(complete)
  }

  claims(): Promise<ClaimRecord[]> {
    return this.claimHolder.claims()
  }

  async listChunks(): Promise<ChunkRef[]> {
    return resolvedOrThrow(await this.listComplete(), this.where)
  }

  async listComplete(): Promise<ChunkRef[]> {
    const chunks = [...(await this.scan()).values()].filter((c) => c.complete).map((c) => c.ref)
    return chunks.sort((a, b) => a.first - b.first || a.last - b.last)
  }

  async readChunkMeta(ref: ChunkRef): Promise<ChunkMeta> {
    const text = await getText(this.loc.bucket, this.key(ref.path, 'meta.json'))
    if (text == null) throw new Error(`chunk ${ref.path} of ${this.where} has no meta.json`)
    return JSON.parse(text)
  }

  async publish(ref: ChunkRef): Promise<ChunkRef> {
    const t0 = performance.now()
    const dir = path.join(this.buildRoot, ref.path)
    const names = await readdir(dir)
    if (!names.includes('blocks.parquet') || !names.includes('meta.json')) throw new Error(`chunk ${ref.path} was not built completely (${names.join(', ')})`)
    let bytes = 0
    const put = async (name: string) => {
      const size = await uploadFile(this.loc.bucket, this.key(ref.path, name), path.join(dir, name))
      bytes += size // not `bytes += await …`: that reads `bytes` before the parallel uploads add to it
    }
    // Every file but blocks.parquet (meta.json among them) while the lease is checked: until
    // blocks.parquet is there they are an unfinished chunk, which the next ingest removes. The
    // check, not one after the uploads, is the one before the upload that makes the chunk visible:
    // a lease is only taken over once expired, so what it read still holds unless the uploads took
    // long (s3-lease.ts). A following ingest pays each round trip here per block.
    const checkedAt = Date.now()
    await Promise.all([this.leaseCheck(), mapLimit(names.filter((n) => n !== 'blocks.parquet'), this.concurrency, put)])
    if (this.leased && Date.now() - checkedAt > this.lease.recheckAfterMs) await this.lease.check()
    const restMs = performance.now() - t0
    await put('blocks.parquet')
    const meta = JSON.parse(await readFile(path.join(dir, 'meta.json'), 'utf8'))
    await rm(dir, { recursive: true, force: true })
    await this.addToIndex(chunkIndexLine(ref, meta))
    const ms = performance.now() - t0
    this.upload.chunks++
    this.upload.bytes += bytes
    this.upload.ms += ms
    log.info({ chunk: ref.path, bytes, files: names.length, ms: Math.round(ms), restMs: Math.round(restMs) }, 'chunk uploaded')
    return ref
  }

  /** The dataset lease, held by an ingest up to the head (a range ingest has its claim). */
  private async leaseCheck(): Promise<void> {
    if (this.leased) await this.lease.check()
  }

  async deleteChunk(ref: ChunkRef): Promise<void> {
    await this.leaseCheck()
    const keys = (await listObjects(this.loc.bucket, this.key(ref.path) + '/')).map((o) => o.key)
    const blocks = this.key(ref.path, 'blocks.parquet')
    await deleteObjects(this.loc.bucket, [blocks]) // the chunk leaves the listing
    await deleteObjects(this.loc.bucket, keys.filter((k) => k !== blocks))
    log.info({ chunk: ref.path, dataset: this.where }, 'chunk deleted')
  }

  async blockHashes(ref: ChunkRef): Promise<Map<number, string>> {
    const file = path.join(this.buildRoot, `.blocks-${path.basename(ref.path)}.parquet`)
    try {
      await downloadObject(this.loc.bucket, this.key(ref.path, 'blocks.parquet'), file)
      return await readBlockHashes(file)
    } finally {
      await rm(file, { force: true })
    }
  }

  /**
   * An object cannot be appended to: the index is rewritten once the lines not written yet are a
   * 64th of it (so each chunk costs about 64 lines of upload however big the dataset), and at
   * `close`. Chunks published after the last write are read from their meta.json by routers.
   */
  private async addToIndex(line: string): Promise<void> {
    this.indexMine.push(line)
    this.indexLines++
    this.indexUnwritten++
    // the chunk is published whatever happens here: an index not written now is written with a later chunk
    if (this.indexUnwritten * 64 >= this.indexLines) await this.writeIndex().catch((e) => log.warn({ err: e instanceof Error ? e.message : String(e), dataset: this.where }, 'could not write the chunk index; routers read the meta.json of the chunks it lacks'))
  }

  /**
   * Ingests of other ranges (backfills in parallel) write the same index: each write adds this
   * run's lines to the object as it is now, and reads it back to see that they stayed (another
   * ingest may have written between the read and the write); if not, it writes again, a few times.
   */
  private async writeIndex(): Promise<void> {
    if (!this.indexUnwritten) return
    const n = this.indexUnwritten
    const key = this.key(CHUNK_INDEX_FILE)
    const lacking = (text: string) => {
      const have = new Set(text.split('\n'))
      return this.indexMine.filter((l) => !have.has(l.slice(0, -1)))
    }
    for (let attempt = 1; ; attempt++) {
      let text = (await getText(this.loc.bucket, key)) ?? ''
      if (text && !text.endsWith('\n')) text += '\n' // a line cut short stays unparsable on its own
      const add = lacking(text)
      if (add.length) {
        text += add.join('')
        await putText(this.loc.bucket, key, text)
      }
      this.indexLines = text.split('\n').length - 1
      if (!add.length || !lacking((await getText(this.loc.bucket, key)) ?? '').length) break
      if (attempt === 4) throw new Error('another ingest kept rewriting the chunk index at the same time')
      await sleep(50 + Math.random() * 200 * attempt)
    }
    this.indexUnwritten -= n
  }

  async close(o: CloseOptions = {}): Promise<void> {
    await this.writeIndex().catch((e) => log.warn({ err: e instanceof Error ? e.message : String(e), dataset: this.where }, 'could not write the chunk index; routers read the meta.json of the chunks it lacks'))
    await (o.keepClaim ? this.claimHolder.handOver() : this.claimHolder.release(false))
    if (this.leased) await this.lease.release()
    this.leased = false
    if (this.buildRoot) await rm(this.buildRoot, { recursive: true, force: true })
  }

  async chunkFolder(ref: ChunkRef): Promise<{ dir: string; done(): Promise<void> }> {
    const dir = await mkdtemp(path.join(this.buildRoot, '.tmp-read-'))
    const base = this.key(ref.path) + '/'
    try {
      const files = (await listObjects(this.loc.bucket, base)).filter((o) => !o.key.slice(base.length).includes('/'))
      await mapLimit(files, this.concurrency, (o) => downloadObject(this.loc.bucket, o.key, path.join(dir, o.key.slice(base.length))))
    } catch (e) {
      await rm(dir, { recursive: true, force: true })
      throw e
    }
    return { dir, done: () => rm(dir, { recursive: true, force: true }) }
  }

  /** blocks.parquet first (the chunk is no longer complete for any listing), then the rest; a killed run's rest is removed at the next open. */
  async removeChunk(ref: ChunkRef): Promise<void> {
    await this.leaseCheck()
    const keys = (await listObjects(this.loc.bucket, this.key(ref.path) + '/')).map((o) => o.key)
    const blocks = keys.filter((k) => k.endsWith('/blocks.parquet'))
    if (blocks.length) await deleteObjects(this.loc.bucket, blocks)
    await deleteObjects(this.loc.bucket, keys.filter((k) => !blocks.includes(k)))
  }

  private key(...parts: string[]): string {
    return joinKey(this.loc.prefix, ...parts)
  }

  private async ensureDatasetMeta(want: DatasetMeta): Promise<void> {
    const text = await getText(this.loc.bucket, this.key('dataset.json'))
    if (text != null) {
      const have: DatasetMeta = JSON.parse(text)
      if (have.name !== want.name || have.family !== want.family) throw new Error(`${this.where} holds dataset ${JSON.stringify(have)}, not ${JSON.stringify(want)}`)
      return
    }
    await putText(this.loc.bucket, this.key('dataset.json'), JSON.stringify(want, null, 2) + '\n')
  }

  /** The chunk folders under the prefix, complete or not, by path. */
  private async scan(): Promise<Map<string, ChunkObjects>> {
    const base = this.loc.prefix ? this.loc.prefix + '/' : ''
    const folders = new Map<string, ChunkObjects>()
    for (const o of await listObjects(this.loc.bucket, base)) {
      const parts = o.key.slice(base.length).split('/')
      if (parts.length !== 3) continue
      const ref = parseChunkPath(`${parts[0]}/${parts[1]}`)
      if (!ref) continue
      let folder = folders.get(ref.path)
      if (!folder) folders.set(ref.path, (folder = { ref, keys: [], complete: false }))
      folder.keys.push(o.key)
      if (parts[2] === 'blocks.parquet') folder.complete = true
    }
    return folders
  }

  /**
   * Chunk folders of an interrupted upload (no blocks.parquet), and multipart uploads never
   * completed; but not those in the range of another running ingest (`others`: a chunk it is
   * uploading), and no multipart upload while one runs.
   */
  private async removeLeftovers(others: ClaimRecord[]): Promise<void> {
    for (const folder of (await this.scan()).values()) {
      if (folder.complete) continue
      if (others.some((c) => overlaps(c, { from: folder.ref.first, to: folder.ref.last }))) continue
      log.info({ chunk: folder.ref.path, objects: folder.keys.length, dataset: this.where }, 'removing an unfinished chunk upload left by an earlier run')
      await deleteObjects(this.loc.bucket, folder.keys)
    }
    if (others.length) return
    const aborted = await abortMultipartUploads(this.loc.bucket, this.loc.prefix ? this.loc.prefix + '/' : '')
    if (aborted) log.info({ uploads: aborted, dataset: this.where }, 'aborted multipart uploads left by an earlier run')
  }
}

/**
 * Staging folders (`ba-ingest-s3-<pid>-*`) of ingests on this machine that were killed: their
 * process is gone, and each holds up to a chunk or two of files nobody deletes otherwise.
 */
async function removeStaleStaging(): Promise<void> {
  for (const name of await readdir(tmpdir()).catch(() => [] as string[])) {
    const pid = Number(/^ba-ingest-s3-(\d+)-/.exec(name)?.[1])
    if (!pid || pid === process.pid || alive(pid)) continue
    log.info({ folder: path.join(tmpdir(), name) }, 'removing the staging folder of a killed ingest')
    await rm(path.join(tmpdir(), name), { recursive: true, force: true })
  }
}
