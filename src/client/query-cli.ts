import { readFile } from 'node:fs/promises'
import { ArchiveClient, type ArchiveQuery } from './archive-client.js'

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
  quiet: boolean
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
 * `block-archive query`: run the range loop and print one block per line (NDJSON) on stdout;
 * progress and retries go to stderr. Returns the number of blocks printed.
 */
export async function runQueryCli(cli: QueryCliOptions): Promise<number> {
  const { range, ...query } = await loadQuery(cli)
  const from = cli.from ?? range.fromBlock ?? 0
  const to = cli.to ?? range.toBlock
  if (to !== undefined && to < from) throw new QueryRangeError(`the last block ${to} is below the first ${from}`)
  const opts = { ...cli, from, to }
  const err = (line: string) => {
    if (!opts.quiet) process.stderr.write(line + '\n')
  }
  const client = new ArchiveClient(opts.baseUrl, {
    maxAttempts: opts.maxAttempts,
    onRetry: ({ attempt, error, pauseMs }) => err(`retry ${attempt} in ${pauseMs} ms: ${error.message}`),
  })
  const abort = new AbortController()
  const stop = () => abort.abort(new Error('interrupted'))
  process.once('SIGINT', stop)
  const out = process.stdout
  let closed = false
  out.on('error', (e: NodeJS.ErrnoException) => {
    // `… | head` closes the pipe: stop quietly.
    if (e.code === 'EPIPE') {
      closed = true
      abort.abort(new Error('stdout closed'))
    } else throw e
  })
  const started = Date.now()
  let blocks = 0
  let lastReport = started
  let end: number | undefined
  if (!opts.follow) {
    const r = await client.rangeEnd({ fromBlock: opts.from, toBlock: opts.to })
    end = r.end
    if (opts.to !== undefined && opts.to > r.height) err(`note: toBlock ${opts.to} is above the dataset height ${r.height}; stopping at ${r.height}`)
    if (r.end < opts.from) {
      throw new QueryRangeError(r.height < 0 ? `the dataset has no blocks yet (height -1); nothing to query from block ${opts.from}` : `block ${opts.from} is above the dataset height ${r.height}: nothing to query (--follow waits for it)`)
    }
  }
  try {
    for await (const batch of client.batches(query, {
      fromBlock: opts.from,
      toBlock: end ?? opts.to,
      follow: opts.follow,
      parallel: opts.parallel,
      signal: abort.signal,
    })) {
      let text = ''
      for (const b of batch.blocks) text += JSON.stringify(b) + '\n'
      blocks += batch.blocks.length
      if (!out.write(text)) await new Promise<void>((resolve) => out.once('drain', resolve))
      if (closed) break
      const now = Date.now()
      if (now - lastReport >= 1000) {
        lastReport = now
        const pct = end !== undefined && end >= opts.from ? ` (${(((batch.last - opts.from + 1) / (end - opts.from + 1)) * 100).toFixed(1)}%)` : ''
        err(`progress: up to block ${batch.last}${pct}, ${blocks} blocks, ${((now - started) / 1000).toFixed(1)} s`)
      }
    }
  } catch (e) {
    if (!closed) throw e
  } finally {
    process.off('SIGINT', stop)
  }
  err(`done: ${blocks} blocks in ${((Date.now() - started) / 1000).toFixed(2)} s`)
  return blocks
}
