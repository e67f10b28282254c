import { mkdir, readdir, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { listLocalChunks, scanLocalChunks, readChunkMeta, readDatasetMeta, type ChunkMeta, type ChunkRef, type DatasetMeta } from '../chunks/layout.js'
import { log } from '../log.js'
import { isS3Url } from '../storage/s3.js'
import { DatasetLocked } from './locked.js'
import { readBlockHashes } from './reorg.js'
import type { LeaseOptions } from './s3-lease.js'
import { S3IngestTarget } from './s3-target.js'
import { alive } from '../pid.js'
import { claimLive, FolderClaims, RangeClaim, readClaims, type ClaimOptions, type ClaimRange, type ClaimRecord, type ClaimStore } from './range-claims.js'
import { hostname } from 'node:os'
import { appendToFolderIndex } from '../chunks/chunk-index.js'

/*
 * Where an ingest writes its dataset: a local folder, or `s3://bucket/prefix` (s3-target.ts). Either
 * way the ChunkBuilder builds each chunk in a local folder (`buildRoot`) and the target then makes it
 * visible (`publish`); a chunk is complete exactly when its blocks.parquet exists.
 */

export interface UploadStats {
  chunks: number
  bytes: number
  /** Time spent publishing chunks (uploads overlap with fetching the next chunk's blocks). */
  ms: number
}

export interface IngestTarget {
  /** The dataset as named in messages. */
  readonly where: string
  /** The folder ChunkBuilder builds in; a finished chunk is at `{buildRoot}/{ref.path}`. Set by `open`. */
  readonly buildRoot: string
  /** Object-storage targets: what `publish` uploaded. */
  readonly upload?: UploadStats
  /**
   * Create the dataset (or check that it is this one), lock it against other ingests (not `bounded`:
   * an ingest of a block range takes a range claim instead, `claim`), remove what a killed ingest
   * left (never what a running one, writing another range, is building).
   */
  open(meta: DatasetMeta, o?: { bounded?: boolean }): Promise<void>
  /**
   * Claim the blocks this ingest writes (range-claims.ts); refused (DatasetLocked) when a live ingest
   * claims some of them. `owner`: the claim's owner id (the passes of one ingest share one).
   */
  claim(range: ClaimRange, owner?: string): Promise<void>
  /** Give the claim up: deleted when the range is `complete`, else kept, marked stopped. Also done (not complete) by `close`. */
  releaseClaim(complete: boolean): Promise<void>
  /** The range claims of every ingest of the dataset, this one's included. */
  claims(): Promise<ClaimRecord[]>
  /** This ingest's claim owner id (once claimed). */
  readonly claimOwner?: string
  /** Complete chunks, ascending. */
  listChunks(): Promise<ChunkRef[]>
  readChunkMeta(ref: ChunkRef): Promise<ChunkMeta>
  /** Make a chunk that ChunkBuilder finished visible to readers, and add it to the dataset's chunk index. Called for one chunk at a time, in order. */
  publish(ref: ChunkRef): Promise<ChunkRef>
  /**
   * Remove a chunk of blocks a reorg replaced: it leaves the listing at once (its blocks.parquet
   * goes first), then its other files go. The loop removes chunks newest first, so the dataset stays
   * a prefix of the chain.
   */
  deleteChunk(ref: ChunkRef): Promise<void>
  /** Number → hash (lower case) of a chunk's blocks. */
  blockHashes(ref: ChunkRef): Promise<Map<number, string>>
  /** Unlock (after `open` succeeded) and give the range claim up (see `CloseOptions`). */
  close(o?: CloseOptions): Promise<void>
  /** Compaction (src/compact/): every complete chunk, superseded ones included, ascending. */
  listComplete(): Promise<ChunkRef[]>
  /** Compaction: a local folder holding the chunk's files, for reading; `done` when read. */
  chunkFolder(ref: ChunkRef): Promise<{ dir: string; done(): Promise<void> }>
  /** Compaction: delete a chunk. It stops being complete first (no reader lists a partial chunk). */
  removeChunk(ref: ChunkRef): Promise<void>
}

export interface TargetOptions {
  /** S3 targets: lease timing. */
  lease?: LeaseOptions
  /** Range claim timing. */
  claim?: ClaimOptions
}

export interface CloseOptions {
  /** Leave the range claim running (not marked stopped): another pass of this ingest follows at once. */
  keepClaim?: boolean
}

/** The target for `--out`: `s3://bucket/prefix` or a folder. */
export function ingestTarget(out: string, o: TargetOptions = {}): IngestTarget {
  return isS3Url(out) ? new S3IngestTarget(out, { lease: o.lease, claim: o.claim }) : new FolderTarget(out, o.claim)
}

/** The range claim part of a target, the same for a folder and object storage. */
export class ClaimHolder {
  private held?: RangeClaim

  constructor(
    private readonly store: ClaimStore,
    private readonly o: ClaimOptions = {},
  ) {}

  get owner(): string | undefined {
    return this.held?.owner
  }

  async claim(range: ClaimRange, owner?: string): Promise<void> {
    const c = new RangeClaim(this.store, range, { ...this.o, owner })
    await c.acquire()
    this.held = c
    log.info({ claim: c.name, from: range.from, to: range.to ?? 'head' }, 'claimed the blocks this ingest writes')
  }

  async release(complete: boolean): Promise<void> {
    const c = this.held
    this.held = undefined
    await c?.release(complete)
  }

  /** Stop renewing the claim and leave it as it is: the next pass of the same ingest takes it on. */
  async handOver(): Promise<void> {
    const c = this.held
    this.held = undefined
    await c?.handOver()
  }

  claims(): Promise<ClaimRecord[]> {
    return readClaims(this.store)
  }

  /** Live claims of other ingests. */
  async others(): Promise<ClaimRecord[]> {
    return (await this.claims()).filter((c) => c.owner !== this.held?.owner && claimLive(c))
  }
}

/** A local dataset folder: chunks are built in it and renamed into place by ChunkBuilder. */
export class FolderTarget implements IngestTarget {
  private unlock?: () => Promise<void>
  private readonly claimHolder: ClaimHolder

  constructor(readonly where: string, claim?: ClaimOptions) {
    this.claimHolder = new ClaimHolder(new FolderClaims(where), claim)
  }

  get claimOwner(): string | undefined {
    return this.claimHolder.owner
  }

  claim(range: ClaimRange, owner?: string): Promise<void> {
    return this.claimHolder.claim(range, owner)
  }

  releaseClaim(complete: boolean): Promise<void> {
    return this.claimHolder.release(complete)
  }

  claims(): Promise<ClaimRecord[]> {
    return this.claimHolder.claims()
  }

  get buildRoot(): string {
    return this.where
  }

  async open(meta: DatasetMeta, o: { bounded?: boolean } = {}): Promise<void> {
    await mkdir(this.where, { recursive: true })
    await ensureDatasetMeta(this.where, meta)
    if (!o.bounded) this.unlock = await lock(this.where)
    try {
      await removeStaleTemps(this.where, await this.claimHolder.others())
    } catch (e) {
      await this.close()
      throw e
    }
  }

  listChunks(): Promise<ChunkRef[]> {
    return listLocalChunks(this.where)
  }

  readChunkMeta(ref: ChunkRef): Promise<ChunkMeta> {
    return readChunkMeta(this.where, ref)
  }

  /** The rename into place was the publishing; the chunk's line goes into the dataset's chunk index (src/chunks/chunk-index.ts). */
  async publish(ref: ChunkRef): Promise<ChunkRef> {
    // the chunk is in place whatever happens here: without its line, routers read its meta.json
    await appendToFolderIndex(this.where, ref, await readChunkMeta(this.where, ref)).catch((e) =>
      log.warn({ err: e instanceof Error ? e.message : String(e), chunk: ref.path, dataset: this.where }, 'could not add the chunk to the chunk index; routers read its meta.json'),
    )
    return ref
  }

  async deleteChunk(ref: ChunkRef): Promise<void> {
    // a rename takes the chunk out of the listing at once; a `.tmp-*` folder left by a crash is removed at the next start
    const gone = path.join(this.where, `.tmp-${process.pid}-orphaned-${path.basename(ref.path)}`)
    await rename(path.join(this.where, ref.path), gone)
    await rm(gone, { recursive: true, force: true })
    await rmdir(path.join(this.where, path.dirname(ref.path))).catch(() => undefined) // the top folder, once empty
  }

  blockHashes(ref: ChunkRef): Promise<Map<number, string>> {
    return readBlockHashes(path.join(this.where, ref.path, 'blocks.parquet'))
  }

  async close(o: CloseOptions = {}): Promise<void> {
    await (o.keepClaim ? this.claimHolder.handOver() : this.claimHolder.release(false))
    await this.unlock?.()
    this.unlock = undefined
  }

  listComplete(): Promise<ChunkRef[]> {
    return scanLocalChunks(this.where)
  }

  async chunkFolder(ref: ChunkRef): Promise<{ dir: string; done(): Promise<void> }> {
    return { dir: path.join(this.where, ref.path), done: async () => undefined }
  }

  /** Renamed to a temp name first (one step: listings no longer see it), then deleted; a killed run's temp is removed at the next open. */
  async removeChunk(ref: ChunkRef): Promise<void> {
    const doomed = path.join(this.where, `.tmp-${process.pid}-removed-${randomBytes(4).toString('hex')}`)
    try {
      await rename(path.join(this.where, ref.path), doomed)
    } catch (e: any) {
      if (e.code === 'ENOENT') return
      throw e
    }
    await rm(doomed, { recursive: true, force: true })
  }
}

async function ensureDatasetMeta(dir: string, want: DatasetMeta): Promise<void> {
  const have = await readDatasetMeta(dir)
  if (have) {
    if (have.name !== want.name || have.family !== want.family) {
      throw new Error(`${dir} holds dataset ${JSON.stringify(have)}, not ${JSON.stringify(want)}`)
    }
    return
  }
  const tmp = path.join(dir, `.dataset.json.${process.pid}-${randomBytes(3).toString('hex')}`) // two ingests of one process may start together
  await writeFile(tmp, JSON.stringify(want, null, 2) + '\n')
  await rename(tmp, path.join(dir, 'dataset.json'))
}

/** `.ingest.lock` holds the pid of the ingest writing the folder; a dead holder's lock is taken over. */
async function lock(dir: string): Promise<() => Promise<void>> {
  const file = path.join(dir, '.ingest.lock')
  for (let i = 0; i < 2; i++) {
    try {
      await writeFile(file, String(process.pid), { flag: 'wx' })
      return () => rm(file, { force: true })
    } catch (e: any) {
      if (e.code !== 'EEXIST') throw e
      const pid = Number((await readFile(file, 'utf8').catch(() => '')).trim())
      if (pid && pid !== process.pid && alive(pid)) throw new DatasetLocked(`another ingest (pid ${pid}) is writing ${dir}`)
      await rm(file, { force: true })
    }
  }
  throw new DatasetLocked(`could not lock ${dir}`)
}

/**
 * Temp folders (`.tmp-<pid>-…`) of chunks whose writer died (killed mid-chunk). Those of a process
 * still running (another ingest writing another range) stay; while an ingest of another machine
 * writes into the folder (a live claim from another host), whose pids mean nothing here, none go.
 */
async function removeStaleTemps(dir: string, others: ClaimRecord[]): Promise<void> {
  if (others.some((c) => c.host !== hostname())) return
  for (const name of await readdir(dir)) {
    if (!name.startsWith('.tmp-')) continue
    const m = /^\.tmp-(\d+)-/.exec(name) ?? /\.(\d+)$/.exec(name) // a chunk's, a spool's, a merge's; the head file's
    const pid = Number(m?.[1])
    if (pid === process.pid || alive(pid)) continue
    log.info({ folder: name }, 'removing an unfinished chunk left by an earlier run')
    await rm(path.join(dir, name), { recursive: true, force: true })
  }
}
