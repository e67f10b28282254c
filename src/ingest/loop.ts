import { randomBytes } from 'node:crypto'
import { mkdir, rm } from 'node:fs/promises'
import path from 'node:path'
import { nextTop, type ChunkRef } from '../chunks/layout.js'
import { ChunkBuilder } from '../chunks/writer.js'
import { log } from '../log.js'
import { availableParallelism } from 'node:os'
import { Worker } from 'node:worker_threads'
import type { MissingReceipts, ReceiptsMode, StateDiffsMode, TracesMode } from './evm/source.js'
import { FetchPool } from './fetch-pool.js'
import { chooseFinality, FinalityHead, reorgsExpected, type Finality } from './finality.js'
import { DatasetHashes, findForkPoint } from './reorg.js'
import { BlockNotAvailable, type RowsBatch } from './source.js'
import { createSource, type SourceSpec } from './sources.js'
import { IngestProgress, type ProgressMode } from './progress.js'
import { newTransferStats, type RpcClientOptions } from './rpc.js'
import type { LeaseOptions } from './s3-lease.js'
import { ingestTarget, type UploadStats } from './target.js'
import { startCompactor, type CompactSettings } from '../compact/in-ingest.js'
import type { Compactor } from '../compact/compactor.js'
import { HeadWriter } from './head-writer.js'

export { DatasetLocked, LeaseLost } from './locked.js'

/*
 * The ingest loop: resume after the last complete chunk, fetch blocks concurrently (in order),
 * never above the head the finality allows (finality.ts), check continuity (parentHash = previous
 * block's hash; a reorg is re-read from its fork point: reorg.ts), normalise, and cut chunks bounded
 * by block count and bytes; each chunk appears atomically (ChunkBuilder: temp folder, then rename; in
 * object storage, blocks.parquet uploaded last: target.ts).
 */

export interface IngestOptions {
  /** Dataset family of the node (default `evm`). */
  family?: SourceSpec['family']
  /** JSON-RPC endpoint (every family but a Substrate ingest from a Sidecar or from decoded files). */
  rpc?: string
  /** Dataset name (written to dataset.json). */
  dataset: string
  /** Dataset folder, or `s3://bucket/prefix`. */
  out: string
  /** `s3://` targets: timing of the lease that keeps other ingests out (s3-lease.ts). */
  lease?: LeaseOptions
  /** First block (default: after the last chunk, or 0). */
  from?: number
  /** Last block (default: the confirmed head, or forever with `follow`). */
  to?: number
  /**
   * Ingest exactly these block numbers (a sparse dataset, e.g. isolated recorded blocks) instead of
   * a range. Continuity is checked only between consecutive numbers.
   */
  blocks?: number[]
  /** Keep going: poll the head and ingest new blocks as they are confirmed. */
  follow?: boolean
  /**
   * Publish blocks up to the node's `finalized` or `safe` head, its `latest` block, or the latest
   * block minus this many confirmations. Default: finalized where the node tells it, else latest.
   */
  finality?: Finality
  /** Same as a number `finality` (the older option). */
  confirmations?: number
  /**
   * A reorg above the finality is re-read: the dataset's blocks above the fork point are dropped
   * (the open chunk, and written chunks newest first). A fork deeper than this many blocks below
   * the dataset's last block stops the ingest with ReorgError (default 300; 0: any reorg stops it).
   */
  maxReorgDepth?: number
  /** A chunk holds at most this many blocks (default 10,000)... */
  chunkBlocks?: number
  /** ...and is closed once its rows reach this many bytes (NDJSON size, default 256 MiB). */
  chunkBytes?: number
  /** Chunks per top folder (default 500). */
  topDirSize?: number
  /**
   * Write the open chunk once it is this old and the ingest has caught up with the head. Default
   * with `follow` 0: at once, so every block is queryable about a second after the node has it;
   * else (waiting for `to`) 10 min.
   */
  flushAfterMs?: number
  /** With `follow`: how often the head is polled (default DEFAULT_POLL_MS). */
  pollMs?: number
  /** With `follow`: router base URLs told of each new chunk (`POST <url>/notify`). */
  notify?: string[]
  /** Blocks per fetch (and calls per JSON-RPC batch), default 20. */
  batchSize?: number
  /** Fetches (and HTTP requests) in flight, default 4. */
  concurrency?: number
  /**
   * Chunks that may close (be written) at once while the next one fills; default `defaultCloses()`
   * on the spooled path, else 1. They are moved into place in block order whatever order their
   * writes end in.
   */
  closes?: number
  /**
   * Worker threads that fetch, parse and normalise blocks; 0: the loop's own thread does it. Default:
   * one per core beyond the first, at most 4 (at least 1). The `concurrency` fetches are spread over them.
   */
  workers?: number
  /** RPC retries per request and back-off. */
  attempts?: number
  backoffMs?: number
  maxBackoffMs?: number
  timeoutMs?: number
  /** EVM: how receipts, traces and state diffs are fetched. */
  receipts?: ReceiptsMode
  traces?: TracesMode
  stateDiffs?: StateDiffsMode
  missingReceipts?: MissingReceipts
  /** Starknet: also `starknet_traceBlockTransactions` (traces, message and event call addresses). */
  starknetTraces?: boolean
  /** Starknet: also `starknet_getStateUpdate` (state updates, storage diffs). */
  stateUpdates?: boolean
  /** Substrate: read decoded blocks from this Substrate API Sidecar (instead of `rpc`). */
  sidecar?: string
  /** Substrate: read blocks decoded by polkadot-api from JSON files in this folder (instead of `rpc`). */
  decodedDir?: string
  progress?: ProgressMode
  /**
   * EVM blocks, transactions and logs: `sql` (default) spools the raw RPC answers to disk and
   * normalises them in DuckDB when the chunk closes; `js` normalises each block in JS as it arrives
   * (the way traces and state diffs always go; with them, the whole block does).
   */
  normalizer?: 'sql' | 'js'
  /** Stop gracefully (the open chunk is written) when aborted. */
  signal?: AbortSignal
  /** Called after each chunk is in place. */
  onChunk?: (chunk: ChunkRef) => void
  /** With `follow`: merge small chunks in the background (src/compact/; docs/ingest.md, "Compaction"). */
  compact?: CompactSettings
}

