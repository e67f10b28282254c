import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import assert from 'node:assert/strict'
import { fileURLToPath } from 'node:url'
import type { ProcessorRunConfig } from './processor-run.js'

/*
 * What the real @subsquid/evm-processor should hand to its handler for a recorded block (raw RPC
 * answers transformed the way the SDK documents: quantities → bigint, timestamp × 1000, defaults
 * for nulls), and a runner for the processor in a child process.
 */

/** Raw RPC answers of one block: block with transactions, receipts, parity traces, replay state diffs. */
export interface SourceBlock {
  number: number
  block: any
  receipts: any[]
  parityTraces?: any[]
  replay?: any[]
}

export const RUNNER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'processor-run.js')
export const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'
export const ZERO_ADDRESS = '0x0000000000000000000000000000000000000000'

export const ALL_FIELDS = {
  block: Object.fromEntries(
    ['nonce', 'sha3Uncles', 'logsBloom', 'transactionsRoot', 'stateRoot', 'receiptsRoot', 'mixHash', 'miner', 'difficulty',
      'totalDifficulty', 'extraData', 'size', 'gasLimit', 'gasUsed', 'timestamp', 'baseFeePerGas', 'l1BlockNumber'].map((f) => [f, true]),
  ),
  transaction: Object.fromEntries(
    ['hash', 'from', 'to', 'gas', 'gasPrice', 'maxFeePerGas', 'maxPriorityFeePerGas', 'input', 'nonce', 'value', 'v', 'r', 's',
      'yParity', 'chainId', 'gasUsed', 'cumulativeGasUsed', 'effectiveGasPrice', 'contractAddress', 'type', 'status', 'sighash'].map((f) => [f, true]),
  ),
  log: { transactionHash: true, address: true, data: true, topics: true },
  trace: Object.fromEntries(
    ['subtraces', 'error', 'revertReason', 'createFrom', 'createValue', 'createGas', 'createInit', 'createResultGasUsed',
      'createResultCode', 'createResultAddress', 'callFrom', 'callTo', 'callValue', 'callGas', 'callInput', 'callSighash',
      'callCallType', 'callResultGasUsed', 'callResultOutput', 'suicideAddress', 'suicideRefundAddress', 'suicideBalance',
      'rewardAuthor', 'rewardValue', 'rewardType'].map((f) => [f, true]),
  ),
  stateDiff: { kind: true, prev: true, next: true },
}

// ---------------------------------------------------------------- the source, as the SDK should see it

export const lower = (v: unknown) => (typeof v === 'string' ? v.toLowerCase() : (v ?? null))
export const big = (v: string | null | undefined) => (v == null ? null : BigInt(v).toString())
export const nat = (v: string | number | null | undefined) => (v == null ? null : Number(v))
export const sighash = (input: string | null | undefined) => (input && input.length >= 10 ? input.slice(0, 10).toLowerCase() : '0x')

/** Drop null/undefined members (the SDK leaves some absent, some null) and the SDK's own `id`. */
export function clean(v: any): any {
  if (Array.isArray(v)) return v.map(clean)
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).filter(([k, x]) => x != null && k !== 'id' && k !== '_tx').map(([k, x]) => [k, clean(x)]))
  }
  return v
}

/**
 * Placeholders the SDK puts in place of a selected field that came back null (its `withSentinel`
 * schema entries in evm-processor/src/mapping/schema.ts), after bigints became decimal strings.
 */
const HEADER_SENTINELS: Record<string, unknown> = {
  nonce: '0x', sha3Uncles: '0x', logsBloom: '0x', transactionsRoot: '0x', stateRoot: '0x', receiptsRoot: '0x', mixHash: '0x',
  miner: '0x', difficulty: '-1', totalDifficulty: '-1', extraData: '0x', size: -1, gasLimit: '-1', gasUsed: '-1', baseFeePerGas: '-1',
  timestamp: 0,
}
const TRANSACTION_SENTINELS: Record<string, unknown> = {
  gas: '-1', gasPrice: '-1', nonce: -1, value: '-1', v: '-1', r: '0x', s: '0x', gasUsed: '-1', cumulativeGasUsed: '-1',
  effectiveGasPrice: '-1', type: -1, status: -1,
}

function withSentinels<T extends Record<string, unknown>>(item: T, sentinels: Record<string, unknown>): T {
  const out: Record<string, unknown> = { ...item }
  for (const [k, v] of Object.entries(sentinels)) if (out[k] == null) out[k] = v
  return out as T
}

