#!/usr/bin/env node
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { Command, InvalidArgumentError } from 'commander'

/*
 * Benchmark entry: `npm run bench -- <name> [flags]` (or `node dist/bench/run.js <name>`).
 * Each benchmark prints Markdown tables; BENCHMARKS.md says what each one measures. Modules are
 * loaded on demand so that one benchmark's missing dependency does not break the others.
 */

/** The workers' `--compression`: the clients here are on loopback, so `auto` sends plain JSON. */
const COMPRESSION_HELP = 'workers\' --compression: auto (none for these loopback clients), always (gzip/br as a remote client gets it), never'

const int = (v: string) => {
  const n = Number(v)
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError(`expected a non-negative integer, got ${v}`)
  return n
}

const intList = (v: string, prev: number[] | undefined) => [...(prev ?? []), int(v)]

const program = new Command()
program.name('bench').description('block-archive benchmarks (see BENCHMARKS.md)')

program
  .command('generate')
  .description('generate a synthetic mainnet-like dataset by tiling real blocks, and report the write rate')
  .option('--out <dir>', 'dataset folder (default: $TMPDIR/block-archive-bench/generated-<blocks>)')
  .option('--blocks <n>', 'number of blocks', int, 100_000)
  .option('--chunk-blocks <n>', 'blocks per chunk', int, 200)
  .option('--first <n>', 'number of the first block', int, 0)
  .option('--seed <text>', 'seed of the random bytes (same seed → same dataset)', 'block-archive')
  .option('--no-traces', 'leave out the traces table')
  .option('--no-state-diffs', 'leave out the statediffs table')
  .option('--force', 'replace the output folder if it is not empty')
  .action(async (o) => (await import('./generate.js')).runGenerate(o))

program
  .command('sql')
  .description('bare DuckDB SQL latency per query shape on one ~200-block chunk (the engine limit)')
  .option('--runs <n>', 'timed runs per variant', int, 9)
  .option('--threads <n>', 'DuckDB threads', int, 1)
  .option('--shape <name...>', 'only these shapes')
  .action(async (o) => (await import('./sql.js')).runSql(o))

program
  .command('stringify')
  .description('JSON.stringify baseline: MB/s of one core serialising response objects (and DuckDB building the same JSON)')
  .option('--runs <n>', 'timed runs', int, 7)
  .option('--shape <name...>', 'shapes to serialise', ['all tx+logs', 'logs+tx', 'traces by callTo'])
  .action(async (o) => (await import('./stringify.js')).runStringify(o))

program
  .command('ingest')
  .description('ingest throughput stage by stage: normalise RPC JSON, rows → chunk files, Parquet encoding')
  .option('--blocks <n>', 'blocks to ingest', int, 600)
  .option('--chunk-blocks <n>', 'blocks per chunk', int, 200)
  .option('--no-traces', 'blocks, transactions and logs only')
  .option('--replay-blocks <n>', 'blocks for the end-to-end run through replay-rpc + the ingest command (0: skip)', int, 1000)
  .option('--close-blocks <n>', 'blocks of the spooled path\'s chunk close timed statement by statement: normalise, sort, write (0: skip)', int, 200)
  .action(async (o) => (await import('./ingest.js')).runIngest(o))

program
  .command('sync')
  .description('full-range sync through router + worker processes with our client (and the real SDK with --sdk)')
  .option('--blocks <n>', 'dataset size in blocks (generated once, cached)', int, 1000)
  .option('--workers <n>', 'worker processes', int, 2)
  .option('--shape <name...>', 'queries', ['logs+tx', 'logs, no match', 'all tx+logs'])
  .option('--parallel <n...>', 'requests in flight for our client', intList)
  .option('--sdk', 'also sync with @subsquid/evm-processor 1.27.3')
  .option('--compression <mode>', COMPRESSION_HELP, 'auto')
  .option('--storage <which...>', 'chunks read from: parquet (in place), local (the workers\' local forms), side by side', ['parquet', 'local'])
  .action(async (o) => (await import('./sync.js')).runSync({ ...o, parallel: o.parallel ?? [1, 2], sdk: !!o.sdk }))

program
  .command('memory')
  .description('worker RSS under concurrent queries that hit the size budget')
  .option('--blocks <n>', 'dataset size in blocks (generated once, cached)', int, 1000)
  .option('--clients <n>', 'concurrent queries', int, 16)
  .option('--seconds <n>', 'load duration per configuration', int, 20)
  .option('--shape <name>', 'query', 'all tx+logs')
  .option('--compression <mode>', COMPRESSION_HELP, 'auto')
  .option('--storage <which...>', 'chunks read from: parquet (in place), local (the worker\'s local forms), side by side', ['parquet', 'local'])
  .option('--db-memory <size...>', 'worker --db-memory values to compare side by side ("default": the worker\'s own default)', ['default'])
  .option('--malloc-conf <conf...>', 'worker DUCKDB_JE_MALLOC_CONF values to compare side by side, e.g. dirty_decay_ms:50,muzzy_decay_ms:0 ("default": src/fast-path.ts\'s)', ['default'])
  .action(async (o) => (await import('./memory.js')).runMemory(o))

