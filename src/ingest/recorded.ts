import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { gunzipSync } from 'node:zlib'
import type { IngestOptions, IngestResult } from './loop.js'
import { ReplayServer, type RecordedBlock } from './replay.js'
import { feederToRpc } from './starknet/feeder.js'
import type { RecordedChainName, RecordedStarknetChain } from './recorded-chains.js'

/*
 * Recorded node answers in fixtures/ (fixtures/SOURCES.md says where each came from), grouped per
 * chain as replay-server blocks.
 */

/** The ingest loop (and DuckDB with it), loaded by the helpers that ingest: `replay-rpc` only reads the recordings. */
const ingestLoop = async () => (await import('./loop.js')).runIngest

export function defaultFixturesDir(): string {
  // dist/src/ingest/recorded.js → repository root
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../fixtures')
}

const readJson = (file: string): any => {
  const buf = readFileSync(file)
  return JSON.parse((file.endsWith('.gz') ? gunzipSync(buf) : buf).toString('utf8'))
}

export { RECORDED_CHAINS, RECORDED_STARKNET_CHAINS, type RecordedChainName, type RecordedStarknetChain } from './recorded-chains.js'

/**
 * The recorded blocks of one chain: `eth_getBlockByNumber` + `eth_getBlockReceipts` (+ recorded
 * `eth_getTransactionReceipt` answers). For Ethereum also the recorded traces: `trace_block` of
 * 18500000 (nethermind) and of 1000000 (ethereum-etl, with its callTracer answer), and the traces,
 * replay state diffs and prestate diffs of 17073191/17073192 (erigon rpc-tests; their headers were
 * not recorded, so those two serve only the trace methods).
 */
export function loadRecordedChain(chain: RecordedChainName, fixtures = defaultFixturesDir()): RecordedBlock[] {
  const dir = path.join(fixtures, 'evm', 'squid-sdk', chain)
  const out = new Map<number, RecordedBlock>()
  for (const name of readdirSync(dir)) {
    if (!/^\d+$/.test(name)) continue
    const files = readdirSync(path.join(dir, name))
    const f = (file: string) => path.join(dir, name, file)
    const block = readJson(f('block.json.gz'))
    const n = parseInt(block.number, 16) // folder names are not always the block's number
    const r: RecordedBlock = { number: n, block }
    if (files.includes('receipts.json.gz')) r.receipts = readJson(f('receipts.json.gz'))
    const extra = files.filter((x) => /^tx-.*-receipt\.json\.gz$/.test(x)).map((x) => readJson(f(x)))
    if (extra.length) r.txReceipts = extra
    out.set(n, r)
  }
  if (chain === 'ethereum') {
    const evm = (...p: string[]) => path.join(fixtures, 'evm', ...p)
    const b18500000 = out.get(18500000)
    if (b18500000) b18500000.traceBlock = readJson(evm('nethermind-idealis', 'trace_block_18_500_000.json.gz')).result
    const b1000000 = out.get(1000000)
    if (b1000000) {
      b1000000.traceBlock = readJson(evm('ethereum-etl', 'test_export_traces_job', 'block_with_subtraces', 'web3_response.trace_block_0xf4240.json')).result
      b1000000.callTraces = readJson(evm('ethereum-etl', 'test_extract_geth_traces_job', 'block_with_subtraces', 'web3_response.debug_traceBlockByNumber_0xf4240_tracer_calltracer.json')).result
    }
    const erigon = (method: string, test: number) => readJson(evm('erigon-rpc-tests', method, `test_${test}.json.gz`))[0].response.result
    for (const [n, tb, pre, rep] of [[17073191, 26, 32, 37], [17073192, 27, 33, 38]] as const) {
      out.set(n, { number: n, traceBlock: erigon('trace_block', tb), prestate: erigon('debug_traceBlockByNumber', pre), replay: erigon('trace_replayBlockTransactions', rep) })
    }
  }
  return [...out.values()].sort((a, b) => a.number - b.number)
}

/** "1,2,3,7" → "1-3,7" (what `ingest --blocks` takes). */
export function blockList(numbers: number[]): string {
  const out: string[] = []
  for (let i = 0; i < numbers.length; ) {
    let j = i
    while (j + 1 < numbers.length && numbers[j + 1] === numbers[j] + 1) j++
    out.push(j > i ? `${numbers[i]}-${numbers[j]}` : String(numbers[i]))
    i = j + 1
  }
  return out.join(',')
}

/** A transaction of the block without a receipt of this block (early Cronos): the ingest needs `--missing-receipts null`. */
function lacksReceipts(r: RecordedBlock, repeat: boolean): boolean {
  const hash = String(r.block.hash).toLowerCase()
  // repeat mode answers eth_getTransactionReceipt with null
  const have = new Set([...(r.receipts ?? []), ...(repeat ? [] : r.txReceipts ?? [])].filter((x) => String(x.blockHash).toLowerCase() === hash).map((x) => String(x.transactionHash).toLowerCase()))
  return (r.block.transactions as any[]).some((t) => !have.has(String(typeof t === 'object' ? t.hash : t).toLowerCase()))
}