export function expectedHeader(r: SourceBlock) {
  const b = r.block
  return withSentinels({
    height: nat(b.number), hash: lower(b.hash), parentHash: lower(b.parentHash), nonce: lower(b.nonce), sha3Uncles: lower(b.sha3Uncles),
    logsBloom: lower(b.logsBloom), transactionsRoot: lower(b.transactionsRoot), stateRoot: lower(b.stateRoot),
    receiptsRoot: lower(b.receiptsRoot), mixHash: lower(b.mixHash), miner: lower(b.miner), difficulty: big(b.difficulty),
    totalDifficulty: big(b.totalDifficulty), extraData: lower(b.extraData), size: nat(b.size), gasLimit: big(b.gasLimit),
    gasUsed: big(b.gasUsed), timestamp: Number(b.timestamp) * 1000, baseFeePerGas: big(b.baseFeePerGas),
    l1BlockNumber: b.l1BlockNumber == null ? 0 : nat(b.l1BlockNumber),
  }, HEADER_SENTINELS)
}

export function expectedTransactions(r: SourceBlock) {
  return r.block.transactions.map((tx: any, i: number) => {
    const rc = r.receipts[i]
    return withSentinels({
      transactionIndex: nat(tx.transactionIndex), hash: lower(tx.hash), from: lower(tx.from), to: lower(tx.to), gas: big(tx.gas),
      gasPrice: big(tx.gasPrice), maxFeePerGas: big(tx.maxFeePerGas), maxPriorityFeePerGas: big(tx.maxPriorityFeePerGas),
      input: lower(tx.input), nonce: nat(tx.nonce), value: big(tx.value), v: big(tx.v), r: lower(tx.r), s: lower(tx.s),
      yParity: nat(tx.yParity), chainId: nat(tx.chainId), gasUsed: big(rc.gasUsed), cumulativeGasUsed: big(rc.cumulativeGasUsed),
      effectiveGasPrice: big(rc.effectiveGasPrice), contractAddress: lower(rc.contractAddress), type: nat(rc.type ?? tx.type),
      // Receipts before Byzantium have no status: the archive derives it from the top-level trace.
      status: rc.status != null ? nat(rc.status) : topLevelStatus(r, i), sighash: sighash(tx.input),
    }, TRANSACTION_SENTINELS)
  })
}

function topLevelStatus(r: SourceBlock, txIndex: number): number | null {
  const top = r.parityTraces?.find((t: any) => t.transactionPosition === txIndex && t.traceAddress.length === 0)
  return top ? (top.error == null ? 1 : 0) : null
}

export function expectedLogs(r: SourceBlock) {
  return r.receipts.flatMap((rc: any) =>
    rc.logs.map((l: any) => ({
      logIndex: nat(l.logIndex), transactionIndex: nat(l.transactionIndex), transactionHash: lower(l.transactionHash),
      address: lower(l.address), data: lower(l.data), topics: l.topics.map(lower),
    })),
  )
}

export function expectedTraces(r: SourceBlock) {
  let rewards = 0
  return (r.parityTraces ?? []).map((t: any) => {
    const a = t.action
    const res = t.result
    const base = { transactionIndex: t.transactionPosition, traceAddress: t.traceAddress, type: t.type, subtraces: t.subtraces, error: t.error ?? null }
    switch (t.type) {
      case 'call':
        return {
          ...base,
          action: { callType: a.callType, from: lower(a.from), to: lower(a.to), value: big(a.value), gas: big(a.gas), input: lower(a.input), sighash: sighash(a.input) },
          result: res ? { gasUsed: big(res.gasUsed), output: lower(res.output ?? '0x') } : null,
        }
      case 'create':
        return {
          ...base,
          action: { from: lower(a.from), value: big(a.value), gas: big(a.gas), init: lower(a.init ?? '0x') },
          result: res ? { gasUsed: big(res.gasUsed), code: lower(res.code ?? '0x'), address: lower(res.address ?? ZERO_ADDRESS) } : null,
        }
      case 'suicide':
        return { ...base, action: { address: lower(a.address), refundAddress: lower(a.refundAddress), balance: big(a.balance) } }
      case 'reward':
        // Stored after the block's last transaction (docs/DECISIONS-LOCAL.md).
        return {
          ...base, transactionIndex: r.block.transactions.length, traceAddress: [rewards++],
          action: { author: lower(a.author), value: big(a.value), type: a.rewardType },
        }
      default:
        throw new Error(`trace type ${t.type} is not in the fixture`)
    }
  })
}

