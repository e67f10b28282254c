import { randomBytes } from 'node:crypto'
import { open, writeFile } from 'node:fs/promises'
import path from 'node:path'
import type { RpcCall } from '../rpc.js'
import { int } from './normalize.js'
import type { BlockContext, EvmRpcSource } from './source.js'

/*
 * EVM blocks fetched into a spool (the default for blocks, transactions and logs; sql-normalize.ts
 * turns the spool into rows when the chunk closes). The answers of `eth_getBlockByNumber(n, true)`
 * and `eth_getBlockReceipts(n)` go to disk as the node sent them, one file per HTTP answer, with the
 * block number as JSON-RPC id. No JSON is parsed: a scan for a few keys (`scanBlocks`,
 * `scanReceipts`) takes what the ingest loop and the fetch need — each block's number, hash and
 * parent hash (continuity), its transaction hashes, and that the receipts answer is of this block and
 * lists its transactions in order. An answer the scan cannot vouch for (an error, a missing block,
 * receipts of another block or of other transactions, keys it does not find where expected) is
 * parsed and goes through the checks of source.ts exactly as without a spool (retries, per-transaction
 * receipts, the same errors); what it yields is then written to the spool as JSON.
 */

/** A block fetched into the spool: its identity for the loop, the files holding its answers, row counts. */
export interface SpooledBlock {
  number: number
  hash: string
  parentHash: string
  /** Size of its answers (bytes of JSON): what a chunk's byte bound counts. */
  bytes: number
  transactions: number
  logs: number
  files: { blocks: string; receipts: string }
  /**
   * Its answers may hold upper-case hex or an escaped character (or were re-serialised): the chunk
   * takes the SQL that checks every character.
   */
  checkHex: boolean
}

interface ScannedBlock extends BlockContext {
  parentHash: string
  bytes: number
}

/** What a scan found in a batch answer: per answer, its [start, end) in the body (it becomes one NDJSON line of the spool). */
interface Scanned<T> {
  items: T[]
  spans: [number, number][]
  checkHex: boolean
}

const q = (n: number) => '0x' + n.toString(16)
const HASH = /^0x[0-9a-fA-F]{64}$/

/*
 * The scans read the body's bytes in place (the HTTP client hands over ASCII bodies only, so a byte is
 * a character): no string is made of a body of many MB, which would be one more copy of it and, for
 * V8, external memory that brings on full garbage collections. Keys are searched without their opening
 * quote (then checked): the search looks for a pattern's first byte first, and quotes are everywhere in
 * JSON, letters such as `h`, `j`, `H` or `I` rarely outside keys.
 */

const key = (k: string) => Buffer.from(k, 'latin1')
const JSONRPC = key('jsonrpc"')

/**
 * The answers of a batch: [start, end) of each answer object, found by its `"jsonrpc"` member, which
 * nodes send first (`{"jsonrpc":…},{"jsonrpc":…}`, no white space between answers); undefined when
 * the body is laid out otherwise.
 */
function answerSpans(body: Buffer, count: number): [number, number][] | undefined {
  const starts: number[] = []
  for (let at = body.indexOf(JSONRPC); at >= 0; at = body.indexOf(JSONRPC, at + 8)) {
    if (body[at - 1] !== 34 || body[at - 2] !== 123) return undefined
    starts.push(at - 2)
  }
  if (starts.length !== count) return undefined
  let end = body.length
  while (end > 0 && body[end - 1] <= 32) end--
  const newline = body.indexOf(10 /* \n */)
  if (newline >= 0 && newline < end) return undefined // each answer becomes one line of the spool
  if (count > 1 || body[0] === 91 /* [ */) {
    if (body[starts[0] - 1] !== 91 || body[end - 1] !== 93 /* ] */) return undefined
    end--
  } else if (starts[0] !== 0) return undefined
  const spans: [number, number][] = []
  for (let i = 0; i < count; i++) {
    const to = i + 1 < count ? starts[i + 1] - 1 : end
    if (i + 1 < count && body[to] !== 44 /* , */) return undefined
    spans.push([starts[i], to])
  }
  return spans
}

/**
 * Whether the answer's hex values must be checked character by character: some `"0x…"` string has
 * an upper-case digit, or the body has a backslash. Without a backslash no string value holds a
 * quote, a backslash or a control character (raw ones are not JSON), so values taken as sent are
 * safe between quotes in the query engine's JSON (the `hex` field encoding).
 */
