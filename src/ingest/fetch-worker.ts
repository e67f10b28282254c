import { parentPort, workerData } from 'node:worker_threads'
import { errorToPlain } from './fetch-pool.js'
import { newTransferStats, type TransferStats } from './rpc.js'
import type { BlockOfRows, FetchOptions } from './source.js'
import { createSource, type SourceSpec } from './sources.js'

/*
 * A fetch worker (`--workers`): fetches batches of blocks from the node, parses and normalises them
 * in its own thread and posts the rows back to the ingest loop, which checks continuity and writes
 * chunks. Each worker has its own connections.
 */

export interface FetchWorkerData {
  source: SourceSpec
}

export type FetchWorkerReply = {
  id: number
  blocks: BlockOfRows[]
  error?: { error: Record<string, unknown>; block?: { number: number; hash: string; parentHash: string } }
  normalizeMs: number
  /** RPC counters since the previous reply. */
  stats: TransferStats
}

const data = workerData as FetchWorkerData
const s = newTransferStats()
const source = createSource(data.source, s)
let reported = { ...s }

parentPort!.on('message', async (m: { id: number; numbers: number[]; opts?: FetchOptions }) => {
  const r = await (await source).fetchRows(m.numbers, m.opts)
  const stats = { requests: s.requests - reported.requests, calls: s.calls - reported.calls, retries: s.retries - reported.retries, bytes: s.bytes - reported.bytes, parseMs: s.parseMs - reported.parseMs }
  reported = { ...s }
  const reply: FetchWorkerReply = {
    id: m.id, blocks: r.blocks, normalizeMs: r.normalizeMs, stats,
    error: r.error && { error: errorToPlain(r.error.error), block: r.error.block },
  }
  parentPort!.postMessage(reply)
})
