import assert from 'node:assert/strict'
import path from 'node:path'
import { existsSync } from 'node:fs'
import { listLocalChunks } from '../../src/chunks/layout.js'
import { connect, lit } from '../../src/db.js'
import type { FamilyDecl } from '../../src/families/declaration.js'

/*
 * What the chunk files must hold for the node's answers, written from the spec (REFERENCE.md §4,
 * DECISIONS.md §13) independently of src/ingest/evm/normalize.ts, and a comparison of every column
 * of every row. RPC fields that are deliberately not stored are listed (NOT_STORED), so a new field
 * the node sends is noticed instead of silently dropped.
 */

type Row = Record<string, unknown>

const hex = (v: unknown) => (v == null ? null : String(v).toLowerCase())
const qty = (v: unknown) => (v == null ? null : typeof v === 'number' ? v : Number(BigInt(v as string)))
const dec = (v: unknown) => (v == null ? null : BigInt(v as string | number).toString())
const lowerDeep = (v: unknown): unknown =>
  typeof v === 'string' ? (/^0x[0-9a-fA-F]*$/.test(v) ? v.toLowerCase() : v)
    : Array.isArray(v) ? v.map(lowerDeep)
      : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, lowerDeep(x)])) : v
const json = (v: unknown) => (v == null ? null : JSON.stringify(lowerDeep(v)))
const len = (v: string | null) => (v == null ? 0 : v.length)
const sighash = (input: string | null) => (input && input.length >= 10 ? input.slice(0, 10) : null)

/** RPC fields we do not store, per object kind (with the reason in docs/ingest.md). */
export const NOT_STORED: Record<string, string[]> = {
  block: ['transactions', 'sendCount', 'sendRoot', 'timestampMillis', 'consensusContext'],
  transaction: ['blockHash', 'blockNumber', 'blockTimestamp', 'timeoutTimestamp'],
  receipt: ['blockHash', 'blockNumber', 'blockTimestamp', 'from', 'to', 'transactionHash', 'transactionIndex', 'logs', 'root', 'gasUsedForL1', 'l1BlockNumber', 'feeToken', 'feePayer', 'type'],
  log: ['blockHash', 'blockNumber', 'blockTimestamp', 'removed', 'transactionLogIndex'],
}

function checkCovered(kind: string, obj: any, used: string[], where: string): void {
  const extra = Object.keys(obj).filter((k) => !used.includes(k) && !NOT_STORED[kind].includes(k))
  assert.deepEqual(extra, [], `${where}: RPC ${kind} fields neither stored nor listed as not stored`)
}

export function expectBlock(b: any): Row {
  checkCovered('block', b, ['number', 'hash', 'parentHash', 'nonce', 'sha3Uncles', 'logsBloom', 'transactionsRoot', 'stateRoot', 'receiptsRoot',
    'mixHash', 'miner', 'difficulty', 'totalDifficulty', 'extraData', 'size', 'gasLimit', 'gasUsed', 'timestamp', 'baseFeePerGas',
    'l1BlockNumber', 'blobGasUsed', 'excessBlobGas', 'uncles', 'withdrawals', 'withdrawalsRoot', 'parentBeaconBlockRoot',
    'requestsHash', 'mainBlockGeneralGasLimit', 'sharedGasLimit', 'timestampMillisPart'], `block ${b.number}`)
  const withdrawals = json(b.withdrawals)
  return {
    number: qty(b.number), hash: hex(b.hash), parent_hash: hex(b.parentHash), nonce: hex(b.nonce), sha3_uncles: hex(b.sha3Uncles),
    logs_bloom: hex(b.logsBloom), transactions_root: hex(b.transactionsRoot), state_root: hex(b.stateRoot),
    receipts_root: hex(b.receiptsRoot), mix_hash: hex(b.mixHash), miner: hex(b.miner), difficulty: hex(b.difficulty),
    total_difficulty: hex(b.totalDifficulty), extra_data: hex(b.extraData), size: qty(b.size), gas_limit: hex(b.gasLimit),
    gas_used: hex(b.gasUsed), timestamp: qty(b.timestamp), base_fee_per_gas: hex(b.baseFeePerGas),
    l1_block_number: qty(b.l1BlockNumber), blob_gas_used: hex(b.blobGasUsed), excess_blob_gas: hex(b.excessBlobGas),
    uncles: json(b.uncles), withdrawals, withdrawals_root: hex(b.withdrawalsRoot),
    parent_beacon_block_root: hex(b.parentBeaconBlockRoot), requests_hash: hex(b.requestsHash),
    main_block_general_gas_limit: hex(b.mainBlockGeneralGasLimit), shared_gas_limit: hex(b.sharedGasLimit),
    timestamp_millis_part: qty(b.timestampMillisPart), extra_data_size: len(hex(b.extraData)), withdrawals_size: len(withdrawals),
  }
}

