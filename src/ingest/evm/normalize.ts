import type { BlockRows, Row } from '../../chunks/rows.js'
import { MalformedRpcData } from '../source.js'
import { columnsOf, sourceLabel, sourcePath, type Conversion, type EvmSpooledTable, type JsonShape } from './columns.js'

/*
 * EVM JSON-RPC answers → table rows (columns of src/families/evm.ts). Blocks, transactions and logs
 * are built from the column map of columns.ts (as the SQL normaliser is); traces and state diffs here.
 * Hex is lower-cased; small integers become numbers; u64 values that may pass 2^53 become decimal
 * strings (DuckDB casts them into UBIGINT). JSON-valued columns hold JSON text.
 */

/** Everything fetched for one block. Absent parts mean the source did not provide them. */
export interface EvmBlockBundle {
  /** `eth_getBlockByNumber(n, true)` */
  block: any
  /**
   * `eth_getBlockReceipts` (or per-transaction receipts), one per transaction in order; null when the
   * node has none; a null entry is a transaction without a receipt (its receipt fields stay null).
   */
  receipts?: any[] | null
  /** Parity-style flat traces (`trace_block`). */
  traces?: any[]
  /** geth `debug_traceBlockByNumber` with callTracer: `[{txHash?, result: frame}]`, one per transaction. */
  callTraces?: any[]
  /** `trace_replayBlockTransactions(n, ['stateDiff'])`: `[{stateDiff, transactionHash?}]`, one per transaction. */
  stateDiffs?: any[]
  /** geth `debug_traceBlockByNumber` with prestateTracer diffMode: `[{txHash?, result: {pre, post}}]`. */
  prestateDiffs?: any[]
}

export { MalformedRpcData }

function fail(what: string): never {
  throw new MalformedRpcData(what)
}

const HEX = /^0x[0-9a-fA-F]*$/

/**
 * A 0x-prefixed hex string. Long even-length values (calldata, log data: most of a block's bytes)
 * are checked by Node's hex decoder, which stops at the first non-hex pair: about twice the speed
 * of the regular expression, which took 15 % of a fetch worker's time.
 */
function isHex(v: unknown): v is string {
  if (typeof v !== 'string') return false
  if (v.length < 256 || (v.length & 1) === 1) return HEX.test(v)
  return v.charCodeAt(0) === 48 && v.charCodeAt(1) === 120 && Buffer.from(v.slice(2), 'hex').length * 2 === v.length - 2
}

/** Lower-case hex string or null. */
export function hex(v: unknown, what = 'value'): string | null {
  if (v == null) return null
  if (!isHex(v)) fail(`${what}: expected a 0x-prefixed hex string, got ${JSON.stringify(v)}`)
  return v.toLowerCase()
}

/** Hex quantity (or JSON number) → JS number; must be a safe integer. */
export function int(v: unknown, what = 'value'): number | null {
  if (v == null) return null
  let n: number
  if (typeof v === 'number') n = v
  else if (isHex(v)) n = v.length === 2 ? 0 : parseInt(v, 16)
  else if (typeof v === 'string' && /^\d+$/.test(v)) n = Number(v)
  else fail(`${what}: expected a quantity, got ${JSON.stringify(v)}`)
  if (!Number.isSafeInteger(n)) fail(`${what}: ${JSON.stringify(v)} is not a safe integer`)
  return n
}

/** Hex quantity → decimal string (for UBIGINT columns). */
export function u64(v: unknown, what = 'value'): string | null {
  if (v == null) return null
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return String(v)
  if (typeof v === 'string' && /^\d+$/.test(v)) return v
  if (!isHex(v)) fail(`${what}: expected a quantity, got ${JSON.stringify(v)}`)
  const n = v.length === 2 ? 0n : BigInt(v)
  if (n >= 1n << 64n) fail(`${what}: ${v} does not fit in 64 bits`)
  return n.toString()
}

/** Lower-case every hex string inside a JSON value; returns JSON text or null. */
function jsonText(v: unknown): string | null {
  if (v == null) return null
  return JSON.stringify(lowerHexDeep(v))
}

export function lowerHexDeep(v: unknown): unknown {
  if (typeof v === 'string') return isHex(v) ? v.toLowerCase() : v
  if (Array.isArray(v)) return v.map(lowerHexDeep)
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, lowerHexDeep(x)]))
  return v
}

const size = (s: string | null) => (s == null ? 0 : s.length)
const sighashOf = (input: string | null) => (input && input.length >= 10 ? input.slice(0, 10) : null)

