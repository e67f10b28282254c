import type { ChunkMeta, ChunkRef } from '../../src/chunks/layout.js'
import { familyByName } from '../../src/families/index.js'
import type { ChunkStorage, DatasetInfo } from '../../src/server/storage.js'
import { syntheticChunk } from './synthetic-chunks.js'

/**
 * A router's storage held in memory: one dataset of synthetic chunks (`synthetic-chunks.ts`), for
 * simulations of many workers where listing real storage is not what is measured. `count` chunks
 * can grow between listings.
 */
export class MemoryStorage implements ChunkStorage {
  readonly location = 'memory'
  private chunks: ChunkRef[] = []
  private readonly metas = new Map<string, ChunkMeta>()

  constructor(
    readonly dataset: string,
    count: number,
  ) {
    this.grow(count)
  }

  /** Have `count` chunks from now on. */
  grow(count: number): void {
    for (let i = this.chunks.length; i < count; i++) {
      const { ref, meta } = syntheticChunk(i)
      this.chunks.push(ref)
      this.metas.set(ref.path, meta)
    }
  }

  get listed(): readonly ChunkRef[] {
    return this.chunks
  }

  async listDatasets(): Promise<DatasetInfo[]> {
    return [{ name: this.dataset, family: familyByName('evm'), url: `memory://${this.dataset}` }]
  }

  async listChunks(): Promise<ChunkRef[]> {
    return [...this.chunks]
  }

  async chunkLinks(_dataset: string, chunk: ChunkRef): Promise<ChunkMeta> {
    return this.metas.get(chunk.path)!
  }

  fetchChunk(): Promise<string> {
    throw new Error('memory storage holds no files')
  }

  async dropChunk(): Promise<void> {}
  async intact(): Promise<boolean> {
    return true
  }
  useDatasets(): void {}
  async pruneUnused(): Promise<void> {}
}
