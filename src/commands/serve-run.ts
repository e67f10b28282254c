import path from 'node:path'
import { InvalidArgumentError, type OptionValues } from 'commander'
import { configureDb } from '../db.js'
import { log } from '../log.js'
import type { QueryBudgets } from '../query/types.js'
import type { RouterAccessOptions } from '../server/router-http.js'
import type { ArchiveStorage } from '../server/storage.js'
import type { ChunkCache } from '../storage/chunk-cache.js'
import { checkDataFolders } from '../storage/data-folders.js'
import { onSignal } from './serving-thread.js'
import { defaultCacheFolder, FORMS_DB_MEMORY, gb, workerDbThreads, type AccessFlags, type StorageFlags, type WorkerFlags } from './serve.js'

/*
 * What `serve`, `router` and `worker` do once their flags are read (src/commands/serve.ts declares
 * the flags); loaded only when one of them runs, so `--help` and `query` start without the servers.
 * The worker's modules (the query engine, DuckDB, the chunk cache) are loaded by the commands that
 * run workers: a `router` starts without them. `serve` and `router` check their flags and that their
 * `--data` folders exist before they load the servers (fastify, DuckDB, the query engine), so a
 * mistyped folder is said at once.
 */

/** `--data` roots and `--dataset name=URL` entries; at least one is needed. */
function storageLocations(o: StorageFlags) {
  const datasets = (o.dataset ?? []).map((entry) => {
    const eq = entry.indexOf('=')
    if (eq <= 0 || eq === entry.length - 1) throw new InvalidArgumentError(`--dataset expects NAME=URL, got "${entry}"`)
    return { name: entry.slice(0, eq), url: entry.slice(eq + 1) }
  })
  if (!o.data?.length && !datasets.length) throw new InvalidArgumentError('give where the datasets are: --data <folder|s3://bucket/prefix> and/or --dataset NAME=URL')
  return { roots: o.data, datasets }
}

/** The storage modules, loaded once the flags are checked. */
async function storageOf(o: StorageFlags): Promise<(cache?: ChunkCache) => ArchiveStorage> {
  const locations = storageLocations(o)
  await checkDataFolders(o.data ?? [])
  const { ArchiveStorage } = await import('../server/storage.js')
  return (cache) => new ArchiveStorage({ ...locations, cache })
}

/** The secret from --ticket-secret-file, else BLOCK_ARCHIVE_TICKET_SECRET. */
async function ticketSecret(o: { ticketSecretFile?: string }): Promise<Buffer | undefined> {
  const { loadTicketSecret } = await import('../server/auth.js')
  return loadTicketSecret({ file: o.ticketSecretFile, value: process.env.BLOCK_ARCHIVE_TICKET_SECRET })
}

/**
 * `serve` may make up the secret (its router and workers share the process); a separate router may
 * not: its workers must have the same one.
 */
async function accessSettings(o: AccessFlags, mayGenerateSecret: boolean): Promise<RouterAccessOptions> {
  const { randomSecret } = await import('../server/auth.js')
  let secret = await ticketSecret(o)
  if (!secret && o.keysFile && mayGenerateSecret) {
    secret = randomSecret()
    log.info('access: the workers of this process share a random ticket secret (workers started elsewhere cannot serve this router: give --ticket-secret-file)')
  }
  if (o.keysFile && !secret) {
    throw new InvalidArgumentError('--keys-file needs the ticket secret that the router and its workers share: --ticket-secret-file <path> or BLOCK_ARCHIVE_TICKET_SECRET')
  }
  return {
    keysFile: o.keysFile,
    ticketSecret: secret,
    ticketTtlS: o.ticketTtlS,
    rateLimit: o.rateLimit,
    rateBurst: o.rateBurst,
    keyConcurrency: o.keyConcurrency,
  }
}

/** DuckDB's resources for the workers of this process, from the flags and where they keep their cache. */
function workerSettings(o: WorkerFlags, spillFolder: (cache: string) => string, workers = 1) {
  configureDb({
    threads: o.dbThreads ?? workerDbThreads(o.concurrency * workers),
    memoryLimit: o.dbMemory ?? (o.cache && o.localForms === 'duckdb' ? FORMS_DB_MEMORY : undefined),
    spillFolder: o.cache ? spillFolder(o.cache) : undefined,
    spillLimit: o.dbSpill,
  })
  const budgets: Partial<QueryBudgets> = {}
  if (o.maxResponseBytes !== undefined) budgets.sizeBytes = o.maxResponseBytes
  if (o.maxResponseMs !== undefined) budgets.timeMs = o.maxResponseMs
  if (o.sliceMb !== undefined) budgets.sliceBytes = o.sliceMb * 1024 * 1024
  if (o.heavySliceMb !== undefined) budgets.heavySliceBytes = o.heavySliceMb * 1024 * 1024
  return { budgets, bodyLimit: o.bodyLimit, concurrency: o.concurrency, queue: o.queue, queueTimeoutMs: o.queueTimeoutMs, compression: o.compression }
}