export interface IngestResult {
  /** Blocks (and rows) taken from the node, counting those a reorg then dropped and had read again. */
  blocks: number
  rows: Record<string, number>
  /** Chunks written by this run and still in the dataset. */
  chunks: ChunkRef[]
  /** Last block in the dataset after this run (-1 if none). */
  last: number
  elapsedMs: number
  rpc: { requests: number; calls: number; retries: number; bytes: number; parseMs: number }
  /** Where the time went (ms; stages overlap: chunks are encoded while the next blocks are fetched). */
  stages: IngestStages
  /** `s3://` targets: the chunk uploads of this run. */
  upload?: UploadStats
  /** The finality the ingest published up to. */
  finality: Finality
  /** Reorgs re-read during this run. */
  reorgs: ReorgInfo[]
}

export interface ReorgInfo {
  /** The highest block the dataset and the node agreed on. */
  forkPoint: number
  /** The dataset's last block when the reorg was seen. */
  tip: number
  /** Written chunks deleted (their blocks are read again from `resumeAt`). */
  deletedChunks: string[]
  resumeAt: number
}

export interface IngestStages {
  /** The loop waiting for fetched blocks (HTTP, JSON parsing: `rpc.parseMs`, and normalising them). */
  fetchWaitMs: number
  /** RPC JSON → rows (summed over the fetch workers when there are some). */
  normalizeMs: number
  /** Rows into the open chunk (`ChunkBuilder.addBlock`). */
  addBlockMs: number
  /** The loop waiting for a chunk's encoding to end before starting another (`closes` at once). */
  finishWaitMs: number
  /** Inside the chunks' `finish`: sorting in JS, handing rows to DuckDB, DuckDB writing Parquet. */
  sortMs: number
  appendMs: number
  parquetMs: number
  /** CPU time of the ingest process (user + system, all threads). */
  cpuMs: number
  /**
   * Blocks that went through the spool (EVM default): for them the fetch workers only scan and spool
   * the answers (`normalizeMs` stays 0), `appendMs` is the chunk close's temp tables (answers with
   * upper-case hex) and `parquetMs` its statements (read_json → normaliser → ORDER BY → Parquet).
   */
  spooledBlocks: number
}

/** Fetch workers when not given: one per core beyond the first (the loop, the Appender and DuckDB use it), 1–4. */
export function defaultWorkers(): number {
  return Math.min(4, Math.max(1, availableParallelism() - 1))
}