program
  .command('scaling')
  .description('the router over 1 k – 100 k chunks (folder and s3rver), and throughput with 1, 2, 4 worker processes under the same load')
  .option('--part <which...>', 'router (chunks listed, routable, RSS, requests per relist, /height and /worker p99), workers (throughput per worker count), no-match (a worker\'s first pass of a no-match query over many chunks, with and without written chunk summaries), no-match-cluster (a no-match query over a dataset of --nm-chunks chunks through a router and 2 workers)', ['router', 'workers'])
  .option('--copies <n>', 'no-match part: datasets of 64 one-block chunks passed over', int, 16)
  .option('--warm-passes <n>', 'no-match part: passes after the first (the median is reported)', int, 5)
  .option('--nm-chunks <n>', 'no-match-cluster part: one-block chunks of its dataset (written once, cached)', int, 20_000)
  .option('--nm-passes <n>', 'no-match-cluster part: passes over the whole range', int, 3)
  .option('--chunks <n...>', 'router part: folder datasets of this many sparse synthetic chunks', intList)
  .option('--s3-chunks <n...>', 'router part: s3rver datasets of this many chunks', intList)
  .option('--pingers <n>', 'router part: light HTTP pingers standing in for workers', int, 100)
  .option('--rate <n>', 'router part: requests/s to /height and to /<block>/worker', int, 1000)
  .option('--blocks <n>', 'workers part: dataset size in blocks (generated once, cached)', int, 1000)
  .option('--workers <n...>', 'workers part: worker process counts', intList)
  .option('--clients <n>', 'workers part: concurrent clients', int, 8)
  .option('--seconds <n>', 'load duration per point', int, 10)
  .option('--shape <name...>', 'workers part: queries', ['logs+tx', 'all tx+logs'])
  .option('--compression <mode>', COMPRESSION_HELP, 'auto')
  .action(async (o) => {
    if (o.part.includes('router')) {
      await (await import('./router-scaling.js')).runRouterScaling({
        chunks: o.chunks ?? [1000, 10_000, 100_000], s3Chunks: o.s3Chunks ?? [1000, 10_000], pingers: o.pingers, rate: o.rate, seconds: Math.min(o.seconds, 5),
      })
    }
    if (o.part.includes('workers')) await (await import('./scaling.js')).runScaling({ ...o, workers: o.workers ?? [1, 2, 4] })
    if (o.part.includes('no-match')) await (await import('./no-match-scan.js')).runNoMatchScan({ copies: o.copies, warmPasses: o.warmPasses })
    if (o.part.includes('no-match-cluster')) await (await import('./no-match-cluster.js')).runNoMatchCluster({ chunks: o.nmChunks, passes: o.nmPasses })
  })

program
  .command('chunk-format')
  .description('the chunk\'s Parquet written with other settings (codec, row groups, version) and as a DuckDB file: bytes, logs+tx, JSON rate, full scan, answers compared byte for byte')
  .option('--runs <n>', 'timed runs per variant', int, 7)
  .option('--variant <text...>', 'only these variants, by name (today\'s is always in; see bench/chunk-format.ts)')
  .option('--no-local-form', 'leave out the worker-built local form of today\'s chunk')
  .action(async (o) => (await import('./chunk-format.js')).runChunkFormat(o))

program
  .command('forms')
  .description('local forms on demand against forms of every chunk held: serve over the bench dataset, a full sync then repeated logs+tx passes; worker CPU, forms built, cache bytes, outputs compared')
  .option('--blocks <n>', 'dataset size in blocks (generated once, cached)', int, 2000)
  .option('--forms-after <n...>', 'serve --forms-after values, run one after the other (default: 2 0)', intList)
  .option('--hot-passes <n>', 'logs+tx passes over the last 400 blocks', int, 6)
  .option('--gap-s <n>', 'seconds between hot passes', int, 20)
  .option('--idle-s <n>', 'seconds idle after the last pass (forms still being built)', int, 60)
  .action(async (o) => (await import('./forms.js')).runForms({ ...o, formsAfter: o.formsAfter ?? [2, 0] }))

