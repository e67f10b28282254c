import { copyFile, readdir, stat } from 'node:fs/promises'
import path from 'node:path'
import { chunkFolder, exists, hashFile, parseChunkName, parseChunkPath, readChunkMeta, readDatasetMeta, type ChunkMeta, type ChunkRef, type DatasetMeta } from '../chunks/layout.js'
import { log } from '../log.js'
import { mapLimit } from '../semaphore.js'
import { storageRequests } from './metrics.js'
import { FolderClaims, readClaims, S3Claims, type ClaimRecord } from '../ingest/range-claims.js'
import { CHUNK_INDEX_FILE, linksOf, parseChunkIndex, readFolderIndex, type ChunkLinks } from '../chunks/chunk-index.js'
import { missingDataFolder } from './data-folders.js'
import { downloadObject, getText, isS3Url, joinKey, listFolders, listObjects, parseS3Url, s3Url, type DownloadResult } from './s3.js'

/*
 * Read access to one dataset wherever it lives: a local folder or `s3://bucket/prefix`. The router
 * lists chunks through it; a worker downloads chunk files through it (or, for a folder on its own
 * disk, reads them in place).
 */

export interface ChunkFile {
  name: string
  size: number
}

export interface DatasetStore {
  /** Absolute folder path or `s3://bucket/prefix`. */
  readonly url: string
  meta(): Promise<DatasetMeta | undefined>
  /**
   * Complete chunks (their `blocks.parquet` exists), ascending by first block; overlaps are kept for
   * the caller to judge. `full`: read everything now (chunks of a range backfilled below the last
   * one appear where an incremental listing does not look).
   */
  listChunks(full?: boolean): Promise<ChunkRef[]>
  /** The range claims of the ingests writing the dataset (src/ingest/range-claims.ts). */
  claims(): Promise<ClaimRecord[]>
  chunkMeta(ref: ChunkRef): Promise<ChunkMeta>
  /**
   * What the router needs of the chunk's meta.json: from the dataset's chunk index when it names a
   * chunk of the latest listing (src/chunks/chunk-index.ts), else from the meta.json.
   */
  chunkLinks(ref: ChunkRef): Promise<ChunkLinks>
  /** The chunk's links from the dataset's chunk index when it names a chunk of the latest listing, else undefined (nothing read). */
  indexedLinks(ref: ChunkRef): ChunkLinks | undefined
  /** The chunk's files with their sizes as stored. */
  chunkFiles(ref: ChunkRef): Promise<ChunkFile[]>
  /** The chunk's folder when it is on this machine's disk (served in place), else undefined. */
  localDir(ref: ChunkRef): string | undefined
  /** Copy one file of the chunk to `dest`, hashing it on the way. */
  download(ref: ChunkRef, file: string, dest: string, signal?: AbortSignal): Promise<DownloadResult>
}

export interface DatasetStoreOptions {
  /** How often a listing reads everything again, to notice deleted chunks and chunks put back into gaps (default 60 s). */
  fullListingMs?: number
}

export function openDatasetStore(url: string, opts: DatasetStoreOptions = {}): DatasetStore {
  return isS3Url(url) ? new S3DatasetStore(url, opts) : new FolderDatasetStore(url, opts)
}

/** Where datasets live: `url` is one dataset (it has `dataset.json`) or a folder/prefix of dataset folders. */
export async function discoverDatasets(url: string): Promise<{ url: string; meta: DatasetMeta }[]> {
  const single = await openDatasetStore(url).meta()
  if (single) return [{ url: normalizeUrl(url), meta: single }]
  const out: { url: string; meta: DatasetMeta }[] = []
  for (const sub of await subfolders(url)) {
    const meta = await openDatasetStore(sub).meta()
    if (meta) out.push({ url: sub, meta })
    else await reportNested(url, sub)
  }
  return out
}

/** Folders without dataset.json already looked into for datasets one level further down (once per process). */
const examined = new Set<string>()

/**
 * Only a dataset or a folder of datasets is served: datasets one level further down are not. Says so
 * (once per folder), naming them and the --data that would serve them.
 */
async function reportNested(root: string, folder: string): Promise<void> {
  if (examined.has(folder)) return
  examined.add(folder)
  const nested: string[] = []
  for (const sub of await subfolders(folder).catch(() => [])) if (await openDatasetStore(sub).meta().catch(() => undefined)) nested.push(sub)
  if (nested.length === 0) return
  const names = nested.map((n) => n.slice(folder.length + 1))
  log.warn(
    { data: normalizeUrl(root), folder, skipped: names },
    `not serving the datasets in ${folder} (${names.join(', ')}): it has no dataset.json, and --data ${normalizeUrl(root)} serves only its dataset folders one level down; give --data ${folder} too`,
  )
}

export function normalizeUrl(url: string): string {
  return isS3Url(url) ? s3Url(parseS3Url(url)) : path.resolve(url)
}