export interface SuggestedIngest {
  /** What the command ingests, for the line it is printed on. */
  what: string
  /** The command line (`npx block-archive ingest …`). */
  command: string
}

/**
 * The ingest commands that fit what a replay node serves (`replay-rpc` prints them): first every
 * served block with the optional tables recorded for all of them; then, for each optional table
 * recorded for some of the blocks only, those blocks with it, into a dataset of their own. `blocks`:
 * the recorded blocks the server was given; `repeat`: the server's repeated chain `first`–`last`.
 */
export function suggestIngest(blocks: RecordedBlock[], chain: string, url: string, repeat?: { first: number; last: number }): SuggestedIngest[] {
  const starknet = blocks.some((b) => b.starknet)
  const served = blocks.filter((b) => (starknet ? b.starknet != null : b.block != null))
  const all = served.map((b) => b.number)
  const command = (dataset: string, numbers: number[], flags: string[]) =>
    ['npx block-archive ingest', ...(starknet ? ['--family starknet'] : []), `--rpc ${url}`, `--dataset ${dataset}`, `--out data/replay/${dataset}`,
      repeat && numbers === all ? `--from ${repeat.first} --to ${repeat.last}` : `--blocks ${blockList(numbers)}`, ...flags].join(' ')
  const modes: { flag: string; dataset: string; what: string; has: (b: RecordedBlock) => unknown }[] = starknet
    ? [
      { flag: '--traces starknet', dataset: 'traces', what: 'traces (starknet_traceBlockTransactions)', has: (b) => b.starknet!.traces },
      { flag: '--state-updates', dataset: 'state-updates', what: 'state updates (starknet_getStateUpdate)', has: (b) => b.starknet!.stateUpdate },
    ]
    : [
      { flag: '--traces trace_block', dataset: 'traces', what: 'traces (trace_block)', has: (b) => b.traceBlock },
      { flag: '--traces callTracer', dataset: 'calltraces', what: 'traces (debug_traceBlockByNumber callTracer)', has: (b) => b.callTraces },
      { flag: '--state-diffs replay', dataset: 'statediffs', what: 'state diffs (trace_replayBlockTransactions)', has: (b) => b.replay },
      { flag: '--state-diffs prestateTracer', dataset: 'prestatediffs', what: 'state diffs (debug_traceBlockByNumber prestateTracer)', has: (b) => b.prestate },
    ]
  // one traces mode and one state-diffs mode at most; the first that every block has
  const everywhere = modes.filter((m) => served.length > 0 && served.every((b) => m.has(b) != null))
    .filter((m, i, list) => list.findIndex((x) => x.flag.split(' ')[0] === m.flag.split(' ')[0]) === i)
  const receipts = (list: RecordedBlock[]) => starknet ? [] : [
    // eth_getBlockReceipts of a block recorded without receipts is an error (-32601 when no block has them: auto falls back by itself)
    ...(list.some((b) => b.receipts == null) && blocks.some((b) => b.receipts != null) ? ['--receipts transaction'] : []),
    ...(list.some((b) => lacksReceipts(b, repeat != null)) ? ['--missing-receipts null'] : []),
  ]
  const out: SuggestedIngest[] = [{ what: 'ingest', command: command(chain, all, [...everywhere.map((m) => m.flag), ...receipts(served)]) }]
  if (repeat) return out
  for (const m of modes) {
    const some = served.filter((b) => m.has(b) != null)
    if (!some.length || some.length === served.length) continue
    out.push({
      what: `${m.what}, recorded for ${blockList(some.map((b) => b.number))} only`,
      command: command(`${chain}-${m.dataset}`, some.map((b) => b.number), [m.flag, ...receipts(some)]),
    })
  }
  return out
}

export interface IngestRecordedOptions extends Partial<Omit<IngestOptions, 'rpc' | 'out' | 'dataset'>> {
  /** Which recorded chain (default 'ethereum'). */
  chain?: RecordedChainName
  fixturesDir?: string
}

/**
 * Build a dataset from recorded blocks: starts a replay server on 127.0.0.1 and runs the normal
 * ingest against it. Default: every recorded Ethereum mainnet block that has a header (1000000,
 * 4369999, 18000000, 18500000) with receipts, in `outDir` named `datasetName`. With
 * `traces: 'trace_block'` and no `blocks`, only the blocks whose trace_block was recorded are taken.
 * Resumable like any ingest: blocks already in `outDir` are skipped.
 */
