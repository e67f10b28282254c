import { Command, InvalidArgumentError, Option } from 'commander'
import { createHash } from 'node:crypto'
import os from 'node:os'
import path from 'node:path'
import { DEFAULT_FORMS_AFTER_READS, DEFAULT_GROUP_CHUNKS, DEFAULT_HEAD_WATCH, DEFAULT_ROUTER_OPTIONS, DEFAULT_TICKET_TTL_S, DEFAULT_WORKER_LIMITS } from '../server/defaults.js'
import { COMPRESSION_MODES, type CompressionMode } from '../server/encoding.js'
import { choice, int, opt } from './options.js'

/*
 * `serve` (router + workers in one process), `router`, `worker` (separate processes) and `query`
 * (the client). Every flag also reads an environment variable (shown in --help).
 */



/** Repeatable flag; its environment variable takes a comma-separated list. */
const collect = (value: string, previous: string[] | undefined) => [...(previous ?? []), ...value.split(',').map((v) => v.trim()).filter(Boolean)]

const dataOption = () =>
  opt('--data <url>', 'where datasets live, repeatable: a folder or s3://bucket/prefix holding one dataset (has dataset.json) or dataset folders; new ones are picked up', 'BLOCK_ARCHIVE_DATA', collect)
const datasetOption = () =>
  opt('--dataset <name=url>', 'serve the dataset at this folder or s3:// URL under this name, repeatable', 'BLOCK_ARCHIVE_DATASETS', collect)

export interface StorageFlags {
  data?: string[]
  dataset?: string[]
}


const localFormsOption = () =>
  choice('--local-forms <mode>', 'duckdb: copy chunks queries read again (--forms-after) into a DuckDB file in the cache folder (reads 1.5–3× faster, 4–6× the Parquet bytes, within --cache-gb); off: read the Parquet files only', 'BLOCK_ARCHIVE_LOCAL_FORMS', ['duckdb', 'off'], 'duckdb')
const formsAfterOption = () =>
  opt('--forms-after <reads>', 'build a chunk\'s local form once queries have read it from Parquet this many times (reads a minute apart or more); 0: every chunk a worker holds, as soon as it holds it', 'BLOCK_ARCHIVE_FORMS_AFTER', int(0), DEFAULT_FORMS_AFTER_READS)
const cacheGbOption = () => opt('--cache-gb <n>', 'keep the cache under this many GB (default: no limit)', 'BLOCK_ARCHIVE_CACHE_GB', positiveNumber)

/** A size as DuckDB's settings take it: `512MB`, `1.5GB`, `4GiB`. */
function duckdbSize(v: string): string {
  if (!/^\s*\d+(\.\d+)?\s*([KMGT]i?B|B)\s*$/i.test(v)) throw new InvalidArgumentError(`expected a size such as 512MB or 4GB, got "${v}"`)
  return v.trim()
}

function positiveNumber(v: string): number {
  const n = Number(v)
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`expected a positive number, got "${v}"`)
  return n
}
export const hostOption = () => opt('--host <host>', 'interface to listen on', 'BLOCK_ARCHIVE_HOST', undefined, '127.0.0.1')
const heartbeatOption = () => opt('--heartbeat-ms <ms>', 'worker ping interval', 'BLOCK_ARCHIVE_HEARTBEAT_MS', int(50), DEFAULT_ROUTER_OPTIONS.heartbeatMs)

function nonNegativeNumber(v: string): number {
  const n = Number(v)
  if (v.trim() === '' || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`expected a number ≥ 0, got "${v}"`)
  return n
}

const ticketSecretOption = () =>
  opt('--ticket-secret-file <path>', 'file holding the secret (at least 16 bytes) that router and workers share to sign tickets and worker pings; or the secret itself in BLOCK_ARCHIVE_TICKET_SECRET', 'BLOCK_ARCHIVE_TICKET_SECRET_FILE')