async function subfolders(url: string): Promise<string[]> {
  if (isS3Url(url)) {
    const loc = parseS3Url(url)
    const names = await listFolders(loc.bucket, loc.prefix ? loc.prefix + '/' : '')
    return names.filter((n) => !n.startsWith('.')).map((n) => s3Url({ bucket: loc.bucket, prefix: joinKey(loc.prefix, n) }))
  }
  const root = path.resolve(url)
  let entries
  try {
    entries = await readdir(root, { withFileTypes: true })
  } catch (e: any) {
    if (e.code === 'ENOENT') throw missingDataFolder(root)
    throw e
  }
  return entries.filter((d) => d.isDirectory() && !d.name.startsWith('.')).map((d) => path.join(root, d.name)).sort()
}

const TOP_RE = /^\d{10}$/
/** Chunk folders of a first listing checked at once (a dataset of 100,000 chunks is 100,000 stats). */
const STATS_AT_ONCE = 64

const FULL_LISTING_MS = 60_000

class FolderDatasetStore implements DatasetStore {
  readonly url: string
  /** Complete chunks found so far, by top folder name (chunks are immutable: a known one is not checked again). */
  private known = new Map<string, Map<string, ChunkRef>>()
  /** `known` in block order as last returned; rebuilt only when a listing changed it (100,000 chunks took ~20 ms to sort at every relisting). */
  private ordered?: ChunkRef[]
  private lastFullListing = 0
  /** The chunk index as read at the last full listing (empty without one). */
  private index = new Map<string, ChunkLinks>()