program
  .command('worker')
  .description('query engine latency per shape vs bare SQL on one chunk, and its JSON rate vs JSON.stringify')
  .option('--runs <n>', 'timed runs per variant', int, 7)
  .option('--shape <name...>', 'only these shapes')
  .option('--no-http', 'leave out the worker-over-HTTP column')
  .action(async (o) => (await import('./worker.js')).runWorker(o))

program
  .command('floors')
  .description('each speed target\'s budget against a part of its work measured alone in the same run: DuckDB\'s statements, the columns an answer reads, JSON.stringify/parse, the ingest\'s chunk close')
  .option('--runs <n>', 'timed runs per variant', int, 15)
  .option('--close-blocks <n>', 'blocks of the ingest close timed (0: leave the ingest out)', int, 200)
  .action(async (o) => (await import('./floors.js')).runFloors(o))

program
  .command('engine-ab')
  .description('this build\'s query engine against another build\'s (--baseline <its dist folder>) in one process, alternating, per shape')
  .requiredOption('--baseline <dist>', 'the other build\'s dist folder (e.g. of a git worktree at the commit before)')
  .option('--runs <n>', 'timed runs per build and shape', int, 41)
  .option('--shape <name...>', 'only these shapes')
  .option('--storage <which>', 'chunks read from: local (a local form) or parquet', 'local')
  .option('--stages', 'also each statement\'s median, the time outside statements and GC')
  .action(async (o) => (await import('./engine-ab.js')).runEngineAb({ ...o, stages: !!o.stages }))

program
  .command('compact')
  .description('query time over a fresh tail of one-block chunks before and after compaction, and the time compaction takes')
  .option('--blocks <n>', 'blocks (= one-block chunks) in the tail', int, 64)
  .option('--fanout <n>', 'compaction fanout', int, 4)
  .option('--runs <n>', 'timed runs per query and variant', int, 9)
  .action(async (o) => (await import('./compact.js')).runCompact(o))

program
  .command('anvil')
  .description('the alternative: logs + their transactions from an anvil node (paged eth_getLogs + look-ups) vs from the archive of that chain')
  .option('--rounds <n>', 'blocks with token transfers', int, 500)
  .option('--transfers <n>', 'token transfers per such block', int, 10)
  .option('--empty <n>', 'empty blocks after each', int, 9)
  .option('--page <n>', 'blocks per eth_getLogs call', int, 1000)
  .option('--in-flight <n>', 'transaction look-ups in flight', int, 8)
  .option('--runs <n>', 'interleaved runs', int, 5)
  .option('--keep', 'leave the archive folder in place')
  .option('--chunk-blocks <n>', 'ingest --chunk-blocks of the archive (default: the ingest default)', int)
  .option('--compression <mode>', COMPRESSION_HELP, 'auto')
  .action(async (o) => (await import('./anvil.js')).runAnvil(o))

program
  .command('s3')
  .description('object storage: publish to a loopback S3 server, worker start to routable, download rate, sync vs a local folder')
  .option('--blocks <n>', 'dataset size in blocks (generated once, cached)', int, 1000)
  .option('--workers <n>', 'worker processes', int, 3)
  .option('--shape <name>', 'query of the sync', 'all tx+logs')
  .action(async (o) => (await import('./s3.js')).runS3(o))

program
  .command('fuzz')
  .description('property-based fuzzing of worker queries of every family (fast-check): no 5xx, no hang, JSON errors, answers equal to the reference')
  .option('--cases <n>', 'cases in all, split evenly across the families', int, 10_000)
  .option('--seed <n>', 'seed of the generated cases (default: random, printed)', int)
  .option('--concurrency <n>', 'cases in flight', int, 8)
  .option('--timeout-ms <n>', 'timeout of each request', int, 20_000)
  .option('--only <dataset:index>', 'run only this case (as printed with a failure)')
  .option('--verbose', 'print every case')
  .action(async (o) => {
    // The router and worker run in this process: their info logs would drown the report.
    process.env.LOG_LEVEL ??= 'warn'
    return (await import('./fuzz.js')).runFuzz(o)
  })

program
  .command('load')
  .description('overload a router + worker process on loopback with autocannon: 503 + Retry-After for the excess, latency of the 200s, answers/s, RSS')
  .option('--seconds <n>', 'load duration', int, 30)
  .option('--connections <n>', 'connections sending queries to the worker', int, 64)
  .option('--concurrency <n>', 'worker --concurrency', int, 2)
  .option('--queue <n>', 'worker --queue', int, 4)
  .option('--blocks <n>', 'dataset size in blocks (generated once, cached)', int, 1000)
  .option('--shape <name>', 'query', 'logs+tx')
  .option('--span <n>', 'blocks per query', int, 200)
  .option('--rate <n>', 'queries per second over all connections (0: none, each connection sends again at once)', int, 0)
  .option('--router-connections <n>', 'connections asking the router for /height, and as many for /<block>/worker', int, 4)
  .option('--router-rate <n>', 'requests per second to each of the two router endpoints', int, 100)
  .action(async (o) => (await import('./load.js')).runLoadBench(o))