export function needsHexCheck(body: Buffer): boolean {
  return body.includes(92 /* \\ */) || hasUpperCaseHex(body)
}

/** Whether some `"0x…"` string has an upper-case hex digit (keys have upper-case letters too: each hit is looked at). */
export function hasUpperCaseHex(body: Buffer): boolean {
  for (let c = 65 /* A */; c <= 70 /* F */; c++) {
    for (let at = body.indexOf(c); at >= 0; at = body.indexOf(c, at + 1)) {
      let k = at - 1
      while (k > 1 && isHexDigit(body[k])) k--
      if (body[k] === 120 /* x */ && body[k - 1] === 48 /* 0 */ && body[k - 2] === 34 /* " */) return true
    }
  }
  return false
}

const isHexDigit = (c: number) => (c >= 48 && c <= 57) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70)

/** The first string value of `"key":"` at or after `from`, before `to`; `k` is the key's bytes without its opening quote. */
function valueAt(body: Buffer, k: Buffer, from: number, to: number): { at: number; value: string } | undefined {
  for (let at = body.indexOf(k, from); at >= 0 && at < to; at = body.indexOf(k, at + k.length)) {
    if (body[at - 1] !== 34) continue
    const start = at + k.length
    const end = body.indexOf(34 /* " */, start)
    return end < 0 || end > to ? undefined : { at, value: body.toString('latin1', start, end) }
  }
  return undefined
}

/** Whether `body` has `value` followed by a closing quote at `at`. */
function quotedAt(body: Buffer, value: string, at: number): boolean {
  const n = value.length
  if (body[at + n] !== 34) return false
  for (let i = 0; i < n; i++) if (body[at + i] !== value.charCodeAt(i)) return false
  return true
}

/** Whether `body` has `"` and the bytes of `word` (ASCII) just before `at`. */
function wordBefore(body: Buffer, word: string, at: number): boolean {
  const start = at - word.length
  if (body[start - 1] !== 34) return false
  for (let i = 0; i < word.length; i++) if (body[start + i] !== word.charCodeAt(i)) return false
  return true
}

const NUMBER = key('number":"')
const PARENT_HASH = key('parentHash":"')
const TRANSACTIONS = key('transactions":[')
const HASH_KEY = key('hash":"')
const ANY_HASH = key('Hash":"')
const ANY_INDEX = key('Index":')

/**
 * Blocks of an `eth_getBlockByNumber(n, true)` batch answer, in the asked order, or undefined when
 * the body is not plainly that (then it is parsed). Only the block has `number` and `parentHash`
 * members; `hash` is the block's and each transaction's (the block's is the one outside the
 * transactions array: before it, or else after it). A transaction without a hash, or a hash that is
 * not where it belongs, makes the receipts not match (the parsed way then names the problem).
 */
export function scanBlocks(body: Buffer, numbers: number[]): Scanned<ScannedBlock> | undefined {
  const spans = answerSpans(body, numbers.length)
  if (!spans) return undefined
  const out: ScannedBlock[] = []
  for (const [i, [from, to]] of spans.entries()) {
    const num = valueAt(body, NUMBER, from, to)
    const parent = valueAt(body, PARENT_HASH, from, to)
    if (!num || !parent || !/^0x[0-9a-fA-F]+$/.test(num.value) || parseInt(num.value, 16) !== numbers[i]) return undefined
    const txs = body.indexOf(TRANSACTIONS, from)
    if (txs < 0 || txs >= to || body[txs - 1] !== 34) return undefined
    const first = body[txs + 15]
    if (first !== 123 /* { */ && first !== 93 /* ] */) return undefined
    const hashes: { at: number; value: string }[] = []
    for (let h = valueAt(body, HASH_KEY, from, to); h; h = valueAt(body, HASH_KEY, h.at + 7, to)) hashes.push(h)
    if (!hashes.length) return undefined
    const own = hashes[0].at < txs ? 0 : hashes.length - 1
    const hash = hashes[own].value
    if (!HASH.test(hash) || !HASH.test(parent.value)) return undefined
    out.push({
      number: numbers[i],
      hash: hash.toLowerCase(),
      parentHash: parent.value.toLowerCase(),
      txHashes: hashes.filter((_, k) => k !== own).map((h) => h.value.toLowerCase()),
      bytes: to - from,
    })
  }
  return { items: out, spans, checkHex: needsHexCheck(body) }
}