/** Access control and limits at the router (docs/serving.md, "Access control and limits"); all off by default. */
function accessOptions(cmd: Command): Command {
  return cmd
    .addOption(opt('--keys-file <path>', 'turn access control on: API keys, one per line `<key> [name] [rps=N] [burst=N] [concurrency=N] [revoked]` (or JSON), re-read when it changes', 'BLOCK_ARCHIVE_KEYS_FILE'))
    .addOption(ticketSecretOption())
    .addOption(opt('--ticket-ttl-s <s>', 'lifetime of the tickets in the worker URLs the router hands out', 'BLOCK_ARCHIVE_TICKET_TTL_S', int(1), DEFAULT_TICKET_TTL_S))
    .addOption(opt('--rate-limit <n>', 'requests/s per API key (per client address without --keys-file) to the height and worker routes; 0 = no limit', 'BLOCK_ARCHIVE_RATE_LIMIT', nonNegativeNumber, 0))
    .addOption(opt('--rate-burst <n>', 'requests a client may make at once before --rate-limit applies (default: two seconds worth)', 'BLOCK_ARCHIVE_RATE_BURST', int(1)))
    .addOption(opt('--key-concurrency <n>', 'queries at once per API key on each worker (needs tickets); 0 = no limit', 'BLOCK_ARCHIVE_KEY_CONCURRENCY', int(0), 0))
}

export interface AccessFlags {
  keysFile?: string
  ticketSecretFile?: string
  ticketTtlS: number
  rateLimit: number
  rateBurst?: number
  keyConcurrency: number
}


function routerOptions(cmd: Command): Command {
  return cmd
    .addOption(opt('--replication <n>', 'workers holding each chunk', 'BLOCK_ARCHIVE_REPLICATION', int(1), DEFAULT_ROUTER_OPTIONS.replication))
    .addOption(opt('--missed-heartbeats <n>', 'a worker silent for this many intervals is not routed to', 'BLOCK_ARCHIVE_MISSED_HEARTBEATS', int(1), DEFAULT_ROUTER_OPTIONS.missedHeartbeats))
    .addOption(opt('--relist-ms <ms>', 'how often storage is listed for new chunks (new chunks of a following ingest come sooner through its head.json: --head-poll-ms)', 'BLOCK_ARCHIVE_RELIST_MS', int(100), DEFAULT_ROUTER_OPTIONS.relistMs))
    .addOption(opt('--head-poll-ms <ms>', 'how often the head.json of a dataset in a folder is checked for new chunks (a stat; 0 = only when an ingest POSTs /notify)', 'BLOCK_ARCHIVE_HEAD_POLL_MS', int(0), DEFAULT_HEAD_WATCH.folderMs))
    .addOption(opt('--head-poll-s3-ms <ms>', 'how often the head.json of a dataset in object storage is checked (a GET with If-None-Match; 0 = only when an ingest POSTs /notify)', 'BLOCK_ARCHIVE_HEAD_POLL_S3_MS', int(0), DEFAULT_HEAD_WATCH.s3Ms))
    .addOption(opt('--group-chunks <n>', 'consecutive chunks assigned to the same workers, on average (1: each chunk on its own; docs/serving.md, "Chunk assignment")', 'BLOCK_ARCHIVE_GROUP_CHUNKS', int(1), DEFAULT_GROUP_CHUNKS))
}