export async function ingestRecorded(outDir: string, datasetName: string, opts: IngestRecordedOptions = {}): Promise<IngestResult> {
  const { chain = 'ethereum', fixturesDir, ...rest } = opts
  const recorded = loadRecordedChain(chain, fixturesDir)
  const server = new ReplayServer(recorded)
  await server.start()
  try {
    const want = (r: RecordedBlock) =>
      r.block != null &&
      (rest.traces !== 'trace_block' || r.traceBlock != null) &&
      (rest.traces !== 'callTracer' || r.callTraces != null) &&
      (rest.stateDiffs !== 'replay' || r.replay != null) &&
      (rest.stateDiffs !== 'prestateTracer' || r.prestate != null)
    return await (await ingestLoop())({
      progress: 'none',
      confirmations: 0,
      ...rest,
      blocks: rest.blocks ?? recorded.filter(want).map((r) => r.number),
      rpc: server.url,
      out: outDir,
      dataset: datasetName,
    })
  } finally {
    await server.close()
  }
}

// ---------------------------------------------------------------- Starknet


/** A JSON-RPC answer as recorded (`{jsonrpc, result, id}`) or its bare result. */
const resultOf = (v: any) => (v && typeof v === 'object' && !Array.isArray(v) && 'jsonrpc' in v ? v.result : v)

/**
 * Recorded Starknet blocks. Mainnet: 25 (getBlockWithReceipts + traceBlockTransactions), 588763 and
 * 623436 (getBlockWithReceipts), and 6500, 65000, 550000 (feeder-gateway blocks with their state
 * diffs, turned into the JSON-RPC shapes by `feederToRpc`: L1 handlers, L2→L1 messages, state
 * updates). Sepolia: 3100000 (getBlockWithReceipts + getStateUpdate from one node, RPC 0.10). No
 * public recording has traces and a state update of the same block.
 */
export function loadRecordedStarknet(chain: RecordedStarknetChain, fixtures = defaultFixturesDir()): RecordedBlock[] {
  const f = (...p: string[]) => readJson(path.join(fixtures, 'starknet', ...p))
  const out: RecordedBlock[] = []
  const add = (block: any, extra: { traces?: any[]; stateUpdate?: any } = {}) => out.push({ number: block.block_number, starknet: { block, ...extra } })
  if (chain === 'starknet-sepolia') {
    const go = (kind: string) => resultOf(f('starknet-go', 'rpc', 'testData', kind, 'sepolia3100000.json.gz'))
    add(go('blockWithReceipts'), { stateUpdate: go('stateUpdate') })
    return out
  }
  const nm = (file: string) => resultOf(f('nethermind-idealis', 'starknet', file))
  add(nm('get_block_with_txs_25.json.gz'), { traces: nm('trace_block_25.json.gz') })
  for (const [version, n] of [['0.10.0', 6500], ['0.11.1', 65000], ['0.13.0', 550000]] as const) {
    const { block, stateUpdate } = feederToRpc(f('katana', 'crates', 'gateway', 'gateway-client', 'tests', 'fixtures', version, 'state_update_with_block', `mainnet_${n}.json.gz`))
    add(block, { stateUpdate })
  }
  add(resultOf(f('starknet-go', 'rpc', 'testData', 'blockWithReceipts', 'mainnetBlockReceipts588763.json.gz')))
  add(nm('get_block_with_txs_623_436.json.gz'))
  return out.sort((a, b) => a.number - b.number)
}

/**
 * Build a Starknet dataset from the recorded blocks through the normal ingest path (a replay node
 * on 127.0.0.1), one ingest per group of blocks that share what was recorded: traces, state
 * updates, or neither — so each chunk holds exactly the tables its blocks have data for.
 */
export async function ingestRecordedStarknet(outDir: string, datasetName: string, chain: RecordedStarknetChain = 'starknet-mainnet', opts: Partial<IngestOptions> & { fixturesDir?: string } = {}): Promise<IngestResult[]> {
  const { fixturesDir, ...rest } = opts
  const recorded = loadRecordedStarknet(chain, fixturesDir)
  const server = new ReplayServer(recorded)
  await server.start()
  try {
    const groups: { blocks: number[]; traces: 'none' | 'starknet'; stateUpdates: boolean }[] = []
    for (const r of recorded) {
      const traces = r.starknet!.traces != null ? 'starknet' : 'none'
      const updates = r.starknet!.stateUpdate != null
      const last = groups[groups.length - 1]
      if (last && last.traces === traces && last.stateUpdates === updates) last.blocks.push(r.number)
      else groups.push({ blocks: [r.number], traces, stateUpdates: updates })
    }
    const results: IngestResult[] = []
    for (const g of groups) {
      results.push(await (await ingestLoop())({ progress: 'none', confirmations: 0, ...rest, family: 'starknet', ...g, rpc: server.url, out: outDir, dataset: datasetName }))
    }
    return results
  } finally {
    await server.close()
  }
}