/**
 * Per block, the logs and bytes of an `eth_getBlockReceipts` batch answer, or undefined unless every
 * answer is plainly of its block (every `blockHash` is the block's), names the block's transactions in
 * order (`transactionHash` of receipts and their logs, repeats collapsed) and numbers its logs with
 * increasing `logIndex` quantities. Values are compared where they stand (no strings are cut out).
 */
export function scanReceipts(body: Buffer, blocks: BlockContext[]): Scanned<{ logs: number; bytes: number }> | undefined {
  const spans = answerSpans(body, blocks.length)
  if (!spans) return undefined
  const out: { logs: number; bytes: number }[] = []
  for (const [i, [from, to]] of spans.entries()) {
    const b = blocks[i]
    // `"blockHash":"` and `"transactionHash":"` in one search
    let k = 0
    for (let at = body.indexOf(ANY_HASH, from); at >= 0 && at < to; at = body.indexOf(ANY_HASH, at + 7)) {
      if (wordBefore(body, 'block', at)) {
        if (!quotedAt(body, b.hash, at + 7)) return undefined
      } else if (wordBefore(body, 'transaction', at)) {
        if (k > 0 && quotedAt(body, b.txHashes[k - 1], at + 7)) continue
        if (k >= b.txHashes.length || !quotedAt(body, b.txHashes[k], at + 7)) return undefined
        k++
      }
    }
    if (k !== b.txHashes.length) return undefined
    // log indexes: hex quantities, increasing within the block (else the parsed way renumbers repeats, renumberLogs)
    let logs = 0
    let previous = -1
    for (let at = body.indexOf(ANY_INDEX, from); at >= 0 && at < to; at = body.indexOf(ANY_INDEX, at + 7)) {
      if (!wordBefore(body, 'log', at)) continue
      const index = hexQuantityAt(body, at + 7)
      if (index <= previous) return undefined
      previous = index
      logs++
    }
    out.push({ logs, bytes: to - from })
  }
  return { items: out, spans, checkHex: needsHexCheck(body) }
}

/** The value of the quoted hex quantity (`"0x…"`, at most 12 digits) at `at`, or -1. */
function hexQuantityAt(body: Buffer, at: number): number {
  if (body[at] !== 34 || body[at + 1] !== 48 || body[at + 2] !== 120) return -1
  let n = 0
  let i = at + 3
  for (; i < at + 15; i++) {
    const c = body[i]
    const d = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1
    if (d < 0) break
    n = n * 16 + d
  }
  return i > at + 3 && body[i] === 34 ? n : -1
}

/**
 * Blocks whose log indexes repeat (Stable numbers logs per transaction) get their logs numbered by
 * position within the block, as `logRows` in normalize.ts does; in place, before the receipts are spooled.
 */
function renumberLogs(receipts: any[]): any[] {
  const logs = receipts.flatMap((r) => (r && Array.isArray(r.logs) ? r.logs : []))
  const seen = new Set<unknown>()
  let repeats = false
  for (const l of logs) {
    let index: number | null
    try {
      index = int(l?.logIndex)
    } catch {
      return receipts // malformed: the checks at chunk close name it
    }
    if (seen.size === seen.add(index).size) repeats = true
  }
  if (repeats) logs.forEach((l, i) => (l.logIndex = '0x' + i.toString(16)))
  return receipts
}

/** Logs in a block's receipts (null receipts and receipts without a logs array count none). */
const logCount = (receipts: any[]): number => receipts.reduce((n, r) => n + (Array.isArray(r?.logs) ? r.logs.length : 0), 0)

function groups<T>(xs: T[], size: number): T[][] {
  const out: T[][] = []
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size))
  return out
}

/** Results of a batch answer that passed the scan (no error members), in the order of `ids`. */
function resultsOf(body: Buffer, ids: number[]): unknown[] {
  const json = JSON.parse(body.toString('utf8'))
  const answers: any[] = Array.isArray(json) ? json : [json]
  const byId = new Map(answers.map((a) => [a?.id, a?.result]))
  return ids.map((id) => byId.get(id))
}

const NL = Buffer.from('\n')

/** A spool file's content: one answer (`{…, "id": <block number>, "result": …}`) per line. */
type Lines = Buffer[] | string

/** The answers of a scanned body as lines: views of the body, no copy. */
const linesOf = (body: Buffer, spans: [number, number][]): Buffer[] => spans.flatMap(([from, to]) => [body.subarray(from, to), NL])

const linesText = (ids: number[], results: unknown[]): string => ids.map((id, i) => JSON.stringify({ id, result: results[i] })).join('\n') + '\n'

