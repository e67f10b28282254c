import { Command, InvalidArgumentError } from 'commander'
import { readDatasetMeta, type DatasetMeta } from '../chunks/layout.js'
import { DEFAULT_COMPACT_FANOUT, DEFAULT_COMPACT_GRACE_MS } from '../compact/defaults.js'
import { DEFAULT_CHUNK_BLOCKS } from '../ingest/defaults.js'
import { log } from '../log.js'
import { isS3Url, joinKey, parseS3Url } from '../storage/s3-url.js'
import { int, opt } from './options.js'

/*
 * `compact`: merge a dataset's small chunks (docs/ingest.md, "Compaction"), holding the dataset's
 * ingest lock or S3 lease, so it never runs beside an ingest (an ingest with --follow compacts by
 * itself). Also the flags of compaction that `ingest` shares.
 */

export const compactFanoutOption = () =>
  opt('--compact-fanout <n>', 'chunks of one tier merged into one (the fresh end of a dataset then holds at most (n−1) chunks per tier; docs/ingest.md)', 'BLOCK_ARCHIVE_COMPACT_FANOUT', int(2), DEFAULT_COMPACT_FANOUT)
export const compactGraceOption = () =>
  opt(
    '--compact-grace-ms <ms>',
    'chunks replaced by a merged chunk are deleted this long after it was published; must exceed the router\'s --relist-ms + a worker\'s fetch of the merged chunk + its drop grace (2 heartbeats) + the longest query',
    'BLOCK_ARCHIVE_COMPACT_GRACE_MS',
    int(0),
    DEFAULT_COMPACT_GRACE_MS,
  )
export const metricsPortOption = () => opt('--metrics-port <port>', 'serve GET /metrics (compaction counts and durations) on 127.0.0.1:<port>', 'BLOCK_ARCHIVE_METRICS_PORT', int(1))

async function datasetMetaAt(out: string): Promise<DatasetMeta | undefined> {
  if (!isS3Url(out)) return readDatasetMeta(out)
  const loc = parseS3Url(out)
  const { getText } = await import('../storage/s3.js')
  const text = await getText(loc.bucket, joinKey(loc.prefix, 'dataset.json'))
  return text == null ? undefined : JSON.parse(text)
}

export function registerCompact(program: Command): void {
  program
    .command('compact')
    .description('merge the small chunks of a dataset (folder or s3://) into chunks of the normal size, and delete the chunks merged once their grace period has passed; takes the ingest lock, so not beside a running ingest (ingest --follow compacts by itself)')
    .addOption(opt('--out <folder|s3://bucket/prefix>', 'the dataset (as given to ingest --out)', 'BLOCK_ARCHIVE_OUT').makeOptionMandatory())
    .addOption(opt('--chunk-blocks <n>', 'a merged chunk holds at most this many blocks (as ingest --chunk-blocks)', 'BLOCK_ARCHIVE_CHUNK_BLOCKS', int(1), DEFAULT_CHUNK_BLOCKS))
    .addOption(opt('--chunk-mb <n>', 'a merged chunk\'s rows stay under this many MiB as NDJSON (as ingest --chunk-mb)', 'BLOCK_ARCHIVE_CHUNK_MB', int(1), 256))
    .addOption(compactFanoutOption())
    .addOption(compactGraceOption())
    .addOption(opt('--follow', 'keep compacting (a pass every --interval-ms) until stopped, instead of one pass', 'BLOCK_ARCHIVE_COMPACT_FOLLOW').default(false))
    .addOption(opt('--interval-ms <ms>', 'with --follow: time between passes', 'BLOCK_ARCHIVE_COMPACT_INTERVAL_MS', int(10), 2000))
    .addOption(metricsPortOption())
    .addOption(opt('--db-threads <n>', 'DuckDB threads for writing merged chunks', 'BLOCK_ARCHIVE_DB_THREADS', int(1)))
    .addOption(opt('--db-memory <size>', 'DuckDB memory limit, e.g. 2GB', 'BLOCK_ARCHIVE_DB_MEMORY'))
    .action(async (o) => {
      if (isS3Url(o.out) && !/^s3:\/\/[^/]+/i.test(o.out)) throw new InvalidArgumentError(`--out ${o.out}: expected s3://bucket or s3://bucket/prefix`)
      const meta = await datasetMetaAt(o.out)
      if (!meta) throw new InvalidArgumentError(`${o.out} is not a dataset (no dataset.json)`)
      const [{ configureDb }, { serveMetrics }, { ingestTarget }, { Compactor }, { familyByName }] = await Promise.all([
        import('../db.js'),
        import('../compact/metrics.js'),
        import('../ingest/target.js'),
        import('../compact/compactor.js'),
        import('../families/index.js'),
      ])
      configureDb({ threads: o.dbThreads, memoryLimit: o.dbMemory })
      if (o.metricsPort) await serveMetrics(o.metricsPort)
      const target = ingestTarget(o.out)
      await target.open(meta)
      let leaseLost: (e: Error) => void = () => undefined
      const compactor = new Compactor(target, familyByName(meta.family), {
        onLeaseLost: (e) => leaseLost(e),
        dataset: meta.name,
        chunkBlocks: o.chunkBlocks,
        chunkBytes: o.chunkMb * 1024 * 1024,
        fanout: o.compactFanout,
        graceMs: o.compactGraceMs,
        intervalMs: o.intervalMs,
        all: true,
        // ranges ingests are writing (or stopped writing before their end): their chunks stay as they are
        excluded: () => target.claims(),
      })
      try {
        if (o.follow) {
          compactor.start()
          await new Promise<void>((resolve, reject) => {
            process.once('SIGINT', resolve)
            process.once('SIGTERM', resolve)
            leaseLost = reject
          })
          log.warn('stopping after the merge in progress')
          await compactor.stop()
        } else {
          const r = await compactor.catchUp()
          console.log(
            `compacted ${meta.name}: ${r.merged} merged chunks written, ${r.removed} superseded chunks deleted; ` +
              `${r.open} chunks still open to merging` +
              (r.waiting ? `, ${r.waiting} superseded chunks wait for their grace period (--compact-grace-ms) and go at a later run` : ''),
          )
        }
      } finally {
        await target.close()
      }
    })
}