program
  .command('freshness')
  .description('block lag at the defaults: anvil (--block-time 1) → ingest --follow → serve, over a folder and s3rver; node reports a block → router /height → answered')
  .option('--seconds <n>', 'how long new blocks are followed per storage', int, 60)
  .option('--targets <which...>', 'storage: folder, s3', ['folder', 's3'])
  .option('--txs <n>', 'transfers sent per second meanwhile', int, 2)
  .option('--normalizer <how>', 'the ingest\'s --normalizer (default: its default, auto)')
  .option('--stages', 'also break the lag into stages (ingest, upload, head.json, router, worker download), from the processes\' debug logs')
  .option('--stages-log <file>', 'with --stages: append every log record to this file too')
  .option('--fresh-part-blocks <n>', 'then the query time over a fresh part of this many one-block chunks before and after compaction (as `bench compact`; 0: skip)', int, 64)
  .action(async (o) => {
    await (await import('./freshness.js')).runFreshness(o)
    if (o.freshPartBlocks > 0) await (await import('./compact.js')).runCompact({ blocks: o.freshPartBlocks, fanout: 4, runs: 3 })
  })

program
  .command('suite')
  .description('where the test suite\'s time goes: runs it as npm test does, with each test file\'s wall and CPU, its own and that of the commands it started, and the machine\'s idle time (Linux)')
  .argument('[files...]', 'built test files (default: every dist/test/*.test.js)')
  .option('--concurrency <n>', 'test files at once (npm test: 3)', int, 3)
  .option('--top <n>', 'test files listed', int, 30)
  .action(async (files: string[], o) => (await import('./suite.js')).runSuite({ ...o, files }))

/** What `all` runs, each in its own process (DuckDB settings are per process), with bounded sizes. */
const ALL: string[][] = [
  ['generate', '--blocks', '1000', '--force'],
  ['ingest'],
  ['sql'],
  ['stringify'],
  ['worker'],
  ['floors'],
  // 4 in flight beside 1 and 2: with the workers' DuckDB at 1 thread, 4 in flight kept both cores
  // busier (140–144 k items/s at 2, 149–170 k at 4; docs/benchmark-history.md, step 37).
  ['sync', '--blocks', '2000', '--sdk', '--parallel', '1', '2', '4'],
  // Target 4 over a longer range: the SDK's own start (≈ 20 ms before its first request, then cold
  // requests) is most of a 2,000-block no-match sync (docs/benchmark-history.md, step 36).
  ['sync', '--blocks', '10000', '--sdk', '--shape', 'logs, no match', '--storage', 'parquet'],
  ['memory'],
  ['scaling', '--chunks', '1000', '10000', '--s3-chunks', '1000'],
  ['anvil'],
  ['s3'],
  ['fuzz', '--cases', '2000'],
  ['load', '--seconds', '15'],
  ['freshness', '--seconds', '30'],
]

program
  .command('all')
  .description('run every benchmark with bounded defaults (a few minutes), one process each')
  .option('--skip <name...>', 'benchmarks to leave out', [])
  .action(async (o: { skip: string[] }) => {
    const { TARGET_PREFIX, TARGET_COLUMNS, targetRows } = await import('./lib/targets.js')
    const { printTable } = await import('./lib/report.js')
    const targets: import('./lib/targets.js').TargetFigure[] = []
    const t0 = performance.now()
    for (const args of ALL.filter(([name]) => !o.skip.includes(name))) {
      console.log(`\n## bench ${args.join(' ')}\n`)
      const code = await new Promise<number | null>((resolve) => {
        const child = spawn(process.execPath, [fileURLToPath(import.meta.url), ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
        createInterface({ input: child.stdout! }).on('line', (line) => {
          if (line.startsWith(TARGET_PREFIX)) targets.push(JSON.parse(line.slice(TARGET_PREFIX.length)))
          else console.log(line)
        })
        child.on('exit', resolve)
      })
      if (code !== 0) console.log(`bench ${args[0]} exited with ${code}`)
    }
    printTable('performance targets (BENCHMARKS.md, "Targets"): this run, each against its baseline measured in the same run', TARGET_COLUMNS, targetRows(targets))
    console.log(`\nall benchmarks: ${((performance.now() - t0) / 1000).toFixed(0)} s`)
  })

program.parseAsync(process.argv).catch((e) => {
  console.error(e instanceof Error ? e.message : e)
  process.exit(1)
})
