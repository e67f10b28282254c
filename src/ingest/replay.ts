import { createHash } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { normalizeHex } from '../families/declaration.js'

/*
 * A recorded-RPC replay server: answers the EVM and Starknet JSON-RPC methods the ingest uses from
 * recorded node answers (fixtures), so the ingest code path that talks to real nodes runs unchanged
 * on recorded mainnet data.
 *
 * Two modes:
 * - as recorded: each recorded block under its own number (sparse: unknown numbers answer null,
 *   as a node answers for blocks it does not have);
 * - repeat: the recorded blocks again and again as one long chain `first, first+1, …`, with new
 *   numbers and hashes and each block's parentHash set to the previous block's hash (transactions,
 *   receipts, logs and traces keep their content). For measuring ingest rates, resume and reorgs:
 *   `fork(n)` switches the chain from block n on to other hashes, as a reorg does.
 *
 * Starknet: `starknet_getBlockWithTxHashes` answers from the recorded block (with the `l1_accepted`
 * tag: the head).
 *
 * A method none of the recorded blocks has answers of (trace_block on a chain recorded without
 * traces, …) answers -32601, as a node without the method does; one recorded for other blocks only
 * answers -32000 naming the block.
 *
 * Answers are rendered from pre-serialised JSON with the block-identity fields as placeholders, so
 * the server costs little CPU next to the ingest it feeds.
 */

export interface RecordedBlock {
  number: number
  /** `eth_getBlockByNumber(n, true)`; absent when only traces of the block were recorded. */
  block?: any
  /** `eth_getBlockReceipts` as recorded (may lack receipts, as some Cronos answers do). */
  receipts?: any[]
  /** Further `eth_getTransactionReceipt` answers recorded for this block. */
  txReceipts?: any[]
  /** `trace_block` */
  traceBlock?: any[]
  /** `debug_traceBlockByNumber` callTracer: `[{txHash?, result}]` */
  callTraces?: any[]
  /** `trace_replayBlockTransactions`: `[{transactionHash, stateDiff?, trace?, output?}]` */
  replay?: any[]
  /** `debug_traceBlockByNumber` prestateTracer diffMode: `[{txHash?, result: {pre, post}}]` */
  prestate?: any[]
  /** A Starknet block instead: the results of the Starknet methods (served as recorded, no repeat mode). */
  starknet?: StarknetRecorded
}

export interface StarknetRecorded {
  /** `starknet_getBlockWithReceipts` */
  block: any
  /** `starknet_traceBlockTransactions` */
  traces?: any[]
  /** `starknet_getStateUpdate` */
  stateUpdate?: any
}

/** Starknet's JSON-RPC error for an unknown block. */
const STARKNET_BLOCK_NOT_FOUND = 24

const served = (b: RecordedBlock) => b.block != null || b.starknet != null

export interface ReplayOptions {
  host?: string
  port?: number
  /** Serve the recorded blocks `times` times over as one chain starting at `first` (default 0). */
  repeat?: { times: number; first?: number; seed?: string }
  /** Highest block the node admits to (eth_blockNumber; higher blocks answer null). Default: the last block. */
  head?: number
  /** `eth_chainId` answer (default: the chainId of the first recorded transaction, else 0x1). */
  chainId?: string
  /** Starknet: answer the `l1_accepted` block tag as a node before JSON-RPC 0.9 does (invalid block id). */
  noL1AcceptedTag?: boolean
  /** Test hook: change a result before it is sent (e.g. to break one field). */
  mutate?: (method: string, params: any[], result: unknown) => unknown
  /** Test hook: answer this HTTP request with a failure instead (status code), e.g. to test retries. */
  failRequest?: (requestNumber: number) => number | undefined
}

type Token = 'N' | 'NI' | 'H' | 'P'
const TOKEN_RE = /"@@BA_(N|NI|H|P)@@"/

/** An answer rendered straight into the response: its size in bytes, and writing it at `at` (returns the end). */
interface Rendered {
  size: number
  writeTo(out: Buffer, at: number): number
}