function workerOptions(cmd: Command): Command {
  return cmd
    .addOption(opt('--max-response-bytes <n>', 'stop an answer at a block boundary after this much JSON (default 20 MiB)', 'BLOCK_ARCHIVE_MAX_RESPONSE_BYTES', int(1)))
    .addOption(opt('--max-response-ms <ms>', 'stop an answer at a block boundary this long after the first chunk (default 2000)', 'BLOCK_ARCHIVE_MAX_RESPONSE_MS', int(1)))
    .addOption(opt('--slice-mb <n>', 'largest estimated JSON read in one DuckDB statement: bigger re-reads chunks less for big answers, smaller bounds the memory per query (default 24)', 'BLOCK_ARCHIVE_SLICE_MB', int(1)))
    .addOption(opt('--heavy-slice-mb <n>', 'slices estimated above this are read one at a time per worker process, bounding DuckDB memory under concurrent heavy queries (default 4)', 'BLOCK_ARCHIVE_HEAVY_SLICE_MB', int(0)))
    .addOption(opt('--body-limit <bytes>', 'largest accepted query body', 'BLOCK_ARCHIVE_BODY_LIMIT', int(1), DEFAULT_WORKER_LIMITS.bodyLimit))
    .addOption(opt('--concurrency <n>', 'queries executed at once per worker', 'BLOCK_ARCHIVE_CONCURRENCY', int(1), DEFAULT_WORKER_LIMITS.concurrency))
    .addOption(opt('--queue <n>', 'queries waiting per worker before answering 503', 'BLOCK_ARCHIVE_QUEUE', int(0), DEFAULT_WORKER_LIMITS.queue))
    .addOption(opt('--queue-timeout-ms <ms>', 'longest wait for an execution slot before answering 503', 'BLOCK_ARCHIVE_QUEUE_TIMEOUT_MS', int(1), DEFAULT_WORKER_LIMITS.queueTimeoutMs))
    .addOption(
      opt('--compression <mode>', 'answer compression (gzip/br as the client accepts): auto = not for clients on this machine (loopback, not forwarded by a proxy), always, never', 'BLOCK_ARCHIVE_COMPRESSION', undefined, 'auto')
        .choices(COMPRESSION_MODES),
    )
    .addOption(opt('--db-threads <n>', 'DuckDB threads (default: the cores left beside the queries that run at once, at least 1)', 'BLOCK_ARCHIVE_DB_THREADS', int(1)))
    .addOption(opt('--db-memory <size>', `DuckDB memory limit, e.g. 2GB (default: ${FORMS_DB_MEMORY} with local forms, else 80% of RAM)`, 'BLOCK_ARCHIVE_DB_MEMORY', duckdbSize))
    .addOption(opt('--db-spill <size>', 'most DuckDB may write into its spill folder (.duckdb-spill-<pid> in the cache folder, else .tmp in the working folder) when what it works on does not fit in --db-memory', 'BLOCK_ARCHIVE_DB_SPILL', duckdbSize, DEFAULT_DB_SPILL))
}

export interface WorkerFlags {
  sliceMb?: number
  heavySliceMb?: number
  maxResponseBytes?: number
  maxResponseMs?: number
  bodyLimit: number
  concurrency: number
  queue: number
  queueTimeoutMs: number
  dbThreads?: number
  dbMemory?: string
  dbSpill: string
  compression: CompressionMode
  /** `worker`: absent without a cache folder; `serve`: always there. */
  cache?: string
  localForms: 'duckdb' | 'off'
  formsAfter: number
}

/*
 * DuckDB's memory limit of a process whose workers keep local forms. DuckDB keeps the pages of the
 * forms it wrote or read in its buffer pool up to its limit, by default 80 % of the machine's RAM
 * (peak RSS 1.3 GB under `bench memory`); pages evicted under a lower limit are read again from the
 * file, from the OS page cache. Under `bench memory` (16 clients of 20 MiB answers) the worker's
 * peak RSS was 517–525 MB with 160MB and 491–499 MB with 128MB, for as many answers (165–204 in
 * 20 s either way); forms build 18 % slower (10 bench chunks: 67 → 79 s). Before the block-ordered
 * copies and the bounded copy sorts, 128MB cut some answers off (docs/serving.md, "Local forms", "Memory").
 * Chunks without a form (most of them: forms are built for chunks read again) are read from Parquet,
 * which needs more: a full sync of all transactions and logs of the 2,000-block bench dataset with 4
 * requests in flight ran out of 128MB. Under `bench memory` on a loaded machine (load ≈ 10), peak
 * RSS from Parquet / from forms: 368 / 465 MB at 128MB (Parquet answers broke off), 404 / 530 at
 * 192MB, 465 / 582 at 256MB, and the MB/s from Parquet 13, 30 and 17–27.
 */
