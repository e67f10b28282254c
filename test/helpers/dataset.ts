import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
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
  await mkdir(dir, { recursive: true })
  const meta: DatasetMeta = { name, family: 'evm' }
  await writeFile(path.join(dir, 'dataset.json'), JSON.stringify(meta))
  const chunks: ChunkRef[] = []
  for (let i = 0; i < records.length; i += chunkBlocks) {
    await writeChunk(dir, records.slice(i, i + chunkBlocks), chunks)
  }
  return chunks
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
