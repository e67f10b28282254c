import { mkdir, readdir, rm, statfs, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { nextTop, type ChunkRef } from '../chunks/layout.js'
import { ChunkBuilder, type ParquetSettings } from '../chunks/writer.js'
import { evmFamily } from '../families/evm.js'
import { bundleTables, normalizeEvmBlock } from '../ingest/evm/normalize.js'
import { loadTemplates, type BlockTemplate } from './templates.js'
import { templateFor, tileBlock } from './tile.js'
import { dirSize } from './size.js'

export interface GenerateOptions {
  /** Dataset folder to create. */
  out: string
  /** Number of blocks (default 100,000). */
  blocks?: number
  /** Number of the first block (default 0). */
  first?: number
  /** Blocks per chunk (default 200 — about what the original archives hold per mainnet chunk). */
  chunkBlocks?: number
  /** Chunks per top folder (default 500, as the py writer). */
  topDirSize?: number
  seed?: string
  /** Leave out the optional tables (`traces`, `statediffs`) to make a lighter dataset. */
  withTraces?: boolean
  withStateDiffs?: boolean
  /** Delete `out` first if it is not empty (otherwise a non-empty folder is an error). */
  force?: boolean
  fixturesDir?: string
  templates?: BlockTemplate[]
  /** Parquet settings of the chunks (default: the writer's, `PARQUET_DEFAULTS`). */
  parquet?: ParquetSettings
  /** Called after every block. */
  onBlock?: (done: number, total: number) => void
  /** Called once the first chunk is written, with the projected size of the whole dataset. */
  onEstimate?: (projectedBytes: number, freeBytes: number) => void
}

export interface GenerateStats {
  blocks: number
  chunks: number
  rows: Record<string, number>
  /** Bytes of normalised rows (NDJSON text handed to the chunk writer). */
  rowBytes: number
  /** Bytes of the finished dataset folder. */
  datasetBytes: number
  elapsedMs: number
  /** Main-thread time per stage; `finishWaitMs` is time spent waiting for Parquet encoding. */
  tileMs: number
  normalizeMs: number
  addBlockMs: number
  finishWaitMs: number
}

export class NotEnoughDisk extends Error {}

export async function generateDataset(opts: GenerateOptions): Promise<GenerateStats> {
  const total = opts.blocks ?? 100_000
  const first = opts.first ?? 0
  const chunkBlocks = opts.chunkBlocks ?? 200
  const seed = opts.seed ?? 'block-archive'
  if (!Number.isSafeInteger(total) || total < 1) throw new Error(`--blocks must be a positive integer, got ${total}`)
  if (!Number.isSafeInteger(first) || first < 0) throw new Error(`--first must be a non-negative integer, got ${first}`)
  if (!Number.isSafeInteger(chunkBlocks) || chunkBlocks < 1) throw new Error(`--chunk-blocks must be a positive integer, got ${chunkBlocks}`)
  await prepareOut(opts.out, opts.force ?? false)
  await writeFile(path.join(opts.out, 'dataset.json'), JSON.stringify({ name: path.basename(path.resolve(opts.out)), family: 'evm' }, null, 2) + '\n')

  const templates = opts.templates ?? loadTemplates(opts.fixturesDir)
  const stats: GenerateStats = {
    blocks: 0, chunks: 0, rows: {}, rowBytes: 0, datasetBytes: 0, elapsedMs: 0,
    tileMs: 0, normalizeMs: 0, addBlockMs: 0, finishWaitMs: 0,
  }
  const drop = new Set([...(opts.withTraces === false ? ['traces'] : []), ...(opts.withStateDiffs === false ? ['statediffs'] : [])])
  const started = performance.now()
  const written: ChunkRef[] = []
  let pending: Promise<void> | undefined
  let builder: ChunkBuilder | undefined
  let tables: string[] | undefined
  const flush = async (b: ChunkBuilder) => {
    const t0 = performance.now()
    if (pending) await pending // at most one chunk encoding while the next one is generated
    stats.finishWaitMs += performance.now() - t0
    const top = nextTop(written, b.first, opts.topDirSize ?? 500)
    pending = b.finish(top).then(async (ref) => {
      written.push(ref)
      stats.chunks++
      if (stats.chunks === 1) await checkDisk(opts, path.join(opts.out, ref.path), b.blockCount, total)
    })
  }
  try {
    for (let n = first; n < first + total; n++) {
      let t0 = performance.now()
      const bundle = tileBlock(templateFor(n, templates), n, { seed })
      let t1 = performance.now()
      stats.tileMs += t1 - t0
      const rows = normalizeEvmBlock(bundle)
      for (const d of drop) delete rows[d]
      t0 = performance.now()
      stats.normalizeMs += t0 - t1
      tables ??= bundleTables(bundle).filter((t) => !drop.has(t))
      builder ??= new ChunkBuilder(evmFamily, opts.out, tables, opts.parquet)
      const before = builder.bytes
      await builder.addBlock(n, bundle.block.hash, bundle.block.parentHash, rows)
      stats.rowBytes += builder.bytes - before
      for (const [table, list] of Object.entries(rows)) stats.rows[table] = (stats.rows[table] ?? 0) + list.length
      stats.addBlockMs += performance.now() - t0
      stats.blocks++
      if (builder.blockCount >= chunkBlocks) {
        await flush(builder)
        builder = undefined
      }
      opts.onBlock?.(stats.blocks, total)
    }
    if (builder) await flush(builder)
    builder = undefined
    const t0 = performance.now()
    await pending
    stats.finishWaitMs += performance.now() - t0
  } catch (e) {
    await builder?.abort()
    await pending?.catch(() => undefined)
    throw e
  }
  stats.elapsedMs = performance.now() - started
  stats.datasetBytes = await dirSize(opts.out)
  return stats
}

async function prepareOut(out: string, force: boolean): Promise<void> {
  let names: string[] = []
  try {
    names = await readdir(out)
  } catch (e: any) {
    if (e.code !== 'ENOENT') throw e
  }
  if (names.length) {
    if (!force) throw new Error(`${out} is not empty; choose another folder or pass --force to replace it`)
    await rm(out, { recursive: true, force: true })
  }
  await mkdir(out, { recursive: true })
}

/** After the first chunk: stop early if the whole dataset would not fit on the disk. */
async function checkDisk(opts: GenerateOptions, chunkDir: string, blocksInChunk: number, total: number): Promise<void> {
  const used = await dirSize(chunkDir)
  const projected = (used / blocksInChunk) * total
  const fs = await statfs(opts.out)
  const free = fs.bavail * fs.bsize
  opts.onEstimate?.(projected, free)
  if (projected > free * 0.9) {
    throw new NotEnoughDisk(
      `the dataset would take about ${(projected / 1e9).toFixed(1)} GB but only ${(free / 1e9).toFixed(1)} GB are free; ` +
        `use fewer --blocks or leave out traces/state diffs`,
    )
  }
}