export function expectTransaction(blockNumber: number, t: any, r: any | null, topTrace?: Row): Row {
  checkCovered('transaction', t, ['data', 'hash', 'nonce', 'from', 'to', 'input', 'value', 'gas', 'gasPrice', 'maxFeePerGas', 'maxPriorityFeePerGas',
    'v', 'r', 's', 'yParity', 'chainId', 'transactionIndex', 'type', 'maxFeePerBlobGas', 'blobVersionedHashes', 'accessList',
    'authorizationList', 'calls', 'nonceKey', 'signature', 'feeToken', 'feePayerSignature', 'aaAuthorizationList',
    'keyAuthorization', 'validBefore', 'validAfter'], `block ${blockNumber} tx ${t.hash}`)
  if (r) {
    checkCovered('receipt', r, ['contractAddress', 'gasUsed', 'cumulativeGasUsed', 'effectiveGasPrice', 'status', 'logsBloom',
      'blobGasUsed', 'blobGasPrice', 'l1Fee', 'l1FeeScalar', 'l1GasPrice', 'l1GasUsed', 'l1BlobBaseFee', 'l1BlobBaseFeeScalar',
      'l1BaseFeeScalar'], `block ${blockNumber} receipt ${t.hash}`)
    assert.equal(hex(r.transactionHash), hex(t.hash))
  }
  const input = hex(t.input ?? t.data ?? '0x') // Tempo 0x76 transactions carry `calls` and no input
  const accessList = json(t.accessList)
  const auth = t.authorizationList == null ? null : JSON.stringify(t.authorizationList.map((a: any) => ({
    chainId: qty(a.chainId), address: hex(a.address), nonce: qty(a.nonce), yParity: qty(a.yParity ?? a.v), r: hex(a.r), s: hex(a.s),
  })))
  const calls = json(t.calls)
  let status = r ? qty(r.status) : null
  if (status == null && topTrace) status = topTrace.error == null ? 1 : 0
  return {
    block_number: blockNumber, transaction_index: qty(t.transactionIndex), hash: hex(t.hash), nonce: dec(t.nonce),
    from: hex(t.from), to: hex(t.to), input, value: hex(t.value), gas: hex(t.gas), gas_price: hex(t.gasPrice),
    max_fee_per_gas: hex(t.maxFeePerGas), max_priority_fee_per_gas: hex(t.maxPriorityFeePerGas), v: hex(t.v), r: hex(t.r), s: hex(t.s),
    y_parity: qty(t.yParity), chain_id: dec(t.chainId), sighash: sighash(input),
    contract_address: r ? hex(r.contractAddress) : topTrace?.type === 'create' ? (topTrace.create_result_address as string) : null,
    gas_used: hex(r?.gasUsed), cumulative_gas_used: hex(r?.cumulativeGasUsed), effective_gas_price: hex(r?.effectiveGasPrice),
    type: qty(t.type), status, max_fee_per_blob_gas: hex(t.maxFeePerBlobGas),
    blob_versioned_hashes: t.blobVersionedHashes ? t.blobVersionedHashes.map(hex) : null,
    l1_fee: hex(r?.l1Fee), l1_fee_scalar: r?.l1FeeScalar == null ? null : String(r.l1FeeScalar), l1_gas_price: hex(r?.l1GasPrice),
    l1_gas_used: hex(r?.l1GasUsed), l1_blob_base_fee: hex(r?.l1BlobBaseFee), l1_blob_base_fee_scalar: dec(r?.l1BlobBaseFeeScalar),
    l1_base_fee_scalar: dec(r?.l1BaseFeeScalar), access_list: accessList, logs_bloom: hex(r?.logsBloom), blob_gas_used: hex(r?.blobGasUsed),
    blob_gas_price: hex(r?.blobGasPrice), authorization_list: auth, calls, nonce_key: hex(t.nonceKey), signature: json(t.signature),
    fee_token: hex(t.feeToken), fee_payer_v: hex(t.feePayerSignature?.v ?? t.feePayerSignature?.yParity),
    fee_payer_r: hex(t.feePayerSignature?.r), fee_payer_s: hex(t.feePayerSignature?.s),
    aa_authorization_list: json(t.aaAuthorizationList), key_authorization: json(t.keyAuthorization),
    valid_before: dec(t.validBefore), valid_after: dec(t.validAfter), input_size: len(input), access_list_size: len(accessList),
    authorization_list_size: len(auth), calls_size: len(calls),
  }
}

