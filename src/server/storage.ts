import path from 'node:path'
import { readdir } from 'node:fs/promises'
import { listLocalChunks, readDatasetMeta, type ChunkRef } from '../chunks/layout.js'
import type { FamilyDecl } from '../families/declaration.js'
import { familyByName } from '../families/index.js'

/*
 * Where chunks live. The router only lists; a worker also asks for a local folder of each chunk it
 * is assigned and gives chunks back when they are no longer assigned. The local implementation
 * serves the folders in place; an object-storage implementation would download into a cache folder
 * in `fetchChunk` and delete it in `dropChunk`, with no change to the router or the worker.
 */

export interface DatasetInfo {
  name: string
  family: FamilyDecl
}

export interface ChunkStorage {
  /** Human-readable location, for logs. */
  readonly location: string
  /** Datasets currently present. */
  listDatasets(): Promise<DatasetInfo[]>
  /** Complete chunks of one dataset, ascending. */
  listChunks(dataset: string): Promise<ChunkRef[]>
  /** Make the chunk's Parquet files available on this machine; returns the folder. */
  fetchChunk(dataset: string, chunk: ChunkRef): Promise<string>
  /** The chunk is not needed here any more (no query is using it). */
  dropChunk(dataset: string, chunk: ChunkRef): Promise<void>
}

/**
 * Chunk folders on the local disk. `root` is either one dataset folder (it has `dataset.json`) or a
 * folder whose sub-folders are datasets; in the second form datasets added later are picked up.
 */
export class LocalStorage implements ChunkStorage {
  readonly location: string

  constructor(root: string) {
    this.location = path.resolve(root)
  }

  async listDatasets(): Promise<DatasetInfo[]> {
    const single = await readDatasetMeta(this.location)
    if (single) return [{ name: single.name, family: familyByName(single.family) }]
    let names: string[]
    try {
      names = (await readdir(this.location, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name)
    } catch (e: any) {
      if (e.code === 'ENOENT') throw new Error(`data folder ${this.location} does not exist`)
      throw e
    }
    const out: DatasetInfo[] = []
    for (const dir of names.sort()) {
      const meta = await readDatasetMeta(path.join(this.location, dir))
      if (meta) out.push({ name: meta.name, family: familyByName(meta.family) })
    }
    return out
  }

  async listChunks(dataset: string): Promise<ChunkRef[]> {
    return listLocalChunks(await this.datasetDir(dataset))
  }

  async fetchChunk(dataset: string, chunk: ChunkRef): Promise<string> {
    return path.join(await this.datasetDir(dataset), chunk.path)
  }

  async dropChunk(): Promise<void> {
    // The files are the storage itself: nothing to delete.
  }

  private readonly dirs = new Map<string, string>()

  /** Dataset names come from `dataset.json`, so the folder name may differ from the name. */
  private async datasetDir(dataset: string): Promise<string> {
    const known = this.dirs.get(dataset)
    if (known) return known
    const single = await readDatasetMeta(this.location)
    if (single) {
      if (single.name !== dataset) throw new Error(`unknown dataset ${dataset}`)
      this.dirs.set(dataset, this.location)
      return this.location
    }
    for (const d of await readdir(this.location, { withFileTypes: true })) {
      if (!d.isDirectory()) continue
      const dir = path.join(this.location, d.name)
      const meta = await readDatasetMeta(dir)
      if (meta?.name === dataset) {
        this.dirs.set(dataset, dir)
        return dir
      }
    }
    throw new Error(`unknown dataset ${dataset}`)
  }
}