const isRendered = (x: unknown): x is Rendered => typeof x === 'object' && x != null && !Buffer.isBuffer(x) && 'writeTo' in x

/** The bytes of a rendered answer, in a buffer of their own. */
function materialize(r: Rendered): Buffer {
  const out = Buffer.allocUnsafe(r.size)
  r.writeTo(out, 0)
  return out
}

/** JSON text with block-identity placeholders, pre-encoded as UTF-8 and rendered per block number. */
class Template {
  private readonly parts: Buffer[]
  private readonly tokens: Token[]
  private readonly fixed: number

  constructor(value: unknown) {
    const text = JSON.stringify(value)
    const split = text.split(new RegExp(TOKEN_RE.source, 'g'))
    this.parts = split.filter((_, i) => i % 2 === 0).map((x) => Buffer.from(x, 'utf8'))
    this.tokens = split.filter((_, i) => i % 2 === 1) as Token[]
    this.fixed = this.parts.reduce((n, b) => n + b.length, 0)
  }

  /** The JSON of block `v`, to be written where the response needs it: the parts, the identity values in between. */
  bind(v: { number: number; hash: string; parentHash: string }): Rendered {
    const { parts, tokens } = this
    if (tokens.length === 0) return { size: parts[0].length, writeTo: (out, at) => at + parts[0].copy(out, at) }
    const values: Record<Token, string> = { N: `"0x${v.number.toString(16)}"`, NI: String(v.number), H: `"${v.hash}"`, P: `"${v.parentHash}"` }
    let size = this.fixed
    for (const t of tokens) size += values[t].length
    return {
      size,
      writeTo: (out, at) => {
        let o = at + parts[0].copy(out, at)
        for (let i = 0; i < tokens.length; i++) {
          o += out.write(values[tokens[i]], o, 'latin1')
          o += parts[i + 1].copy(out, o)
        }
        return o
      },
    }
  }
}

const tok = (t: Token) => `@@BA_${t}@@`
/** Answers of at least this many bytes are rendered into pooled buffers; at most this many buffers are kept. */
const POOLED = 64 * 1024
const POOL_BUFFERS = 8
const OPEN = Buffer.from('[')
const COMMA = Buffer.from(',')
const SHUT = Buffer.from(']')
const CLOSE = Buffer.from('}')

/** Pre-serialised answers of a recorded block; with `tokens`, its identity fields are placeholders (repeat mode). */
function withTokens(r: RecordedBlock, tokens: boolean) {
  const setBlockRef = (o: any, numberToken: Token = 'N') => {
    if (!tokens || !o || typeof o !== 'object') return o
    const c = { ...o }
    if ('blockHash' in c) c.blockHash = tok('H')
    if ('blockNumber' in c) c.blockNumber = tok(numberToken)
    return c
  }
  const receipt = (x: any) => {
    const c = setBlockRef(x)
    if (c && Array.isArray(c.logs)) c.logs = c.logs.map((l: any) => setBlockRef(l))
    return c
  }
  const t = (v: unknown) => (v === undefined ? undefined : new Template(v))
  const id = tokens ? { number: tok('N'), hash: tok('H'), parentHash: tok('P') } : {}
  return {
    block: r.block && t({ ...r.block, ...id, transactions: r.block.transactions.map((x: any) => (typeof x === 'object' ? setBlockRef(x) : x)) }),
    blockHashes: r.block && t({ ...r.block, ...id, transactions: r.block.transactions.map((x: any) => (typeof x === 'object' ? x.hash : x)) }),
    receipts: t(r.receipts?.map(receipt)),
    txReceipts: new Map<string, Template>([...(r.receipts ?? []), ...(r.txReceipts ?? [])].map((x) => [String(x.transactionHash).toLowerCase(), new Template(receipt(x))])),
    traceBlock: t(r.traceBlock?.map((x) => setBlockRef(x, 'NI'))),
    callTraces: t(r.callTraces),
    prestate: t(r.prestate),
    replay: r.replay,
  }
}

type Prepared = ReturnType<typeof withTokens>