export function expectLogs(blockNumber: number, receipts: (any | null)[]): Row[] {
  const rows: Row[] = []
  for (const r of receipts) {
    for (const l of r?.logs ?? []) {
      checkCovered('log', l, ['logIndex', 'transactionIndex', 'transactionHash', 'address', 'data', 'topics'], `block ${blockNumber} log`)
      rows.push({
        block_number: blockNumber, log_index: qty(l.logIndex), transaction_index: qty(l.transactionIndex), transaction_hash: hex(l.transactionHash),
        address: hex(l.address), data: hex(l.data), topic0: hex(l.topics[0]), topic1: hex(l.topics[1]), topic2: hex(l.topics[2]),
        topic3: hex(l.topics[3]), data_size: len(hex(l.data)),
      })
    }
  }
  // a block whose logIndex repeats (per-transaction numbering, Stable) is numbered by position
  if (new Set(rows.map((r) => r.log_index)).size !== rows.length) rows.forEach((r, i) => (r.log_index = i))
  return rows
}

const NO_TRACE_FIELDS = {
  error: null, revert_reason: null, create_from: null, create_value: null, create_gas: null, create_init: null, create_result_gas_used: null,
  create_result_code: null, create_result_address: null, call_from: null, call_to: null, call_value: null, call_gas: null,
  call_sighash: null, call_input: null, call_type: null, call_result_gas_used: null, call_result_output: null, suicide_address: null,
  suicide_refund_address: null, suicide_balance: null, reward_author: null, reward_value: null, reward_type: null,
}
const traceSizes = (r: Row): Row => ({
  ...r,
  create_init_size: len(r.create_init as string | null), create_result_code_size: len(r.create_result_code as string | null),
  call_input_size: len(r.call_input as string | null), call_result_output_size: len(r.call_result_output as string | null),
})

