import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync, rmSync } from 'node:fs'
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { chunkFolder, hashFile, type ChunkMeta, type ChunkRef } from '../chunks/layout.js'
import { alive } from '../pid.js'
import { log } from '../log.js'
import { mapLimit } from '../semaphore.js'
import { cacheBytes, cacheCorrupt, cacheEvictions, downloadBytes, downloadSeconds } from './metrics.js'
import type { DatasetStore } from './dataset-store.js'
import { LocalForms } from './local-forms.js'
import { DEFAULT_FORMS_AFTER_READS } from '../server/defaults.js'

/*
 * A worker's local copy of the chunks it serves from remote storage. A chunk is downloaded into a
 * temp folder, every file checked against the sizes listed in storage and the sha256 sums of the
 * chunk's manifest (`meta.json` → `files`), then renamed into place with `.verified.json` (each
 * file's size, sha256 and mtime). Only such folders are served. After a restart they are reused
 * without downloading; a file whose size or mtime changed is hashed again and the chunk deleted if
 * it no longer matches. Before a query reads a chunk its files are stat'ed the same way.
 *
 * Layout: `{root}/{dataset}/{top}/{first}-{last}-{hash}/`, with `{root}/{dataset}/source.json`
 * naming the storage URL (a dataset moved to another URL starts afresh); beside them the local forms
 * (`local-forms.duckdb`) and DuckDB's spill folder.
 */

const VERIFIED = '.verified.json'
/**
 * DuckDB's spill folders in a cache folder (its `temp_directory`): `.duckdb-spill-<pid>`, one per
 * process, so that a process sharing the cache folder (two `serve` with the default one) never
 * empties another's. The scan below passes over them (a dataset named so would not be found again
 * after a restart, only downloaded anew).
 */
const SPILL_PREFIX = '.duckdb-spill-'

/**
 * This process's spill folder in the cache folder `root`, not created (DuckDB creates it when it
 * first spills), after deleting what processes no longer running left (a killed worker's files).
 */
export function spillFolder(root: string): string {
  const names = existsSync(root) ? readdirSync(root) : []
  for (const name of names.filter((n) => n.startsWith(SPILL_PREFIX))) {
    const pid = Number(name.slice(SPILL_PREFIX.length))
    if (pid === process.pid || !alive(pid)) rmSync(path.join(root, name), { recursive: true, force: true })
  }
  return path.resolve(root, `${SPILL_PREFIX}${process.pid}`)
}
const MiB = 1024 * 1024

export class CacheFull extends Error {}

export interface ChunkCacheOptions {
  root: string
  /** Stay under this many bytes (default: no limit). */
  limitBytes?: number
  /** Files downloaded at once per chunk (default 4). */
  parallel?: number
  /** Label of the metrics (the worker id). */
  label: string
  /**
   * Keep local forms of chunks served (cached or read in place) in `local-forms.duckdb`, within the
   * same limit; downloads come first (default true).
   */
  localForms?: boolean
  /** Reads from Parquet after which a chunk gets its local form (default `DEFAULT_FORMS_AFTER_READS`; 0: every chunk held). */
  formsAfterReads?: number
}

interface VerifiedFile {
  size: number
  sha256: string
  mtimeMs: number
}

interface Entry {
  dataset: string
  path: string
  dir: string
  bytes: number
  files: Record<string, VerifiedFile>
  /** Served by the worker (fetched and not released). Entries found at start are not, until fetched. */
  held: boolean
  lastUsed: number
}

export class ChunkCache {
  private readonly entries = new Map<string, Entry>()
  private readonly inFlight = new Map<string, Promise<string>>()
  private opened?: Promise<void>
  bytes = 0
  /** Bytes of downloads under way: room was made for them, they are not in `bytes` yet. */
  private reserved = 0

  /** Local forms of the chunks served, sharing the byte limit (undefined with `localForms: false`). */
  readonly forms?: LocalForms