export class RpcError extends Error {
  constructor(readonly code: number, message: string) {
    super(message)
  }
}

export class ReplayServer {
  private server?: Server
  private blocks: RecordedBlock[]
  private readonly prepared = new Map<number, Prepared>()
  private readonly byNumber = new Map<number, RecordedBlock>()
  private readonly txIndex = new Map<string, number>()
  private forkFrom = Infinity
  private requests = 0
  /** Response buffers of large answers, for reuse (`takeBuffer`). */
  private readonly pool: Buffer[] = []
  head: number
  readonly first: number
  readonly last: number
  url = ''
  /** Calls answered, per method. */
  readonly calls = new Map<string, number>()
  /** Methods none of the served blocks has answers of: they answer -32601, as a node without the method does. */
  private readonly lacks = new Set<string>()

  constructor(recorded: RecordedBlock[], private readonly opts: ReplayOptions = {}) {
    this.blocks = [...recorded].sort((a, b) => a.number - b.number)
    for (const r of this.blocks) this.byNumber.set(r.number, r)
    if (opts.repeat && this.blocks.some((b) => b.starknet)) throw new Error('repeat mode serves EVM blocks only')
    if (opts.repeat) {
      const withBlock = this.blocks.filter((b) => b.block)
      if (!withBlock.length) throw new Error('repeat mode needs recorded blocks')
      this.blocks = withBlock
      this.first = opts.repeat.first ?? 0
      this.last = this.first + withBlock.length * opts.repeat.times - 1
    } else {
      const numbers = this.blocks.filter(served).map((b) => b.number)
      this.first = numbers.length ? numbers[0] : 0
      this.last = numbers.length ? numbers[numbers.length - 1] : 0
      // eth_getTransactionReceipt answers come from the last block holding the transaction (as a node's tx index does)
      for (const r of this.blocks) for (const x of [...(r.receipts ?? []), ...(r.txReceipts ?? [])]) this.txIndex.set(String(x.transactionHash).toLowerCase(), r.number)
    }
    this.head = opts.head ?? this.last
    const none = (f: (b: RecordedBlock) => unknown) => !this.blocks.some((b) => f(b) != null)
    if (!this.blocks.some((b) => b.starknet)) {
      if (none((b) => b.receipts)) this.lacks.add('eth_getBlockReceipts')
      if (none((b) => b.traceBlock)) this.lacks.add('trace_block')
      if (none((b) => b.callTraces ?? b.prestate)) this.lacks.add('debug_traceBlockByNumber')
      if (none((b) => b.replay)) this.lacks.add('trace_replayBlockTransactions')
    }
  }

  /** Numbers of the blocks served (with headers), ascending. */
  numbers(): number[] {
    if (this.opts.repeat) return Array.from({ length: this.last - this.first + 1 }, (_, i) => this.first + i)
    return this.blocks.filter(served).map((b) => b.number)
  }

  /** Repeat mode: from block `n` on, blocks get other hashes (a reorg replacing n and later). */
  fork(n: number): void {
    if (!this.opts.repeat) throw new Error('fork() needs repeat mode')
    this.forkFrom = n
  }

