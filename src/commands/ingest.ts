import { Command, InvalidArgumentError } from 'commander'
import { availableParallelism } from 'node:os'
import { FINALITY_CHOICES, type Finality } from '../ingest/finality.js'
import { DEFAULT_CHUNK_BLOCKS, DEFAULT_MAX_REORG_DEPTH, DEFAULT_POLL_MS, defaultWorkers } from '../ingest/defaults.js'
import type { IngestOptions } from '../ingest/loop.js'
import { familyFlags, sourceSpec } from '../ingest/sources.js'
import { DEFAULT_FAMILY, FAMILY_NAMES } from '../families/index.js'
import { log } from '../log.js'
import { isS3Url } from '../storage/s3-url.js'
import { choice, int, numberList, opt } from './options.js'
import { compactFanoutOption, compactGraceOption, metricsPortOption } from './compact.js'

/*
 * `ingest` (a node's blocks → Parquet chunks). Every flag also reads an environment variable (shown
 * in --help); each family's flags come from its source module (src/families/index.ts lists them).
 * docs/ingest.md describes them.
 */

/** `finalized`, `safe`, `latest` or a number of confirmations. */
function finality(value: string): Finality {
  const v = value.trim().toLowerCase()
  if ((FINALITY_CHOICES as readonly string[]).includes(v)) return v as Finality
  if (/^\d+$/.test(v)) return Number(v)
  throw new InvalidArgumentError(`expected finalized, safe, latest or a number of confirmations, got "${value}"`)
}

/** Ctrl-C / SIGTERM: stop fetching and write the open chunk; a second signal exits at once. */
function abortOnSignal(): AbortController {
  const ac = new AbortController()
  const handler = (signal: string) => {
    if (ac.signal.aborted) process.exit(130)
    log.warn({ signal }, 'stopping: writing the open chunk (send the signal again to exit at once)')
    ac.abort()
  }
  process.on('SIGINT', handler)
  process.on('SIGTERM', handler)
  return ac
}