/**
 * Chunks closing at once by default on the spooled path (the raw answers wait on disk, not in
 * memory): 2 with 2 cores or more. A close runs on one DuckDB thread (`--db-threads` default); a
 * second one uses the core the fetch worker leaves idle once it is ahead: 197.7 → 221–232 blocks/s
 * on 2 cores, ingest peak RSS 548 → 560–695 MB (docs/benchmark-history.md, step 36). Chunks whose rows
 * are held in memory (traces, state diffs, other families) close one at a time unless `--closes` says
 * otherwise: each one more would hold another chunk of rows.
 */
export function defaultCloses(): number {
  return Math.min(2, availableParallelism())
}

/** The chain does not continue where we are: a reorg deeper than --max-reorg-depth, or a wrong dataset. */
export class ReorgError extends Error {}

export const DEFAULT_MAX_REORG_DEPTH = 300

const MiB = 1024 * 1024

/**
 * Default block bound of a chunk; the byte bound (256 MiB of rows) closes mainnet-sized chunks long
 * before it (≈ 345 blocks). Chains with little data per block would otherwise get many small chunks,
 * and a query pays ≈ 15–20 ms per chunk it reads: the anvil comparison (5,002 blocks) answered in
 * 131–140 ms from 1,000-block chunks and in 99–109 ms from one chunk
 * (docs/benchmark-history.md, step 20).
 */
export const DEFAULT_CHUNK_BLOCKS = 10_000

/**
 * Head polling while waiting for blocks: a block waits half of it on average before the ingest sees
 * it, which is most of what a following ingest adds to a block's way to the router (docs/ingest.md,
 * "Freshness"); one `eth_blockNumber` per poll.
 */
export const DEFAULT_POLL_MS = 250