/** The raw objects one row is made from (columns.ts): the block number, block, transaction, receipt, log. */
interface Raw {
  n: number
  b?: any
  t?: any
  r?: any
  l?: any
}

const SHAPES: Record<JsonShape, (v: any) => boolean> = {
  array: Array.isArray,
  'object or array': (v) => v != null && typeof v === 'object',
  any: (v) => v != null,
}

/** What the generated row builders call. */
const HELPERS = {
  fail,
  size,
  sighashOf,
  json: Object.fromEntries(Object.entries(SHAPES).map(([shape, ok]) => [shape, (v: unknown) => (ok(v) ? jsonText(v) : null)])),
  convert: {
    hex,
    int,
    u64,
    text: (v: unknown) => (v == null ? null : String(v)),
    hexList: (v: unknown, what: string) => (Array.isArray(v) ? v.map((h) => hex(h, what)) : null),
    authorizationList: (v: unknown) => authorizationList(v),
  } satisfies Record<Exclude<Conversion['kind'], 'json' | 'blockNumber' | 'size' | 'sighash'>, (v: any, what: string) => unknown>,
}

const js = (v: unknown) => JSON.stringify(v)

/** JS reading a source's raw value (`a|b`: the first that is not null; else the default). */
function readExpr(from: string[], fallback?: string): string {
  const reads = from.map((source) => {
    const { object, field, member } = sourcePath(source)
    return `x.${object}?.[${js(field)}]${member == null ? '' : `?.[${js(member)}]`}`
  })
  if (fallback != null) reads.push(js(fallback))
  return reads.length === 1 ? reads[0] : `(${reads.join(' ?? ')})`
}

/** JS computing one column's value, from the raw objects (`x`) and the row's columns before it (`c<i>`). */
function columnExpr(c: Conversion, local: (column: string) => string): string {
  switch (c.kind) {
    case 'blockNumber':
      return 'x.n'
    case 'size':
      return `h.size(${local(c.of)})`
    case 'sighash':
      return `h.sighashOf(${local(c.of)})`
    case 'json':
      return `h.json[${js(c.shape)}](${readExpr(c.from)})`
    default: {
      const what = sourceLabel(c.from[0])
      const value = `h.convert.${c.kind}(${readExpr(c.from, c.default)}, ${js(what)})`
      return c.required ? `(${value} ?? h.fail(${js(`${what} is missing`)}))` : value
    }
  }
}

/**
 * The row builder of a table, generated from its column map (columns.ts) as one function that
 * builds the row as an object literal: as fast as a hand-written builder (a loop over per-column
 * closures took 1.5–2 times as long).
 */
function rowBuilder(table: EvmSpooledTable): (x: Raw) => Row {
  const columns = columnsOf(table)
  const local = (column: string) => `c${columns.findIndex(([name]) => name === column)}`
  const body =
    columns.map(([, c], i) => `const c${i} = ${columnExpr(c, local)}\n`).join('') +
    `return {${columns.map(([name], i) => `${js(name)}: c${i}`).join(', ')}}`
  const build = new Function('h', 'x', body) as (h: typeof HELPERS, x: Raw) => Row
  return (x) => build(HELPERS, x)
}

const buildBlock = rowBuilder('blocks')
const buildTransaction = rowBuilder('transactions')
const buildLog = rowBuilder('logs')

export function blockRow(b: any): Row {
  if (!b || typeof b !== 'object') fail('block: expected an object')
  return buildBlock({ n: 0, b })
}

function authorizationList(list: unknown): string | null {
  if (!Array.isArray(list)) return null
  return JSON.stringify(
    list.map((a: any) => ({
      chainId: int(a.chainId, 'authorizationList.chainId'),
      address: hex(a.address, 'authorizationList.address'),
      nonce: int(a.nonce, 'authorizationList.nonce'),
      yParity: int(a.yParity ?? a.v, 'authorizationList.yParity'),
      r: hex(a.r, 'authorizationList.r'),
      s: hex(a.s, 'authorizationList.s'),
    })),
  )
}

/**
 * A transaction's row. Without a receipt, a top-level trace (JS path only: blocks with traces)
 * gives the status and a created contract's address.
 */
