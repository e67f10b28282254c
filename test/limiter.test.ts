import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ApiError } from '../src/errors.js'
import { Limiter } from '../src/server/limiter.js'
import { mapLimit, Semaphore, WaitRefused } from '../src/semaphore.js'

/*
 * The one waiting queue of the code base (src/semaphore.ts) and what is built on it: a worker's
 * admission of queries (bounded queue, queue timeout, client gone) and `mapLimit`.
 */

const turn = () => new Promise((r) => setImmediate(r))

describe('semaphore', () => {
  it('a waiter whose signal aborts leaves the queue (refused as aborted); the others keep their order', async () => {
    const s = new Semaphore(1)
    const first = await s.acquire()
    const ac = new AbortController()
    const order: string[] = []
    const a = s.acquire(ac.signal).then((r) => (order.push('a'), r))
    const b = s.acquire().then((r) => (order.push('b'), r))
    assert.equal(s.queued, 2)
    ac.abort(new Error('gave up'))
    await assert.rejects(a, (e) => e instanceof WaitRefused && e.reason === 'aborted')
    assert.equal(s.queued, 1)
    first()
    const release = await b
    assert.deepEqual(order, ['b'])
    assert.equal(s.active, 1)
    release()
    assert.equal(s.active, 0)
    await assert.rejects(s.acquire(ac.signal), (e) => e instanceof WaitRefused && e.reason === 'aborted', 'an aborted signal is refused at once')
    assert.equal(s.active, 0)
  })
})

describe('mapLimit', () => {
  it('runs at most `limit` calls at once, keeps the order of results', async () => {
    let running = 0
    let most = 0
    const out = await mapLimit([...Array(20).keys()], 3, async (n) => {
      most = Math.max(most, ++running)
      await turn()
      running--
      return n * 2
    })
    assert.deepEqual(out, [...Array(20).keys()].map((n) => n * 2))
    assert.equal(most, 3)
    assert.deepEqual(await mapLimit([], 4, async () => 1), [])
  })

  it('after a failure starts nothing more, and throws the first error once the calls under way have ended', async () => {
    const started: number[] = []
    const ended: number[] = []
    await assert.rejects(
      mapLimit([0, 1, 2, 3, 4, 5, 6, 7], 3, async (n) => {
        started.push(n)
        if (n === 1) throw new Error('one failed')
        if (n === 2) throw new Error('two failed too')
        await turn()
        await turn()
        ended.push(n)
      }),
      /one failed/,
    )
    assert.deepEqual(started, [0, 1, 2])
    assert.deepEqual(ended, [0], 'the call under way ended before the error was thrown')
    await assert.rejects(mapLimit([1], 1, () => { throw new Error('thrown before a promise') }), /thrown before a promise/)
  })
})

describe('worker admission limiter', () => {
  const status = (e: unknown) => (e instanceof ApiError ? e.status : e)

  it('runs `concurrency` queries, queues `queue` more in order, refuses the next with 503; stats and onChange follow', async () => {
    const changes: [number, number][] = []
    const l = new Limiter({ concurrency: 2, queue: 2, queueTimeoutMs: 60_000 }, (a, q) => changes.push([a, q]))
    const r1 = await l.acquire()
    const r2 = await l.acquire()
    const order: number[] = []
    const w3 = l.acquire().then((r) => (order.push(3), r))
    const w4 = l.acquire().then((r) => (order.push(4), r))
    assert.deepEqual({ active: l.stats.active, queued: l.stats.queued }, { active: 2, queued: 2 })
    await assert.rejects(l.acquire(), (e) => status(e) === 503 && /too many queries are running or waiting/.test((e as Error).message))
    r1()
    r1()
    const r3 = await w3
    await turn()
    assert.deepEqual(order, [3], 'a second release of the same slot let nobody else in')
    r2()
    const r4 = await w4
    r3()
    r4()
    assert.deepEqual({ active: l.stats.active, queued: l.stats.queued }, { active: 0, queued: 0 })
    assert.deepEqual(changes.at(-1), [0, 0])
    assert.ok(changes.some(([a, q]) => a === 2 && q === 2))
  })

  it('a query waiting longer than queueTimeoutMs gets a 503; one whose client left gets a 499; both leave the queue', async () => {
    const l = new Limiter({ concurrency: 1, queue: 5, queueTimeoutMs: 50 })
    const held = await l.acquire()
    await assert.rejects(l.acquire(), (e) => status(e) === 503 && /within 50 ms/.test((e as Error).message))
    assert.equal(l.stats.queued, 0)

    const slow = new Limiter({ concurrency: 1, queue: 5, queueTimeoutMs: 60_000 })
    const holder = await slow.acquire()
    const ac = new AbortController()
    const waiting = slow.acquire(ac.signal)
    assert.equal(slow.stats.queued, 1)
    ac.abort()
    await assert.rejects(waiting, (e) => status(e) === 499)
    assert.equal(slow.stats.queued, 0)
    await assert.rejects(slow.acquire(ac.signal), (e) => status(e) === 499, 'a client already gone is refused at once')
    holder()
    const next = await slow.acquire()
    assert.equal(slow.stats.active, 1)
    next()
    held()
  })
})
