import { Command, InvalidArgumentError } from 'commander'
import { configureDb } from '../db.js'
import { availableParallelism } from 'node:os'
import { FINALITY_CHOICES, type Finality } from '../ingest/finality.js'
import { DEFAULT_CHUNK_BLOCKS, DEFAULT_MAX_REORG_DEPTH, DEFAULT_POLL_MS, defaultWorkers, runIngest } from '../ingest/loop.js'
import { loadRecordedChain, loadRecordedStarknet, RECORDED_CHAINS, RECORDED_STARKNET_CHAINS, blockList, suggestIngest, type RecordedChainName, type RecordedStarknetChain } from '../ingest/recorded.js'
import { ReplayServer } from '../ingest/replay.js'
import { loadRecordedSubstrate, RECORDED_SUBSTRATE_CHAINS, SubstrateReplayServer, type RecordedSubstrateChain } from '../ingest/substrate/rpc/replay.js'
import { log } from '../log.js'
import { isS3Url } from '../storage/s3.js'
import { choice, int, opt } from './options.js'
import { compactFanoutOption, compactGraceOption, metricsPortOption } from './compact.js'
import { serveMetrics } from '../compact/metrics.js'

/*
 * `ingest` (EVM JSON-RPC → Parquet chunks) and `replay-rpc` (a JSON-RPC node answering from the
 * recorded fixtures). Every flag also reads an environment variable (shown in --help).
 * docs/ingest.md describes them.
 */

