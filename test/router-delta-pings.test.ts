import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { FakeFleet } from '../bench/lib/fake-fleet.js'
import { MemoryStorage } from '../bench/lib/memory-storage.js'
import { PingSession, stateDelta } from '../src/server/ping-session.js'
import { mergeRanges, subtractRanges, unionRanges, type Range } from '../src/server/ranges.js'
import { RouterState, type RouterOptions } from '../src/server/router.js'

/*
 * Pings that carry only what changed (src/server/ping-session.ts): workers pinging with deltas end
 * with the same routing as workers pinging their full state, also after the router restarts under
 * them (it knows no state then and asks for the full one), while the pings and answers of a settled
 * fleet shrink to a few bytes. Sparse synthetic chunks: every chunk its own range.
 */

const OPTS: RouterOptions = { replication: 2, heartbeatMs: 1000, missedHeartbeats: 3 }

async function router(storage: MemoryStorage): Promise<RouterState> {
  const r = new RouterState(storage, OPTS)
  await r.relist(true)
  return r
}

/** Per chunk, the workers a router routes its first block to (all candidates, by asking repeatedly). */
function routing(r: RouterState, storage: MemoryStorage, now: number): string[] {
  return storage.listed.map((c) => {
    const seen = new Set<string>()
    for (let i = 0; i < 4; i++) seen.add(/^http:\/\/([^.]+)\.invalid\//.exec(r.route('sim', c.first, now))![1])
    return [...seen].sort().join()
  })
}

describe('delta pings', { timeout: 600_000 }, () => {
  it('range arithmetic: a delta applied to the state before gives the state after', () => {
    let seed = 7
    const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n
    const ranges = (): Range[] => mergeRanges(Array.from({ length: rnd(30) }, () => { const a = rnd(1000); return { first: a, last: a + rnd(20) } }))
    for (let i = 0; i < 500; i++) {
      const before = { a: ranges(), b: ranges() }
      const after = { a: ranges(), c: ranges() }
      const { added, removed } = stateDelta(before, after)
      for (const name of ['a', 'b', 'c']) {
        const got = subtractRanges(unionRanges(before[name as 'a'] ?? [], added[name] ?? []), removed[name] ?? [])
        assert.deepEqual(got, after[name as 'a'] ?? [], `${name}: ${JSON.stringify({ before, after })}`)
      }
    }
  })

  it('converge to the same routing as full pings, with pings and answers of a few bytes once settled', async () => {
    const storage = new MemoryStorage('sim', 3000)
    const full = new FakeFleet([await router(storage)], OPTS.heartbeatMs, { countBytes: true })
    const delta = new FakeFleet([await router(storage)], OPTS.heartbeatMs, { deltas: true, countBytes: true })
    for (const f of [full, delta]) {
      for (let i = 0; i < 20; i++) f.add(`w${i}`)
      f.settle()
    }
    assert.equal(full.now, delta.now)
    assert.deepEqual(routing(delta.routers[0], storage, delta.now), routing(full.routers[0], storage, full.now))
    assert.deepEqual([...delta.desired], [...full.desired])
    assert.equal(delta.routers[0].height('sim', delta.now), storage.listed.at(-1)!.last)

    // A settled round: the full fleet sends and receives every range, the delta fleet almost nothing.
    full.bytes = { pings: 0, answers: 0 }
    delta.bytes = { pings: 0, answers: 0 }
    full.round()
    delta.round()
    assert.ok(full.bytes.pings > 20 * 1000, JSON.stringify(full.bytes))
    assert.ok(delta.bytes.pings * 20 < full.bytes.pings, `${JSON.stringify(delta.bytes)} vs ${JSON.stringify(full.bytes)}`)
    assert.ok(delta.bytes.answers * 5 < full.bytes.answers, `${JSON.stringify(delta.bytes)} vs ${JSON.stringify(full.bytes)}`)

    // Workers leave and chunks grow: still the same routing.
    for (const f of [full, delta]) {
      f.stop('w3')
      f.stop('w11')
    }
    storage.grow(3200)
    for (const f of [full, delta]) {
      await f.routers[0].relist()
      for (let i = 0; i < OPTS.missedHeartbeats + 1; i++) f.round()
      f.settle()
    }
    assert.deepEqual(routing(delta.routers[0], storage, delta.now), routing(full.routers[0], storage, full.now))
    assert.deepEqual([...delta.desired].sort(), [...full.desired].sort())
  })

  it('after a router restart, delta pings are asked for the full state once and converge to the same routing', async () => {
    const storage = new MemoryStorage('sim', 2000)
    const full = new FakeFleet([await router(storage)], OPTS.heartbeatMs, { countBytes: true })
    const delta = new FakeFleet([await router(storage)], OPTS.heartbeatMs, { deltas: true, countBytes: true })
    for (const f of [full, delta]) {
      for (let i = 0; i < 12; i++) f.add(`w${i}`)
      f.settle()
    }
    const held = [...delta.workers.values()].map((w) => JSON.stringify(w.held))
    full.routers[0] = await router(storage)
    delta.routers[0] = await router(storage)
    // The first ping of each worker after the restart: a delta the new router cannot apply.
    const r = delta.routers[0]
    const w = delta.workers.get('w0')!
    const answer = r.ping({ worker_id: w.id, worker_url: `http://${w.id}.invalid`, ...w.sessions[0].fields(w.held) }, delta.now)
    assert.equal(answer.resync, true)
    assert.equal(answer.desired, undefined)
    assert.equal(r.liveWorkers(delta.now).length, 0, 'a ping the router could not take does not register the worker')
    for (const f of [full, delta]) f.settle()
    assert.deepEqual(routing(delta.routers[0], storage, delta.now), routing(full.routers[0], storage, full.now))
    assert.deepEqual([...delta.workers.values()].map((x) => JSON.stringify(x.held)), held, 'the restart moved no chunk')
  })

  it('a lost answer: the next delta is based on a state the router no longer has, and the full state resolves it', async () => {
    const storage = new MemoryStorage('sim', 200)
    const r = await router(storage)
    const session = new PingSession()
    const msg = (state: Record<string, Range[]>) => ({ worker_id: 'w', worker_url: 'http://w.invalid', ...session.fields(state) })
    let now = 1_000_000
    let held: Record<string, Range[]> = {}
    for (let i = 0; i < 4; i++) {
      held = session.answered(held, r.ping(msg(held), (now += 1000)))!
    }
    assert.equal(held.sim.length, 200)
    // The router takes a ping whose answer never arrives.
    const half = { sim: held.sim.slice(0, 100) }
    r.ping(msg(half), (now += 1000))
    const answer = r.ping(msg(half), (now += 1000))
    assert.equal(answer.resync, true)
    assert.equal(session.answered(half, answer), undefined)
    const desired = session.answered(half, r.ping(msg(half), now))
    assert.deepEqual(desired, { sim: held.sim })
    assert.deepEqual(r.status(now).workers[0].state, half)
  })
})
