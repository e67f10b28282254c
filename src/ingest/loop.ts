import { randomBytes } from 'node:crypto'
import { mkdir, rm } from 'node:fs/promises'
import path from 'node:path'
import { nextTop, type ChunkRef } from '../chunks/layout.js'
import { ChunkBuilder } from '../chunks/writer.js'
import { log } from '../log.js'
import { availableParallelism } from 'node:os'
import { DEFAULT_CHUNK_BLOCKS, DEFAULT_MAX_REORG_DEPTH, DEFAULT_POLL_MS, defaultWorkers } from './defaults.js'
import { Worker } from 'node:worker_threads'
import { FetchPool } from './fetch-pool.js'
import { chooseFinality, FinalityHead, reorgsExpected, type Finality } from './finality.js'
import { DatasetHashes, ReorgHandler } from './reorg.js'
import { BlockNotAvailable, type RowsBatch } from './source.js'
import { createSource, sourceSpec, type SourceOptions } from './sources.js'
import { IngestProgress, type ProgressMode } from './progress.js'
import { newTransferStats } from './rpc.js'
import type { LeaseOptions } from './s3-lease.js'
import { ingestTarget, type IngestTarget, type UploadStats } from './target.js'
import { startCompactor, type CompactSettings } from '../compact/in-ingest.js'
import type { Compactor } from '../compact/compactor.js'
import { HeadWriter } from './head-writer.js'
import { sleep } from '../retry.js'
import type { ClaimOptions } from './range-claims.js'

export { DatasetLocked, LeaseLost } from './locked.js'

/*
 * The ingest loop: resume after the last complete chunk, fetch blocks concurrently (in order),
 * never above the head the finality allows (finality.ts), check continuity (parentHash = previous
 * block's hash; a reorg is re-read from its fork point: reorg.ts), normalise, and cut chunks bounded
 * by block count and bytes; each chunk appears atomically (ChunkBuilder: temp folder, then rename; in
 * object storage, blocks.parquet uploaded last: target.ts).
 */

/**
 * An ingest's settings, and which source it reads (`SourceOptions`: `family`, default the first
 * registered one, `rpc`, and the options of each family's source module, e.g. EVM `traces`).
 */
