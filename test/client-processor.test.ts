import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { after, before, describe, it } from 'node:test'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { anvilRecords, tempDir, writeDataset, type AnvilRecord } from './helpers/dataset.js'
import type { ProcessorRunConfig } from './helpers/processor-run.js'

/*
 * The real `@subsquid/evm-processor@1.27.3` (in a child process: it exits when done) against a router
 * and two workers over the recorded anvil chain. What its handler got is compared, field by field,
 * with the raw RPC answers the chunks were built from (receipts, parity traces, replay state diffs),
 * transformed the way the SDK documents (quantities → bigint, timestamp × 1000, defaults for nulls).
 */

const RUNNER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'helpers/processor-run.js')
const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'
const ZERO_ADDRESS = '0x0000000000000000000000000000000000000000'

const ALL_FIELDS = {
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
      'callCallType', 'callResultGasUsed', 'callResultOutput', 'suicideAddress', 'suicideRefundAddress', 'suicideBalance'].map((f) => [f, true]),
  ),
  stateDiff: { kind: true, prev: true, next: true },
}

// ---------------------------------------------------------------- the source, as the SDK should see it

const lower = (v: unknown) => (typeof v === 'string' ? v.toLowerCase() : (v ?? null))
const big = (v: string | null | undefined) => (v == null ? null : BigInt(v).toString())
const nat = (v: string | number | null | undefined) => (v == null ? null : Number(v))
const sighash = (input: string | null | undefined) => (input && input.length >= 10 ? input.slice(0, 10).toLowerCase() : '0x')

/** Drop null/undefined members (the SDK leaves some absent, some null) and the SDK's own `id`. */
function clean(v: any): any {
  if (Array.isArray(v)) return v.map(clean)
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).filter(([k, x]) => x != null && k !== 'id' && k !== '_tx').map(([k, x]) => [k, clean(x)]))
  }
  return v
}

function expectedHeader(r: AnvilRecord) {
  const b = r.block
  return {
    height: nat(b.number), hash: lower(b.hash), parentHash: lower(b.parentHash), nonce: lower(b.nonce), sha3Uncles: lower(b.sha3Uncles),
    logsBloom: lower(b.logsBloom), transactionsRoot: lower(b.transactionsRoot), stateRoot: lower(b.stateRoot),
    receiptsRoot: lower(b.receiptsRoot), mixHash: lower(b.mixHash), miner: lower(b.miner), difficulty: big(b.difficulty),
    totalDifficulty: big(b.totalDifficulty), extraData: lower(b.extraData), size: nat(b.size), gasLimit: big(b.gasLimit),
    gasUsed: big(b.gasUsed), timestamp: Number(b.timestamp) * 1000, baseFeePerGas: big(b.baseFeePerGas),
    l1BlockNumber: b.l1BlockNumber == null ? 0 : nat(b.l1BlockNumber),
  }
}

function expectedTransactions(r: AnvilRecord) {
  return r.block.transactions.map((tx: any, i: number) => {
    const rc = r.receipts[i]
    return {
      transactionIndex: nat(tx.transactionIndex), hash: lower(tx.hash), from: lower(tx.from), to: lower(tx.to), gas: big(tx.gas),
      gasPrice: big(tx.gasPrice), maxFeePerGas: big(tx.maxFeePerGas), maxPriorityFeePerGas: big(tx.maxPriorityFeePerGas),
      input: lower(tx.input), nonce: nat(tx.nonce), value: big(tx.value), v: big(tx.v), r: lower(tx.r), s: lower(tx.s),
      yParity: nat(tx.yParity), chainId: nat(tx.chainId), gasUsed: big(rc.gasUsed), cumulativeGasUsed: big(rc.cumulativeGasUsed),
      effectiveGasPrice: big(rc.effectiveGasPrice), contractAddress: lower(rc.contractAddress), type: nat(rc.type ?? tx.type),
      status: nat(rc.status), sighash: sighash(tx.input),
    }
  })
}

function expectedLogs(r: AnvilRecord) {
  return r.receipts.flatMap((rc: any) =>
    rc.logs.map((l: any) => ({
      logIndex: nat(l.logIndex), transactionIndex: nat(l.transactionIndex), transactionHash: lower(l.transactionHash),
      address: lower(l.address), data: lower(l.data), topics: l.topics.map(lower),
    })),
  )
}

function expectedTraces(r: AnvilRecord) {
  return r.parityTraces.map((t: any) => {
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
      default:
        throw new Error(`trace type ${t.type} is not in the fixture`)
    }
  })
}

