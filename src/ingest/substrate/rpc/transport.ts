import { RpcClient, type RpcCall } from '../../rpc.js'

/*
 * How the Substrate source talks to a node: JSON-RPC calls and batches over HTTP(S) or WebSocket,
 * both through the one RpcClient (src/ingest/rpc.ts: batching, bounded concurrency, retries), cut
 * into batches of `batchSize` calls. A batch answers each call with its result or an `RpcError`
 * (the node's error answer), never throwing for one call.
 */

export interface SubstrateTransport {
  readonly url: string
  call(method: string, params?: unknown[]): Promise<any>
  /** Each call's result, or an `RpcError` for a call the node answered with an error. */
  batch(calls: RpcCall[]): Promise<unknown[]>
  close(): Promise<void>
}

export interface TransportOptions {
  url: string
  /** Requests in flight at once (default 4). */
  concurrency?: number
  /** Calls per JSON-RPC batch (default 100; 1 sends every call on its own). */
  batchSize?: number
  /** Time limit per request (default 60 s). */
  timeoutMs?: number
  /** Tries per request (default 8). */
  attempts?: number
}

export function createTransport(opts: TransportOptions): SubstrateTransport {
  const protocol = new URL(opts.url).protocol
  if (!['ws:', 'wss:', 'http:', 'https:'].includes(protocol)) throw new Error(`a Substrate RPC URL must be ws(s):// or http(s)://, got ${opts.url}`)
  return new RpcTransport(opts)
}

function chunks<T>(list: T[], size: number): T[][] {
  const out: T[][] = []
  for (let i = 0; i < list.length; i += size) out.push(list.slice(i, i + size))
  return out
}

export class RpcTransport implements SubstrateTransport {
  readonly url: string
  readonly client: RpcClient
  private readonly batchSize: number

  constructor(opts: TransportOptions) {
    this.url = opts.url
    this.batchSize = Math.max(1, opts.batchSize ?? 100)
    this.client = new RpcClient({ url: opts.url, concurrency: opts.concurrency, timeoutMs: opts.timeoutMs, attempts: opts.attempts })
  }

  call(method: string, params: unknown[] = []): Promise<any> {
    return this.client.call(method, params)
  }

  async batch(calls: RpcCall[]): Promise<unknown[]> {
    const parts = await Promise.all(chunks(calls, this.batchSize).map((c) => this.client.batch(c)))
    return parts.flat()
  }

  async close(): Promise<void> {
    this.client.close()
  }
}