export interface IngestOptions extends Partial<SourceOptions> {
  /** Dataset name (written to dataset.json). */
  dataset: string
  /** Dataset folder, or `s3://bucket/prefix`. */
  out: string
  /** `s3://` targets: timing of the lease that keeps other ingests out (s3-lease.ts). */
  lease?: LeaseOptions
  /** Timing of the range claim (range-claims.ts). */
  claim?: ClaimOptions
  /** First block (default: after the last chunk, or 0). */
  from?: number
  /**
   * Last block (default: the confirmed head, or forever with `follow`). With `to` the ingest writes
   * the range [from, to] beside other ingests of other ranges (docs/ingest.md, "Backfill in
   * parallel"): it claims the range, not the dataset, and resumes after its own last chunk in it.
   */
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
   * one per core beyond the first, at most 4 (at least 1); none for a pass of at most two batches
   * (a short range or block list). The `concurrency` fetches are spread over them.
   */
  workers?: number
  /** RPC retries per request and back-off. */
  attempts?: number
  backoffMs?: number
  maxBackoffMs?: number
  timeoutMs?: number
  progress?: ProgressMode
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
  /** Spooled blocks of chunks small enough to be normalised in JS at their close (`--normalizer auto`: `normalizeMs` counts it). */
  closedInJsBlocks: number
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

export { ReorgError } from './reorg.js'


const MiB = 1024 * 1024



export async function runIngest(o: IngestOptions): Promise<IngestResult> {
  const started = performance.now()
  // One owner for the range claim of every pass: a later pass goes on under the claim of the first.
  const claimOwner = randomBytes(8).toString('hex')
  let pass = await ingestPass(o, claimOwner)
  let result = pass.result
  // A range [from, to] with chunks of other runs in it has several holes; each pass writes one, up
  // to the next chunk already there, and the command goes on until none is left.
  while (pass.goesOn) {
    log.info({ from: o.from, to: o.to, next: pass.missing!.from, nextTo: pass.missing!.to }, 'the range has chunks of another run in it; going on with the next blocks it lacks')
    pass = await ingestPass(o, claimOwner)
    result = addResults(result, pass.result)
  }
  const missing = pass.missing
  if (missing) log.warn({ from: o.from, to: o.to, missingFrom: missing.from, missingTo: missing.to }, 'blocks of the range are still missing: run the same ingest again to write them')
  result.elapsedMs = performance.now() - started
  return result
}

/** Two passes of one ingest as one result. */
function addResults(a: IngestResult, b: IngestResult): IngestResult {
  /** Field by field (every field a number). */
  const sum = <T extends object>(x: T, y: T): T => {
    const [p, q] = [x as Record<string, number>, y as Record<string, number>]
    return Object.fromEntries([...new Set([...Object.keys(p), ...Object.keys(q)])].map((k) => [k, (p[k] ?? 0) + (q[k] ?? 0)])) as T
  }
  return {
    ...b,
    blocks: a.blocks + b.blocks,
    rows: sum(a.rows, b.rows),
    chunks: [...a.chunks, ...b.chunks],
    rpc: sum(a.rpc, b.rpc),
    stages: sum(a.stages, b.stages),
    ...(a.upload && b.upload ? { upload: sum(a.upload, b.upload) } : {}),
    reorgs: [...a.reorgs, ...b.reorgs],
  }
}

interface Pass {
  result: IngestResult
  /** In a range: the next blocks of it still lacking (a chunk of another run lies above this pass's last block). */
  missing?: { from: number; to: number }
  /** Another pass follows (it writes `missing`): this one left its claim running. */
  goesOn: boolean
}

/**
 * One pass: from where the dataset (or, bounded, the range) resumes to its end, or, in a range, up
 * to the next chunk already written in it.
 */
async function ingestPass(o: IngestOptions, claimOwner: string): Promise<Pass> {
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
  if (o.blocks && (o.from != null || o.to != null || o.follow)) throw new Error('a block list cannot be combined with --from, --to or --follow')
  if (o.from != null && o.to != null && o.to < o.from) throw new Error(`--to ${o.to} is below --from ${o.from}`)

  const spec = sourceSpec({ ...o, batchSize, concurrency })
  const target = ingestTarget(o.out, { lease: o.lease, claim: o.claim })
  // An ingest of a range [from, to] claims only its blocks; one up to the head (or a block list) holds the dataset.
  const bounded = o.to != null && !o.blocks
  await target.open({ name: o.dataset, family: spec.family }, { bounded })
  // raw answers of the open chunks, under the build folder (a killed run's `.tmp-*` folders are removed at the next start)
  const spool = spec.spool
    ? new Spool(path.join(target.buildRoot, `.tmp-${process.pid}-spool-${randomBytes(4).toString('hex')}`))
    : undefined
  const closes = Math.max(1, o.closes ?? (spool ? defaultCloses() : 1))
  let compactor: Compactor | undefined
  let missing: Pass['missing']
  let goesOn = false
  try {
    if (spool) {
      await mkdir(spool.dir, { recursive: true })
      spec.spoolDir = spool.dir
    }
    const listed = await target.listChunks()
    const datasetLast = listed.at(-1)?.last ?? -1
    // the blocks this run writes: [start, stop], or from start on without `to`
    let start: number
    let stop = o.to
    /** Chunks of the dataset this run continues (the ingest's own, in its range when bounded). */
    let written: ChunkRef[]
    /** The chunk ending right before `start` (this run's first block continues its last block's hash). */
    let lastChunk: ChunkRef | undefined
    if (bounded) {
      const from = o.from ?? datasetLast + 1
      ;({ resumeAt: start, stopAt: stop } = rangeResume(listed, from, o.to!))
      // without --from the range continues the dataset (a reorg may reach below it); with one, only its own chunks are this run's to drop
      written = listed.filter((c) => (o.from == null || c.first >= from) && c.last < start)
      lastChunk = listed.find((c) => c.last === start - 1)
      // claimed even when complete already: a stopped claim of it (a run killed before deleting it) goes at the end
      if (from <= o.to!) await target.claim({ from, to: o.to! }, claimOwner)
      if (start > from && start <= o.to!) log.info({ from, to: o.to, resumeAt: start, stopAt: stop }, 'resuming the range after its last complete chunk')
      if (stop! < o.to!) log.info({ from, to: o.to, stopAt: stop, next: stop! + 1 }, 'the range already has chunks from block ' + (stop! + 1) + '; this pass ends below them, the next goes on after them')
    } else {
      written = listed
      lastChunk = listed.at(-1)
      start = Math.max(o.from ?? 0, datasetLast + 1)
      if (o.blocks) start = Math.max(o.blocks.reduce((a, b) => Math.min(a, b), Infinity), datasetLast + 1)
      await target.claim({ from: start, to: null })
    }
    let prev: { number: number; hash: string; where: string } | undefined
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
      from: start,
      to: stop,
      follow: o.follow ?? false,
      batchSize,
      pollMs,
      signal: o.signal,
      onHead: head && ((h, confirmed) => head.node(h, confirmed)),
    })
    if (!bounded && !o.blocks && datasetLast >= 0 && start > datasetLast + 1) {
      log.warn({ from: o.from, lastInDataset: datasetLast }, 'starting above the last block in the dataset: the blocks in between are missing until an ingest of their range (--from/--to) writes them')
    }
    if (!bounded && o.from != null && o.from <= datasetLast) log.info({ from: o.from, resumeAt: datasetLast + 1 }, 'the dataset already has these blocks; resuming after its last chunk')
    else if (!bounded && lastChunk) log.info({ resumeAt: start, lastChunk: lastChunk.path }, 'resuming after the last complete chunk')

