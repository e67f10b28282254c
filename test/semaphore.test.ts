import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ApiError } from '../src/errors.js'
import { Limiter } from '../src/server/limiter.js'
import { Mutex, Semaphore, WaitRefused } from '../src/semaphore.js'

/** Settles pending promise reactions. */
const tick = () => new Promise((r) => setImmediate(r))

describe('semaphore (the one concurrency limit)', () => {
  it('admits `permits` holders and serves waiters in order', async () => {
    const s = new Semaphore(2)
    const order: number[] = []
    const r1 = await s.acquire()
    const r2 = await s.acquire()
    const waiting = [3, 4, 5].map((n) => s.acquire().then((release) => (order.push(n), release)))
    await tick()
    assert.deepEqual(s.stats, { active: 2, queued: 3 })
    r2()
    r2() // a second call does nothing
    await tick()
    assert.deepEqual(order, [3])
    r1()
    await tick()
    assert.deepEqual(order, [3, 4])
    for (const w of waiting.slice(0, 2)) (await w)()
    ;(await waiting[2])()
    assert.deepEqual(order, [3, 4, 5])
    assert.deepEqual(s.stats, { active: 0, queued: 0 })
  })

  it('refuses beyond its queue, after its longest wait, and when the signal aborts; reports every change', async () => {
    const changes: string[] = []
    const s = new Semaphore(1, { queue: 2, waitMs: 200, onChange: (a, q) => changes.push(`${a}/${q}`) })
    const held = await s.acquire()
    const ac = new AbortController()
    const timedOut = s.acquire()
    const aborted = s.acquire(ac.signal)
    await assert.rejects(s.acquire(), (e: unknown) => e instanceof WaitRefused && e.reason === 'queue')
    ac.abort()
    await assert.rejects(aborted, (e: unknown) => e instanceof WaitRefused && e.reason === 'aborted')
    await assert.rejects(timedOut, (e: unknown) => e instanceof WaitRefused && e.reason === 'timeout' && /within 200 ms/.test(e.message))
    held()
    assert.deepEqual(changes, ['1/0', '1/1', '1/2', '1/1', '1/0', '0/0'])
    await assert.rejects(s.acquire(AbortSignal.abort()), (e: unknown) => e instanceof WaitRefused && e.reason === 'aborted')
  })

  it('a mutex is one holder at a time', async () => {
    const m = new Mutex()
    const unlock = await m.lock()
    let second = false
    const next = m.lock().then((u) => ((second = true), u))
    await tick()
    assert.equal(second, false)
    unlock()
    ;(await next)()
    assert.equal(second, true)
  })

  it("a worker's limiter turns refusals into 503 (busy) and 499 (client gone)", async () => {
    const l = new Limiter({ concurrency: 1, queue: 1, queueTimeoutMs: 100 })
    const held = await l.acquire()
    const ac = new AbortController()
    const gone = l.acquire(ac.signal)
    await assert.rejects(l.acquire(), (e: unknown) => e instanceof ApiError && e.status === 503 && /too many queries are running or waiting/.test(e.message))
    ac.abort()
    await assert.rejects(gone, (e: unknown) => e instanceof ApiError && e.status === 499)
    await assert.rejects(l.acquire(), (e: unknown) => e instanceof ApiError && e.status === 503 && /no execution slot became free within 100 ms/.test(e.message))
    assert.deepEqual(l.stats, { active: 1, queued: 0, concurrency: 1, queue: 1, queueTimeoutMs: 100 })
    held()
    assert.equal(l.stats.active, 0)
  })
})