  get formsAfterReads(): number {
    return this.opts.formsAfterReads ?? DEFAULT_FORMS_AFTER_READS
  }

  constructor(readonly opts: ChunkCacheOptions) {
    if (opts.localForms !== false) {
      const limit = opts.limitBytes
      this.forms = new LocalForms({
        file: path.join(opts.root, 'local-forms.duckdb'),
        label: opts.label,
        room: limit === undefined ? undefined : () => limit - this.bytes - this.reserved,
      })
    }
  }

  private key(dataset: string, chunkPath: string): string {
    return `${dataset}\n${chunkPath}`
  }

  private datasetDir(dataset: string): string {
    return path.join(this.opts.root, encodeURIComponent(dataset))
  }

  /** Scan what an earlier run left: keep verified chunks, delete the rest. Idempotent. */
  open(): Promise<void> {
    this.opened ??= this.scan()
    return this.opened
  }

  private async scan(): Promise<void> {
    await mkdir(this.opts.root, { recursive: true })
    const t0 = performance.now()
    for (const d of await readdir(this.opts.root, { withFileTypes: true })) {
      if (!d.isDirectory() || d.name.startsWith(SPILL_PREFIX)) continue
      const dataset = decodeURIComponent(d.name)
      const dsDir = path.join(this.opts.root, d.name)
      for (const top of await readdir(dsDir, { withFileTypes: true })) {
        if (!top.isDirectory()) continue
        for (const c of await readdir(path.join(dsDir, top.name), { withFileTypes: true })) {
          const dir = chunkFolder(dsDir, `${top.name}/${c.name}`)
          const files = c.isDirectory() && !c.name.includes('.part-') ? await this.recheck(dir) : undefined
          if (!files) {
            await rm(dir, { recursive: true, force: true })
            continue
          }
          this.add({ dataset, path: `${top.name}/${c.name}`, dir, files, bytes: sumSizes(files), held: false, lastUsed: 0 })
        }
      }
    }
    cacheBytes.set({ worker: this.opts.label }, this.bytes)
    log.info({ worker: this.opts.label, cache: this.opts.root, chunks: this.entries.size, mb: +(this.bytes / MiB).toFixed(1), ms: Math.round(performance.now() - t0) }, 'cache: opened')
  }

  /** The verified files of a cached chunk folder, re-hashing those whose size or mtime changed; undefined when it does not check out. */
  private async recheck(dir: string): Promise<Record<string, VerifiedFile> | undefined> {
    let files: Record<string, VerifiedFile>
    try {
      files = JSON.parse(await readFile(path.join(dir, VERIFIED), 'utf8')).files
    } catch {
      return undefined
    }
    let rewritten = false
    for (const [name, f] of Object.entries(files)) {
      const s = await stat(path.join(dir, name)).catch(() => undefined)
      if (!s || s.size !== f.size) return this.corrupt(dir, name)
      if (s.mtimeMs === f.mtimeMs) continue
      if ((await hashFile(path.join(dir, name))).sha256 !== f.sha256) return this.corrupt(dir, name)
      f.mtimeMs = s.mtimeMs
      rewritten = true
    }
    if (rewritten) await writeFile(path.join(dir, VERIFIED), JSON.stringify({ files }))
    return files
  }

  private corrupt(dir: string, file: string): undefined {
    cacheCorrupt.inc({ worker: this.opts.label })
    log.warn({ worker: this.opts.label, chunk: dir, file }, 'cache: chunk file changed on disk; it will not be served and is downloaded again')
    return undefined
  }

  /** Whether a held chunk's files still look as verified (sizes and mtimes; cheap, run before a query reads it). */
  async intact(dataset: string, chunkPath: string): Promise<boolean> {
    const e = this.entries.get(this.key(dataset, chunkPath))
    if (!e) return false
    for (const [name, f] of Object.entries(e.files)) {
      const s = await stat(path.join(e.dir, name)).catch(() => undefined)
      if (!s || s.size !== f.size || s.mtimeMs !== f.mtimeMs) {
        this.corrupt(e.dir, name)
        return false
      }
    }
    return true
  }

