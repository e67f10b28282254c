import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ArchiveClient, type Block } from '../src/client/archive-client.js'
import { RouterServer } from '../src/server/router-http.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'

/*
 * Parallel mode on a long range: one block per answer (a 1-byte size budget) over the 128 recorded
 * anvil blocks, so the range takes ~128 answers, many times the segments a request loop covers.
 * The worker is registered under the URL of a proxy that counts the queries in flight and holds
 * each one until `parallel` are in flight (or none has arrived for a while, as at the range's end):
 * a client that keeps N requests going makes full waves, one that falls back to one request at a
 * time makes waves of one.
 */

const PARALLEL = 4
/** A wave is released without being full once no request has come for this long. */
const QUIET_MS = 400

interface Wave {
  /** Queries in flight when the wave went on. */
  inFlight: number
  /** Queries the wave let go on. */
  released: number
}

class CountingProxy {
  readonly server: http.Server
  target = ''
  url = ''
  inFlight = 0
  maxInFlight = 0
  waves: Wave[] = []
  private held: (() => void)[] = []
  private timer?: NodeJS.Timeout

  /** Queries in flight that make a full wave. */
  fullWave = 1

  constructor() {
    this.server = http.createServer((req, res) => {
      this.inFlight++
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight)
      res.on('close', () => this.inFlight--)
      this.hold(() => {
        const out = http.request(this.target + req.url, { method: req.method, headers: req.headers }, (answer) => {
          res.writeHead(answer.statusCode!, answer.headers)
          answer.pipe(res)
        })
        out.on('error', () => res.destroy())
        req.pipe(out)
      })
    })
  }

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r))
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  private hold(go: () => void): void {
    this.held.push(go)
    clearTimeout(this.timer)
    if (this.inFlight >= this.fullWave) this.release()
    else this.timer = setTimeout(() => this.release(), QUIET_MS)
  }

  private release(): void {
    clearTimeout(this.timer)
    const go = this.held
    this.held = []
    if (go.length) this.waves.push({ inFlight: this.inFlight, released: go.length })
    for (const f of go) f()
  }

  reset(fullWave: number): void {
    this.fullWave = fullWave
    this.waves = []
    this.maxInFlight = 0
  }

  async stop(): Promise<void> {
    this.release()
    this.server.closeAllConnections()
    await new Promise((r) => this.server.close(r))
  }
}

describe('client: parallel mode keeps N requests in flight on a long range', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let router: RouterServer
  let worker: WorkerServer
  let proxy: CountingProxy
  let base: string

  before(async () => {
    tmp = await tempDir()
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', await anvilRecords(), 16)
    const storage = new LocalStorage(tmp.dir)
    router = new RouterServer({ storage, replication: 1, heartbeatMs: 200, missedHeartbeats: 50, relistMs: 60_000 })
    const routerUrl = await router.start('127.0.0.1', 0)
    proxy = new CountingProxy()
    await proxy.start()
    worker = new WorkerServer({ storage, routerUrl, heartbeatMs: 200, dropGraceMs: 400, budgets: { sizeBytes: 1 }, concurrency: 2, queue: 16, queueTimeoutMs: 60_000, publicUrl: proxy.url })
    proxy.target = await worker.start('127.0.0.1', 0)
    base = router.datasetUrl('anvil')
    const client = new ArchiveClient(base)
    for (let i = 0; (await client.getHeight()) < 127; i++) {
      assert.ok(i < 600, 'the worker never served the whole dataset')
      await new Promise((r) => setTimeout(r, 100))
    }
  })

  after(async () => {
    await worker?.stop()
    await router?.stop()
    await proxy?.stop()
    await tmp?.cleanup()
  })

  it('issues N requests at once and yields the blocks of parallel 1', async () => {
    const client = new ArchiveClient(base)
    const query = { includeAllBlocks: true, transactions: [{}], fields: { block: { timestamp: true }, transaction: { hash: true } } }
    const collect = async (parallel: number) => {
      proxy.reset(parallel)
      const out: Block[] = []
      for await (const b of client.blocks(query, { fromBlock: 0, toBlock: 127, parallel })) out.push(b)
      return out
    }
    const sequential = await collect(1)
    assert.deepEqual(sequential.map((b) => b.header.number), Array.from({ length: 128 }, (_, i) => i))
    assert.ok(proxy.waves.length >= 100, `${proxy.waves.length} answers: the budget did not cut the range into one block per answer`)
    assert.equal(proxy.maxInFlight, 1)

    const parallel = await collect(PARALLEL)
    assert.deepEqual(parallel, sequential)
    assert.equal(proxy.maxInFlight, PARALLEL, 'never more than N at once')
    const requests = proxy.waves.reduce((n, w) => n + w.released, 0)
    const inFullWaves = proxy.waves.filter((w) => w.inFlight === PARALLEL).reduce((n, w) => n + w.released, 0)
    // Only the first answer (alone) and the range's last segments make waves that are not full.
    assert.ok(inFullWaves >= 0.75 * requests, `${inFullWaves} of ${requests} requests went out ${PARALLEL} at a time (in flight per wave: ${proxy.waves.map((w) => w.inFlight).join(' ')})`)
  })
})
