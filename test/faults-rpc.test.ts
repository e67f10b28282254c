import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { readdir } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks } from '../src/chunks/layout.js'
import { log } from '../src/log.js'
import { runIngest, type IngestOptions } from '../src/ingest/loop.js'
import { loadRecordedChain } from '../src/ingest/recorded.js'
import { ReplayServer, type ReplayOptions } from '../src/ingest/replay.js'
import { RpcUnavailable } from '../src/ingest/rpc.js'
import { BadRpcAnswer, BlockChanged } from '../src/ingest/source.js'
import { tempDir } from './helpers/dataset.js'
import { FaultProxy } from './helpers/fault-proxy.js'

/*
 * A JSON-RPC node answering malformed or inconsistent data (the replay node with its `mutate`
 * hook, and the fault proxy in front of it for broken HTTP bodies). Each time the ingest either
 * retries and writes exactly what a clean ingest writes, or stops with an error naming the block
 * and the method, and every chunk it wrote before is a clean ingest's chunk, byte for byte.
 *
 * Covered elsewhere (ingest-recorded.test.ts): a receipt without a logs array, a trace_block answer
 * that is not an array, HTTP 503 retried, a parent-hash mismatch between consecutive blocks, Cronos
 * receipts the node does not have. Here: receipts that do not match the block's transactions
 * (foreign, extra, of another block, a log claiming another transaction), a block answered for
 * another number or with a transaction of another block, traces of another block (transient:
 * fetched again; for good: stops), JSON bodies cut short (with a fitting Content-Length, or the
 * connection closed mid-body).
 */

const eth = loadRecordedChain('ethereum')
const light = eth.filter((b) => b.number === 1000000 || b.number === 4369999) // 2 and 22 transactions; blocks 2k+1 have 22
const traced = eth.filter((b) => b.number === 1000000) // 2 transactions, 4 parity traces
const LAST = 19
const hex = (n: number) => '0x' + n.toString(16)
const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex')