export async function runIngest(o: IngestOptions): Promise<IngestResult> {
  const started = performance.now()
  if (o.finality != null && o.confirmations != null) throw new Error('give --finality or --confirmations (the same thing as a number), not both')
  const maxReorgDepth = Math.max(0, o.maxReorgDepth ?? DEFAULT_MAX_REORG_DEPTH)
  const chunkBlocks = o.chunkBlocks ?? DEFAULT_CHUNK_BLOCKS
  const chunkBytes = o.chunkBytes ?? 256 * MiB
  const topDirSize = o.topDirSize ?? 500
  // `--to` above the head: waiting for the head is not following it, so the open chunk waits as well
  const flushAfterMs = o.flushAfterMs ?? (o.follow ? 0 : 10 * 60_000)
  const pollMs = o.pollMs ?? DEFAULT_POLL_MS
  const batchSize = Math.max(1, o.batchSize ?? 20)
  const concurrency = Math.max(1, o.concurrency ?? 4)
  const workers = Math.max(0, o.workers ?? defaultWorkers())
  if (o.blocks && (o.from != null || o.to != null || o.follow)) throw new Error('a block list cannot be combined with --from, --to or --follow')
  if (o.from != null && o.to != null && o.to < o.from) throw new Error(`--to ${o.to} is below --from ${o.from}`)

  const connection: Omit<RpcClientOptions, 'url'> = { concurrency, attempts: o.attempts, backoffMs: o.backoffMs, maxBackoffMs: o.maxBackoffMs, timeoutMs: o.timeoutMs }
  const spec = sourceSpec(o, batchSize, connection)
  const target = ingestTarget(o.out, { lease: o.lease })
  await target.open({ name: o.dataset, family: spec.family })
  // raw answers of the open chunks, under the build folder (a killed run's `.tmp-*` folders are removed at the next start)
  const spool = spec.family === 'evm' && (o.normalizer ?? 'sql') === 'sql' && (o.traces ?? 'none') === 'none' && (o.stateDiffs ?? 'none') === 'none'
    ? new Spool(path.join(target.buildRoot, `.tmp-${process.pid}-spool-${randomBytes(4).toString('hex')}`))
    : undefined
  const closes = Math.max(1, o.closes ?? (spool ? defaultCloses() : 1))
  let compactor: Compactor | undefined
  try {
    if (spool) {
      await mkdir(spool.dir, { recursive: true })
      spec.options = { ...spec.options, spoolDir: spool.dir }
    }
    const written = await target.listChunks()
    let prev: { number: number; hash: string; where: string } | undefined
    const lastChunk = written[written.length - 1]
    if (lastChunk) {
      const meta = await target.readChunkMeta(lastChunk)
      prev = { number: meta.last, hash: meta.lastHash.toLowerCase(), where: `chunk ${lastChunk.path}` }
    }

    // A following ingest tells routers of each chunk through the dataset's head file (and --notify).
    const head = o.follow ? new HeadWriter({ out: o.out, dataset: o.dataset, written, notify: o.notify }) : undefined
    const transfer = newTransferStats()
    const source = await createSource(spec, transfer)
    const finality = await chooseFinality(source, o.finality ?? o.confirmations).catch(async (e) => {
      await source.close?.()
      throw e
    })
    // Below a node-announced finality nothing is re-read; with `latest` or confirmations a reorg up to
    // --max-reorg-depth drops written chunks, so only chunks below that depth are merged.
    const mergeBelow = typeof finality === 'string' && finality !== 'latest' ? undefined : () => result.last - maxReorgDepth
    const heads = new FinalityHead(source, finality)
    const plan = new Planner(heads, {
      list: o.blocks ? [...new Set(o.blocks)].sort((a, b) => a - b).filter((n) => !prev || n > prev.number) : undefined,
      from: Math.max(o.from ?? 0, prev ? prev.number + 1 : 0),
      to: o.to,
      follow: o.follow ?? false,
      batchSize,
      pollMs,
      signal: o.signal,
      onHead: head && ((h, confirmed) => head.node(h, confirmed)),
    })
    if (prev && o.from != null && o.from > prev.number + 1) {
      log.warn({ from: o.from, lastInDataset: prev.number }, 'starting above the last block in the dataset: the blocks in between are a gap')
    }
    if (prev && o.from != null && o.from <= prev.number) log.info({ from: o.from, resumeAt: prev.number + 1 }, 'the dataset already has these blocks; resuming after its last chunk')
    else if (prev) log.info({ resumeAt: prev.number + 1, lastChunk: lastChunk!.path }, 'resuming after the last complete chunk')

    const progress = new IngestProgress(o.progress ?? 'auto')
    const stages: IngestStages = { fetchWaitMs: 0, normalizeMs: 0, addBlockMs: 0, finishWaitMs: 0, sortMs: 0, appendMs: 0, parquetMs: 0, cpuMs: 0, spooledBlocks: 0 }
    const cpu0 = process.cpuUsage()
    const result: IngestResult = { blocks: 0, rows: {}, chunks: [], last: prev?.number ?? -1, elapsedMs: 0, rpc: transfer, stages, ...(target.upload ? { upload: target.upload } : {}), finality, reorgs: [] }
    compactor = o.follow && o.compact ? startCompactor(target, source.family, o.dataset, chunkBlocks, chunkBytes, { maxBlock: mergeBelow, ...o.compact }) : undefined
    let rowTotal = 0
    const tables = source.tables()
    const extraMeta = { dataset: o.dataset, sources: source.describe() }
    const spoolWriter = source.spoolWriter?.()
    let builder: ChunkBuilder | undefined
    /** Whether the open chunk's blocks are spooled. */
    let builderSpooled = false
    /** Last block of the latest chunk (written or being written): the next chunk's `previousLast`, which lets the router tell a missing chunk from a deliberate jump. */
    let chunkEnd = written.at(-1)?.last ?? -1
    let openedAt = 0
    /** Chunks closing now (at most `closes`), oldest first; each settles once its chunk is in place. */
    const closing: Promise<void>[] = []
    /** The latest chunk to close: the next one is moved into place after it, so chunks appear in order. */
    let placed: Promise<void> = Promise.resolve()
    /** Top folder of every chunk written or closing (where the next chunk goes). */
    const tops = written.map((c) => ({ top: c.top }))
    /** A chunk that failed to be written or published: the loop stops at the next batch instead of at the next flush. */
    let pendingError: unknown

    const flush = async () => {
      const b = builder
      if (!b) return
      builder = undefined
      chunkEnd = b.last
      const t0 = performance.now()
      // chunks close while the next ones fill, `closes` at most; if one failed, this one is dropped too
      try {
        while (closing.length >= closes) await closing[0]
        if (pendingError) throw pendingError
      } catch (e) {
        await b.abort()
        throw e
      }
      stages.finishWaitMs += performance.now() - t0
      const top = nextTop(tops, b.first, topDirSize)
      tops.push({ top })
      log.debug({ first: b.first, last: b.last }, 'ingest: closing a chunk')
      const previous = placed
      const done = b.finish(top, () => previous).then((ref) => target.publish(ref)).then(async (ref) => {
        await spool?.consumed(ref.last)
        stages.sortMs += b.times.sortMs
        stages.appendMs += b.times.appendMs
        stages.parquetMs += b.times.parquetMs
        written.push(ref)
        result.chunks.push(ref)
        head?.published(ref)
        log.info({ chunk: ref.path, blocks: b.blockCount }, 'chunk written')
        o.onChunk?.(ref)
        compactor?.add(ref)
      })
      placed = done
      closing.push(done)
      done.catch((e) => {
        pendingError ??= e
      }).finally(() => closing.splice(closing.indexOf(done), 1))
    }

    const hashes = new DatasetHashes(target, () => written, maxReorgDepth + 1)
    /** Whether `f` does not continue the dataset's chain (its parent is not the block before it). */
    const forks = (f: { number: number; parentHash: string }) => prev != null && prev.number === f.number - 1 && prev.hash !== f.parentHash
    const pool = workers > 0
      ? new FetchPool(workers, {
        // The requests in flight are spread over the workers.
        source: 'rpc' in spec ? { ...spec, rpc: { ...spec.rpc, concurrency: Math.ceil(concurrency / workers) } } : spec,
      }, Worker, transfer)
      : undefined
    // Following: a short batch reaches the head as last read, and the chunk it goes into is written
    // within a block or two, so it is normalised in JS rather than spooled (FetchOptions.inline).
    const fetchOpts = (nums: number[]) => (o.follow && spool && nums.length < batchSize ? { inline: true } : undefined)
    const fetcher = pool ? (nums: number[]) => pool.fetch(nums, fetchOpts(nums)) : (nums: number[]) => source.fetchRows(nums, fetchOpts(nums))

    /**
     * `f` does not continue the dataset: find the fork point, drop the blocks above it (the open
     * chunk, written chunks newest first) and read on from there. Returns where to read from.
     */
    const reorg = async (f: { number: number; hash: string; parentHash: string }): Promise<number> => {
      const tip = prev!
      const mismatch = `block ${f.number} (${f.hash}) has parent hash ${f.parentHash}, but block ${tip.number} has hash ${tip.hash} (${tip.where})`
      if (o.blocks || maxReorgDepth === 0 || !source.blockHashes) {
        const why = o.blocks ? 'with --blocks, a mismatch is not re-read' : maxReorgDepth === 0 ? '--max-reorg-depth is 0' : 'this source cannot tell the hashes of its blocks, so a reorg cannot be re-read'
        throw new ReorgError(`chain mismatch: ${mismatch}; ${why}. Nothing of block ${f.number} was written; ` +
          `if the dataset's blocks are on the abandoned fork, delete the chunks from block ${tip.number} on and ingest again.`)
      }
      // the chunks closing now are placed first: the search and the deletion see every written block
      await builder?.abort()
      const open = builder?.first
      builder = undefined
      await Promise.allSettled([...closing])
      if (pendingError) throw pendingError
      const found = await findForkPoint(tip.number, maxReorgDepth, (n) => hashes.hashOf(n), (ns) => source.blockHashes!(ns), batchSize)
      if (!('fork' in found)) {
        throw new ReorgError(
          `chain mismatch deeper than --max-reorg-depth (${maxReorgDepth}): ${mismatch}. ` +
            ('missing' in found
              ? `The node's chain shares no block with the dataset down to its first block${found.missing >= 0 ? ` (the dataset has no block ${found.missing})` : ''}: it serves another chain, or the dataset was written from another fork. `
              : `The node's chain and the dataset differ on each of the ${maxReorgDepth} blocks below ${tip.number + 1}. `) +
            `Nothing of block ${f.number} was written; if the dataset's blocks are on the abandoned fork, delete its chunks down to the fork point and ingest again, or pass a larger --max-reorg-depth.`,
        )
      }
      const fork = found.fork
      const orphaned = await hashes.hashOf(fork + 1)
      const [replacing] = await source.blockHashes([fork + 1])
      const finalHead = Math.max(heads.known, reorgsExpected(finality) ? (await source.finalizedHead?.('finalized').catch(() => undefined)) ?? -1 : -1)
      if (fork < finalHead) {
        log.error({ block: fork + 1, datasetHash: orphaned, nodeHash: replacing, finalizedHead: finalHead },
          `a reorg replaced block ${fork + 1}, below the finalized head ${finalHead} the node announced: the node's finality is not final`)
      }
      const deleted: ChunkRef[] = []
      while (written.length && written[written.length - 1].last > fork) {
        const c = written.pop()!
        await target.deleteChunk(c)
        deleted.push(c)
        log.warn({ chunk: c.path }, 'reorg: deleted a chunk of replaced blocks')
      }
      for (const c of deleted) if (result.chunks.includes(c)) result.chunks.splice(result.chunks.indexOf(c), 1)
      tops.splice(0, tops.length, ...written.map((c) => ({ top: c.top })))
      if (deleted.length) head?.rewound(written)
      chunkEnd = written.at(-1)?.last ?? -1
      const resumeAt = Math.min(fork + 1, open ?? Infinity, ...deleted.map((c) => c.first))
      hashes.forget(resumeAt)
      const below = await hashes.hashOf(resumeAt - 1)
      prev = below ? { number: resumeAt - 1, hash: below, where: 'in the dataset below the fork point' } : undefined
      result.last = resumeAt - 1
      result.reorgs.push({ forkPoint: fork, tip: tip.number, deletedChunks: deleted.map((c) => c.path), resumeAt })
      log.warn({ forkPoint: fork, depth: tip.number - fork, datasetHash: orphaned, nodeHash: replacing, deletedChunks: deleted.length, resumeAt },
        `chain reorganisation above the finality: blocks ${fork + 1}–${tip.number} replaced; reading the node's chain from block ${resumeAt}`)
      return resumeAt
    }

    let batches = fetchInOrder(plan, concurrency, fetcher)
    try {
      try {
        batch: for (;;) {
          let t0 = performance.now()
          const next = await batches.next()
          stages.fetchWaitMs += performance.now() - t0
          if (pendingError) throw pendingError
          if (next.done) break
          const batch = next.value
          stages.normalizeMs += batch.normalizeMs
          // every block of the batch before any is written, so that a file is not deleted before its last block is in a chunk
          for (const f of batch.blocks) if (f.spool) spool?.add(f.spool.files, f.number)
          let forked: { number: number; hash: string; parentHash: string } | undefined
          for (const f of batch.blocks) {
            if (forks(f)) {
              forked = f
              break
            }
            // A chunk is spooled whole or not at all: a block fetched the other way starts a new one.
            if (builder && builder.blockCount > 0 && builderSpooled !== !!f.spool) await flush()
            const rows = f.rows
            if (!builder) {
              builder = new ChunkBuilder(source.family, target.buildRoot, tables, { extraMeta: { ...extraMeta, previousLast: chunkEnd }, spool: spoolWriter })
              builderSpooled = !!f.spool
              openedAt = performance.now()
            }
            t0 = performance.now()
            await builder.addBlock(f.number, f.hash, f.parentHash, rows, f.bytes, f.texts, f.spool)
            stages.addBlockMs += performance.now() - t0
            if (f.spool) stages.spooledBlocks++
            const counts = [...Object.entries(rows).map(([t, list]) => [t, list.length] as const), ...Object.entries(f.texts).map(([t, x]) => [t, x.rows] as const), ...Object.entries(f.spool?.rows ?? {})]
            for (const [t, n] of counts) {
              result.rows[t] = (result.rows[t] ?? 0) + n
              rowTotal += n
            }
            result.blocks++
            result.last = f.number
            prev = { number: f.number, hash: f.hash, where: 'fetched earlier in this run' }
            hashes.remember(f.number, f.hash)
            if (builder.blockCount >= chunkBlocks || builder.bytes >= chunkBytes) await flush()
          }
          if (!forked && batch.error?.block && forks(batch.error.block)) forked = batch.error.block
          if (forked) {
            await batches.return(undefined) // the blocks in flight follow the old chain
            plan.rewind(await reorg(forked))
            batches = fetchInOrder(plan, concurrency, fetcher)
            continue batch
          }
          if (batch.error) {
            const e = batch.error.error
            // a reorg to a shorter chain took a block the head had announced: wait for the node to have it again
            if (e instanceof BlockNotAvailable && !o.blocks && reorgsExpected(finality) && e.block > (await source.head())) {
              log.warn({ block: e.block }, 'the node no longer has this block (a reorg made its chain shorter); waiting for it again')
              await batches.return(undefined)
              plan.rewind(e.block)
              batches = fetchInOrder(plan, concurrency, fetcher)
              continue batch
            }
            throw e
          }
          // Caught up: don't sit on blocks. While a chunk is still being written (uploaded), the open one
          // waits for it and gathers the blocks meanwhile: when writing a chunk takes longer than a
          // block, chunks do not queue up (each behind the last) and the lag stays about one write.
          if (batch.blocks.length === 0 && builder && performance.now() - openedAt >= flushAfterMs && closing.length === 0) await flush()
          progress.update({ block: result.last, blocks: result.blocks, rows: rowTotal, target: plan.target, start: plan.start })
        }
      } finally {
        await batches.return(undefined) // stops fetching (the generator waits for requests in flight)
        await pool?.close()
      }
      await flush()
      await placed
    } catch (e) {
      await builder?.abort()
      await Promise.allSettled([...closing]) // a chunk that was complete before the error stays
      throw e
    } finally {
      progress.stop()
      await source.close?.()
      await head?.close()
    }
    result.elapsedMs = performance.now() - started
    const cpu = process.cpuUsage(cpu0)
    stages.cpuMs = (cpu.user + cpu.system) / 1000
    log.info({ blocks: result.blocks, elapsedMs: Math.round(result.elapsedMs), parseMs: Math.round(transfer.parseMs), ...Object.fromEntries(Object.entries(stages).map(([k, v]) => [k, Math.round(v)])) }, 'ingest stages')
    return result
  } finally {
    await compactor?.stop()
    await spool?.remove()
    await target.close()
  }
}

