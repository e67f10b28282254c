import { createHash, randomBytes } from 'node:crypto'
import { cp, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { gunzipSync } from 'node:zlib'
import os from 'node:os'
import path from 'node:path'
import { after, before } from 'node:test'
import { fileURLToPath } from 'node:url'
import { nextTop, type ChunkRef, type DatasetMeta } from '../../src/chunks/layout.js'
import { ChunkBuilder } from '../../src/chunks/writer.js'
import { evmFamily } from '../../src/families/evm.js'
import { LocalStorage } from '../../src/server/storage.js'
import { WorkerServer, type WorkerServerOptions } from '../../src/server/worker-http.js'
import { bundleTables, normalizeEvmBlock, type EvmBlockBundle } from '../../src/ingest/evm/normalize.js'

/*
 * Chunk folders for server tests, built from the recorded anvil dev chain
 * (fixtures/evm/devchain-anvil: 128 blocks with receipts, parity traces and replay state diffs).
 */

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')

/** One recorded block as in the fixture file (raw RPC answers). */
export interface AnvilRecord {
  number: number
  block: any
  receipts: any[]
  parityTraces: any[]
  replay: any[]
  callTraces: any[]
  prestateDiff: any[]
}

let cache: AnvilRecord[] | undefined

export async function anvilRecords(): Promise<AnvilRecord[]> {
  if (!cache) {
    const text = gunzipSync(await readFile(path.join(REPO, 'fixtures/evm/devchain-anvil/anvil-blocks.jsonl.gz'))).toString('utf8')
    cache = text.split('\n').filter(Boolean).map((l) => JSON.parse(l))
  }
  return cache
}

/** The bundle the normaliser takes: receipts, parity traces, replay state diffs. */
export function anvilBundle(r: AnvilRecord): EvmBlockBundle {
  return { block: r.block, receipts: r.receipts, traces: r.parityTraces, stateDiffs: r.replay }
}

/**
 * Write `records` as an EVM dataset into `dir`, `chunkBlocks` records per chunk (records need not be
 * consecutive blocks: a sparse selection gives a sparse dataset).
 */
export async function writeDataset(dir: string, name: string, records: AnvilRecord[], chunkBlocks: number): Promise<ChunkRef[]> {
  const sizes: number[] = []
  for (let i = 0; i < records.length; i += chunkBlocks) sizes.push(Math.min(chunkBlocks, records.length - i))
  return writeDatasetChunks(dir, name, records, sizes)
}

/** Write `records` as an EVM dataset into `dir`: the first `sizes[0]` records in one chunk, the next `sizes[1]` in the next, …; records left over are not written. */
export async function writeDatasetChunks(dir: string, name: string, records: AnvilRecord[], sizes: number[]): Promise<ChunkRef[]> {
  await mkdir(dir, { recursive: true })
  const meta: DatasetMeta = { name, family: 'evm' }
  await writeFile(path.join(dir, 'dataset.json'), JSON.stringify(meta))
  const write = async (into: string) => {
    const chunks: ChunkRef[] = []
    let at = 0
    for (const n of sizes) {
      await writeChunk(into, records.slice(at, at + n), chunks)
      at += n
    }
    return chunks
  }
  const cache = process.env[DATASET_CACHE_ENV]
  if (!cache || sizes.length === 0) return write(dir)
  return copyCached(cache, datasetKey(records, sizes), dir, write)
}

/*
 * The chunks of a `writeDataset` or `writeDatasetChunks` call are written once per suite run and
 * copied after that. Most test files write the same records of the anvil chain, and writing them
 * (normalise, DuckDB, zstd Parquet) costs 1–1.5 CPU s a time (64 one-block chunks: 4–5 s) against a
 * few ms for a copy; the chunk writer is deterministic, so a copy holds the same bytes. `npm test`
 * names the folder (helpers/suite-env.ts, which removes it when the run ends); a test file run
 * without it writes every dataset itself. The files are copied, not linked, so a test may change or
 * corrupt its copy.
 */
export const DATASET_CACHE_ENV = 'BLOCK_ARCHIVE_TEST_DATASETS'

const recordHashes = new WeakMap<AnvilRecord, string>()

/**
 * What identifies a dataset's chunks: the chunk sizes and the content of each record written (tests
 * may pass changed records). A record object is hashed once per process: `anvilRecords()` hands the
 * same objects to every test of a file, so a test that changes a record changes a copy.
 */
function datasetKey(records: AnvilRecord[], sizes: number[]): string {
  const hash = createHash('sha256').update(`sizes ${sizes.join(',')}\n`)
  for (const r of records.slice(0, sizes.reduce((a, b) => a + b, 0))) {
    let h = recordHashes.get(r)
    if (!h) {
      h = createHash('sha256').update(JSON.stringify(r)).digest('hex')
      recordHashes.set(r, h)
    }
    hash.update(h)
  }
  return hash.digest('hex').slice(0, 32)
}

/** Copy the chunk folders cached under `key` into `dir`, writing them into the cache first if no process has. */
async function copyCached(cache: string, key: string, dir: string, write: (into: string) => Promise<ChunkRef[]>): Promise<ChunkRef[]> {
  const entry = path.join(cache, key)
  const refsFile = path.join(entry, 'refs.json')
  let refs = await readFile(refsFile, 'utf8').then((t) => JSON.parse(t) as ChunkRef[], () => undefined)
  if (!refs) {
    // Written beside the entry and renamed into place: a concurrent test file sees all of it or none.
    const staging = path.join(cache, `${key}.${process.pid}.${randomBytes(4).toString('hex')}`)
    refs = await write(path.join(staging, 'chunks'))
    await writeFile(path.join(staging, 'refs.json'), JSON.stringify(refs))
    await rename(staging, entry).catch(() => rm(staging, { recursive: true, force: true }))
  }
  // Chunk by chunk into a temp folder and renamed into place, as the chunk writer does: a server
  // listing `dir` meanwhile never sees a partial chunk.
  for (const ref of refs) {
    const tmp = path.join(dir, `.tmp-${process.pid}-${randomBytes(4).toString('hex')}`)
    await cp(path.join(entry, 'chunks', ref.path), tmp, { recursive: true })
    await mkdir(path.dirname(path.join(dir, ref.path)), { recursive: true })
    await rename(tmp, path.join(dir, ref.path))
  }
  return refs
}

/** Append one chunk holding `records` to the dataset in `dir` (and to `existing`); `extraMeta` goes into its meta.json. */
export async function writeChunk(dir: string, records: AnvilRecord[], existing: ChunkRef[], extraMeta?: Record<string, unknown>): Promise<ChunkRef> {
  const bundles = records.map(anvilBundle)
  const builder = new ChunkBuilder(evmFamily, dir, bundleTables(bundles[0]), extraMeta ? { extraMeta } : {})
  for (const b of bundles) {
    const rows = normalizeEvmBlock(b)
    const header = rows.blocks[0]
    await builder.addBlock(header.number as number, header.hash as string, header.parent_hash as string, rows)
  }
  const ref = await builder.finish(nextTop(existing, builder.first, 500))
  existing.push(ref)
  return ref
}

export async function tempDir(prefix = 'ba-server-'): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix))
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) }
}

