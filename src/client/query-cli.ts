import { readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { ArchiveClient, type ArchiveQuery } from './archive-client.js'
import { FileSink, outputSpec, resumePoint, StreamSink, TableSink, type BlockSink, type OutputFormat } from './export.js'
import { countItems, defaultProgressMode, QueryProgress, type QueryProgressMode } from './query-progress.js'

export interface QueryCliOptions {
  baseUrl: string
  /** First block (default: the query's `fromBlock`, else 0). */
  from?: number
  /** Last block (default: the query's `toBlock`, else the height). */
  to?: number
  /** Inline JSON text or undefined. */
  inline?: string
  /** Path of a JSON file. */
  file?: string
  parallel: number
  follow: boolean
  maxAttempts: number
  /** Sent to the router as `Authorization: Bearer <key>`. */
  apiKey?: string
  quiet: boolean
  /** Output file (default stdout). */
  out?: string
  /** Default: from the `out` extension (.ndjson/.jsonl, .json, .parquet, .csv), else NDJSON. */
  format?: OutputFormat
  /** Continue the NDJSON file `out` after its last complete block. */
  resume?: boolean
  /** Default: none with `quiet`, a bar when stderr is a terminal, text lines otherwise. */
  progress?: QueryProgressMode
}

/** The range holds nothing to query (above the height, or upside down): exit code 3, so scripts can tell. */
export class QueryRangeError extends Error {
  readonly exitCode = 3
}

/** Read the query (inline or file); its range keys are taken out (they become `--from`/`--to` defaults). */
export async function loadQuery(opts: Pick<QueryCliOptions, 'inline' | 'file'>): Promise<ArchiveQuery & { range: { fromBlock?: number; toBlock?: number } }> {
  if (opts.inline !== undefined && opts.file !== undefined) throw new Error('give the query either inline or with --query, not both')
  const text = opts.file !== undefined ? await readFile(opts.file, 'utf8') : (opts.inline ?? '{}')
  let q: unknown
  try {
    q = JSON.parse(text)
  } catch (e) {
    throw new Error(`the query is not valid JSON (${opts.file ?? 'inline'}): ${(e as Error).message}`)
  }
  if (!q || typeof q !== 'object' || Array.isArray(q)) throw new Error('the query must be a JSON object')
  const { fromBlock, toBlock, ...rest } = q as Record<string, unknown>
  const block = (v: unknown, key: string) => {
    if (v == null) return undefined
    if (!Number.isSafeInteger(v) || (v as number) < 0) throw new Error(`${key} in the query must be a block number, got ${JSON.stringify(v)}`)
    return v as number
  }
  return { ...rest, range: { fromBlock: block(fromBlock, 'fromBlock'), toBlock: block(toBlock, 'toBlock') } }
}

/**
 * `block-archive query`: run the range loop and write the blocks to stdout or `--out` (NDJSON, a JSON
 * array, Parquet or CSV); progress, retries and a summary go to stderr. Returns the number of blocks
 * written by this run.
 */
export async function runQueryCli(cli: QueryCliOptions): Promise<number> {
  const output = outputSpec(cli)
  if (output.out !== undefined) {
    const dir = path.dirname(path.resolve(output.out))
    const isDir = await stat(dir).then((s) => s.isDirectory(), () => false)
    if (!isDir) throw new Error(`--out ${output.out}: the folder ${dir} does not exist`)
  }
  const { range, ...query } = await loadQuery(cli)
  const from = cli.from ?? range.fromBlock ?? 0
  const to = cli.to ?? range.toBlock
  if (to !== undefined && to < from) throw new QueryRangeError(`the last block ${to} is below the first ${from}`)
  const mode = cli.progress ?? defaultProgressMode(cli.quiet)
  // Messages before the progress display exists.
  let say = (line: string) => {
    if (mode !== 'none') process.stderr.write(line + '\n')
  }
  const client = new ArchiveClient(cli.baseUrl, {
    maxAttempts: cli.maxAttempts,
    apiKey: cli.apiKey,
    onRetry: ({ attempt, error, pauseMs }) => say(`retry ${attempt} in ${pauseMs} ms: ${error.message}`),
  })

  // --resume: continue after the file's last complete block.
  let start = from
  const resumed = output.resume ? await resumePoint(output.out!) : undefined
  if (resumed?.last !== undefined) {
    if (resumed.last + 1 < from) {
      throw new Error(`${output.out} ends at block ${resumed.last}, below the first block ${from}: it is not an export of this range (remove it, or run without --resume)`)
    }
    start = resumed.last + 1
  }
  const complete = async (end: number) => {
    if (resumed!.partial > 0) await (await FileSink.create(output.out!, 'ndjson', resumed!.keep)).finish()
    say(`${output.out} is complete: it ends at block ${resumed!.last}, the range ends at ${end}`)
    return 0
  }
  if (resumed?.last !== undefined && to !== undefined && start > to) return complete(to)

  let end: number | undefined
  if (!cli.follow) {
    const r = await client.rangeEnd({ fromBlock: start, toBlock: to })
    end = r.end
    if (to !== undefined && to > r.height) say(`note: toBlock ${to} is above the dataset height ${r.height}; stopping at ${r.height}`)
    if (resumed?.last !== undefined && start > r.end && r.end >= from) return complete(r.end)
    if (r.end < start) {
      throw new QueryRangeError(r.height < 0 ? `the dataset has no blocks yet (height -1); nothing to query from block ${start}` : `block ${start} is above the dataset height ${r.height}: nothing to query (--follow waits for it)`)
    }
  }

  const abort = new AbortController()
  const stop = () => abort.abort(new Error('interrupted'))
  let sink: BlockSink
  let stdout: StreamSink | undefined
  if (output.out === undefined) {
    sink = stdout = new StreamSink(process.stdout, output.format as 'ndjson' | 'json', () => abort.abort(new Error('stdout closed')))
  } else if (output.format === 'parquet' || output.format === 'csv') {
    sink = await TableSink.create(output.out, output.format)
  } else {
    sink = await FileSink.create(output.out, output.format, resumed?.keep)
  }
  const progress = new QueryProgress(mode, from, start, end)
  say = (line) => progress.message(line)
  if (resumed) {
    const dropped = resumed.partial > 0 ? ` (dropped a partial last line of ${resumed.partial} bytes)` : ''
    say(resumed.last === undefined ? `${output.out} holds no complete block${dropped}; starting at block ${start}` : `resuming ${output.out} after block ${resumed.last}${dropped}`)
  }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
  try {
    for await (const batch of client.batches(query, {
      fromBlock: start,
      toBlock: end ?? to,
      follow: cli.follow,
      parallel: cli.parallel,
      signal: abort.signal,
    })) {
      await sink.write(batch.blocks)
      progress.update(batch.last, batch.blocks.length, countItems(batch.blocks))
      if (stdout?.closed) break
    }
    progress.stop()
    if (output.format === 'parquet' || output.format === 'csv') say(`writing ${output.out} (${output.format}) with DuckDB`)
    if (!stdout?.closed) await sink.finish()
  } catch (e) {
    progress.stop()
    await sink.discard()
    if (stdout?.closed) return progress.blocks
    if (output.out !== undefined && output.format === 'ndjson') {
      // The file holds complete blocks up to here: say how to go on.
      const held = `${output.out} holds ${progress.last >= from ? `the blocks up to ${progress.last}` : 'no block yet'}; continue with --resume`
      throw new Error(abort.signal.aborted ? `interrupted: ${held}` : `${(e as Error)?.message ?? e} (${held})`, { cause: e })
    }
    throw e
  } finally {
    process.off('SIGINT', stop)
    process.off('SIGTERM', stop)
  }
  const where = output.out !== undefined ? ` into ${output.out} (${output.format})` : ''
  say(`done: ${progress.blocks} blocks, ${progress.items} items in ${progress.seconds.toFixed(2)} s${where}`)
  return progress.blocks
}