  /** The local folder of a chunk, downloading it first when it is not cached. */
  async fetch(dataset: string, store: DatasetStore, ref: ChunkRef, signal?: AbortSignal): Promise<string> {
    await this.open()
    await this.checkSource(dataset, store.url)
    const key = this.key(dataset, ref.path)
    const e = this.entries.get(key)
    if (e) {
      e.held = true
      e.lastUsed = Date.now()
      return e.dir
    }
    let p = this.inFlight.get(key)
    if (!p) {
      p = this.download(dataset, store, ref, signal).finally(() => this.inFlight.delete(key))
      this.inFlight.set(key, p)
    }
    return p
  }

  /** The worker no longer serves the chunk: delete it. */
  async release(dataset: string, chunkPath: string): Promise<void> {
    const e = this.entries.get(this.key(dataset, chunkPath))
    if (!e) return
    await this.remove(e)
    cacheEvictions.inc({ worker: this.opts.label, reason: 'unassigned' })
  }

  /** Delete chunks found at start that the worker has not asked for (call once it knows what it serves). */
  async pruneUnheld(): Promise<void> {
    for (const e of [...this.entries.values()]) {
      if (!e.held) {
        await this.remove(e)
        cacheEvictions.inc({ worker: this.opts.label, reason: 'unassigned' })
      }
    }
  }

  private async remove(e: Entry): Promise<void> {
    this.entries.delete(this.key(e.dataset, e.path))
    this.bytes -= e.bytes
    cacheBytes.set({ worker: this.opts.label }, this.bytes)
    await rm(e.dir, { recursive: true, force: true })
  }

  private add(e: Entry): void {
    this.entries.set(this.key(e.dataset, e.path), e)
    this.bytes += e.bytes
  }

  private readonly sources = new Map<string, string>()

  /** A dataset whose storage URL changed is a different dataset: drop what is cached of it. */
  private async checkSource(dataset: string, url: string): Promise<void> {
    if (this.sources.get(dataset) === url) return
    const file = path.join(this.datasetDir(dataset), 'source.json')
    const known = await readFile(file, 'utf8').then((t) => JSON.parse(t).url as string, () => undefined)
    if (known !== url) {
      if (known !== undefined) {
        log.warn({ worker: this.opts.label, dataset, was: known, now: url }, 'cache: the dataset moved to another storage URL; dropping its cached chunks')
        for (const e of [...this.entries.values()]) if (e.dataset === dataset) await this.remove(e)
      }
      await mkdir(this.datasetDir(dataset), { recursive: true })
      await writeFile(file, JSON.stringify({ url }))
    }
    this.sources.set(dataset, url)
  }

  /**
   * Evict chunks not being served, least recently used first, until `need` more bytes fit, and
   * reserve them (the caller gives the reservation back once the download is done or failed), so
   * that downloads running at once do not pass the limit together.
   */
  private async makeRoom(need: number): Promise<void> {
    const limit = this.opts.limitBytes
    if (limit !== undefined) {
      const used = () => this.bytes + this.reserved + (this.forms?.bytes ?? 0)
      // Local forms only speed queries up: they give way first.
      if (this.forms && used() + need > limit) await this.forms.free(used() + need - limit)
      const idle = [...this.entries.values()].filter((e) => !e.held).sort((a, b) => a.lastUsed - b.lastUsed)
      while (used() + need > limit && idle.length) {
        const e = idle.shift()!
        // While this waited, another caller may have removed it, or a fetch may serve it again.
        if (this.entries.get(this.key(e.dataset, e.path)) !== e || e.held) continue
        await this.remove(e)
        cacheEvictions.inc({ worker: this.opts.label, reason: 'space' })
      }
      if (used() + need > limit) {
        throw new CacheFull(
          `the cache holds ${(used() / MiB).toFixed(1)} MiB of served and downloading chunks and local forms in use; ${(need / MiB).toFixed(1)} MiB more would pass the limit of ${(limit / MiB).toFixed(1)} MiB`,
        )
      }
    }
    this.reserved += need
  }

