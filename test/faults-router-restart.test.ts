import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ArchiveClient, isRetryable, type Block } from '../src/client/archive-client.js'
import { killChildren, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeDataset, type AnvilRecord } from './helpers/dataset.js'

/*
 * The router killed (SIGKILL) while a client syncs, and started again on the same port: a router
 * and two worker processes over a folder dataset (the recorded anvil chain, 16 chunks of 8 blocks),
 * replication 1, answers cut at 20 kB so that the sync takes dozens of requests. The workers keep
 * serving and keep pinging while the router is down (their heartbeats fail and are logged), and
 * register again with the new router, which hands the chunks out anew. The real ArchiveClient with
 * its default retry settings sees only retryable errors (refused connections, 503s) and gets every
 * block exactly once, equal to an undisturbed sync.
 */

const HB = ['--heartbeat-ms', '200']
const QUERY = {
  includeAllBlocks: true,
  transactions: [{}],
  logs: [{}],
  fields: { block: { hash: true, parentHash: true, timestamp: true }, transaction: { hash: true, from: true, to: true, input: true }, log: { address: true, data: true, topics: true } },
}

describe('router restarted while a client syncs', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let data: string
  let port = 0
  let routerUrl = ''
  let base = ''
  let router: Awaited<ReturnType<typeof startCli>>
  const workers: Awaited<ReturnType<typeof startCli>>[] = []

  const startRouter = async () => {
    router = await startCli(['router', '--data', data, '--port', String(port), '--replication', '1', '--relist-ms', '300', ...HB], ['router', 'dataset anvil'])
    routerUrl = router.lines.get('router')![0]
    base = router.lines.get('dataset anvil')![0]
    port = Number(new URL(routerUrl).port)
  }
  const status = async () => (await fetch(`${routerUrl}/status`)).json()
  /** Both workers alive and every chunk served (the height is the last block). */
  const ready = () => until('both workers registered and serving everything', async () => {
    const s = await status()
    return s.workers.filter((w: any) => w.alive).length === 2 && s.datasets[0].height === records.at(-1)!.number ? s : undefined
  }, 30_000)

  before(async () => {
    tmp = await tempDir('ba-faults-router-')
    records = await anvilRecords()
    data = path.join(tmp.dir, 'anvil')
    await writeDataset(data, 'anvil', records, 8)
    await startRouter()
    for (const id of ['w0', 'w1']) {
      workers.push(await startCli(['worker', '--router', routerUrl, '--id', id, '--port', '0', '--max-response-bytes', '20000', ...HB], ['worker']))
    }
    await ready()
  })

  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  /** Sync the whole chain with the real client; `during(batch)` runs after each answer. */
  const sync = async (during?: (batch: number) => Promise<void>) => {
    const retries: Error[] = []
    const client = new ArchiveClient(base, { onRetry: ({ error }) => retries.push(error) })
    const blocks: Block[] = []
    let batches = 0
    for await (const batch of client.batches(QUERY, { fromBlock: 0, toBlock: records.at(-1)!.number })) {
      blocks.push(...batch.blocks)
      batches++
      await during?.(batches)
    }
    return { blocks, batches, retries }
  }

  it('the client gets every block exactly once, equal to an undisturbed sync, seeing only retryable errors', async () => {
    const calm = await sync()
    assert.deepEqual(calm.retries, [])
    assert.ok(calm.batches >= 15, `${calm.batches} requests`)
    assert.deepEqual(calm.blocks.map((b) => b.header.number), records.map((r) => r.number))
    assert.deepEqual(calm.blocks.map((b) => b.header.hash), records.map((r) => r.block.hash.toLowerCase()))

    // Killed twice: early, and again a few answers later (an answer may cover more after a restart:
    // the assignment, and so where answers end, can differ); each time started again on the same
    // port 0.5 s later.
    const killAt = new Set([3, Math.min(6, Math.floor(calm.batches / 2))])
    const restarts: Promise<void>[] = []
    const t0 = performance.now()
    const disturbed = await sync(async (batch) => {
      if (!killAt.has(batch)) return
      router.child.kill('SIGKILL')
      await new Promise((r) => router.child.once('exit', r))
      restarts.push(new Promise((r) => setTimeout(r, 500)).then(startRouter))
    })
    const ms = Math.round(performance.now() - t0)
    await Promise.all(restarts)
    assert.equal(restarts.length, 2)
    assert.ok(disturbed.retries.length >= 2, `the client met the restarts: ${disturbed.retries.length} retries`)
    for (const e of disturbed.retries) assert.ok(isRetryable(e), `not retryable: ${e.message}`)
    const kinds = [...new Set(disturbed.retries.map((e) => e.constructor.name + ((e as any).status ? ` ${(e as any).status}` : '')))]
    // Exactly the blocks of the undisturbed sync: no gap, no duplicate, same content.
    assert.deepEqual(disturbed.blocks.map((b) => b.header.number), calm.blocks.map((b) => b.header.number))
    assert.deepEqual(disturbed.blocks, calm.blocks)

    // The workers noticed the router was down, and are registered with the new one.
    const s = await ready()
    assert.deepEqual(s.workers.map((w: any) => w.id).sort(), ['w0', 'w1'])
    for (const w of workers) assert.match(w.stderr(), /"msg":"worker: heartbeat failed"/)
    for (const w of workers) {
      const ws = await (await fetch(`${w.lines.get('worker')![0]}/status`)).json()
      assert.equal(ws.last_ping_error, null)
      assert.ok(ws.last_ping_ms_ago < 2000)
    }
    console.log(`# sync with two router restarts: ${ms} ms, ${disturbed.batches} answers, ${disturbed.retries.length} retries (${kinds.join(', ')}); undisturbed ${calm.batches} answers`)
  })
})
