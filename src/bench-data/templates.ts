import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { gunzipSync } from 'node:zlib'

/*
 * The real blocks the synthetic chain is tiled from (fixtures/SOURCES.md has their origin).
 *
 * Only Ethereum 18500000 has its own trace_block. The erigon rpc-tests recorded traces and replay
 * state diffs of 17073191/17073192 but not those blocks themselves, so their traces and diffs are
 * laid onto the transactions of the recorded blocks *by position* (transaction i of the template
 * gets the traces and the state diff of transaction i of the trace source; positions past the
 * template's transaction count are dropped). Addresses, sighashes, topics, storage keys and sizes
 * stay real; only which transaction they hang on is borrowed.
 */

/** One real block with everything the tiler copies. */
export interface BlockTemplate {
  name: string
  /** `eth_getBlockByNumber(n, true)` */
  block: any
  /** `eth_getBlockReceipts` */
  receipts: any[]
  /** Parity `trace_block` traces, `transactionPosition` within this block's transactions. */
  traces: any[]
  /** `trace_replayBlockTransactions` stateDiff entries, one per transaction (may be shorter). */
  stateDiffs: { stateDiff: any }[]
}

export function defaultFixturesDir(): string {
  // dist/src/bench-data/templates.js → repository root
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../fixtures')
}

function readGzJson(file: string): any {
  return JSON.parse(gunzipSync(readFileSync(file)).toString('utf8'))
}

interface TraceSource {
  traces: any[]
  stateDiffs: { stateDiff: any }[]
}

/** Traces + diffs of several source blocks as if they were one block (positions shifted). */
function concatSources(sources: TraceSource[]): TraceSource {
  const traces: any[] = []
  const stateDiffs: { stateDiff: any }[] = []
  for (const s of sources) {
    const shift = stateDiffs.length
    for (const t of s.traces) traces.push({ ...t, transactionPosition: t.transactionPosition == null ? null : t.transactionPosition + shift })
    stateDiffs.push(...s.stateDiffs)
  }
  return { traces, stateDiffs }
}

function clipTo(txCount: number, traces: any[], stateDiffs: { stateDiff: any }[]) {
  return {
    traces: traces.filter((t) => t.transactionPosition != null && t.transactionPosition < txCount),
    stateDiffs: stateDiffs.slice(0, txCount),
  }
}

/**
 * The three templates, in the order the tiler repeats them (`TEMPLATE_CYCLE`):
 * A = Ethereum 18000000 + traces/diffs of 17073191, B = Ethereum 18500000 + its own trace_block +
 * diffs of 17073192, C = Polygon 50000000 + traces/diffs of 17073191 and 17073192 one after the other.
 */
export function loadTemplates(fixtures = defaultFixturesDir()): BlockTemplate[] {
  const f = (...p: string[]) => path.join(fixtures, 'evm', ...p)
  const erigon = (method: string, test: number) => readGzJson(f('erigon-rpc-tests', method, `test_${test}.json.gz`))[0].response.result
  const replay = (test: number) => (erigon('trace_replayBlockTransactions', test) as any[]).map((e) => ({ stateDiff: e.stateDiff }))
  const e191: TraceSource = { traces: erigon('trace_block', 26), stateDiffs: replay(37) }
  const e192: TraceSource = { traces: erigon('trace_block', 27), stateDiffs: replay(38) }
  const own18500000 = readGzJson(f('nethermind-idealis', 'trace_block_18_500_000.json.gz')).result as any[]

  const make = (name: string, dir: string, src: TraceSource): BlockTemplate => {
    const block = readGzJson(f('squid-sdk', dir, 'block.json.gz'))
    const receipts = readGzJson(f('squid-sdk', dir, 'receipts.json.gz'))
    return { name, block, receipts, ...clipTo(block.transactions.length, src.traces, src.stateDiffs) }
  }
  return [
    make('ethereum-18000000', 'ethereum/18000000', e191),
    make('ethereum-18500000', 'ethereum/18500000', { traces: own18500000, stateDiffs: e192.stateDiffs }),
    make('polygon-50000000', 'polygon/50000000', concatSources([e191, e192])),
  ]
}

/**
 * Which template block n copies: A B A B C. Two Ethereum blocks of each kind per Polygon block
 * gives ≈213 transactions and ≈455 logs per block on average — mainnet-like (2023) sizes.
 */
export const TEMPLATE_CYCLE = [0, 1, 0, 1, 2]