/** The spool folder of an ingest: files of raw answers, each deleted once every block in it is in a written chunk. */
class Spool {
  /** File → the last block it holds. */
  private readonly files = new Map<string, number>()

  constructor(readonly dir: string) {}

  add(files: Record<string, string>, block: number): void {
    for (const f of Object.values(files)) this.files.set(f, Math.max(block, this.files.get(f) ?? -1))
  }

  /** The chunks up to `last` are written: their files go. */
  async consumed(last: number): Promise<void> {
    const done = [...this.files].filter(([, l]) => l <= last).map(([f]) => f)
    for (const f of done) this.files.delete(f)
    await Promise.all(done.map((f) => rm(f, { force: true })))
  }

  async remove(): Promise<void> {
    await rm(this.dir, { recursive: true, force: true })
  }
}

function sourceSpec(o: IngestOptions, batchSize: number, connection: Omit<RpcClientOptions, 'url'>): SourceSpec {
  const family = o.family ?? 'evm'
  if (family !== 'substrate' && o.decodedDir) throw new Error('--decoded-dir is for --family substrate')
  if (family === 'substrate') {
    if ([o.rpc, o.sidecar, o.decodedDir].filter((x) => x).length > 1) {
      throw new Error('give one of the node (--rpc), a Sidecar (--sidecar) or a folder of decoded blocks (--decoded-dir), not several')
    }
    if (o.sidecar) return { family, from: 'sidecar', options: { url: o.sidecar, batchSize, timeoutMs: o.timeoutMs } }
    if (o.decodedDir) return { family, from: 'decoded', options: { dir: path.resolve(o.decodedDir) } }
    if (!o.rpc) throw new Error('a Substrate ingest needs the node (--rpc ws://…|http://…), a Sidecar (--sidecar) or a folder of blocks decoded by polkadot-api (--decoded-dir)')
    return { family, from: 'node', options: { url: o.rpc, batchSize, timeoutMs: o.timeoutMs, attempts: o.attempts, concurrency: Math.max(1, o.concurrency ?? 4) } }
  }
  if (!o.rpc) throw new Error('give the node URL (--rpc)')
  const rpc = { ...connection, url: o.rpc }
  if (family === 'starknet') {
    if ((o.traces && o.traces !== 'none') || (o.stateDiffs && o.stateDiffs !== 'none')) {
      throw new Error('--receipts, --traces trace_block|callTracer, --state-diffs and --missing-receipts are EVM options; a Starknet ingest takes --traces starknet and --state-updates')
    }
    return { family, rpc, options: { traces: o.starknetTraces ?? false, stateUpdates: o.stateUpdates ?? false, batchSize } }
  }
  if (o.starknetTraces || o.stateUpdates) throw new Error('--state-updates and Starknet traces are Starknet options (add --family starknet)')
  return { family, rpc, options: { receipts: o.receipts, traces: o.traces, stateDiffs: o.stateDiffs, missingReceipts: o.missingReceipts, batchSize } }
}

