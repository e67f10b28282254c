import { chunkTableNames, type ChunkRef } from '../chunks/layout.js'
import type { ChunkLinks } from '../chunks/chunk-index.js'
import { blockOrders, type FamilyDecl } from '../families/declaration.js'
import { familyByName } from '../families/index.js'
import type { ChunkCache } from '../storage/chunk-cache.js'
import type { LocalTables } from '../storage/local-forms.js'
import type { ClaimRecord } from '../ingest/range-claims.js'
import { discoverDatasets, normalizeUrl, openDatasetStore, type DatasetStore } from '../storage/dataset-store.js'

/*
 * Where chunks live, as the router and the workers see it. The router only lists; a worker also asks
 * for a local folder of each chunk it is assigned and gives chunks back when they are no longer
 * assigned. Datasets on this machine's disk are served in place; datasets in object storage are
 * downloaded into the worker's cache.
 */

export interface DatasetInfo {
  name: string
  family: FamilyDecl
  /** Where the dataset lives: an absolute folder or `s3://bucket/prefix`. */
  url: string
}

/** A dataset as the router announces it to workers. */
export interface DatasetAnnouncement {
  name: string
  family: string
  url: string
  /**
   * Merged chunks (compaction) that still have the chunks they replace in storage: paths a worker
   * adds to its listing (their keys sort before those chunks', which an incremental listing skips).
   */
  merged?: string[]
}

export interface ChunkStorage {
  /** Human-readable location, for logs. */
  readonly location: string
  /** Datasets currently present. */
  listDatasets(): Promise<DatasetInfo[]>
  /** Complete chunks of one dataset, ascending (`full`: not only what is new since the last listing). */
  listChunks(dataset: string, full?: boolean): Promise<ChunkRef[]>
  /** The range claims of the ingests writing the dataset (a backfill in parallel: docs/ingest.md). */
  listClaims?(dataset: string): Promise<ClaimRecord[]>
  /** What the router needs of a chunk's meta.json (src/chunks/chunk-index.ts). */
  chunkLinks(dataset: string, chunk: ChunkRef): Promise<ChunkLinks>
  /** The chunk's links if the dataset's chunk index names it (nothing read, nothing kept), else undefined. */
  indexedLinks?(dataset: string, chunk: ChunkRef): Promise<ChunkLinks | undefined>
  /** Make the chunk's Parquet files available on this machine; returns the folder. */
  fetchChunk(dataset: string, chunk: ChunkRef): Promise<string>
  /** The chunk is not needed here any more (no query is using it). */
  dropChunk(dataset: string, chunk: ChunkRef): Promise<void>
  /** Whether a fetched chunk's files are still as fetched (always true for chunks served in place). */
  intact(dataset: string, chunk: ChunkRef): Promise<boolean>
  /** A worker registered with a router learns the datasets and their URLs from it. */
  useDatasets(list: DatasetAnnouncement[]): void
  /** The worker knows what it serves (`held`): cached chunks and local forms it did not ask for can go. */
  pruneUnused(held: { dataset: string; chunk: ChunkRef }[]): Promise<void>
  /** Whether this storage keeps local forms of the chunks (a worker with a cache folder). */
  readonly keepsLocalForms?: boolean
  /** Reads from Parquet after which a chunk gets its local form (0: every chunk held); see `DEFAULT_FORMS_AFTER_READS`. */
  readonly formsAfterReads?: number
  /** Build the local form of a fetched chunk; returns whether it has one. */
  buildLocalForm?(dataset: string, chunk: ChunkRef, dir: string): Promise<boolean>
  /** Whether the chunk has a local form (one an earlier run built, say). */
  hasLocalForm?(dataset: string, chunk: ChunkRef): boolean
  /** The chunk's local tables for one query, if built (give them back with `releaseLocalForm`). */
  localForm?(dataset: string, chunk: ChunkRef): LocalTables | undefined
  releaseLocalForm?(dataset: string, chunk: ChunkRef): void
  /** Let go of files held open (the local forms' database). */
  close?(): Promise<void>
}

export interface ArchiveStorageOptions {
  /** Each a dataset (has `dataset.json`) or a folder / prefix of dataset folders; new datasets are picked up. */
  roots?: string[]
  /** Datasets by explicit name (the name they are served under) and URL. */
  datasets?: { name: string; url: string }[]
  /** Where a worker keeps chunks of datasets in object storage. */
  cache?: ChunkCache
  /** How often a listing reads a whole dataset again, to notice chunks that replace or fill in listed ones (default 60 s; `DatasetStoreOptions`). */
  fullListingMs?: number
}

export class DuplicateDataset extends Error {}

/** Datasets from folders and `s3://` prefixes (or as a router announces them), one storage interface for both. */
/** A chunk's key in per-chunk maps (metas, local forms): storage URL and chunk path (a dataset moved elsewhere is another dataset). */
const chunkKey = (store: DatasetStore, chunk: ChunkRef) => `${store.url}\n${chunk.path}`

export class ArchiveStorage implements ChunkStorage {
  readonly location: string
  private readonly stores = new Map<string, DatasetStore>()
  private readonly families = new Map<string, FamilyDecl>()
  private announced?: DatasetAnnouncement[]

  constructor(private readonly opts: ArchiveStorageOptions) {
    this.location = [...(opts.roots ?? []).map(normalizeUrl), ...(opts.datasets ?? []).map((d) => `${d.name}=${normalizeUrl(d.url)}`)].join(', ') || 'the router'
  }