/** Parity `trace_block` → trace rows (rewards after the last transaction, DECISIONS-LOCAL). */
export function expectParityTraces(blockNumber: number, traces: any[], txCount: number): Row[] {
  let reward = 0
  return traces.map((t) => {
    const a = t.action ?? {}
    const res = t.result ?? {}
    const isReward = t.type === 'reward' && t.transactionPosition == null
    const base: Row = {
      ...NO_TRACE_FIELDS, block_number: blockNumber, transaction_index: isReward ? txCount : t.transactionPosition,
      trace_address: isReward ? [reward++] : t.traceAddress, subtraces: t.subtraces, type: t.type, error: t.error ?? null,
      revert_reason: t.revertReason ?? null,
    }
    if (t.type === 'call') Object.assign(base, { call_from: hex(a.from), call_to: hex(a.to), call_value: hex(a.value), call_gas: hex(a.gas), call_input: hex(a.input), call_sighash: sighash(hex(a.input)), call_type: a.callType?.toLowerCase() ?? null, call_result_gas_used: hex(res.gasUsed), call_result_output: hex(res.output) })
    if (t.type === 'create') Object.assign(base, { create_from: hex(a.from), create_value: hex(a.value), create_gas: hex(a.gas), create_init: hex(a.init), create_result_gas_used: hex(res.gasUsed), create_result_code: hex(res.code), create_result_address: hex(res.address) })
    if (t.type === 'suicide') Object.assign(base, { suicide_address: hex(a.address), suicide_refund_address: hex(a.refundAddress), suicide_balance: hex(a.balance) })
    if (t.type === 'reward') Object.assign(base, { reward_author: hex(a.author), reward_value: hex(a.value), reward_type: a.rewardType ?? null })
    return traceSizes(base)
  })
}

/** geth callTracer frames → the same rows (DECISIONS-LOCAL: kinds, absent value = 0x0). */
export function expectCallTraces(blockNumber: number, perTx: any[]): Row[] {
  const rows: Row[] = []
  perTx.forEach((e, txIndex) => {
    const walk = (f: any, addr: number[]) => {
      const kind = String(f.type).toUpperCase()
      const calls = f.calls ?? []
      const base: Row = { ...NO_TRACE_FIELDS, block_number: blockNumber, transaction_index: txIndex, trace_address: addr, subtraces: calls.length, error: f.error ?? null, revert_reason: f.revertReason ?? null }
      if (kind === 'CREATE' || kind === 'CREATE2') Object.assign(base, { type: 'create', create_from: hex(f.from), create_value: hex(f.value ?? '0x0'), create_gas: hex(f.gas), create_init: hex(f.input), create_result_gas_used: hex(f.gasUsed), create_result_code: hex(f.output), create_result_address: hex(f.to) })
      else if (kind === 'SELFDESTRUCT') Object.assign(base, { type: 'suicide', suicide_address: hex(f.from), suicide_refund_address: hex(f.to), suicide_balance: hex(f.value ?? '0x0') })
      else Object.assign(base, { type: 'call', call_from: hex(f.from), call_to: hex(f.to), call_value: hex(f.value ?? '0x0'), call_gas: hex(f.gas), call_input: hex(f.input ?? '0x'), call_sighash: sighash(hex(f.input ?? '0x')), call_type: kind.toLowerCase(), call_result_gas_used: hex(f.gasUsed), call_result_output: hex(f.output) })
      rows.push(traceSizes(base))
      calls.forEach((c: any, i: number) => walk(c, [...addr, i]))
    }
    walk(e.result, [])
  })
  return rows
}

const diffRow = (block: number, tx: number, address: string, key: string, kind: string, prev: unknown, next: unknown): Row => ({
  block_number: block, transaction_index: tx, address: hex(address), key: key.startsWith('0x') ? key.toLowerCase() : key, kind,
  prev: hex(prev), next: hex(next), prev_size: len(hex(prev)), next_size: len(hex(next)),
})

/** `trace_replayBlockTransactions` stateDiff → rows; `=` entries are not stored. */
export function expectReplayDiffs(blockNumber: number, perTx: any[]): Row[] {
  const rows: Row[] = []
  perTx.forEach((e, tx) => {
    for (const [address, acc] of Object.entries<any>(e.stateDiff ?? {})) {
      const one = (key: string, d: any) => {
        if (d === '=') return
        if ('+' in d) rows.push(diffRow(blockNumber, tx, address, key, '+', null, d['+']))
        else if ('-' in d) rows.push(diffRow(blockNumber, tx, address, key, '-', d['-'], null))
        else rows.push(diffRow(blockNumber, tx, address, key, '*', d['*'].from, d['*'].to))
      }
      one('balance', acc.balance)
      one('code', acc.code)
      one('nonce', acc.nonce)
      for (const [slot, d] of Object.entries(acc.storage ?? {})) one(slot, d)
    }
  })
  return rows
}