interface PlannerOptions {
  list?: number[]
  from: number
  to?: number
  follow: boolean
  batchSize: number
  pollMs: number
  signal?: AbortSignal
  /** Called with each head read and the confirmed head derived from it. */
  onHead?: (head: number, confirmed: number) => void
}

/** Hands out block numbers to fetch, never past the head the finality allows. */
class Planner {
  private next: number
  private listPos = 0
  private confirmed = -1
  readonly start: number
  target?: number

  constructor(private readonly heads: FinalityHead, private readonly o: PlannerOptions) {
    this.next = o.from
    this.start = o.list ? (o.list[0] ?? 0) : o.from
    if (o.list) this.target = o.list[o.list.length - 1]
  }

  get done(): boolean {
    if (this.o.signal?.aborted) return true
    if (this.o.list) return this.listPos >= this.o.list.length
    return this.o.to != null && this.next > this.o.to
  }

  /** The next numbers to fetch, or undefined when they are not confirmed yet (or there are none). */
  take(): number[] | undefined {
    if (this.done) return undefined
    if (this.o.list) {
      const list = this.o.list
      const batch: number[] = []
      while (this.listPos < list.length && batch.length < this.o.batchSize && list[this.listPos] <= this.confirmed) batch.push(list[this.listPos++])
      return batch.length ? batch : undefined
    }
    const end = Math.min(this.next + this.o.batchSize - 1, this.confirmed, this.o.to ?? Infinity)
    if (end < this.next) return undefined
    const batch: number[] = []
    for (let n = this.next; n <= end; n++) batch.push(n)
    this.next = end + 1
    return batch
  }