  async start(): Promise<string> {
    this.server = createServer((req, res) => void this.handle(req, res))
    this.server.keepAliveTimeout = 30_000
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject)
      this.server!.listen(this.opts.port ?? 0, this.opts.host ?? '127.0.0.1', () => resolve())
    })
    const a = this.server.address() as AddressInfo
    this.url = `http://${a.address}:${a.port}`
    return this.url
  }

  async close(): Promise<void> {
    if (!this.server) return
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server!.close(() => resolve()))
    this.server = undefined
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const n = ++this.requests
    const chunks: Buffer[] = []
    for await (const c of req) chunks.push(c as Buffer)
    const fail = this.opts.failRequest?.(n)
    if (fail) {
      res.writeHead(fail, { 'content-type': 'text/plain' }).end(`injected failure of request ${n}`)
      return
    }
    let body: any
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
    } catch {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}')
      return
    }
    const parts: (Buffer | Rendered)[] = []
    const one = (c: any) => {
      const id = JSON.stringify(c?.id ?? null)
      try {
        // Named parameters (`{block_id: …}`) are taken in their declared order, which is all the methods here need.
        const params = Array.isArray(c?.params) ? c.params : c?.params && typeof c.params === 'object' ? Object.values(c.params) : []
        const result = this.answerLazy(String(c?.method), params)
        parts.push(Buffer.from(`{"jsonrpc":"2.0","id":${id},"result":`), typeof result === 'string' ? Buffer.from(result, 'utf8') : result, CLOSE)
      } catch (e: any) {
        const code = e instanceof RpcError ? e.code : -32603
        parts.push(Buffer.from(`{"jsonrpc":"2.0","id":${id},"error":${JSON.stringify({ code, message: e?.message ?? String(e) })}}`))
      }
    }
    if (Array.isArray(body)) {
      parts.push(OPEN)
      body.forEach((c, i) => {
        if (i > 0) parts.push(COMMA)
        one(c)
      })
      parts.push(SHUT)
    } else one(body)
    // the answers are rendered straight into one buffer, taken from a pool and given back once sent:
    // no buffer per answer, no copy to join them, and little garbage for V8 (buffers of many MB are
    // external memory, whose growth brings on full garbage collections)
    let size = 0
    for (const p of parts) size += Buffer.isBuffer(p) ? p.length : p.size
    const out = this.takeBuffer(size)
    let o = 0
    for (const p of parts) o = Buffer.isBuffer(p) ? o + p.copy(out, o) : p.writeTo(out, o)
    if (out.length >= POOLED) res.once('finish', () => this.giveBuffer(out))
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': size }).end(out.subarray(0, size))
  }

  /** A buffer of at least `size` bytes: from the pool for large answers. */
  private takeBuffer(size: number): Buffer {
    if (size < POOLED) return Buffer.allocUnsafe(size)
    let best = -1
    for (let i = 0; i < this.pool.length; i++) if (this.pool[i].length >= size && (best < 0 || this.pool[i].length < this.pool[best].length)) best = i
    if (best >= 0) return this.pool.splice(best, 1)[0]
    return Buffer.allocUnsafeSlow(Math.ceil(size * 1.25))
  }

  /** A response's buffer, once sent (`finish`: handed to the system), for the next answers. */
  private giveBuffer(b: Buffer): void {
    if (this.pool.length < POOL_BUFFERS) this.pool.push(b)
  }

  /** JSON of the result of one call (text, or UTF-8 bytes when rendered from a template). */
  answer(method: string, params: any[]): string | Buffer {
    const a = this.answerLazy(method, params)
    return isRendered(a) ? materialize(a) : a
  }

  /** The result of one call: text, or a template bound to its block, written into the response later. */
  private answerLazy(method: string, params: any[]): string | Rendered {
    this.calls.set(method, (this.calls.get(method) ?? 0) + 1)
    const a = this.answerRaw(method, params)
    if (!this.opts.mutate) return a
    const text = isRendered(a) ? materialize(a).toString() : a
    return JSON.stringify(this.opts.mutate(method, params, JSON.parse(text)) ?? null)
  }

  private answerRaw(method: string, params: any[]): string | Rendered {
    if (this.lacks.has(method)) throw new RpcError(-32601, `the method ${method} does not exist/is not available`)
    switch (method) {
      case 'eth_chainId':
        return JSON.stringify(this.opts.chainId ?? this.chainId())
      case 'eth_blockNumber':
        return `"0x${this.head.toString(16)}"`
      case 'eth_getBlockByNumber': {
        const n = this.blockParam(params[0])
        const p = n == null ? undefined : this.preparedFor(n)
        if (!p?.block) return 'null'
        return (params[1] ? p.block : p.blockHashes!).bind(this.identity(n!))
      }
      case 'eth_getBlockByHash': {
        const n = this.numberOfHash(params[0])
        const p = n == null ? undefined : this.preparedFor(n)
        if (!p?.block) return 'null'
        return (params[1] ? p.block : p.blockHashes!).bind(this.identity(n!))
      }
      case 'eth_getBlockReceipts': {
        const n = this.blockOrHashParam(params[0])
        const p = n == null ? undefined : this.preparedFor(n)
        if (!p?.block) return 'null'
        if (!p.receipts) throw new RpcError(-32000, `receipts of block ${n} were not recorded`)
        return p.receipts.bind(this.identity(n!))
      }
      case 'eth_getTransactionReceipt': {
        const h = String(params[0]).toLowerCase()
        const n = this.txIndex.get(h)
        if (n == null) return 'null'
        return this.preparedFor(n)!.txReceipts.get(h)!.bind(this.identity(n))
      }
      case 'trace_block': {
        const n = this.blockOrHashParam(params[0])
        const p = n == null ? undefined : this.preparedFor(n)
        if (!p) return 'null'
        if (!p.traceBlock) throw new RpcError(-32000, `trace_block of block ${n} was not recorded`)
        return p.traceBlock.bind(this.identity(n!))
      }
      case 'debug_traceBlockByNumber': {
        const n = this.blockParam(params[0])
        const tracer = params[1]?.tracer
        const p = n == null ? undefined : this.preparedFor(n)
        if (!p) throw new RpcError(-32000, `block ${params[0]} not found`)
        if (tracer === 'callTracer' && p.callTraces) return p.callTraces.bind(this.identity(n!))
        if (tracer === 'prestateTracer' && params[1]?.tracerConfig?.diffMode && p.prestate) return p.prestate.bind(this.identity(n!))
        throw new RpcError(-32000, `debug_traceBlockByNumber ${JSON.stringify(params[1] ?? {})} of block ${n} was not recorded`)
      }
      case 'trace_replayBlockTransactions': {
        const n = this.blockOrHashParam(params[0])
        const p = n == null ? undefined : this.preparedFor(n)
        if (!p) return 'null'
        const types: string[] = Array.isArray(params[1]) ? params[1] : []
        if (!p.replay || types.some((t) => !p.replay!.every((e) => t in e))) {
          throw new RpcError(-32000, `trace_replayBlockTransactions ${JSON.stringify(types)} of block ${n} was not recorded`)
        }
        return JSON.stringify(p.replay.map((e) => ({
          output: e.output ?? '0x',
          stateDiff: types.includes('stateDiff') ? e.stateDiff : null,
          trace: types.includes('trace') ? e.trace : [],
          transactionHash: e.transactionHash,
          vmTrace: types.includes('vmTrace') ? e.vmTrace : null,
        })))
      }
      case 'starknet_blockNumber':
        return String(this.head)
      case 'starknet_getBlockWithReceipts':
        return JSON.stringify(this.starknetBlock(params[0]).block)
      case 'starknet_getBlockWithTxHashes': {
        const { transactions, ...header } = this.starknetBlock(params[0]).block
        return JSON.stringify({ ...header, transactions: (transactions ?? []).map((t: any) => t.transaction?.transaction_hash ?? t.receipt?.transaction_hash) })
      }
      case 'starknet_traceBlockTransactions': {
        const b = this.starknetBlock(params[0])
        if (!b.traces) throw new RpcError(-32000, `starknet_traceBlockTransactions of block ${b.block.block_number} was not recorded`)
        return JSON.stringify(b.traces)
      }
      case 'starknet_getStateUpdate': {
        const b = this.starknetBlock(params[0])
        if (!b.stateUpdate) throw new RpcError(-32000, `starknet_getStateUpdate of block ${b.block.block_number} was not recorded`)
        return JSON.stringify(b.stateUpdate)
      }
      default:
        throw new RpcError(-32601, `the method ${method} does not exist/is not available`)
    }
  }

  /** The recorded Starknet block a block id (`{block_number}`, `{block_hash}`, `"latest"`) names; error 24 when there is none. */
  private starknetBlock(id: unknown): StarknetRecorded {
    let n: number | undefined
    if (id === 'l1_accepted' && this.opts.noL1AcceptedTag) throw new RpcError(-32602, `invalid block id ${JSON.stringify(id)}`)
    if (id === 'latest' || id === 'pending' || id === 'pre_confirmed' || id === 'l1_accepted') n = this.head
    else if (id && typeof id === 'object' && 'block_number' in id) n = Number((id as any).block_number)
    else if (id && typeof id === 'object' && 'block_hash' in id) {
      const h = normalizeHex(String((id as any).block_hash), 'felt')
      n = this.blocks.find((b) => b.starknet && normalizeHex(String(b.starknet.block.block_hash), 'felt') === h)?.number
    } else throw new RpcError(-32602, `invalid block id ${JSON.stringify(id)}`)
    const b = n == null || n > this.head ? undefined : this.byNumber.get(n)?.starknet
    if (!b) throw new RpcError(STARKNET_BLOCK_NOT_FOUND, 'Block not found')
    return b
  }

  private chainId(): string {
    for (const b of this.blocks) for (const t of b.block?.transactions ?? []) if (t?.chainId) return t.chainId
    return '0x1'
  }

  /** Number of a block parameter (quantity or tag), within what this node has. */
  private blockParam(p: unknown): number | undefined {
    let n: number
    if (p === 'latest' || p === 'safe' || p === 'finalized' || p === 'pending') n = this.head
    else if (p === 'earliest') n = this.first
    else if (typeof p === 'string' && /^0x[0-9a-f]+$/i.test(p)) n = parseInt(p, 16)
    else if (typeof p === 'number') n = p
    else throw new RpcError(-32602, `invalid block parameter ${JSON.stringify(p)}`)
    return n > this.head ? undefined : n
  }

  private blockOrHashParam(p: unknown): number | undefined {
    if (typeof p === 'string' && /^0x[0-9a-f]{64}$/i.test(p)) return this.numberOfHash(p)
    if (p && typeof p === 'object' && 'blockHash' in p) return this.numberOfHash((p as any).blockHash)
    if (p && typeof p === 'object' && 'blockNumber' in p) return this.blockParam((p as any).blockNumber)
    return this.blockParam(p)
  }

  private numberOfHash(h: unknown): number | undefined {
    const want = String(h).toLowerCase()
    if (this.opts.repeat) {
      throw new RpcError(-32000, 'block hashes are not indexed in repeat mode; ask by number')
    }
    for (const b of this.blocks) if (b.block && String(b.block.hash).toLowerCase() === want) return b.number <= this.head ? b.number : undefined
    return undefined
  }

  private preparedFor(n: number): Prepared | undefined {
    const r = this.opts.repeat ? (n >= this.first && n <= this.last ? this.blocks[(n - this.first) % this.blocks.length] : undefined) : this.byNumber.get(n)
    if (!r) return undefined
    let p = this.prepared.get(r.number)
    if (!p) {
      p = withTokens(r, this.opts.repeat != null)
      this.prepared.set(r.number, p)
    }
    return p
  }

  /**
   * Renders every served block's answers now rather than at its first request (for measuring a
   * client: many distinct blocks cost the server ≈ 25 ms each to render once).
   */
  prepareAll(): void {
    for (const r of this.blocks) if (!this.prepared.has(r.number)) this.prepared.set(r.number, withTokens(r, this.opts.repeat != null))
  }

  /** Number, hash and parent hash of block n as served. */
  identity(n: number): { number: number; hash: string; parentHash: string } {
    if (!this.opts.repeat) {
      const b = this.byNumber.get(n)!.block
      return { number: n, hash: b?.hash, parentHash: b?.parentHash }
    }
    return { number: n, hash: this.hashOf(n), parentHash: this.hashOf(n - 1) }
  }

  private hashOf(n: number): string {
    const seed = this.opts.repeat?.seed ?? 'block-archive-replay'
    return '0x' + createHash('sha256').update(`${seed}/${n >= this.forkFrom ? `fork-${this.forkFrom}` : "main"}/${n}`).digest('hex')
  }
}