function transactionRow(blockNumber: number, tx: any, receipt: any | undefined, topTrace: Row | undefined): Row {
  if (!tx || typeof tx !== 'object') fail(`block ${blockNumber}: transactions must be full objects (eth_getBlockByNumber with true)`)
  const row = buildTransaction({ n: blockNumber, t: tx, r: receipt ?? undefined })
  if (row.status == null && topTrace) row.status = topTrace.error == null ? 1 : 0
  if (!receipt && topTrace?.type === 'create') row.contract_address = (topTrace.create_result_address as string | null) ?? null
  return row
}

function logRows(blockNumber: number, receipts: any[]): Row[] {
  const rows: Row[] = []
  for (const [i, r] of receipts.entries()) {
    if (r == null) continue // a transaction the node has no receipt for (stored without receipt fields)
    if (!Array.isArray(r?.logs)) fail(`block ${blockNumber}: receipt without a logs array`)
    for (const [j, l] of r.logs.entries()) {
      // A log must belong to its receipt's transaction and block: an inconsistent node is not written down.
      // (Not its transactionIndex: Cronos numbers it without the transactions that have no receipt.)
      const at = `block ${blockNumber}: log ${j} of receipt ${i} (transaction ${r.transactionHash})`
      if (l?.transactionHash != null && hex(l.transactionHash) !== hex(r.transactionHash)) fail(`${at} names transaction ${l.transactionHash}`)
      if (l?.blockHash != null && r.blockHash != null && hex(l.blockHash) !== hex(r.blockHash)) fail(`${at} says it is in block ${l.blockHash}, its receipt in ${r.blockHash}`)
      const topics: unknown[] = Array.isArray(l.topics) ? l.topics : fail(`block ${blockNumber}: log without topics`)
      if (topics.length > 4) fail(`block ${blockNumber}: log with ${topics.length} topics`)
      rows.push(buildLog({ n: blockNumber, r, l }))
    }
  }
  // logIndex is the position within the block; some chains (Stable) number logs per transaction,
  // which would repeat indexes within a block: those blocks get their logs numbered by position.
  const seen = new Set<unknown>()
  if (rows.some((r) => seen.size === seen.add(r.log_index).size)) rows.forEach((r, i) => (r.log_index = i))
  return rows
}

const EMPTY_TRACE = {
  subtraces: 0, error: null, revert_reason: null,
  create_from: null, create_value: null, create_gas: null, create_init: null, create_result_gas_used: null,
  create_result_code: null, create_result_address: null,
  call_from: null, call_to: null, call_value: null, call_gas: null, call_sighash: null, call_input: null, call_type: null,
  call_result_gas_used: null, call_result_output: null,
  suicide_address: null, suicide_refund_address: null, suicide_balance: null,
  reward_author: null, reward_value: null, reward_type: null,
}

function withSizes(row: Row): Row {
  row.create_init_size = size(row.create_init as string | null)
  row.create_result_code_size = size(row.create_result_code as string | null)
  row.call_input_size = size(row.call_input as string | null)
  row.call_result_output_size = size(row.call_result_output as string | null)
  return row
}

/** Parity `trace_block` traces → rows. Reward traces (no transaction) go after the last transaction. */
export function parityTraceRows(blockNumber: number, traces: any[], txCount: number): Row[] {
  const rows: Row[] = []
  let rewards = 0
  for (const t of traces) {
    const a = t.action ?? {}
    const res = t.result ?? {}
    const isReward = t.type === 'reward'
    const row: Row = {
      block_number: blockNumber,
      transaction_index: isReward && t.transactionPosition == null ? txCount : int(t.transactionPosition, 'trace.transactionPosition'),
      trace_address: isReward && t.transactionPosition == null ? [rewards++] : (t.traceAddress ?? []).map((x: unknown) => int(x)),
      type: t.type,
      ...EMPTY_TRACE,
      subtraces: int(t.subtraces, 'trace.subtraces') ?? 0,
      error: t.error ?? null,
      revert_reason: t.revertReason ?? null,
    }
    switch (t.type) {
      case 'call':
        Object.assign(row, {
          call_from: hex(a.from), call_to: hex(a.to), call_value: hex(a.value), call_gas: hex(a.gas),
          call_input: hex(a.input), call_sighash: sighashOf(hex(a.input)), call_type: a.callType?.toLowerCase() ?? null,
          call_result_gas_used: hex(res.gasUsed), call_result_output: hex(res.output),
        })
        break
      case 'create':
        Object.assign(row, {
          create_from: hex(a.from), create_value: hex(a.value), create_gas: hex(a.gas), create_init: hex(a.init),
          create_result_gas_used: hex(res.gasUsed), create_result_code: hex(res.code), create_result_address: hex(res.address),
        })
        break
      case 'suicide':
        Object.assign(row, { suicide_address: hex(a.address), suicide_refund_address: hex(a.refundAddress), suicide_balance: hex(a.balance) })
        break
      case 'reward':
        Object.assign(row, { reward_author: hex(a.author), reward_value: hex(a.value), reward_type: a.rewardType ?? null })
        break
      default:
        fail(`block ${blockNumber}: unknown trace type ${JSON.stringify(t.type)}`)
    }
    rows.push(withSizes(row))
  }
  return rows
}

