import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRequire } from 'node:module'
import { after, before, describe, it } from 'node:test'
import { RpcClient, RpcError, RpcUnavailable } from '../src/ingest/rpc.js'

/*
 * The JSON-RPC client over WebSocket against a real WebSocket server (the `websocket` package's,
 * the same library the client's connection uses) that misbehaves the ways nodes do: it drops the
 * connection mid-request, says it is busy, answers with errors. Retries, messages and the results
 * must be those of the client over HTTP.
 */

// resolved from @subsquid/rpc-client, which depends on it (no dependency of this package's own)
const fromRpcClient = createRequire(createRequire(import.meta.url).resolve('@subsquid/rpc-client'))
const { server: WebSocketServer } = fromRpcClient('websocket') as { server: new (o: object) => any }

/** What the server does with the next request: answer, drop the connection, or say it is busy. */
type Mode = 'answer' | 'drop' | 'busy'

describe('JSON-RPC client over WebSocket', { timeout: 120_000 }, () => {
  let httpServer: http.Server
  let url: string
  const plan: Mode[] = []
  let connections = 0

  const answer = (req: any) => {
    if (req.method === 'eth_blockNumber') return { jsonrpc: '2.0', id: req.id, result: '0x10' }
    if (req.method === 'echo') return { jsonrpc: '2.0', id: req.id, result: req.params }
    return { jsonrpc: '2.0', id: req.id, error: { code: -32601, message: `the method ${req.method} does not exist/is not available` } }
  }

  before(async () => {
    httpServer = http.createServer()
    const ws = new WebSocketServer({ httpServer, autoAcceptConnections: false })
    ws.on('request', (request: any) => {
      const conn = request.accept(null, request.origin)
      connections++
      conn.on('message', (msg: any) => {
        const body = JSON.parse(msg.utf8Data)
        const mode = plan.shift() ?? 'answer'
        if (mode === 'drop') return conn.drop()
        const one = (r: any) => (mode === 'busy' ? { jsonrpc: '2.0', id: r.id, error: { code: -32005, message: 'server busy, try again' } } : answer(r))
        conn.sendUTF(JSON.stringify(Array.isArray(body) ? body.map(one) : one(body)))
      })
    })
    await new Promise<void>((resolve) => httpServer.listen(0, '127.0.0.1', resolve))
    url = `ws://127.0.0.1:${(httpServer.address() as AddressInfo).port}`
  })

  after(() => {
    httpServer.closeAllConnections()
    httpServer.close()
  })

  it('answers calls and batches in order, and error answers as RpcError naming the call', async () => {
    const rpc = new RpcClient({ url, backoffMs: 1 })
    try {
      assert.equal(await rpc.call('eth_blockNumber'), '0x10')
      const r = await rpc.batch([{ method: 'echo', params: [1] }, { method: 'nope', params: ['0x1'] }, { method: 'echo', params: ['b'] }])
      assert.deepEqual(r[0], [1])
      assert.deepEqual(r[2], ['b'])
      assert.ok(r[1] instanceof RpcError)
      assert.equal((r[1] as RpcError).message, 'nope("0x1") failed: the method nope does not exist/is not available (code -32601)')
      assert.ok((r[1] as RpcError).unsupported)
      await assert.rejects(rpc.call('nope', []), /^Error: nope\(\) failed: the method nope does not exist/)
      assert.equal(rpc.stats.retries, 0)
    } finally {
      rpc.close()
    }
  })

  it('opens the connection again after it dropped, and retries busy answers', async () => {
    const rpc = new RpcClient({ url, backoffMs: 1 })
    try {
      assert.equal(await rpc.call('eth_blockNumber'), '0x10')
      const before = connections
      plan.push('drop', 'busy')
      assert.deepEqual(await rpc.batch([{ method: 'echo', params: ['x'] }, { method: 'echo', params: ['y'] }]), [['x'], ['y']])
      assert.equal(rpc.stats.retries, 2)
      assert.equal(connections, before + 1, 'one new connection after the drop')
    } finally {
      rpc.close()
    }
  })

  it('gives up after --attempts with the same message as over HTTP', async () => {
    const rpc = new RpcClient({ url, backoffMs: 1, attempts: 3 })
    try {
      plan.push('drop', 'drop', 'drop')
      await assert.rejects(rpc.call('eth_blockNumber'), (e: Error) => {
        assert.ok(e instanceof RpcUnavailable)
        assert.match(e.message, new RegExp(`^eth_blockNumber\\(\\) at ${url} failed 3 times; last error: `))
        return true
      })
    } finally {
      rpc.close()
    }
  })

  it('where no server listens, fails after its attempts naming the URL', async () => {
    const rpc = new RpcClient({ url: 'ws://127.0.0.1:1', backoffMs: 1, attempts: 2 })
    try {
      await assert.rejects(rpc.call('eth_blockNumber'), (e: Error) => e instanceof RpcUnavailable && /^eth_blockNumber\(\) at ws:\/\/127\.0\.0\.1:1 failed 2 times; last error: cannot open a WebSocket connection/.test(e.message))
    } finally {
      rpc.close()
    }
  })
})