  /** A reorg: hand out blocks from `n` again, once the head has been read again. */
  rewind(n: number): void {
    this.next = n
    this.confirmed = Math.min(this.confirmed, n - 1)
  }

  /** Nothing to hand out: refresh the head. Returns false when the ingest should end. */
  async refresh(first: boolean): Promise<boolean> {
    if (this.o.signal?.aborted) return false
    this.confirmed = await this.heads.read()
    this.o.onHead?.(this.heads.latest, this.confirmed)
    if (!this.o.list) this.target = this.o.to ?? (this.o.follow ? Math.max(this.confirmed, this.next - 1) : this.confirmed)
    if (this.done) return false
    const waiting = this.o.list ? this.o.list[this.listPos] : this.next
    if (waiting <= this.confirmed) return true
    if (this.o.list) {
      throw new BlockNotAvailable(waiting) // a listed block above the head: the node does not have it
    }
    if (!this.o.follow && this.o.to == null) return false // caught up with the confirmed head
    if (first || this.o.to != null) log.info({ waitingFor: waiting, head: this.confirmed, finality: this.heads.finality }, 'waiting for the head to move')
    await sleep(this.o.pollMs, this.o.signal)
    return !this.o.signal?.aborted
  }
}

/**
 * Fetch batches concurrently and yield them in block order. Yields an empty batch each time it has
 * caught up with the head as last read, before reading it again (so the caller can write the open
 * chunk then, instead of one poll later).
 */
async function* fetchInOrder(plan: Planner, concurrency: number, fetch: (nums: number[]) => Promise<RowsBatch>): AsyncGenerator<RowsBatch> {
  const inflight: Promise<RowsBatch>[] = []
  let first = true
  try {
    for (;;) {
      while (inflight.length < concurrency) {
        const nums = plan.take()
        if (!nums) break
        const p = fetch(nums)
        p.catch(() => undefined)
        inflight.push(p)
      }
      if (inflight.length) {
        yield await inflight.shift()!
        continue
      }
      if (plan.done) return
      if (!first) yield { blocks: [], normalizeMs: 0 }
      const more = await plan.refresh(first)
      if (!more) return
      first = false
    }
  } finally {
    await Promise.allSettled(inflight)
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms)
    function done() {
      clearTimeout(t)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    signal?.addEventListener('abort', done, { once: true })
  })
}