  /**
   * Download a chunk into the cache. Its meta.json comes first: its file manifest names the other
   * files with their sizes and hashes, so they are fetched at once without listing the chunk folder
   * (a round trip, and on some stores a slow one, on the way of every fresh chunk). A chunk without
   * a manifest (written before manifests) is listed instead.
   */
  private async download(dataset: string, store: DatasetStore, ref: ChunkRef, signal?: AbortSignal): Promise<string> {
    const dest = chunkFolder(this.datasetDir(dataset), ref.path)
    const tmp = `${dest}.part-${randomBytes(4).toString('hex')}`
    const t0 = performance.now()
    let total = 0
    let reserved = 0
    try {
      await mkdir(tmp, { recursive: true })
      const files: Record<string, VerifiedFile> = {}
      const metaFile = path.join(tmp, 'meta.json')
      const metaGot = await store.download(ref, 'meta.json', metaFile, signal)
      files['meta.json'] = { size: metaGot.bytes, sha256: metaGot.sha256, mtimeMs: (await stat(metaFile)).mtimeMs }
      const manifest = (JSON.parse(await readFile(metaFile, 'utf8')) as ChunkMeta).files
      const rest = manifest ? Object.entries(manifest).map(([name, f]) => ({ name, size: f.size })) : (await store.chunkFiles(ref)).filter((f) => f.name !== 'meta.json')
      total = metaGot.bytes + rest.reduce((n, f) => n + f.size, 0)
      await this.makeRoom(total)
      reserved = total
      // The first failure stops the other downloads of the chunk; `mapLimit` throws it once none of
      // them writes into the temp folder any more (else a file created meanwhile is left behind).
      const stop = new AbortController()
      const both = signal ? AbortSignal.any([signal, stop.signal]) : stop.signal
      await mapLimit(rest, this.opts.parallel ?? 4, async (f) => {
        try {
          const file = path.join(tmp, f.name)
          const got = await store.download(ref, f.name, file, both)
          const want = manifest?.[f.name]
          if (got.bytes !== f.size || (want && want.sha256 !== got.sha256)) {
            throw new Error(`chunk ${ref.path}: ${f.name} arrived with ${got.bytes} bytes, sha256 ${got.sha256}; ${want ? `its manifest says ${want.size} bytes, sha256 ${want.sha256}` : `storage lists ${f.size} bytes`}`)
          }
          files[f.name] = { size: got.bytes, sha256: got.sha256, mtimeMs: (await stat(file)).mtimeMs }
        } catch (e) {
          stop.abort()
          throw e
        }
      })
      await writeFile(path.join(tmp, VERIFIED), JSON.stringify({ files }))
      await rm(dest, { recursive: true, force: true })
      await rename(tmp, dest)
      this.add({ dataset, path: ref.path, dir: dest, files, bytes: total, held: true, lastUsed: Date.now() })
      const seconds = (performance.now() - t0) / 1000
      downloadBytes.inc({ worker: this.opts.label }, total)
      downloadSeconds.inc({ worker: this.opts.label }, seconds)
      cacheBytes.set({ worker: this.opts.label }, this.bytes)
      log.debug({ worker: this.opts.label, dataset, chunk: ref.path, mb: +(total / MiB).toFixed(2), ms: Math.round(seconds * 1000) }, 'cache: chunk downloaded')
      return dest
    } catch (e) {
      await rm(tmp, { recursive: true, force: true })
      throw e
    } finally {
      this.reserved -= reserved
    }
  }
}

function sumSizes(files: Record<string, VerifiedFile>): number {
  return Object.values(files).reduce((n, f) => n + f.size, 0)
}