  async listDatasets(): Promise<DatasetInfo[]> {
    const found: DatasetInfo[] = []
    if (this.announced) {
      for (const a of this.announced) found.push({ name: a.name, family: familyByName(a.family), url: a.url })
    } else {
      for (const root of this.opts.roots ?? []) {
        for (const d of await discoverDatasets(root)) found.push({ name: d.meta.name, family: familyByName(d.meta.family), url: d.url })
      }
      for (const d of this.opts.datasets ?? []) {
        const meta = await openDatasetStore(d.url).meta()
        if (meta) found.push({ name: d.name, family: familyByName(meta.family), url: normalizeUrl(d.url) })
      }
    }
    const byName = new Map<string, DatasetInfo>()
    for (const d of found) {
      const other = byName.get(d.name)
      if (other && other.url !== d.url) {
        throw new DuplicateDataset(`two datasets are named "${d.name}": ${other.url} and ${d.url}; rename one (its dataset.json) or serve it under another name with --dataset NAME=URL`)
      }
      byName.set(d.name, d)
      this.families.set(d.name, d.family)
      if (this.stores.get(d.name)?.url !== d.url) this.stores.set(d.name, openDatasetStore(d.url, { fullListingMs: this.opts.fullListingMs }))
    }
    return [...byName.values()].sort((a, b) => a.name.localeCompare(b.name))
  }

  /** Ignored when this storage was given its own locations (a worker with `--data`: the same data mounted elsewhere). */
  useDatasets(list: DatasetAnnouncement[]): void {
    if (!this.opts.roots?.length && !this.opts.datasets?.length) this.announced = list
  }

  async listChunks(dataset: string, full = false): Promise<ChunkRef[]> {
    return (await this.store(dataset)).listChunks(full)
  }

  async listClaims(dataset: string): Promise<ClaimRecord[]> {
    return (await this.store(dataset)).claims()
  }

  /**
   * Chunks are immutable: each chunk's links are read once (the router reads those at the jumps of
   * sparse datasets), from the dataset's chunk index when it names the chunk, else its meta.json.
   */
  async chunkLinks(dataset: string, chunk: ChunkRef): Promise<ChunkLinks> {
    const store = await this.store(dataset)
    const key = chunkKey(store, chunk)
    let links = this.links.get(key)
    if (!links) {
      links = store.chunkLinks(chunk)
      this.links.set(key, links)
      links.catch(() => this.links.delete(key))
    }
    return links
  }

  private readonly links = new Map<string, Promise<ChunkLinks>>()

  async indexedLinks(dataset: string, chunk: ChunkRef): Promise<ChunkLinks | undefined> {
    return (await this.store(dataset)).indexedLinks(chunk)
  }

  async fetchChunk(dataset: string, chunk: ChunkRef): Promise<string> {
    const store = await this.store(dataset)
    const local = store.localDir(chunk)
    if (local) return local
    if (!this.opts.cache) throw new Error(`dataset ${dataset} is in object storage (${store.url}): a worker needs a cache folder (--cache) to serve it`)
    return this.opts.cache.fetch(dataset, store, chunk)
  }

  async dropChunk(dataset: string, chunk: ChunkRef): Promise<void> {
    const key = this.formKey(dataset, chunk)
    if (key) await this.opts.cache?.forms?.drop(key)
    await this.opts.cache?.release(dataset, chunk.path)
  }

  get keepsLocalForms(): boolean {
    return this.opts.cache?.forms !== undefined
  }

  get formsAfterReads(): number {
    return this.opts.cache?.formsAfterReads ?? 0
  }

  private formKey(dataset: string, chunk: ChunkRef): string | undefined {
    const store = this.stores.get(dataset)
    return store && chunkKey(store, chunk)
  }

  async buildLocalForm(dataset: string, chunk: ChunkRef, dir: string): Promise<boolean> {
    const forms = this.opts.cache?.forms
    const key = this.formKey(dataset, chunk)
    if (!forms || !key) return false
    const family = this.families.get(dataset)
    // Forms built on demand may take the room of forms no query has read for a while.
    return forms.build(key, dir, await chunkTableNames(dir), family && blockOrders(family), { evictIdle: this.formsAfterReads > 0 })
  }

  hasLocalForm(dataset: string, chunk: ChunkRef): boolean {
    const key = this.formKey(dataset, chunk)
    return key !== undefined && this.opts.cache?.forms?.has(key) === true
  }

  localForm(dataset: string, chunk: ChunkRef): LocalTables | undefined {
    const key = this.formKey(dataset, chunk)
    return key ? this.opts.cache?.forms?.acquire(key) : undefined
  }

  releaseLocalForm(dataset: string, chunk: ChunkRef): void {
    const key = this.formKey(dataset, chunk)
    if (key) this.opts.cache?.forms?.release(key)
  }

  async close(): Promise<void> {
    await this.opts.cache?.forms?.close()
  }

  async intact(dataset: string, chunk: ChunkRef): Promise<boolean> {
    const store = this.stores.get(dataset)
    if (!store || !this.opts.cache || store.localDir(chunk)) return true
    return this.opts.cache.intact(dataset, chunk.path)
  }

  async pruneUnused(held: { dataset: string; chunk: ChunkRef }[]): Promise<void> {
    await this.opts.cache?.pruneUnheld()
    const keep = new Set(held.map((h) => this.formKey(h.dataset, h.chunk)))
    await this.opts.cache?.forms?.prune((key) => keep.has(key))
  }

  private async store(dataset: string): Promise<DatasetStore> {
    let s = this.stores.get(dataset)
    if (!s) {
      await this.listDatasets()
      s = this.stores.get(dataset)
    }
    if (!s) throw new Error(`unknown dataset ${dataset}`)
    return s
  }
}

/** Chunk folders on the local disk: one dataset folder, or a folder of dataset folders. */
export class LocalStorage extends ArchiveStorage {
  constructor(root: string) {
    super({ roots: [root] })
  }
}