function numberList(value: string): number[] {
  const out: number[] = []
  for (const part of value.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part)
    if (!m) throw new InvalidArgumentError(`expected numbers and ranges such as "100,200-210", got "${part}"`)
    const a = Number(m[1])
    const b = m[2] != null ? Number(m[2]) : a
    if (b < a) throw new InvalidArgumentError(`range ${part} goes down`)
    for (let n = a; n <= b; n++) out.push(n)
  }
  if (!out.length) throw new InvalidArgumentError('empty block list')
  return out
}

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
  program
    .command('ingest')
    .description('read blocks from an EVM, Starknet or Substrate node (JSON-RPC; Substrate also Sidecar or decoded dumps) and write immutable Parquet chunks ({top}/{first}-{last}-{hash}/*.parquet); resumes after the last complete chunk')
    .addOption(choice('--family <family>', 'chain family of the node', 'BLOCK_ARCHIVE_FAMILY', ['evm', 'starknet', 'substrate'], 'evm'))
    .addOption(opt('--rpc <url>', 'JSON-RPC endpoint of the node (http/https; ws/wss for substrate)', 'BLOCK_ARCHIVE_RPC'))
    .addOption(opt('--sidecar <url>', 'substrate: read decoded blocks from a Substrate API Sidecar instead of the node (GET /blocks/{n}); see docs/ingest.md for what it cannot fill', 'BLOCK_ARCHIVE_SIDECAR'))
    .addOption(opt('--decoded-dir <folder>', 'substrate: read blocks decoded by polkadot-api, as JSON files (<anything>.json[.gz], one block each, numbered by their content) from this folder instead of the node; see docs/ingest.md for what it cannot fill', 'BLOCK_ARCHIVE_DECODED_DIR'))
    .addOption(opt('--dataset <name>', 'dataset name, written to dataset.json at the root of --out', 'BLOCK_ARCHIVE_DATASET').makeOptionMandatory())
    .addOption(opt('--out <folder|s3://bucket/prefix>', 'dataset folder (created if missing) or object-storage prefix (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; see docs/ingest.md)', 'BLOCK_ARCHIVE_OUT').makeOptionMandatory())
    .addOption(opt('--from <n>', 'first block (default: after the last chunk in --out, else 0)', 'BLOCK_ARCHIVE_FROM', int(0)))
    .addOption(opt('--to <n>', 'last block; waits for the head (up to the --finality) to reach it (default: that head at the time it is reached)', 'BLOCK_ARCHIVE_TO', int(0)))
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
    .addOption(choice('--receipts <how>', 'auto: eth_getBlockReceipts, eth_getTransactionReceipt per transaction if the node lacks it; block: eth_getBlockReceipts only; transaction: per transaction', 'BLOCK_ARCHIVE_RECEIPTS', ['auto', 'block', 'transaction'], 'auto'))
    .addOption(choice('--traces <how>', 'traces table: none; EVM: trace_block (parity/erigon/reth/nethermind) or callTracer (debug_traceBlockByNumber, geth); Starknet: starknet (starknet_traceBlockTransactions)', 'BLOCK_ARCHIVE_TRACES', ['none', 'trace_block', 'callTracer', 'starknet'], 'none'))
    .addOption(choice('--state-diffs <how>', 'statediffs table: none, replay (trace_replayBlockTransactions stateDiff) or prestateTracer (debug_traceBlockByNumber diffMode)', 'BLOCK_ARCHIVE_STATE_DIFFS', ['none', 'replay', 'prestateTracer'], 'none'))
    .addOption(opt('--state-updates', 'Starknet: state_updates and storage_diffs tables (starknet_getStateUpdate)', 'BLOCK_ARCHIVE_STATE_UPDATES').default(false))
    .addOption(choice('--missing-receipts <what>', 'a transaction the node has no receipt for (early Cronos): error stops, null stores it without receipt fields and logs', 'BLOCK_ARCHIVE_MISSING_RECEIPTS', ['error', 'null'], 'error'))
    .addOption(choice('--normalizer <how>', 'EVM blocks, transactions and logs: sql spools the raw RPC answers to disk and normalises them in DuckDB when the chunk closes; js normalises each block in the fetch workers (traces and state diffs always go that way, and with them the whole block)', 'BLOCK_ARCHIVE_NORMALIZER', ['sql', 'js'], 'sql'))
    .addOption(opt('--batch-size <n>', 'blocks per fetch = calls per JSON-RPC batch request (1 = no batching)', 'BLOCK_ARCHIVE_BATCH_SIZE', int(1), 20))
    .addOption(opt('--concurrency <n>', 'fetches and HTTP requests in flight at once', 'BLOCK_ARCHIVE_INGEST_CONCURRENCY', int(1), 4))
    .addOption(opt('--workers <n>', 'worker threads that fetch, parse and normalise blocks (0: the main thread does it; default: cores − 1, 1 to 4)', 'BLOCK_ARCHIVE_INGEST_WORKERS', int(0)))
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
      const starknet = o.family === 'starknet'
      if (o.family === 'substrate' ? [o.rpc, o.sidecar, o.decodedDir].filter((x) => x).length !== 1 : !o.rpc) {
        throw new InvalidArgumentError(o.family === 'substrate'
          ? 'a substrate ingest reads one of: the node (--rpc ws://…|http://…), a Sidecar (--sidecar <url>) or blocks decoded by polkadot-api (--decoded-dir <folder>)'
          : '--rpc <url> is required')
      }
      if (o.family !== 'substrate' && o.sidecar) throw new InvalidArgumentError('--sidecar is for --family substrate')
      if (o.family !== 'substrate' && o.decodedDir) throw new InvalidArgumentError('--decoded-dir is for --family substrate')
      if (o.family === 'substrate' && (o.traces !== 'none' || o.stateDiffs !== 'none' || o.stateUpdates)) throw new InvalidArgumentError('--traces, --state-diffs and --state-updates do not apply to substrate')
      if (starknet && !['none', 'starknet'].includes(o.traces)) throw new InvalidArgumentError(`--traces ${o.traces} is for EVM nodes; a Starknet ingest takes --traces starknet`)
      if (!starknet && o.traces === 'starknet') throw new InvalidArgumentError('--traces starknet needs --family starknet')
      if (starknet && o.stateDiffs !== 'none') throw new InvalidArgumentError('--state-diffs is for EVM nodes; a Starknet ingest takes --state-updates')
      if (!starknet && o.stateUpdates) throw new InvalidArgumentError('--state-updates needs --family starknet')
      configureDb({ threads: o.dbThreads ?? ingestDbThreads(o.workers), memoryLimit: o.dbMemory })
      const ac = abortOnSignal()
      if (o.metricsPort) await serveMetrics(o.metricsPort)
      const r = await runIngest({
        compact: o.compact === 'on' ? { fanout: o.compactFanout, graceMs: o.compactGraceMs } : undefined,
        family: o.family,
        rpc: o.rpc,
        sidecar: o.sidecar,
        decodedDir: o.decodedDir,
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
        ...(starknet
          ? { starknetTraces: o.traces === 'starknet', stateUpdates: o.stateUpdates }
          : { receipts: o.receipts, traces: o.traces, stateDiffs: o.stateDiffs, missingReceipts: o.missingReceipts, normalizer: o.normalizer }),
        batchSize: o.batchSize,
        concurrency: o.concurrency,
        closes: o.closes,
        workers: o.workers,
        attempts: o.attempts,
        backoffMs: o.backoffMs,
        maxBackoffMs: o.maxBackoffMs,
        timeoutMs: o.timeoutMs,
        progress: o.progress,
        signal: ac.signal,
      })
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

  program
    .command('replay-rpc')
    .description('serve recorded node answers (fixtures/) as a JSON-RPC node, for trying and measuring the ingest without a node; prints the ingest commands that fit what it serves')
    .addOption(choice('--chain <name>', 'recorded chain (EVM, Starknet, or Substrate: raw SCALE blocks with their events and metadata)', 'BLOCK_ARCHIVE_REPLAY_CHAIN', [...RECORDED_CHAINS, ...RECORDED_STARKNET_CHAINS, ...RECORDED_SUBSTRATE_CHAINS], 'ethereum'))
    .addOption(opt('--repeat <times>', 'serve the recorded blocks this many times over as one chain (renumbered from --first, hashes re-linked)', 'BLOCK_ARCHIVE_REPLAY_REPEAT', int(1)))
    .addOption(opt('--first <n>', 'with --repeat: number of the first block', 'BLOCK_ARCHIVE_REPLAY_FIRST', int(0), 0))
    .addOption(opt('--only <list>', 'serve only these recorded blocks (e.g. 18500000 for the one with trace_block)', 'BLOCK_ARCHIVE_REPLAY_ONLY', numberList))
    .addOption(opt('--host <host>', 'interface to listen on', 'BLOCK_ARCHIVE_REPLAY_HOST', undefined, '127.0.0.1'))
    .addOption(opt('--port <n>', 'port (0 = any free port)', 'BLOCK_ARCHIVE_REPLAY_PORT', int(0), 8545))
    .action(async (o) => {
      const starknet = (RECORDED_STARKNET_CHAINS as readonly string[]).includes(o.chain)
      const substrate = (RECORDED_SUBSTRATE_CHAINS as readonly string[]).includes(o.chain)
      if ((starknet || substrate) && o.repeat) throw new InvalidArgumentError('--repeat serves EVM chains only')
      if (substrate) return replaySubstrate(o.chain, o)
      let recorded = starknet ? loadRecordedStarknet(o.chain as RecordedStarknetChain) : loadRecordedChain(o.chain as RecordedChainName)
      if (o.only) recorded = recorded.filter((r) => o.only.includes(r.number))
      const server = new ReplayServer(recorded, { host: o.host, port: o.port, repeat: o.repeat ? { times: o.repeat, first: o.first } : undefined })
      const url = await server.start()
      console.log(`rpc: ${url}`)
      const numbers = server.numbers()
      const sparse = !o.repeat && numbers.length > 1 && numbers[numbers.length - 1] - numbers[0] + 1 !== numbers.length
      console.log(`blocks: ${o.repeat ? `${server.first}-${server.last}` : blockList(numbers)}${sparse ? ' (only these: other numbers answer null, so ingest them with --blocks)' : ''}`)
      // the ingest commands that fit: every served block with what all of them have; then the blocks some tables were recorded for
      for (const [i, c] of suggestIngest(recorded, o.chain, url, o.repeat ? { first: server.first, last: server.last } : undefined).entries()) {
        console.log(i === 0 ? `ingest: ${c.command}` : `  ${c.what}: ${c.command}`)
      }
      const stop = () => server.close().then(() => process.exit(0))
      process.once('SIGINT', stop)
      process.once('SIGTERM', stop)
    })
}

/** `replay-rpc` for a recorded Substrate chain: serves it and prints the ingest command that fits. */
async function replaySubstrate(chain: RecordedSubstrateChain, o: { only?: number[]; host?: string; port?: number }): Promise<void> {
  const recorded = loadRecordedSubstrate(chain)
  if (o.only) recorded.blocks = recorded.blocks.filter((b) => o.only!.includes(b.number))
  if (recorded.blocks.length === 0) throw new InvalidArgumentError(`--only leaves none of the recorded blocks of ${chain}`)
  const server = new SubstrateReplayServer(recorded, { host: o.host, port: o.port })
  const url = await server.start()
  const blocks = blockList(server.numbers())
  console.log(`rpc: ${url}`)
  console.log(`blocks: ${blocks} (only these: other numbers answer null, so ingest them with --blocks)`)
  console.log(`ingest: npx block-archive ingest --family substrate --rpc ${url} --dataset ${chain} --out data/replay/${chain} --blocks ${blocks}`)
  const stop = () => server.close().then(() => process.exit(0))
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
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