/** geth callTracer frames (one tree per transaction) → the same flat rows as parity traces. */
export function callTracerRows(blockNumber: number, perTx: any[]): Row[] {
  const rows: Row[] = []
  perTx.forEach((entry, txIndex) => {
    const frame = entry?.result ?? entry
    if (!frame || typeof frame !== 'object' || !frame.type) {
      fail(`block ${blockNumber}: callTracer result for transaction ${txIndex} has no frame${entry?.error ? ` (${entry.error})` : ''}`)
    }
    const walk = (f: any, address: number[]) => {
      const children: any[] = Array.isArray(f.calls) ? f.calls : []
      const kind = String(f.type).toUpperCase()
      const row: Row = {
        block_number: blockNumber, transaction_index: txIndex, trace_address: address, type: '', ...EMPTY_TRACE,
        subtraces: children.length, error: f.error ?? null, revert_reason: f.revertReason ?? null,
      }
      if (kind === 'CREATE' || kind === 'CREATE2') {
        Object.assign(row, {
          type: 'create', create_from: hex(f.from), create_value: hex(f.value ?? '0x0'), create_gas: hex(f.gas),
          create_init: hex(f.input), create_result_gas_used: hex(f.gasUsed), create_result_code: hex(f.output ?? null),
          create_result_address: hex(f.to),
        })
      } else if (kind === 'SELFDESTRUCT') {
        Object.assign(row, { type: 'suicide', suicide_address: hex(f.from), suicide_refund_address: hex(f.to), suicide_balance: hex(f.value ?? '0x0') })
      } else if (kind === 'CALL' || kind === 'STATICCALL' || kind === 'DELEGATECALL' || kind === 'CALLCODE') {
        const input = hex(f.input ?? '0x')
        Object.assign(row, {
          type: 'call', call_from: hex(f.from), call_to: hex(f.to), call_value: hex(f.value ?? '0x0'), call_gas: hex(f.gas),
          call_input: input, call_sighash: sighashOf(input), call_type: kind.toLowerCase(),
          call_result_gas_used: hex(f.gasUsed), call_result_output: hex(f.output ?? null),
        })
      } else {
        fail(`block ${blockNumber}: unknown callTracer frame type ${JSON.stringify(f.type)}`)
      }
      rows.push(withSizes(row))
      children.forEach((c, i) => walk(c, [...address, i]))
    }
    walk(frame, [])
  })
  return rows
}

/** `trace_replayBlockTransactions` stateDiff → rows; unchanged (`=`) entries are skipped. */
export function replayStateDiffRows(blockNumber: number, perTx: any[]): Row[] {
  const rows: Row[] = []
  perTx.forEach((entry, txIndex) => {
    const diff = entry?.stateDiff
    if (diff == null) return
    for (const [address, acc] of Object.entries<any>(diff)) {
      const add = (key: string, d: any) => {
        if (d === '=' || d == null) return
        if ('+' in d) rows.push(sd(blockNumber, txIndex, address, key, '+', null, d['+']))
        else if ('-' in d) rows.push(sd(blockNumber, txIndex, address, key, '-', d['-'], null))
        else if ('*' in d) rows.push(sd(blockNumber, txIndex, address, key, '*', d['*'].from, d['*'].to))
        else fail(`block ${blockNumber}: unknown state diff entry ${JSON.stringify(d)}`)
      }
      add('balance', acc.balance)
      add('code', acc.code)
      add('nonce', acc.nonce)
      for (const [slot, d] of Object.entries<any>(acc.storage ?? {})) add(slot, d)
    }
  })
  return rows
}