/** prestateTracer diffMode → rows (py writer rules, DECISIONS-LOCAL). */
export function expectPrestateDiffs(blockNumber: number, perTx: any[]): Row[] {
  const rows: Row[] = []
  const q = (v: unknown) => (typeof v === 'number' ? '0x' + v.toString(16) : v)
  perTx.forEach((e, tx) => {
    const pre = e.result.pre ?? {}
    const post = e.result.post ?? {}
    for (const address of new Set([...Object.keys(pre), ...Object.keys(post)])) {
      const a = pre[address]
      const b = post[address]
      if (!b) {
        for (const k of ['balance', 'code', 'nonce']) if (a[k] != null) rows.push(diffRow(blockNumber, tx, address, k, '-', q(a[k]), null))
        for (const [s, v] of Object.entries(a.storage ?? {})) rows.push(diffRow(blockNumber, tx, address, s, '-', v, null))
        continue
      }
      for (const k of ['balance', 'code', 'nonce']) {
        if (b[k] == null) continue
        rows.push(a?.[k] == null ? diffRow(blockNumber, tx, address, k, '+', null, q(b[k])) : diffRow(blockNumber, tx, address, k, '*', q(a[k]), q(b[k])))
      }
      const ps = a?.storage ?? {}
      const ns = b.storage ?? {}
      for (const s of new Set([...Object.keys(ps), ...Object.keys(ns)])) {
        if (ns[s] == null) rows.push(diffRow(blockNumber, tx, address, s, '-', ps[s], null))
        else if (ps[s] == null) rows.push(diffRow(blockNumber, tx, address, s, '+', null, ns[s]))
        else rows.push(diffRow(blockNumber, tx, address, s, '*', ps[s], ns[s]))
      }
    }
  })
  return rows
}

/** Raw node answers of one block, as the ingest asked for them. */
export interface NodeBlock {
  block: any
  receipts: (any | null)[]
  traces?: any[]
  callTraces?: any[]
  replay?: any[]
  prestate?: any[]
}

export function expectTables(n: NodeBlock): Record<string, Row[]> {
  const number = qty(n.block.number) as number
  const out: Record<string, Row[]> = { blocks: [expectBlock(n.block)] }
  let traces: Row[] | undefined
  if (n.traces) traces = expectParityTraces(number, n.traces, n.block.transactions.length)
  if (n.callTraces) traces = expectCallTraces(number, n.callTraces)
  const top = new Map((traces ?? []).filter((t) => (t.trace_address as number[]).length === 0).map((t) => [t.transaction_index, t]))
  out.transactions = n.block.transactions.map((t: any, i: number) => expectTransaction(number, t, n.receipts[i], top.get(i)))
  out.logs = expectLogs(number, n.receipts)
  if (traces) out.traces = traces
  if (n.replay) out.statediffs = expectReplayDiffs(number, n.replay)
  if (n.prestate) out.statediffs = expectPrestateDiffs(number, n.prestate)
  return out
}

/** Rows of one table across every chunk of a dataset, as plain JS values (integers as strings). */
export async function readTable(dataset: string, table: string): Promise<Row[]> {
  const con = await connect()
  try {
    // the chunks a listing serves: a merged chunk, not the chunks it supersedes (compaction)
    const files = (await listLocalChunks(dataset)).map((c) => path.join(dataset, c.path, `${table}.parquet`)).filter((f) => existsSync(f))
    if (!files.length) return []
    const r = await con.runAndReadAll(`SELECT * FROM read_parquet([${files.map(lit).join(', ')}], union_by_name = true)`)
    return r.getRowObjectsJS().map((row) => canon(row) as Row)
  } finally {
    con.closeSync()
  }
}