async function writeLines(file: string, lines: Lines): Promise<void> {
  if (typeof lines === 'string') return writeFile(file, lines)
  const h = await open(file, 'w')
  try {
    await h.writev(lines)
  } finally {
    await h.close()
  }
}

/**
 * Fetch `numbers` into the spool folder `dir`: one pair of NDJSON files (blocks, receipts) per group
 * of `batchSize` blocks. Throws what `EvmRpcSource.fetch` throws (BlockChanged, BlockNotAvailable,
 * BadRpcAnswer, RPC errors); files are written only once every answer passed its checks.
 */
export async function fetchSpooled(s: EvmRpcSource, numbers: number[], dir: string): Promise<SpooledBlock[]> {
  const parts = groups(numbers, s.batchSize)
  const blockCalls = (g: number[]): RpcCall[] => g.map((n) => ({ method: 'eth_getBlockByNumber', params: [q(n), true] }))
  const answers = await Promise.all(parts.map((g) => s.rpc.batchRaw(blockCalls(g), g, (body) => scanBlocks(body, g))))
  /** Bodies whose views are spooled (given back to the RPC client once written). */
  const bodies: Buffer[] = []
  const writes: { file: string; lines: Lines }[] = []
  const out: SpooledBlock[] = []
  const name = (g: number[]) => path.join(dir, `${g[0]}-${g[g.length - 1]}-${randomBytes(4).toString('hex')}`)

  if (answers.some((a) => 'answers' in a)) {
    // the slow way for the whole batch: parsed answers through the checks of source.ts
    const results = answers.flatMap((a, i) => ('answers' in a ? a.answers : resultsOf(a.body, parts[i])))
    const fetched = await s.fetch(numbers, results)
    const base = name(numbers)
    const files = { blocks: `${base}.blocks.ndjson`, receipts: `${base}.receipts.ndjson` }
    writes.push({ file: files.blocks, lines: linesText(numbers, fetched.map((f) => f.bundle.block)) })
    writes.push({ file: files.receipts, lines: linesText(numbers, fetched.map((f) => renumberLogs(f.bundle.receipts ?? []))) })
    for (const f of fetched) {
      const receipts = (f.bundle.receipts ?? []) as any[]
      out.push({
        number: f.number, hash: f.hash, parentHash: f.parentHash,
        bytes: JSON.stringify(f.bundle.block).length + JSON.stringify(receipts).length,
        transactions: f.bundle.block.transactions.length,
        logs: logCount(receipts),
        files, checkHex: true,
      })
    }
  } else {
    await Promise.all(parts.map(async (g, gi) => {
      const a = answers[gi] as { body: Buffer; scanned: Scanned<ScannedBlock> }
      const ctx = a.scanned.items
      const base = name(g)
      const files = { blocks: `${base}.blocks.ndjson`, receipts: `${base}.receipts.ndjson` }
      let perBlock: { logs: number; bytes: number }[]
      let checkHex = a.scanned.checkHex
      let receiptLines: Lines
      const r = s.receiptsByTx ? undefined : await s.rpc.batchRaw(g.map((n) => ({ method: 'eth_getBlockReceipts', params: [q(n)] })), g, (body) => scanReceipts(body, ctx))
      if (r && 'body' in r) {
        bodies.push(r.body)
        receiptLines = linesOf(r.body, r.scanned.spans)
        perBlock = r.scanned.items
        checkHex ||= r.scanned.checkHex
      } else {
        const lists = await s.fetchReceipts(ctx, r?.answers)
        receiptLines = linesText(g, lists.map(renumberLogs))
        checkHex = true
        perBlock = lists.map((list) => ({
          logs: logCount(list),
          bytes: JSON.stringify(list).length,
        }))
      }
      bodies.push(a.body)
      writes.push({ file: files.blocks, lines: linesOf(a.body, a.scanned.spans) }, { file: files.receipts, lines: receiptLines })
      ctx.forEach((b, i) => out.push({
        number: b.number, hash: b.hash, parentHash: b.parentHash, bytes: b.bytes + perBlock[i].bytes,
        transactions: b.txHashes.length, logs: perBlock[i].logs, files, checkHex,
      }))
    }))
    out.sort((x, y) => numbers.indexOf(x.number) - numbers.indexOf(y.number))
  }
  await Promise.all(writes.map((w) => writeLines(w.file, w.lines)))
  for (const body of bodies) s.rpc.releaseBody(body) // written out: their buffers take the next answers
  return out
}