/**
 * For a test file: a temp folder made before its tests and removed after them; the returned
 * function names a fresh sub-folder (`ds1`, `ds2`, …) at each call.
 */
export function freshFolders(prefix: string): () => string {
  let tmp: Awaited<ReturnType<typeof tempDir>> | undefined
  let n = 0
  before(async () => {
    tmp = await tempDir(prefix)
  })
  after(async () => {
    await tmp?.cleanup()
  })
  return () => path.join(tmp!.dir, `ds${++n}`)
}

/**
 * A standalone worker (no router: it serves every chunk under `root`) on a free port; by default its
 * budgets are far above what the fixtures need, so one answer covers the whole requested range.
 */
export async function startStandaloneWorker(root: string, opts: Partial<WorkerServerOptions> = {}): Promise<WorkerServer> {
  const worker = new WorkerServer({
    storage: new LocalStorage(root),
    heartbeatMs: 1000,
    dropGraceMs: 2000,
    concurrency: 2,
    queue: 8,
    queueTimeoutMs: 60_000,
    budgets: { sizeBytes: 1 << 30, timeMs: 600_000 },
    ...opts,
  })
  await worker.start('127.0.0.1', 0)
  return worker
}

export const REPO_ROOT = REPO

/**
 * Heartbeat settings of a test cluster whose test is not about dead workers: pings every
 * `heartbeatMs`, but a worker is declared dead only after 30 s of silence, so a machine stalled for
 * seconds (CPU burners beside the suite) does not make the router answer `no-worker`.
 */
export const stallTolerant = (heartbeatMs: number) => ({ heartbeatMs, missedHeartbeats: Math.ceil(30_000 / heartbeatMs) })
