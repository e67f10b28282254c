import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { FakeFleet, moved } from '../bench/lib/fake-fleet.js'
import { MemoryStorage } from '../bench/lib/memory-storage.js'
import { rangesContain, type Range } from '../src/server/ranges.js'
import { RouterState, type RouterOptions } from '../src/server/router.js'

/*
 * Chunk assignment with many workers, simulated in process: light fake workers ping RouterStates
 * (a simulated clock; each worker holds at once what it is told to hold) over a dataset of
 * synthetic chunks held in memory.
 */

const OPTS: RouterOptions = { replication: 2, heartbeatMs: 1000, missedHeartbeats: 3 }

async function router(storage: MemoryStorage, opts: RouterOptions = OPTS): Promise<RouterState> {
  const r = new RouterState(storage, opts)
  await r.relist(true)
  return r
}

const within = (inner: Range[], outer: Range[]) => inner.every(([a, b]) => rangesContain(outer, a, b))

describe('chunk assignment', { timeout: 600_000 }, () => {
  it('two routers over the same storage with the same workers agree, and route each block to a worker holding it', async () => {
    const storage = new MemoryStorage('sim', 5000)
    const a = await router(storage)
    const b = await router(storage)
    const fleet = new FakeFleet([a, b], OPTS.heartbeatMs)
    for (let i = 0; i < 50; i++) fleet.add(`w${i}`)
    fleet.settle()
    for (const w of fleet.workers.values()) {
      const pa = a.ping({ worker_id: w.id, worker_url: `http://${w.id}.invalid`, state: w.held }, fleet.now)
      const pb = b.ping({ worker_id: w.id, worker_url: `http://${w.id}.invalid`, state: w.held }, fleet.now)
      assert.deepEqual(pa.desired, pb.desired, w.id)
    }
    const holders = fleet.holders('sim', storage.listed)
    assert.ok(holders.every((h) => h.length === 2), 'every chunk on two workers')
    const loads = new Map<string, number>()
    for (const h of holders) for (const id of h) loads.set(id, (loads.get(id) ?? 0) + 1)
    assert.equal(loads.size, 50, 'every worker holds chunks')
    for (let i = 0; i < storage.listed.length; i += 7) {
      const block = storage.listed[i].first
      for (const r of [a, b]) {
        const url = r.route('sim', block, fleet.now)
        const id = /^http:\/\/([^.]+)\.invalid\//.exec(url)![1]
        assert.ok(holders[i].includes(id), `block ${block} → ${id}, held by ${holders[i]}`)
        assert.ok(rangesContain(fleet.workers.get(id)!.held.sim, block, block))
      }
      // A block in the gap before the chunk goes to the chunk's holders too.
      if (block > 0) {
        const url = a.route('sim', block - 1, fleet.now)
        assert.ok(holders[i].some((id) => url.includes(`//${id}.`)), `block ${block - 1} → ${url}`)
      }
    }
  })

  it('a worker joining or leaving moves about 2/N of the chunks (1,000 workers)', async () => {
    const N = 1000
    const storage = new MemoryStorage('sim', 40_000)
    const r = await router(storage)
    const fleet = new FakeFleet([r], OPTS.heartbeatMs)
    for (let i = 0; i < N; i++) fleet.add(`worker-${i}`)
    fleet.settle()
    const chunks = storage.listed
    let before = fleet.holders('sim', chunks)
    const expected = (2 / N) * chunks.length
    const movedPerEvent: number[] = []
    for (let k = 0; k < 10; k++) {
      fleet.add(`joiner-${k}`)
      fleet.settle(20, 1)
      let after = fleet.holders('sim', chunks)
      movedPerEvent.push(moved(before, after))
      before = after
      fleet.stop(`worker-${k * 37}`)
      for (let i = 0; i <= OPTS.missedHeartbeats; i++) fleet.round()
      fleet.settle(20, 1)
      after = fleet.holders('sim', chunks)
      movedPerEvent.push(moved(before, after))
      before = after
    }
    assert.ok(before.every((h) => h.length === 2))
    const mean = movedPerEvent.reduce((s, n) => s + n, 0) / movedPerEvent.length
    const detail = `moved per event ${movedPerEvent.join(' ')} (2/N of the chunks: ${expected.toFixed(0)})`
    assert.ok(mean <= 1.5 * expected, `mean ${mean}: ${detail}`)
    assert.ok(Math.max(...movedPerEvent) <= 3 * expected, detail)
    assert.ok(movedPerEvent.every((n) => n > 0), detail)
  })

  it('a restarted router comes back to the same assignment without ordering a download', async () => {
    const storage = new MemoryStorage('sim', 5000)
    const first = await router(storage)
    const fleet = new FakeFleet([first], OPTS.heartbeatMs)
    for (let i = 0; i < 40; i++) fleet.add(`w${i}`)
    fleet.settle()
    const held = new Map([...fleet.workers.values()].map((w) => [w.id, w.held]))
    const before = fleet.holders('sim', storage.listed)

    const restarted = await router(storage)
    const again = new FakeFleet([restarted], OPTS.heartbeatMs, { start: fleet.now })
    // The workers come back one by one within a heartbeat: nobody is told to fetch what it does not hold meanwhile.
    for (const [id, h] of held) {
      again.now += Math.floor(OPTS.heartbeatMs / held.size)
      again.add(id, h)
      const d = again.pingOne(id)
      assert.ok(within(d.sim ?? [], h.sim ?? []), `${id} told to fetch during the restart`)
    }
    again.settle()
    for (const [id, d] of again.desired) assert.deepEqual(d.sim, held.get(id)!.sim, `${id}: desired after the restart = held before it`)
    assert.equal(moved(before, again.holders('sim', storage.listed)), 0)
  })

  it('assigns chunks appended to the dataset, mostly next to the chunks before them', async () => {
    const storage = new MemoryStorage('sim', 2000)
    const r = await router(storage)
    const fleet = new FakeFleet([r], OPTS.heartbeatMs)
    for (let i = 0; i < 20; i++) fleet.add(`w${i}`)
    fleet.settle()
    const before = fleet.holders('sim', storage.listed)
    storage.grow(2100)
    await r.relist()
    fleet.settle()
    const after = fleet.holders('sim', storage.listed)
    assert.equal(moved(before, after.slice(0, 2000)), 0, 'the chunks listed before stay where they were')
    assert.ok(after.every((h) => h.length === 2))
    // Groups of consecutive chunks: most new chunks have the holders of the chunk before them.
    const same = after.slice(2000).filter((h, i) => h.join() === after[1999 + i].join()).length
    assert.ok(same >= 50, `${same} of 100 new chunks share the holders of the chunk before`)
    assert.equal(r.height('sim', fleet.now), storage.listed.at(-1)!.last)
  })
})