/** Integers (number or bigint) as decimal strings, recursively, so both sides compare alike. */
export function canon(v: unknown): unknown {
  if (typeof v === 'bigint' || typeof v === 'number') return String(v)
  if (Array.isArray(v)) return v.map(canon)
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, canon(x)]))
  return v
}

const KEYS: Record<string, string[]> = {
  blocks: ['number'],
  transactions: ['block_number', 'transaction_index'],
  logs: ['block_number', 'log_index'],
  traces: ['block_number', 'transaction_index', 'trace_address'],
  statediffs: ['block_number', 'transaction_index', 'address', 'key'],
}

/**
 * Compare expected rows with the rows read back, by primary key, column by column; the column sets
 * must match too. Returns the number of values compared.
 */
export function compareRows(table: string, expected: Row[], actual: Row[]): number {
  const key = (r: Row) => KEYS[table].map((k) => JSON.stringify(canon(r[k]))).join('/')
  const have = new Map(actual.map((r) => [key(r), r]))
  assert.equal(have.size, actual.length, `${table}: duplicate primary keys in the chunk files`)
  assert.equal(actual.length, expected.length, `${table}: ${actual.length} rows in the chunks, ${expected.length} expected`)
  let values = 0
  for (const e of expected) {
    const k = key(e)
    const a = have.get(k)
    assert.ok(a, `${table}: row ${k} is missing`)
    assert.deepEqual(Object.keys(a).sort(), Object.keys(e).sort(), `${table} ${k}: columns differ`)
    for (const c of Object.keys(e)) {
      assert.deepEqual(a[c], canon(e[c]), `${table} ${k}: column ${c}`)
      values++
    }
  }
  return values
}

/**
 * Every value of the columns a family declares `hex` (written into the answer between quotes, not
 * escaped) in the dataset's chunk files is `0x` + lower-case hex digits. Returns how many non-null
 * values were checked.
 */
export async function assertHexColumns(dataset: string, family: FamilyDecl, tables: string[]): Promise<number> {
  const columns = new Map<string, Set<string>>()
  for (const item of [family.header, ...family.items]) {
    if (!tables.includes(item.table)) continue
    for (const f of Object.values(item.fields)) {
      if (f.encoding.kind === 'hex') (columns.get(item.table) ?? columns.set(item.table, new Set()).get(item.table)!).add(f.encoding.column)
    }
  }
  const con = await connect()
  let checked = 0
  try {
    for (const [table, cols] of columns) {
      const glob = lit(path.join(dataset, '*', '*', `${table}.parquet`))
      for (const c of cols) {
        const q = `"${c}"`
        const r = await con.runAndReadAll(
          `SELECT count(${q}), count(*) FILTER (WHERE NOT regexp_full_match(${q}, '0x[0-9a-f]*')), any_value(${q}) FILTER (WHERE NOT regexp_full_match(${q}, '0x[0-9a-f]*')) ` +
            `FROM read_parquet(${glob}, union_by_name = true)`,
        )
        const [n, bad, example] = r.getRows()[0]
        assert.equal(Number(bad), 0, `${table}.${c} is declared hex but holds ${JSON.stringify(example)}`)
        checked += Number(n)
      }
    }
  } finally {
    con.closeSync()
  }
  return checked
}

/** Every block of the dataset exactly once, in order, each linked to the one before; chunks without gaps. */
export async function checkChain(dir: string, first: number, last: number): Promise<void> {
  const blocks = (await readTable(dir, 'blocks')).sort((a, b) => Number(a.number) - Number(b.number))
  assert.deepEqual(blocks.map((b) => Number(b.number)), Array.from({ length: last - first + 1 }, (_, i) => first + i))
  for (let i = 1; i < blocks.length; i++) assert.equal(blocks[i].parent_hash, blocks[i - 1].hash, `block ${blocks[i].number} parent`)
  const chunks = await listLocalChunks(dir)
  for (let i = 1; i < chunks.length; i++) assert.equal(chunks[i].first, chunks[i - 1].last + 1, `gap before ${chunks[i].path}`)
}
