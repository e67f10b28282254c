import type { EvmBlockBundle } from '../ingest/evm/normalize.js'
import type { RecordedBlock } from '../ingest/replay.js'
import { Rng, syntheticBlockHash, toQuantity } from './random.js'
import { TEMPLATE_CYCLE, type BlockTemplate } from './templates.js'

/*
 * Tiling: block n of the synthetic chain is a copy of a real block (at the RPC-JSON level, so that
 * the real normaliser runs on it) with
 *   - number, hash (derived from seed and number), parentHash (= hash of n−1), timestamp (12 s apart);
 *   - fresh random transaction hashes, signatures, roots, mixHash;
 *   - calldata, log data, trace input/output/init/code and state-diff values "scrambled": same
 *     length, same zero bytes, other bytes random (sighashes kept);
 *   - addresses, topics, storage keys, values, gas, statuses and all sizes exactly as recorded.
 */

export interface TileOptions {
  seed: string
  /** Timestamp of block 0 (seconds). */
  genesisTime?: number
}

const GENESIS_TIME = 1_700_000_000

export function templateFor(n: number, templates: BlockTemplate[]): BlockTemplate {
  return templates[TEMPLATE_CYCLE[n % TEMPLATE_CYCLE.length] % templates.length]
}

export function tileBlock(t: BlockTemplate, n: number, opts: TileOptions): EvmBlockBundle {
  const rng = new Rng(`${opts.seed}/data/${n}`)
  const hash = syntheticBlockHash(opts.seed, n)
  const number = toQuantity(n)
  const src = t.block
  const txHashes: string[] = src.transactions.map(() => rng.hash())

  const transactions = src.transactions.map((tx: any, i: number) => ({
    ...tx,
    blockHash: hash,
    blockNumber: number,
    hash: txHashes[i],
    input: rng.scramble(tx.input, 8),
    r: rng.hash(),
    s: rng.hash(),
  }))
  const block = {
    ...src,
    number,
    hash,
    parentHash: n === 0 ? '0x' + '0'.repeat(64) : syntheticBlockHash(opts.seed, n - 1),
    timestamp: toQuantity((opts.genesisTime ?? GENESIS_TIME) + n * 12),
    transactionsRoot: rng.hash(),
    stateRoot: rng.hash(),
    receiptsRoot: rng.hash(),
    mixHash: rng.hash(),
    transactions,
  }
  const receipts = t.receipts.map((r: any, i: number) => ({
    ...r,
    blockHash: hash,
    blockNumber: number,
    transactionHash: txHashes[i],
    logs: r.logs.map((l: any) => ({
      ...l,
      blockHash: hash,
      blockNumber: number,
      transactionHash: txHashes[i],
      data: rng.scramble(l.data),
    })),
  }))
  const traces = t.traces.map((tr: any) => ({
    ...tr,
    blockHash: hash,
    blockNumber: n,
    transactionHash: tr.transactionPosition == null ? null : txHashes[tr.transactionPosition],
    action: tr.action && {
      ...tr.action,
      input: rng.scramble(tr.action.input, 8),
      init: rng.scramble(tr.action.init),
    },
    result: tr.result && {
      ...tr.result,
      output: rng.scramble(tr.result.output),
      code: rng.scramble(tr.result.code),
    },
  }))
  const stateDiffs = t.stateDiffs.map((e) => ({ stateDiff: scrambleStateDiff(e.stateDiff, rng) }))
  return { block, receipts, traces, stateDiffs }
}

/** Replay stateDiff with storage values and code scrambled; keys, balances and nonces kept. */
function scrambleStateDiff(diff: any, rng: Rng): any {
  if (diff == null) return diff
  const out: Record<string, any> = {}
  for (const [address, acc] of Object.entries<any>(diff)) {
    const storage: Record<string, any> = {}
    for (const [slot, d] of Object.entries<any>(acc.storage ?? {})) storage[slot] = scrambleDelta(d, rng)
    out[address] = { ...acc, code: scrambleDelta(acc.code, rng), storage }
  }
  return out
}

function scrambleDelta(d: any, rng: Rng): any {
  if (d == null || d === '=') return d
  if ('+' in d) return { '+': rng.scramble(d['+']) }
  if ('-' in d) return { '-': rng.scramble(d['-']) }
  if ('*' in d) return { '*': { from: rng.scramble(d['*'].from), to: rng.scramble(d['*'].to) } }
  return d
}

/**
 * `n` distinct copies of recorded EVM blocks, numbered 0…n−1 (copy i tiled from `recorded[i % length]`
 * as `tileBlock` does), for a replay that does not repeat itself: copies of a few blocks compress
 * against each other far better than a real chain. What the recorded block has (receipts,
 * `trace_block`, replayed state diffs) the copy has, scrambled alike; geth traces and extra receipts
 * are not copied.
 */
export function distinctCopies(recorded: RecordedBlock[], n: number, seed: string): RecordedBlock[] {
  const sources = recorded.filter((r) => r.block)
  if (!sources.length) throw new Error('distinct copies need recorded blocks with headers')
  return Array.from({ length: n }, (_, i) => {
    const r = sources[i % sources.length]
    const template: BlockTemplate = {
      name: String(r.number),
      block: r.block,
      receipts: r.receipts ?? [],
      traces: r.traceBlock ?? [],
      stateDiffs: (r.replay ?? []).map((e) => ({ stateDiff: e.stateDiff })),
    }
    const copy = tileBlock(template, i, { seed })
    const txHash = (k: number) => copy.block.transactions[k]?.hash
    return {
      number: i,
      block: copy.block,
      receipts: r.receipts ? copy.receipts! : undefined,
      traceBlock: r.traceBlock ? copy.traces : undefined,
      replay: r.replay?.map((e, k) => ({ ...e, transactionHash: txHash(k) ?? e.transactionHash, stateDiff: copy.stateDiffs?.[k]?.stateDiff ?? e.stateDiff })),
    }
  })
}