function expectedStateDiffs(r: AnvilRecord) {
  const out: any[] = []
  r.replay.forEach((entry: any, txIndex: number) => {
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

interface Run {
  code: number | null
  batches: { nextHead: number; blocks: any[] }[]
  stderr: string
}

/** Run the processor; with `stopAtBlock` (open ranges never end) it is killed once that block arrived. */
async function runProcessor(dir: string, name: string, config: Omit<ProcessorRunConfig, 'out'>, stopAtBlock?: number): Promise<Run> {
  const out = path.join(dir, `${name}.ndjson`)
  const configPath = path.join(dir, `${name}.json`)
  await writeFile(configPath, JSON.stringify({ ...config, out }))
  const child = spawn(process.execPath, [RUNNER], {
    env: { ...process.env, PROCESSOR_RUN_CONFIG: configPath, SQD_DEBUG: '' },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-20_000)))
  const read = () => (existsSync(out) ? readFileSync(out, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [])
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  const timeout = setTimeout(() => child.kill('SIGKILL'), 60_000)
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

const blocksOf = (run: Run) => run.batches.flatMap((b) => b.blocks)

describe('@subsquid/evm-processor against router + workers', { timeout: 180_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let cluster: Cluster
  let gateway: string

  before(async () => {
    tmp = await tempDir()
    records = await anvilRecords()
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    // A small size budget makes the processor walk the range in many steps, across both workers.
    cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 2, replication: 1, heartbeatMs: 200, budgets: { sizeBytes: 200_000 } })
    gateway = cluster.datasets.get('anvil')!
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('delivers every block, transaction, log, trace and state diff with every selected field as in the source', async () => {
    const run = await runProcessor(tmp.dir, 'full', {
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
    assert.equal(run.code, 0, run.stderr)
    assert.ok(run.batches.length > 1, 'expected several batches')
    const blocks = blocksOf(run)
    assert.deepEqual(blocks.map((b) => b.header.height), records.map((r) => r.number))
    let counts = { tx: 0, logs: 0, traces: 0, diffs: 0 }
    for (const b of blocks) {
      const r = records[b.header.height]
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
      traces: s.traces + r.parityTraces.length,
      diffs: s.diffs + expectedStateDiffs(r).length,
    }), { tx: 0, logs: 0, traces: 0, diffs: 0 })
    assert.deepEqual(counts, src)
  })

  it('honours filters and the transaction relation on an open range (no toBlock)', async () => {
    const height = records.at(-1)!.number
    const run = await runProcessor(tmp.dir, 'open', {
      gateway,
      from: 0,
      logs: [{ topic0: [TRANSFER], transaction: true }],
      traces: [{ type: ['create'], transaction: true }],
      fields: { log: { topics: true, address: true }, transaction: { hash: true, from: true }, trace: { createFrom: true } },
    }, height)
    const blocks = blocksOf(run)
    assert.ok(blocks.length > 0, run.stderr)
    assert.equal(blocks.at(-1).header.height, height)
    const heights = blocks.map((b) => b.header.height)
    assert.deepEqual(heights, [...new Set(heights)].sort((a, b) => a - b))
    const got = { logs: new Set<string>(), traces: new Set<string>(), txs: new Set<string>() }
    for (const b of blocks) {
      const r = records[b.header.height]
      for (const l of b.logs) {
        assert.equal(l.topics[0], TRANSFER)
        assert.equal(l._tx, l.transactionIndex, 'log not linked to its transaction')
        got.logs.add(`${r.number}:${l.logIndex}`)
      }
      for (const t of b.traces) {
        assert.equal(t.type, 'create')
        assert.equal(t._tx, t.transactionIndex, 'trace not linked to its transaction')
        assert.equal(t.action.from, r.parityTraces.find((p: any) => p.transactionPosition === t.transactionIndex && p.traceAddress.join() === t.traceAddress.join()).action.from.toLowerCase())
        got.traces.add(`${r.number}:${t.transactionIndex}:${t.traceAddress.join('.')}`)
      }
      for (const tx of b.transactions) {
        assert.equal(tx.hash, r.block.transactions[tx.transactionIndex].hash.toLowerCase())
        got.txs.add(`${r.number}:${tx.transactionIndex}`)
      }
    }
    const want = { logs: new Set<string>(), traces: new Set<string>(), txs: new Set<string>() }
    for (const r of records) {
      for (const l of expectedLogs(r)) {
        if (l.topics[0] !== TRANSFER) continue
        want.logs.add(`${r.number}:${l.logIndex}`)
        want.txs.add(`${r.number}:${l.transactionIndex}`)
      }
      for (const t of r.parityTraces) {
        if (t.type !== 'create') continue
        want.traces.add(`${r.number}:${t.transactionPosition}:${t.traceAddress.join('.')}`)
        want.txs.add(`${r.number}:${t.transactionPosition}`)
      }
    }
    assert.ok(want.logs.size > 0 && want.traces.size > 0)
    assert.deepEqual([...got.logs].sort(), [...want.logs].sort())
    assert.deepEqual([...got.traces].sort(), [...want.traces].sort())
    assert.deepEqual([...got.txs].sort(), [...want.txs].sort())
  })

  it('resumes from a stored height after checking its hash', async () => {
    const stored = records[60]
    const run = await runProcessor(tmp.dir, 'resume', {
      gateway,
      from: 0,
      to: 100,
      resume: { height: stored.number, hash: stored.block.hash },
      includeAllBlocks: true,
      fields: { block: { timestamp: true } },
    })
    assert.equal(run.code, 0, run.stderr)
    const blocks = blocksOf(run)
    assert.deepEqual(blocks.map((b) => b.header.height), records.slice(61, 101).map((r) => r.number))
    for (const b of blocks) {
      const { height, hash, parentHash, timestamp } = expectedHeader(records[b.header.height])
      assert.deepEqual(clean(b.header), { height, hash, parentHash, timestamp })
    }
  })

  it('refuses to resume when the stored hash is not on the chain', async () => {
    const run = await runProcessor(tmp.dir, 'fork', {
      gateway,
      from: 0,
      to: 100,
      resume: { height: 60, hash: records[61].block.hash },
      includeAllBlocks: true,
      fields: { block: { timestamp: true } },
    })
    assert.notEqual(run.code, 0)
    assert.equal(blocksOf(run).length, 0)
  })
})