  constructor(url: string, private readonly opts: DatasetStoreOptions = {}) {
    this.url = path.resolve(url.replace(/^file:\/\//, ''))
  }

  async meta(): Promise<DatasetMeta | undefined> {
    return readDatasetMeta(this.url)
  }

  /**
   * Reads the last known top folder and the ones after it, and checks only chunk folders not seen
   * before (a `blocks.parquet` stat each, but for chunks the chunk index names: the index is
   * written after a chunk is complete); once every `fullListingMs` every top folder and the index
   * are read again, so chunks deleted or put back into earlier top folders are noticed too.
   */
  claims(): Promise<ClaimRecord[]> {
    return readClaims(new FolderClaims(this.url))
  }

  async listChunks(fullNow = false): Promise<ChunkRef[]> {
    let tops: string[]
    try {
      tops = (await this.readdir(this.url)).filter((n) => TOP_RE.test(n)).sort()
    } catch (e: any) {
      if (e.code === 'ENOENT') return []
      throw e
    }
    const full = fullNow || Date.now() - this.lastFullListing >= (this.opts.fullListingMs ?? FULL_LISTING_MS)
    if (full) {
      this.lastFullListing = Date.now()
      storageRequests.inc({ storage: 'folder', op: 'read' })
      this.index = (await readFolderIndex(this.url)) ?? new Map()
    }
    const lastKnown = [...this.known.keys()].sort().at(-1) ?? ''
    const present = new Set(tops)
    let changed = false
    for (const top of this.known.keys()) {
      if (!present.has(top)) {
        this.known.delete(top)
        changed = true
      }
    }
    for (const top of tops) {
      if (!full && top < lastKnown) continue
      let names: string[]
      try {
        names = await this.readdir(path.join(this.url, top))
      } catch (e: any) {
        if (e.code === 'ENOENT' || e.code === 'ENOTDIR') continue
        throw e
      }
      const before = this.known.get(top) ?? new Map<string, ChunkRef>()
      const now = new Map<string, ChunkRef>()
      const unseen: ChunkRef[] = []
      for (const name of names.sort()) {
        const known = before.get(name)
        if (known) now.set(name, known)
        else {
          const ref = parseChunkName(Number(top), name)
          if (ref) unseen.push(ref)
        }
      }
      const complete = await mapLimit(unseen, STATS_AT_ONCE, async (ref) => {
        if (this.index.has(ref.path)) return true
        storageRequests.inc({ storage: 'folder', op: 'stat' })
        return exists(path.join(this.url, ref.path, 'blocks.parquet'))
      })
      unseen.forEach((ref, i) => complete[i] && now.set(ref.path.slice(top.length + 1), ref))
      // `now` holds what is still there of `before` and the new complete chunks
      if (now.size !== before.size || complete.some(Boolean)) changed = true
      if (now.size) this.known.set(top, now)
      else this.known.delete(top)
    }
    if (changed || !this.ordered) {
      const out: ChunkRef[] = []
      for (const chunks of this.known.values()) for (const c of chunks.values()) out.push(c)
      this.ordered = out.sort((a, b) => a.first - b.first || a.last - b.last)
    }
    return [...this.ordered]
  }

  private async readdir(dir: string): Promise<string[]> {
    storageRequests.inc({ storage: 'folder', op: 'readdir' })
    return readdir(dir)
  }

  async chunkMeta(ref: ChunkRef): Promise<ChunkMeta> {
    storageRequests.inc({ storage: 'folder', op: 'read' })
    return readChunkMeta(this.url, ref).catch((e) => {
      throw e.code === 'ENOENT' ? new Error(`chunk ${ref.path} of ${this.url} has no meta.json`) : e
    })
  }

  async chunkLinks(ref: ChunkRef): Promise<ChunkLinks> {
    return this.indexedLinks(ref) ?? linksOf(await this.chunkMeta(ref))
  }

  indexedLinks(ref: ChunkRef): ChunkLinks | undefined {
    return this.known.get(ref.path.slice(0, 10))?.has(ref.path.slice(11)) ? this.index.get(ref.path) : undefined
  }

  async chunkFiles(ref: ChunkRef): Promise<ChunkFile[]> {
    const dir = path.join(this.url, ref.path)
    const out: ChunkFile[] = []
    for (const name of (await readdir(dir)).sort()) out.push({ name, size: (await stat(path.join(dir, name))).size })
    return out
  }

  localDir(ref: ChunkRef): string {
    return chunkFolder(this.url, ref.path)
  }

  async download(ref: ChunkRef, file: string, dest: string): Promise<DownloadResult> {
    const src = path.join(this.url, ref.path, file)
    await copyFile(src, dest)
    const { size, sha256 } = await hashFile(dest)
    return { bytes: size, sha256 }
  }
}

class S3DatasetStore implements DatasetStore {
  readonly url: string
  private readonly bucket: string
  private readonly prefix: string
  /** Complete chunks listed so far: chunks are immutable and appear in key order, so a listing continues after the last one. */
  private known: ChunkRef[] = []
  private knownPaths = new Set<string>()
  private lastFullListing = 0
  /** The chunk index as read at the last full listing (empty without one). */
  private index = new Map<string, ChunkLinks>()

  constructor(url: string, private readonly opts: DatasetStoreOptions = {}) {
    const loc = parseS3Url(url)
    this.bucket = loc.bucket
    this.prefix = loc.prefix
    this.url = s3Url(loc)
  }

  private key(...parts: string[]): string {
    return joinKey(this.prefix, ...parts)
  }

  async meta(): Promise<DatasetMeta | undefined> {
    const text = await getText(this.bucket, this.key('dataset.json'))
    return text === undefined ? undefined : JSON.parse(text)
  }

  /**
   * Lists the keys after the last complete chunk found before (chunk keys sort in block order), so a
   * relisting reads only what is new; once every `fullListingMs` the whole prefix and the chunk
   * index are read again, so chunks deleted from the bucket or put back into a gap are noticed too.
   */
  claims(): Promise<ClaimRecord[]> {
    return readClaims(new S3Claims({ bucket: this.bucket, prefix: this.prefix }, this.url))
  }

  async listChunks(full = false): Promise<ChunkRef[]> {
    const base = this.prefix ? this.prefix + '/' : ''
    if (full || Date.now() - this.lastFullListing >= (this.opts.fullListingMs ?? FULL_LISTING_MS)) {
      this.known = []
      this.knownPaths = new Set()
      this.lastFullListing = Date.now()
      const text = await getText(this.bucket, this.key(CHUNK_INDEX_FILE))
      this.index = text === undefined ? new Map() : parseChunkIndex(text)
    }
    const last = this.known.at(-1)
    // '~' sorts after every character of a chunk's file names.
    const after = last ? this.key(last.path, '~') : undefined
    const found: ChunkRef[] = []
    for (const o of await listObjects(this.bucket, base, after)) {
      const rel = o.key.slice(base.length)
      if (!rel.endsWith('/blocks.parquet') || !TOP_RE.test(rel.slice(0, 10))) continue
      const ref = parseChunkPath(rel.slice(0, -'/blocks.parquet'.length))
      if (ref) found.push(ref)
    }
    // (nothing new: no sort of the whole listing at every relisting)
    if (found.length) this.known = [...this.known, ...found].sort((a, b) => a.first - b.first || a.last - b.last)
    for (const c of found) this.knownPaths.add(c.path)
    return [...this.known]
  }

  async chunkLinks(ref: ChunkRef): Promise<ChunkLinks> {
    return this.indexedLinks(ref) ?? linksOf(await this.chunkMeta(ref))
  }

  indexedLinks(ref: ChunkRef): ChunkLinks | undefined {
    return this.knownPaths.has(ref.path) ? this.index.get(ref.path) : undefined
  }

  async chunkMeta(ref: ChunkRef): Promise<ChunkMeta> {
    const text = await getText(this.bucket, this.key(ref.path, 'meta.json'))
    if (text === undefined) throw new Error(`chunk ${ref.path} of ${this.url} has no meta.json`)
    return JSON.parse(text)
  }

  async chunkFiles(ref: ChunkRef): Promise<ChunkFile[]> {
    const dir = this.key(ref.path) + '/'
    return (await listObjects(this.bucket, dir)).map((o) => ({ name: o.key.slice(dir.length), size: o.size })).filter((f) => f.name && !f.name.includes('/'))
  }

  localDir(): undefined {
    return undefined
  }

  download(ref: ChunkRef, file: string, dest: string, signal?: AbortSignal): Promise<DownloadResult> {
    return downloadObject(this.bucket, this.key(ref.path, file), dest, signal)
  }
}