export function registerIngest(program: Command): void {
  const command = program
    .command('ingest')
    .description('read blocks from an EVM, Starknet or Substrate node (JSON-RPC; Substrate also Sidecar or decoded dumps) and write immutable Parquet chunks ({top}/{first}-{last}-{hash}/*.parquet); resumes after the last complete chunk')
    .addOption(choice('--family <family>', 'chain family of the node', 'BLOCK_ARCHIVE_FAMILY', FAMILY_NAMES, DEFAULT_FAMILY))
    .addOption(opt('--rpc <url>', 'JSON-RPC endpoint of the node (http(s):// or ws(s)://)', 'BLOCK_ARCHIVE_RPC'))
    .addOption(opt('--dataset <name>', 'dataset name, written to dataset.json at the root of --out', 'BLOCK_ARCHIVE_DATASET').makeOptionMandatory())
    .addOption(opt('--out <folder|s3://bucket/prefix>', 'dataset folder (created if missing) or object-storage prefix (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; see docs/ingest.md)', 'BLOCK_ARCHIVE_OUT').makeOptionMandatory())
    .addOption(opt('--from <n>', 'first block (default: after the last chunk in --out, else 0)', 'BLOCK_ARCHIVE_FROM', int(0)))
    .addOption(opt('--to <n>', 'last block; waits for the head (up to the --finality) to reach it (default: that head at the time it is reached). With --to the ingest writes the range [--from, --to] beside ingests of other ranges (a backfill in parallel): it claims only that range (.ingest-lease-<from>-<to>.json), refuses one overlapping a running ingest\'s, and resumes after its own last chunk in it', 'BLOCK_ARCHIVE_TO', int(0)))
    .addOption(opt('--follow', 'keep following the head (up to the --finality) until stopped', 'BLOCK_ARCHIVE_FOLLOW').default(false))
    .addOption(opt('--blocks <list>', 'ingest exactly these blocks, e.g. "1000000,18000000-18000010" (a sparse dataset; continuity is checked only between consecutive numbers)', 'BLOCK_ARCHIVE_BLOCKS', numberList))
    .addOption(opt('--finality <finalized|safe|latest|k>', 'publish blocks up to the node\'s finalized head (EVM finalized tag, Substrate chain_getFinalizedHead, Starknet ACCEPTED_ON_L1), its safe head (EVM), its latest block, or k blocks below the latest (default: finalized where the node tells it, else latest; the log says which)', 'BLOCK_ARCHIVE_FINALITY', finality))
    .addOption(opt('--confirmations <k>', 'the same as --finality k: stay k blocks behind the latest block', 'BLOCK_ARCHIVE_CONFIRMATIONS', int(0)))
    .addOption(opt('--max-reorg-depth <n>', 'a reorg above the finality is re-read (replaced blocks and chunks are dropped); a fork deeper than n blocks below the dataset\'s last block stops the ingest (0: any reorg stops it)', 'BLOCK_ARCHIVE_MAX_REORG_DEPTH', int(0), DEFAULT_MAX_REORG_DEPTH))
    .addOption(opt('--chunk-blocks <n>', 'at most this many blocks per chunk (the --chunk-mb bound usually closes a chunk first on busy chains)', 'BLOCK_ARCHIVE_CHUNK_BLOCKS', int(1), DEFAULT_CHUNK_BLOCKS))
    .addOption(opt('--chunk-mb <n>', 'close a chunk once its rows reach this many MiB (as NDJSON, before compression); a block is never split', 'BLOCK_ARCHIVE_CHUNK_MB', int(1), 256))
    .addOption(opt('--top-dir-size <n>', 'chunks per top folder', 'BLOCK_ARCHIVE_TOP_DIR_SIZE', int(1), 500))
    .addOption(opt('--flush-after-ms <ms>', 'write the open chunk once it is this old and the ingest has caught up with the head (default: 0 with --follow, so each new block is queryable at once; 600000 while waiting for --to)', 'BLOCK_ARCHIVE_FLUSH_AFTER_MS', int(0)))
    .addOption(opt('--poll-ms <ms>', 'how often the head is polled while waiting for new blocks', 'BLOCK_ARCHIVE_POLL_MS', int(10), DEFAULT_POLL_MS))
    .addOption(opt('--notify <url>', 'with --follow: router base URL to tell of each new chunk (POST <url>/notify), repeatable; routers also watch the dataset\'s head.json without it', 'BLOCK_ARCHIVE_NOTIFY', (v: string, prev: string[] | undefined) => [...(prev ?? []), ...v.split(',').map((x) => x.trim()).filter(Boolean)]))
  // each family's flags, from its source module
  for (const f of familyFlags()) command.addOption(f.choices ? choice(f.flags, f.description, f.env, f.choices, f.default as string) : opt(f.flags, f.description, f.env, undefined, f.default))
  command
    .addOption(opt('--batch-size <n>', 'blocks per fetch = calls per JSON-RPC batch request (1 = no batching)', 'BLOCK_ARCHIVE_BATCH_SIZE', int(1), 20))
    .addOption(opt('--concurrency <n>', 'fetches and HTTP requests in flight at once', 'BLOCK_ARCHIVE_INGEST_CONCURRENCY', int(1), 4))
    .addOption(opt('--workers <n>', 'worker threads that fetch, parse and normalise blocks (0: the main thread does it; default: cores − 1, 1 to 4; none for at most two batches of blocks)', 'BLOCK_ARCHIVE_INGEST_WORKERS', int(0)))
    .addOption(opt('--attempts <n>', 'tries per RPC request on connection errors, timeouts, HTTP 429/5xx and rate-limit answers', 'BLOCK_ARCHIVE_RPC_ATTEMPTS', int(1), 8))
    .addOption(opt('--backoff-ms <ms>', 'first retry delay, doubled on each retry', 'BLOCK_ARCHIVE_RPC_BACKOFF_MS', int(0), 200))
    .addOption(opt('--max-backoff-ms <ms>', 'longest retry delay', 'BLOCK_ARCHIVE_RPC_MAX_BACKOFF_MS', int(0), 10_000))
    .addOption(opt('--timeout-ms <ms>', 'time limit per RPC request', 'BLOCK_ARCHIVE_RPC_TIMEOUT_MS', int(1), 60_000))
    .addOption(choice('--progress <how>', 'auto: a progress bar on a terminal, log lines otherwise', 'BLOCK_ARCHIVE_PROGRESS', ['auto', 'bar', 'log', 'none'], 'auto'))
    .addOption(opt('--closes <n>', 'chunks written at once while the next one fills (each on its own DuckDB connection; they appear in block order; default: 2 with 2 cores or more on the spooled path, where the rows wait on disk, else 1)', 'BLOCK_ARCHIVE_INGEST_CLOSES', int(1)))
    .addOption(opt('--db-threads <n>', 'DuckDB threads for writing the chunks (default: the cores the fetch workers leave, at least 1)', 'BLOCK_ARCHIVE_DB_THREADS', int(1)))
    .addOption(opt('--db-memory <size>', 'DuckDB memory limit, e.g. 2GB', 'BLOCK_ARCHIVE_DB_MEMORY'))
    .addOption(choice('--compact <on|off>', 'with --follow: merge small chunks into chunks of --chunk-blocks/--chunk-mb in the background (docs/ingest.md, "Compaction")', 'BLOCK_ARCHIVE_COMPACT', ['on', 'off'], 'on'))
    .addOption(compactFanoutOption())
    .addOption(compactGraceOption())
    .addOption(metricsPortOption())
    .action(async (o) => {
      if (isS3Url(o.out) && !/^s3:\/\/[^/]+/i.test(o.out)) throw new InvalidArgumentError(`--out ${o.out}: expected s3://bucket or s3://bucket/prefix`)
      if (o.blocks && (o.from != null || o.to != null || o.follow)) throw new InvalidArgumentError('--blocks cannot be combined with --from, --to or --follow')
      if (o.follow && o.to != null) throw new InvalidArgumentError('--follow and --to exclude each other')
      if (o.notify && !o.follow) throw new InvalidArgumentError('--notify needs --follow')
      for (const url of o.notify ?? []) if (!/^https?:\/\/[^/]+/.test(url)) throw new InvalidArgumentError(`--notify ${url}: expected a router base URL such as http://127.0.0.1:8080`)
      if (o.finality != null && o.confirmations != null) throw new InvalidArgumentError('--finality and --confirmations say the same thing: give one')
      const options: IngestOptions = {
        compact: o.compact === 'on' ? { fanout: o.compactFanout, graceMs: o.compactGraceMs } : undefined,
        family: o.family,
        rpc: o.rpc,
        ...Object.fromEntries(familyFlags().map((f) => [f.key, o[f.key]])),
        dataset: o.dataset,
        out: o.out,
        from: o.from,
        to: o.to,
        blocks: o.blocks,
        follow: o.follow,
        finality: o.finality ?? o.confirmations,
        maxReorgDepth: o.maxReorgDepth,
        chunkBlocks: o.chunkBlocks,
        chunkBytes: o.chunkMb * 1024 * 1024,
        topDirSize: o.topDirSize,
        flushAfterMs: o.flushAfterMs,
        pollMs: o.pollMs,
        notify: o.notify,
        batchSize: o.batchSize,
        concurrency: o.concurrency,
        closes: o.closes,
        workers: o.workers,
        attempts: o.attempts,
        backoffMs: o.backoffMs,
        maxBackoffMs: o.maxBackoffMs,
        timeoutMs: o.timeoutMs,
        progress: o.progress,
      }
      // the source the flags name (its family's flags, and no other family's), before anything starts
      sourceSpec({ ...options, batchSize: o.batchSize, concurrency: o.concurrency })
      const [{ configureDb }, { runIngest }, { serveMetrics }] = await Promise.all([import('../db.js'), import('../ingest/loop.js'), import('../compact/metrics.js')])
      configureDb({ threads: o.dbThreads ?? ingestDbThreads(o.workers), memoryLimit: o.dbMemory })
      const ac = abortOnSignal()
      if (o.metricsPort) await serveMetrics(o.metricsPort)
      const r = await runIngest({ ...options, signal: ac.signal })
      const secs = r.elapsedMs / 1000
      const rows = Object.values(r.rows).reduce((a, b) => a + b, 0)
      console.log(
        `ingested ${r.blocks} blocks into ${r.chunks.length} chunks in ${secs.toFixed(1)} s: ` +
          `${(r.blocks / secs).toFixed(1)} blocks/s, ${(rows / secs).toFixed(0)} rows/s ` +
          `(${Object.entries(r.rows).map(([t, n]) => `${n} ${t}`).join(', ') || 'no rows'}); ` +
          `RPC: ${r.rpc.requests} requests, ${r.rpc.calls} calls, ${r.rpc.retries} retries, ${(r.rpc.bytes / 1e6).toFixed(1)} MB; ` +
          `last block in the dataset: ${r.last}` +
          (r.upload ? `; uploaded ${(r.upload.bytes / 1e6).toFixed(1)} MB in ${r.upload.chunks} chunks` : '') +
          (r.reorgs.length ? `; reorgs re-read: ${r.reorgs.map((x) => `blocks ${x.forkPoint + 1}–${x.tip} from ${x.resumeAt}`).join(', ')}` : ''),
      )
    })
}

/**
 * DuckDB threads of an ingest: the cores the fetch workers leave (at least 1). A statement's calling
 * thread polls for work while DuckDB's other threads run the only task left (a sort's merge, the
 * Parquet writer), and that polling burns a core: on 2 cores with 1 fetch worker, 2 DuckDB threads
 * took ≈ 6.2 ms of CPU per mainnet block to write a chunk, 1 thread ≈ 3.8 ms, in no more wall time
 * (docs/benchmark-history.md, step 29).
 */
export function ingestDbThreads(workers: number | undefined): number {
  return Math.max(1, availableParallelism() - (workers ?? defaultWorkers()))
}