/** prestateTracer diffMode (`{pre, post}` per transaction) → rows, following the py writer's rules. */
export function prestateDiffRows(blockNumber: number, perTx: any[]): Row[] {
  const rows: Row[] = []
  const q = (v: unknown) => (typeof v === 'number' ? '0x' + v.toString(16) : (v as string | undefined))
  perTx.forEach((entry, txIndex) => {
    const res = entry?.result ?? entry
    if (!res || typeof res !== 'object' || !('pre' in res || 'post' in res)) {
      fail(`block ${blockNumber}: prestate diff for transaction ${txIndex} has no pre/post`)
    }
    const pre: Record<string, any> = res.pre ?? {}
    const post: Record<string, any> = res.post ?? {}
    for (const address of new Set([...Object.keys(pre), ...Object.keys(post)])) {
      const a = pre[address]
      const b = post[address]
      if (b == null) {
        // account removed (selfdestruct)
        for (const key of ['balance', 'code', 'nonce'] as const) {
          if (a[key] != null) rows.push(sd(blockNumber, txIndex, address, key, '-', q(a[key]), null))
        }
        for (const [slot, v] of Object.entries<any>(a.storage ?? {})) rows.push(sd(blockNumber, txIndex, address, slot, '-', v, null))
        continue
      }
      for (const key of ['balance', 'code', 'nonce'] as const) {
        if (b[key] == null) continue
        if (a?.[key] == null) rows.push(sd(blockNumber, txIndex, address, key, '+', null, q(b[key])))
        else rows.push(sd(blockNumber, txIndex, address, key, '*', q(a[key]), q(b[key])))
      }
      const preSlots: Record<string, any> = a?.storage ?? {}
      const postSlots: Record<string, any> = b.storage ?? {}
      for (const slot of new Set([...Object.keys(preSlots), ...Object.keys(postSlots)])) {
        const p = preSlots[slot]
        const n = postSlots[slot]
        if (n == null) rows.push(sd(blockNumber, txIndex, address, slot, '-', p, null))
        else if (p == null) rows.push(sd(blockNumber, txIndex, address, slot, '+', null, n))
        else rows.push(sd(blockNumber, txIndex, address, slot, '*', p, n))
      }
    }
  })
  return rows
}

function sd(block: number, tx: number, address: string, key: string, kind: string, prev: unknown, next: unknown): Row {
  const p = hex(prev ?? null, 'stateDiff.prev')
  const n = hex(next ?? null, 'stateDiff.next')
  return {
    block_number: block,
    transaction_index: tx,
    address: hex(address, 'stateDiff.address'),
    key: key.startsWith('0x') ? key.toLowerCase() : key,
    kind,
    prev: p,
    next: n,
    prev_size: size(p),
    next_size: size(n),
  }
}

/** The tables a bundle provides rows for. */
export function bundleTables(b: EvmBlockBundle): string[] {
  const t = ['blocks', 'transactions', 'logs']
  if (b.traces || b.callTraces) t.push('traces')
  if (b.stateDiffs || b.prestateDiffs) t.push('statediffs')
  return t
}

export function normalizeEvmBlock(bundle: EvmBlockBundle): BlockRows {
  const block = blockRow(bundle.block)
  const number = block.number as number
  const txs: any[] = Array.isArray(bundle.block.transactions) ? bundle.block.transactions : fail(`block ${number}: no transactions array`)
  const receipts = bundle.receipts ?? null
  if (receipts && receipts.length !== txs.length) {
    fail(`block ${number}: ${receipts.length} receipts for ${txs.length} transactions`)
  }
  let traces: Row[] | undefined
  if (bundle.traces) traces = parityTraceRows(number, bundle.traces, txs.length)
  else if (bundle.callTraces) traces = callTracerRows(number, bundle.callTraces)
  const topTraces = new Map<number, Row>()
  for (const t of traces ?? []) if ((t.trace_address as number[]).length === 0) topTraces.set(t.transaction_index as number, t)

  const rows: BlockRows = {
    blocks: [block],
    transactions: txs.map((tx, i) => {
      const receipt = receipts?.[i]
      if (receipt && hex(receipt.transactionHash) !== hex(tx.hash)) {
        fail(`block ${number}: receipt ${i} is for ${receipt.transactionHash}, not ${tx.hash}`)
      }
      return transactionRow(number, tx, receipt, topTraces.get(i))
    }),
    logs: receipts ? logRows(number, receipts) : [],
  }
  if (traces) rows.traces = traces
  if (bundle.stateDiffs) rows.statediffs = replayStateDiffRows(number, bundle.stateDiffs)
  else if (bundle.prestateDiffs) rows.statediffs = prestateDiffRows(number, bundle.prestateDiffs)
  return rows
}