describe('malformed and inconsistent node answers', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let level: string
  let n = 0
  /** Clean ingests of 0..LAST, per chain and options (the chunks a faulty run may have written must be these). */
  const references = new Map<string, string>()

  before(async () => {
    level = log.level
    log.level = 'error' // retries are logged as warnings; expected here
    tmp = await tempDir('ba-faults-rpc-')
  })
  after(async () => {
    log.level = level
    await tmp?.cleanup()
  })

  const folder = () => path.join(tmp.dir, `ds${++n}`)
  const serve = async (chain: typeof light, opts: ReplayOptions = {}) => {
    const s = new ReplayServer(chain, { repeat: { times: 20, seed: `rpc-${chain.length}` }, ...opts })
    await s.start()
    return s
  }
  // finality latest: no eth_getBlockByNumber("finalized") probe among the block answers the faults count
  const ingest = (rpc: string, out: string, o: Partial<IngestOptions> = {}) =>
    runIngest({ rpc, dataset: 'eth', out, to: LAST, finality: 'latest', chunkBlocks: 5, batchSize: 5, workers: 0, backoffMs: 5, progress: 'none', ...o })

  const reference = async (chain: typeof light, o: Partial<IngestOptions>) => {
    const key = `${chain.length}/${JSON.stringify(o)}`
    if (!references.has(key)) {
      const s = await serve(chain)
      const dir = folder()
      try {
        await ingest(s.url, dir, o)
      } finally {
        await s.close()
      }
      references.set(key, dir)
    }
    return references.get(key)!
  }

  /** Every chunk in `dir` is the clean ingest's chunk, byte for byte; returns the last block written. */
  const assertOnlyCleanChunks = async (dir: string, chain: typeof light, o: Partial<IngestOptions> = {}) => {
    const ref = await reference(chain, o)
    const want = new Map((await listLocalChunks(ref)).map((c) => [c.path, c]))
    const have = await listLocalChunks(dir).catch(() => [])
    for (const c of have) {
      assert.ok(want.has(c.path), `${c.path} is not a chunk of the clean ingest`)
      const files = (await readdir(path.join(ref, c.path))).sort()
      assert.deepEqual((await readdir(path.join(dir, c.path))).sort(), files)
      for (const f of files) assert.equal(sha256(path.join(dir, c.path, f)), sha256(path.join(ref, c.path, f)), `${c.path}/${f}`)
    }
    const names = await readdir(dir).catch(() => [] as string[])
    assert.deepEqual(names.filter((x) => x.startsWith('.tmp-')), [], 'no temp folder left')
    return have.at(-1)?.last ?? -1
  }

  /** Ingest through a node whose answers `mutate` changes; returns the error (or undefined) after checking the chunks. */
  const attempt = async (chain: typeof light, mutate: ReplayOptions['mutate'], o: Partial<IngestOptions> = {}) => {
    const s = await serve(chain, { mutate })
    const dir = folder()
    try {
      const error = await ingest(s.url, dir, o).then(() => undefined, (e: Error) => e)
      const last = await assertOnlyCleanChunks(dir, chain, o)
      return { error, last }
    } finally {
      await s.close()
    }
  }

  it('a receipt of a transaction the block does not have (in place of one it has): the missing receipt is asked for by hash, and without it the ingest stops naming the transaction', async () => {
    // (The replay node in repeat mode serves every transaction in many blocks, so it has no answer by hash; a real node would.)
    let asked = 0
    const { error, last } = await attempt(light, (method, params, result: any) => {
      if (method === 'eth_getBlockReceipts' && params[0] === hex(13)) result[4] = { ...result[4], transactionHash: '0x' + 'ee'.repeat(32) }
      if (method === 'eth_getTransactionReceipt') asked++
      return result
    })
    assert.equal(asked, 1)
    assert.ok(error instanceof BadRpcAnswer, String(error))
    assert.match(error.message, /^block 13: eth_getBlockReceipts returned malformed data: no receipt for transaction 4 \(0x[0-9a-f]{64}\): the node has no receipt for it/)
    assert.ok(last < 13)
  })

  it('more receipts than transactions stops the ingest naming the block; nothing of it is written', async () => {
    const { error, last } = await attempt(light, (method, params, result: any) => (method === 'eth_getBlockReceipts' && params[0] === hex(13) ? [...result, { ...result[0], transactionHash: '0x' + 'ee'.repeat(32) }] : result))
    assert.ok(error instanceof BadRpcAnswer, String(error))
    assert.match(error.message, /^block 13: eth_getBlockReceipts returned malformed data: 23 receipts for 22 transactions/)
    assert.ok(last < 13)
  })

  it('a hex value holding an escaped quote (the engine writes hex values unescaped) stops the ingest naming the block; nothing of it is written', async () => {
    // Lower-case otherwise, so only the backslash in the answer sends the chunk to the character check.
    const { error, last } = await attempt(light, (method, params, result: any) =>
      method === 'eth_getBlockByNumber' && params[0] === hex(13) ? { ...result, miner: '0x12"34' } : result)
    assert.ok(error instanceof BadRpcAnswer, String(error))
    assert.match(error.message, /^block 13: eth_getBlockByNumber returned malformed data: .*0x12\\"34/)
    assert.ok(last < 13)
  })

  it('chunks closing side by side (closes 3): a chunk that fails at its close leaves the chunks before it written, and none after it', async () => {
    const mutate: ReplayOptions['mutate'] = (method, params, result: any) =>
      method === 'eth_getBlockByNumber' && params[0] === hex(13) ? { ...result, miner: '0x12"34' } : result
    for (const closes of [1, 3]) {
      const s = await serve(light, { mutate })
      const dir = folder()
      try {
        const error = await ingest(s.url, dir, { closes }).then(() => undefined, (e: Error) => e)
        assert.ok(error instanceof BadRpcAnswer, String(error))
        await assertOnlyCleanChunks(dir, light)
        // chunks of 5: 10-14 fails, 15-19 may have closed beside it but must not be placed (a gap)
        assert.deepEqual((await listLocalChunks(dir)).map((c) => [c.first, c.last]), [[0, 4], [5, 9]], `closes ${closes}`)
      } finally {
        await s.close()
      }
    }
  })

  it('a log that names another transaction than its receipt stops the ingest naming the block; nothing of it is written', async () => {
    // Block 13's receipt 6 has 2 logs: the second one says it belongs to transaction 7.
    const { error, last } = await attempt(light, (method, params, result: any) => {
      if (method === 'eth_getBlockReceipts' && params[0] === hex(13)) {
        const r = result[6]
        r.logs[1] = { ...r.logs[1], transactionIndex: result[7].transactionIndex, transactionHash: result[7].transactionHash }
      }
      return result
    })
    assert.ok(error instanceof BadRpcAnswer, String(error))
    assert.match(error.message, /^block 13: eth_getBlockReceipts returned malformed data: block 13: log 1 of receipt 6 \(transaction 0x[0-9a-f]{64}\) names transaction 0x[0-9a-f]{64}$/)
    assert.ok(last < 13)
  })

  it('a log of another block in a receipt of this one stops the ingest naming the block', async () => {
    const { error, last } = await attempt(light, (method, params, result: any) => {
      if (method === 'eth_getBlockReceipts' && params[0] === hex(13)) result[6].logs[0] = { ...result[6].logs[0], blockHash: '0x' + 'cd'.repeat(32) }
      return result
    })
    assert.ok(error instanceof BadRpcAnswer, String(error))
    assert.match(error.message, /^block 13: eth_getBlockReceipts returned malformed data: block 13: log 0 of receipt 6 \(transaction 0x[0-9a-f]{64}\) says it is in block 0x(cd){32}, its receipt in 0x[0-9a-f]{64}$/)
    assert.ok(last < 13)
  })

  it('receipts of another block (the head moved) are fetched again; the chunk is right', async () => {
    let left = 2
    const other = '0x' + 'ab'.repeat(32)
    const ok = await attempt(light, (method, params, result: any) => {
      if (method === 'eth_getBlockReceipts' && params[0] === hex(13) && left-- > 0) for (const r of result) r.blockHash = other
      return result
    })
    assert.equal(ok.error, undefined)
    assert.equal(ok.last, LAST)
  })

  it('a block answered for another number, or holding a transaction of another block, stops the ingest naming the block', async () => {
    const a = await attempt(light, (method, params, result: any) => (method === 'eth_getBlockByNumber' && params[0] === hex(12) ? { ...result, number: hex(11) } : result))
    assert.ok(a.error instanceof BadRpcAnswer, String(a.error))
    assert.match(a.error.message, /^block 12: eth_getBlockByNumber returned malformed data: asked for block 12, got number "0xb"/)
    assert.ok(a.last < 12)
    const b = await attempt(light, (method, params, result: any) => {
      if (method === 'eth_getBlockByNumber' && params[0] === hex(12)) result.transactions[1].blockHash = '0x' + 'cd'.repeat(32)
      return result
    })
    assert.ok(b.error instanceof BadRpcAnswer, String(b.error))
    assert.match(b.error.message, /^block 12: eth_getBlockByNumber returned malformed data: transaction 1 says it is in block 0xcdcd/)
    assert.ok(b.last < 12)
  })

  it('traces of another block than the one fetched are fetched again; for good, the ingest stops naming both hashes, writing nothing of the block', async () => {
    const o = { traces: 'trace_block' as const }
    const other = '0x' + 'ab'.repeat(32)
    let left = 2
    const mutate = (forGood: boolean) => (method: string, params: any[], result: any) => {
      if (method === 'trace_block' && params[0] === hex(11) && (forGood || left-- > 0)) for (const t of result) t.blockHash = other
      return result
    }
    const transient = await attempt(traced, mutate(false), o)
    assert.equal(transient.error, undefined)
    assert.equal(transient.last, LAST)
    const t0 = performance.now()
    const forGood = await attempt(traced, mutate(true), o)
    assert.ok(forGood.error instanceof BlockChanged, String(forGood.error))
    assert.match(forGood.error.message, new RegExp(`^block 11: trace_block returned traces of block ${other}, not 0x[0-9a-f]{64}`))
    assert.ok(forGood.last < 11)
    assert.ok(performance.now() - t0 > 1000, 'fetched again (with back-off) before giving up')
  })

  describe('JSON bodies cut short (fault proxy in front of the node)', () => {
    let node: ReplayServer
    let proxy: FaultProxy
    before(async () => {
      node = await serve(light)
      proxy = new FaultProxy(node.url)
      await proxy.start()
    })
    after(async () => {
      await proxy?.close()
      await node?.close()
    })

    for (const [what, fault] of [['cut short (Content-Length fits)', 'truncate'], ['broken off (connection closed mid-body)', 'cut'], ['shorter than its Content-Length', 'short']] as const) {
      it(`an answer ${what} is retried; the dataset is the clean one`, async () => {
        proxy.setRules([
          { name: 'blocks', fault, bytes: 700, method: 'POST', body: /eth_getBlockByNumber/, times: 2 },
          { name: 'receipts', fault, bytes: 300, method: 'POST', body: /eth_getBlockReceipts/, times: 1 },
        ])
        const dir = folder()
        const r = await ingest(proxy.url, dir)
        assert.equal(r.blocks, LAST + 1)
        assert.equal(proxy.hitCount('blocks'), 2)
        assert.equal(proxy.hitCount('receipts'), 1)
        assert.ok(r.rpc.retries >= 3, `${r.rpc.retries} retries`)
        assert.equal(await assertOnlyCleanChunks(dir, light), LAST)
        proxy.hits.clear()
      })
    }

    it('answers cut short every time stop the ingest after its tries, naming the call; nothing is written', async () => {
      proxy.setRules([{ name: 'blocks', fault: 'truncate', bytes: 500, method: 'POST', body: /eth_getBlockByNumber/ }])
      const dir = folder()
      await assert.rejects(ingest(proxy.url, dir, { attempts: 3 }), (e: any) => {
        assert.ok(e instanceof RpcUnavailable, e.message)
        assert.match(e.message, /^batch of 5 calls \(eth_getBlockByNumber\) at http:\/\/127\.0\.0\.1:\d+ failed 3 times; last error: HTTP 200: the answer is not JSON: /)
        return true
      })
      assert.equal(await assertOnlyCleanChunks(dir, light), -1)
      proxy.clear()
    })
  })
})