    const progress = new IngestProgress(o.progress ?? 'auto')
    const stages: IngestStages = { fetchWaitMs: 0, normalizeMs: 0, addBlockMs: 0, finishWaitMs: 0, sortMs: 0, appendMs: 0, parquetMs: 0, cpuMs: 0, spooledBlocks: 0, closedInJsBlocks: 0 }
    const cpu0 = process.cpuUsage()
    const result: IngestResult = { blocks: 0, rows: {}, chunks: [], last: prev?.number ?? -1, elapsedMs: 0, rpc: transfer, stages, ...(target.upload ? { upload: target.upload } : {}), finality, reorgs: [] }
    compactor = o.follow && o.compact ? startCompactor(target, source.family, o.dataset, chunkBlocks, chunkBytes, { maxBlock: mergeBelow, excluded: () => otherClaims(target), ...o.compact }) : undefined
    let rowTotal = 0
    const tables = source.tables()
    const extraMeta = { dataset: o.dataset, sources: source.describe() }
    const spoolWriter = source.spoolWriter?.()
    let builder: ChunkBuilder | undefined
    /** Whether the open chunk's blocks are spooled. */
    let builderSpooled = false
    /**
     * Last block of the latest chunk (written or being written): the next chunk's `previousLast`,
     * which lets the router tell a missing chunk from a deliberate jump. A run starting above the
     * dataset's last block (another range, or --from above it) declares the block before its start:
     * the blocks in between are missing until another ingest writes them.
     */
    let chunkEnd = o.blocks ? (written.at(-1)?.last ?? -1) : start - 1
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
        stages.normalizeMs += b.times.normalizeMs
        if (b.closedInJs) stages.closedInJsBlocks += b.blockCount
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
    // A pass of at most two batches is fetched by the loop's own thread unless --workers says otherwise:
    // starting a worker thread (loading the source's modules again) costs more than such a pass.
    const blocksToFetch = o.blocks ? o.blocks.length : stop != null && !o.follow ? stop - start + 1 : Infinity
    const workers = Math.max(0, o.workers ?? (blocksToFetch <= 2 * batchSize ? 0 : defaultWorkers()))
    const pool = workers > 0
      ? new FetchPool(workers, {
        // The requests in flight are spread over the workers.
        source: spec.rpc ? { ...spec, rpc: { ...spec.rpc, concurrency: Math.ceil(concurrency / workers) } } : spec,
      }, Worker, transfer)
      : undefined
    // Following: a short batch reaches the head as last read, and the chunk it goes into is written
    // within a block or two, so it is normalised in JS rather than spooled (FetchOptions.inline).
    const fetchOpts = (nums: number[]) => (o.follow && spool && nums.length < batchSize ? { inline: true } : undefined)
    const fetcher = pool ? (nums: number[]) => pool.fetch(nums, fetchOpts(nums)) : (nums: number[]) => source.fetchRows(nums, fetchOpts(nums))