/** Stop cleanly on Ctrl-C / SIGTERM. */
export function onShutdown(stop: () => Promise<void>): void {
  let stopping = false
  const handler = (signal: string) => {
    if (stopping) process.exit(1)
    stopping = true
    log.info({ signal }, 'shutting down')
    stop().then(
      () => process.exit(0),
      (e) => {
        log.error({ err: e }, 'shutdown failed')
        process.exit(1)
      },
    )
  }
  onSignal(handler)
}

/** The parsed flags (commander's values; the declared ones typed). */
type Flags = StorageFlags & AccessFlags & WorkerFlags & OptionValues

/** The router's flags (src/commands/serve.ts, `routerOptions` and `--heartbeat-ms`), as `serve` and `router` take them. */
function routerSettings(o: Flags) {
  return {
    replication: o.replication as number,
    heartbeatMs: o.heartbeatMs as number,
    missedHeartbeats: o.missedHeartbeats as number,
    relistMs: o.relistMs as number,
    headWatch: { folderMs: o.headPollMs as number, s3Ms: o.headPollS3Ms as number },
    groupChunks: o.groupChunks as number,
  }
}

export async function runServe(o: Flags): Promise<void> {
  const storageAt = await storageOf(o)
  const access = await accessSettings(o, true)
  const [{ startCluster }, { ChunkCache, spillFolder }] = await Promise.all([import('../server/cluster.js'), import('../storage/chunk-cache.js')])
  const cache = (o.cache ??= defaultCacheFolder(o))
  const storage = storageAt()
  const cluster = await startCluster({
    storage,
    workerStorage: (i) => storageAt(new ChunkCache({ root: path.join(cache, `worker-${i}`), limitBytes: gb(o.cacheGb), label: `worker-${i}`, localForms: o.localForms === 'duckdb', formsAfterReads: o.formsAfter })),
    host: o.host,
    port: o.port,
    workers: o.workers,
    ...routerSettings(o),
    ...workerSettings(o, spillFolder, o.workers),
    access,
  })
  console.log(`router: ${cluster.router.url}`)
  for (const w of cluster.workers) console.log(`worker: ${w.url}`)
  for (const [name, url] of cluster.datasets) console.log(`dataset ${name}: ${url}`)
  if (cluster.datasets.size === 0) console.log(`no dataset in ${storage.location} yet; new ones are picked up while running`)
  onShutdown(() => cluster.stop())
}

export async function runRouter(o: Flags): Promise<void> {
  const storageAt = await storageOf(o)
  const access = await accessSettings(o, false)
  const { RouterServer } = await import('../server/router-http.js')
  const server = new RouterServer({
    storage: storageAt(),
    ...routerSettings(o),
    access,
  })
  await server.start(o.host, o.port)
  console.log(`router: ${server.url}`)
  for (const name of server.state.datasetNames()) console.log(`dataset ${name}: ${server.datasetUrl(name)}`)
  onShutdown(() => server.stop())
}

export async function runWorker(o: Flags): Promise<void> {
  const [{ WorkerServer }, { ChunkCache, spillFolder }, { ArchiveStorage }] = await Promise.all([
    import('../server/worker-http.js'),
    import('../storage/chunk-cache.js'),
    import('../server/storage.js'),
  ])
  const server = new WorkerServer({
    storage: new ArchiveStorage({ roots: o.data, cache: o.cache ? new ChunkCache({ root: o.cache, limitBytes: gb(o.cacheGb), label: o.id ?? 'worker', localForms: o.localForms === 'duckdb', formsAfterReads: o.formsAfter }) : undefined }),
    routerUrl: o.router.replace(/\/+$/, ''),
    id: o.id,
    publicUrl: o.publicUrl,
    heartbeatMs: o.heartbeatMs,
    dropGraceMs: o.heartbeatMs * 2,
    ...workerSettings(o, spillFolder),
    ticketSecret: await ticketSecret(o),
  })
  await server.start(o.host, o.port)
  console.log(`worker: ${server.url} (id ${server.id}, router ${o.router})`)
  onShutdown(() => server.stop())
}