export const FORMS_DB_MEMORY = '192MB'
const DEFAULT_DB_SPILL = '4GB'

/**
 * DuckDB threads of a process whose workers run `statementsAtOnce` statements at once (their
 * `--concurrency` together). Each statement runs on its calling thread, and DuckDB's other threads
 * only help on cores that no caller occupies; a caller polls for work while those threads run its
 * statement's last task, and that polling burns a core. On 2 cores, 2 workers at the default
 * concurrency, an all tx+logs sync took 8.7–9.1 CPU s of the workers per pass with 2 DuckDB threads
 * and 7.0–7.2 with 1, at 134 k → 147 k items/s (docs/benchmark-history.md, step 37).
 */
export function workerDbThreads(statementsAtOnce: number): number {
  return Math.max(1, os.availableParallelism() - statementsAtOnce + 1)
}



export function registerServe(program: Command): void {
  const serve = program
    .command('serve')
    .description('run a router and N workers in one process over a chunk folder')
    .addOption(dataOption())
    .addOption(datasetOption())
    .addOption(hostOption())
    .addOption(opt('--port <n>', 'router port (0 = any free port); workers take free ports', 'BLOCK_ARCHIVE_PORT', int(0), 8080))
    .addOption(opt('--workers <n>', 'number of workers', 'BLOCK_ARCHIVE_WORKERS', int(1), 2))
    .addOption(opt('--cache <folder>', `where workers keep chunks of datasets in object storage and their local forms, one sub-folder per worker (default: a folder of its own for these --data/--dataset locations under ${CACHE_PARENT})`, 'BLOCK_ARCHIVE_CACHE'))
    .addOption(cacheGbOption())
    .addOption(localFormsOption())
    .addOption(formsAfterOption())
    .addOption(heartbeatOption())
  routerOptions(serve)
  accessOptions(serve)
  workerOptions(serve)
  serve.action(async (o) => (await import('./serve-run.js')).runServe(o))

  const router = program
    .command('router')
    .description('run the router alone; workers register with `block-archive worker --router <url>`')
    .addOption(dataOption())
    .addOption(datasetOption())
    .addOption(hostOption())
    .addOption(opt('--port <n>', 'port (0 = any free port)', 'BLOCK_ARCHIVE_PORT', int(0), 8080))
    .addOption(heartbeatOption())
  routerOptions(router)
  accessOptions(router)
  router.action(async (o) => (await import('./serve-run.js')).runRouter(o))

  const worker = program
    .command('worker')
    .description('run one worker that registers with a router and serves the chunks it is assigned')
    .addOption(opt('--router <url>', 'router base URL, e.g. http://127.0.0.1:8080; datasets and their storage URLs come from it', 'BLOCK_ARCHIVE_ROUTER').makeOptionMandatory())
    .addOption(opt('--cache <folder>', 'where chunks of datasets in object storage are downloaded (kept across restarts); datasets in a folder on this machine are read in place', 'BLOCK_ARCHIVE_CACHE'))
    .addOption(opt('--data <url>', 'read datasets from here instead of the locations the router announces (e.g. the same folder mounted at another path), repeatable', 'BLOCK_ARCHIVE_DATA', collect))
    .addOption(cacheGbOption())
    .addOption(localFormsOption())
    .addOption(formsAfterOption())
    .addOption(hostOption())
    .addOption(opt('--port <n>', 'port (0 = any free port)', 'BLOCK_ARCHIVE_WORKER_PORT', int(0), 0))
    .addOption(opt('--public-url <url>', 'URL clients reach this worker at (default: the listening address)', 'BLOCK_ARCHIVE_PUBLIC_URL'))
    .addOption(opt('--id <id>', 'worker id (default: its public URL)', 'BLOCK_ARCHIVE_WORKER_ID'))
    .addOption(heartbeatOption())
    .addOption(ticketSecretOption())
  workerOptions(worker)
  worker.action(async (o) => (await import('./serve-run.js')).runWorker(o))

  program
    .command('query')
    .description('run a query over a block range through a router; prints one JSON block per line (or writes --out as NDJSON, JSON, Parquet or CSV), progress on stderr')
    .argument('<baseUrl>', 'dataset base URL, e.g. http://127.0.0.1:8080/datasets/ethereum')
    .argument('[json]', 'the query as inline JSON (--from/--to override its fromBlock/toBlock)')
    .addOption(new Option('--from <n>', "first block (default: the query's fromBlock, else 0)").argParser(int(0)))
    .addOption(new Option('--to <n>', "last block (default: the query's toBlock, else the dataset height)").argParser(int(0)))
    .option('--query <file>', 'read the query from a JSON file')
    .addOption(new Option('--parallel <n>', 'requests in flight at once (output stays in order)').argParser(int(1)).default(1))
    .option('--follow', 'keep waiting for new blocks instead of stopping at the height', false)
    .addOption(new Option('--max-attempts <n>', 'tries per request on retryable errors').argParser(int(1)).default(8))
    .addOption(new Option('--api-key <key>', 'API key of an archive with access control (sent to the router as Authorization: Bearer)').env('BLOCK_ARCHIVE_API_KEY'))
    .option('-o, --out <file>', 'write the blocks into this file instead of stdout (an existing file is replaced, unless --resume; NDJSON is written as it comes, json, parquet and csv are moved into place when done)')
    .addOption(
      new Option('--format <format>', 'ndjson (one block per line), json (one array), parquet or csv (one row per block: header fields as columns, item lists nested, as JSON text in csv; written by DuckDB, --out only) (default: from the --out extension, else ndjson)').choices([
        'ndjson',
        'json',
        'parquet',
        'csv',
      ]),
    )
    .option('--resume', 'continue an interrupted NDJSON --out file after its last complete block (a partial last line is dropped); a missing file starts anew', false)
    .option('-q, --quiet', 'no progress on stderr (a bar on a terminal, a line per second otherwise)', false)
    .action(async (baseUrl: string, json: string | undefined, o) => {
      if (o.to !== undefined && o.from !== undefined && o.to < o.from) throw new InvalidArgumentError(`--to ${o.to} is below --from ${o.from}`)
      const { runQueryCli } = await import('../client/query-cli.js')
      await runQueryCli({
        baseUrl,
        from: o.from,
        to: o.to,
        inline: json,
        file: o.query,
        parallel: o.parallel,
        follow: o.follow,
        maxAttempts: o.maxAttempts,
        apiKey: o.apiKey,
        quiet: o.quiet,
        out: o.out,
        format: o.format,
        resume: o.resume,
      })
    })
}

const CACHE_PARENT = path.join(os.tmpdir(), 'block-archive-cache')

/**
 * `serve`'s cache folder without --cache: one per archive, named after its data locations, so two
 * archives on one machine do not share (and lock each other out of) their workers' local forms.
 */
export function defaultCacheFolder(o: StorageFlags): string {
  const where = (url: string) => (/^s3:\/\//.test(url) ? url : path.resolve(url))
  const named = (o.dataset ?? []).map((entry) => entry.replace(/=(.*)$/, (_, url: string) => `=${where(url)}`))
  const locations = [...(o.data ?? []).map(where), ...named].sort()
  const name = path.basename(locations[0] ?? 'archive').replace(/[^\w.-]+/g, '_') || 'archive'
  const hash = createHash('sha256').update(locations.join('\n')).digest('hex').slice(0, 10)
  return path.join(CACHE_PARENT, `${name}-${hash}`)
}

export const gb = (n: number | undefined) => (n === undefined ? undefined : Math.floor(n * 1024 ** 3))