    const reorgs = new ReorgHandler({ target, source, heads, hashes, written, maxDepth: maxReorgDepth, window: batchSize, blockList: !!o.blocks }, {
      dropOpenChunk: async () => {
        await builder?.abort()
        const open = builder?.first
        builder = undefined
        await Promise.allSettled([...closing])
        if (pendingError) throw pendingError
        return open
      },
      rewound: ({ resumeAt, deleted, tip, info }) => {
        for (const c of deleted) if (result.chunks.includes(c)) result.chunks.splice(result.chunks.indexOf(c), 1)
        tops.splice(0, tops.length, ...written.map((c) => ({ top: c.top })))
        if (deleted.length) head?.rewound(written)
        chunkEnd = written.at(-1)?.last ?? -1
        prev = tip
        result.last = resumeAt - 1
        result.reorgs.push(info)
      },
    })

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
            plan.rewind(await reorgs.handle(forked, prev!))
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
    if (bounded && !o.signal?.aborted) {
      const now = await target.listChunks()
      // the range above, written before this one ended: its first block must be the child of this run's last
      const above = result.blocks > 0 && prev ? now.find((c) => c.first === prev!.number + 1) : undefined
      if (above && prev) {
        const parent = (await target.readChunkMeta(above)).firstParentHash.toLowerCase()
        if (parent !== prev.hash) {
          throw new Error(
            `block ${prev.number} (${prev.hash}) written by this run is not the parent of block ${above.first} in chunk ${above.path} (its parent hash is ${parent}): ` +
              'the two ranges were read from different chains or forks; delete the chunks of the range on the wrong one and ingest it again',
          )
        }
      }
      const left = rangeResume(now, o.from ?? datasetLast + 1, o.to!)
      if (left.resumeAt > o.to!) await target.releaseClaim(true)
      else missing = { from: left.resumeAt, to: left.stopAt }
    }
    result.elapsedMs = performance.now() - started
    const cpu = process.cpuUsage(cpu0)
    stages.cpuMs = (cpu.user + cpu.system) / 1000
    log.info({ blocks: result.blocks, elapsedMs: Math.round(result.elapsedMs), parseMs: Math.round(transfer.parseMs), ...Object.fromEntries(Object.entries(stages).map(([k, v]) => [k, Math.round(v)])) }, 'ingest stages')
    // only a range given with --from has holes (without it the range starts after the dataset's last chunk)
    goesOn = missing !== undefined && o.from != null && !o.signal?.aborted && result.blocks > 0
    return { result, missing, goesOn }
  } finally {
    await compactor?.stop()
    await spool?.remove()
    await target.close({ keepClaim: goesOn })
  }
}

/**
 * Where an ingest of [from, to] resumes: after the chunks that continue each other from `from`
 * (its own chunks of an earlier run, or of another ingest), up to the first chunk after that, if
 * one lies in the range.
 */
export function rangeResume(chunks: readonly ChunkRef[], from: number, to: number): { resumeAt: number; stopAt: number } {
  let resumeAt = from
  let stopAt = to
  for (const c of chunks) {
    if (c.last < resumeAt) continue
    if (c.first > stopAt) break
    if (c.first <= resumeAt) resumeAt = c.last + 1
    else {
      stopAt = c.first - 1
      break
    }
  }
  return { resumeAt, stopAt }
}

/** The ranges other ingests claim (running or stopped before their end): compaction leaves their chunks alone. */
async function otherClaims(target: IngestTarget): Promise<{ from: number; to: number | null }[]> {
  return (await target.claims()).filter((c) => c.owner !== target.claimOwner)
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

