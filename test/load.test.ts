import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { overloadProblems, runOverload, type OverloadFigures } from './helpers/overload.js'
import { rng } from './helpers/walk.js'

/*
 * Overload on loopback: a router and a worker PROCESS (`--concurrency 2 --queue 4`) over the recorded
 * anvil chain, 64 autocannon connections sending queries straight to the worker for 8 s
 * while 2 × 4 more ask the router for `/height` and `/<block>/worker`. The excess must be refused with
 * 503 (or 429, if a rate limit were configured) and Retry-After — never a timeout, a closed
 * connection or another 5xx — the worker's RSS must stay bounded, the router must keep answering,
 * and afterwards a query is answered and the worker's limiter is idle. `npm run bench -- load` runs
 * longer on a bigger dataset.
 */

const SECONDS = 8
const MAX_RSS = 1.5 * 2 ** 30

/**
 * Queries of 4–16 blocks: logs with their transactions, or transactions with traces (a few to tens of
 * ms each when alone; under the storm of refusals each step of a query waits behind them).
 */
function anvilBodies(n: number, height: number, seed = 1): string[] {
  const r = rng(seed)
  return Array.from({ length: n }, (_, i) => {
    const span = r.pick([4, 8, 16])
    const from = r.int(height - span + 1)
    const q = i % 2
      ? { logs: [{ transaction: true }], fields: { log: { address: true, topics: true, data: true }, transaction: { hash: true, from: true } } }
      : { transactions: [{ traces: true }], fields: { transaction: { hash: true, to: true, input: true }, trace: { callFrom: true, callTo: true } } }
    return JSON.stringify({ fromBlock: from, toBlock: from + span - 1, ...q })
  })
}

const mib = (b: number) => (b / 2 ** 20).toFixed(0)

describe('load: more queries than the worker admits (router + worker processes, autocannon)', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let dir: string

  before(async () => {
    tmp = await tempDir('ba-load-')
    dir = path.join(tmp.dir, 'anvil')
    await writeDataset(dir, 'anvil', await anvilRecords(), 16)
  })

  after(async () => {
    await tmp?.cleanup()
  })

  it('64 connections against --concurrency 2 --queue 4: 503 + Retry-After for the excess, no timeout, reset or other 5xx, RSS bounded, the router answers', async () => {
    const f: OverloadFigures = await runOverload({
      data: dir,
      seconds: SECONDS,
      connections: 64,
      concurrency: 2,
      queue: 4,
      bodies: anvilBodies(32, 127),
      blocks: Array.from({ length: 128 }, (_, i) => i),
      // The queries are starved by the refusals on a small machine: time out late, but time out.
      timeoutSec: 30,
      // a worker stalled by the storm on a busy machine must not be declared dead: that is not tested here
      flags: { missedHeartbeats: 30 },
    })
    const w = f.worker
    console.log(
      `# load: worker ${w.answers} answers in ${f.seconds} s (${w.rps.toFixed(0)}/s): ${JSON.stringify(w.statuses)}; ` +
        `200s p50 ${w.ok.p50.toFixed(0)} ms, p99 ${w.ok.p99.toFixed(0)} ms; refusals p50 ${w.refused.p50.toFixed(0)} ms, p99 ${w.refused.p99.toFixed(0)} ms; ` +
        `router /height ${f.height.rps.toFixed(0)}/s p99 ${f.height.ok.p99.toFixed(0)} ms, /<block>/worker ${f.routing.rps.toFixed(0)}/s p99 ${f.routing.ok.p99.toFixed(0)} ms; ` +
        `worker RSS idle ${mib(f.rss.idle)} MiB, max ${mib(f.rss.max)} MiB, peak ${mib(f.rss.peak)} MiB; CPU worker ${f.cpu.worker.toFixed(1)} s, router ${f.cpu.router.toFixed(1)} s`,
    )
    assert.deepEqual(overloadProblems(f, MAX_RSS), [])
  })
})