export function expectedStateDiffs(r: SourceBlock) {
  const out: any[] = []
  ;(r.replay ?? []).forEach((entry: any, txIndex: number) => {
    for (const [address, acc] of Object.entries<any>(entry.stateDiff ?? {})) {
      const add = (key: string, d: any) => {
        if (d === '=' || d == null) return
        const base = { transactionIndex: txIndex, address: address.toLowerCase(), key: key.toLowerCase() }
        if ('+' in d) out.push({ ...base, kind: '+', next: lower(d['+']) })
        else if ('-' in d) out.push({ ...base, kind: '-', prev: lower(d['-']) })
        else out.push({ ...base, kind: '*', prev: lower(d['*'].from), next: lower(d['*'].to) })
      }
      add('balance', acc.balance)
      add('code', acc.code)
      add('nonce', acc.nonce)
      for (const [slot, d] of Object.entries(acc.storage ?? {})) add(slot, d)
    }
  })
  const key = (d: any) => `${String(d.transactionIndex).padStart(6, '0')} ${d.address} ${d.key}`
  return out.sort((a, b) => (key(a) < key(b) ? -1 : 1))
}

// ---------------------------------------------------------------- running the processor

export interface Run {
  code: number | null
  batches: { nextHead: number; blocks: any[] }[]
  stderr: string
}

/** Run the processor (killed after `timeoutMs`); with `stopAtBlock` (open ranges never end) it is killed once that block arrived. */
export async function runProcessor(dir: string, name: string, config: Omit<ProcessorRunConfig, 'out'>, stopAtBlock?: number, timeoutMs = 60_000): Promise<Run> {
  const out = path.join(dir, `${name}.ndjson`)
  const configPath = path.join(dir, `${name}.json`)
  await writeFile(configPath, JSON.stringify({ ...config, out }))
  const child = spawn(process.execPath, [RUNNER], {
    env: { ...process.env, PROCESSOR_RUN_CONFIG: configPath, SQD_DEBUG: '' },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-20_000)))
  // read while the runner appends: only complete lines (a line may be half written, e.g. cut at 128 KiB)
  const read = () => {
    const text = existsSync(out) ? readFileSync(out, 'utf8') : ''
    return text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter(Boolean).map((l) => JSON.parse(l))
  }
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  const timeout = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
  try {
    if (stopAtBlock !== undefined) {
      for (;;) {
        const done = await Promise.race([exited.then(() => true), new Promise((r) => setTimeout(() => r(false), 100))])
        if (done || read().some((b) => b.nextHead >= stopAtBlock)) break
      }
      child.kill('SIGTERM')
    }
    const code = await exited
    return { code, batches: read(), stderr }
  } finally {
    clearTimeout(timeout)
    child.kill('SIGKILL')
  }
}

export const blocksOf = (run: Run) => run.batches.flatMap((b) => b.blocks)

/** Every block of `records` with every table and field: what `assertMatchesSource` checks. */
export const fullSync = (gateway: string, records: SourceBlock[]): Omit<ProcessorRunConfig, 'out'> => ({
  gateway,
  from: 0,
  to: records.at(-1)!.number,
  includeAllBlocks: true,
  transactions: [{}],
  logs: [{}],
  traces: [{}],
  stateDiffs: [{}],
  fields: ALL_FIELDS,
})

/**
 * Blocks the processor delivered (every table, ALL_FIELDS) equal `records` exactly: each block once,
 * in order, every item and field as in the source; and the totals are the fixture's, not the server's.
 */
export function assertMatchesSource(blocks: any[], records: SourceBlock[]): void {
  assert.deepEqual(blocks.map((b) => b.header.height), records.map((r) => r.number))
  let counts = { tx: 0, logs: 0, traces: 0, diffs: 0 }
  for (const b of blocks) {
    const r = records.find((x) => x.number === b.header.height)!
    const where = `block ${r.number}`
    assert.deepEqual(clean(b.header), clean(expectedHeader(r)), `${where} header`)
    assert.deepEqual(clean(b.transactions), clean(expectedTransactions(r)), `${where} transactions`)
    assert.deepEqual(clean(b.logs), clean(expectedLogs(r)), `${where} logs`)
    assert.deepEqual(clean(b.traces), clean(expectedTraces(r)), `${where} traces`)
    const key = (d: any) => `${String(d.transactionIndex).padStart(6, '0')} ${d.address} ${d.key}`
    const diffs = [...b.stateDiffs].sort((x: any, y: any) => (key(x) < key(y) ? -1 : 1))
    assert.deepEqual(clean(diffs), clean(expectedStateDiffs(r)), `${where} state diffs`)
    counts = { tx: counts.tx + b.transactions.length, logs: counts.logs + b.logs.length, traces: counts.traces + b.traces.length, diffs: counts.diffs + b.stateDiffs.length }
  }
  // The comparison covered real volumes (numbers from the fixture, not from the server).
  const src = records.reduce((s, r) => ({
    tx: s.tx + r.block.transactions.length,
    logs: s.logs + expectedLogs(r).length,
    traces: s.traces + (r.parityTraces ?? []).length,
    diffs: s.diffs + expectedStateDiffs(r).length,
  }), { tx: 0, logs: 0, traces: 0, diffs: 0 })
  assert.deepEqual(counts, src)
}
