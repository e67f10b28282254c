import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { exponential, retry } from '../src/retry.js'

describe('retry', () => {
  it('retries what the policy calls retryable, with its pauses, and gives the result', async () => {
    const pauses: number[] = []
    let calls = 0
    const r = await retry(async (attempt) => {
      calls++
      if (attempt < 3) throw new Error(`fail ${attempt}`)
      return 'ok'
    }, { attempts: 5, retryable: () => true, pauseMs: (n) => n, onRetry: (_e, _a, ms) => pauses.push(ms) })
    assert.equal(r, 'ok')
    assert.equal(calls, 3)
    assert.deepEqual(pauses, [1, 2])
  })

  it('throws at once what is not retryable, and the exhausted error after the last attempt', async () => {
    let calls = 0
    await assert.rejects(retry(async () => { calls++; throw new TypeError('final') }, { attempts: 5, retryable: (e) => !(e instanceof TypeError), pauseMs: () => 0 }), /final/)
    assert.equal(calls, 1)
    calls = 0
    await assert.rejects(
      retry(async () => { calls++; throw new Error('again') }, { attempts: 3, retryable: () => true, pauseMs: () => 0, exhausted: (e, n) => new Error(`failed ${n} times: ${(e as Error).message}`) }),
      /failed 3 times: again/,
    )
    assert.equal(calls, 3)
  })

  it('an abort during a pause ends it with the signal\'s reason', async () => {
    const ac = new AbortController()
    const started = Date.now()
    const p = retry(async () => { throw new Error('x') }, { attempts: 10, retryable: () => true, pauseMs: () => 60_000, signal: ac.signal })
    setTimeout(() => ac.abort(new Error('stopped')), 20)
    await assert.rejects(p, /stopped/)
    assert.ok(Date.now() - started < 30_000, 'did not wait out the pause')
  })

  it('exponential pauses double up to the cap; jitter stays within its bounds', () => {
    assert.deepEqual([1, 2, 3, 4, 5].map(exponential(100, 1000)), [100, 200, 400, 800, 1000])
    for (let n = 1; n < 50; n++) {
      const p = exponential(200, 10_000, 0.25)(3)
      assert.ok(p >= 600 && p <= 1000, String(p))
    }
  })
})

describe('semaphore', () => {
  it('lets `permits` holders in at once and the others in order; a release twice counts once', async () => {
    const { Semaphore } = await import('../src/semaphore.js')
    const s = new Semaphore(2)
    const order: number[] = []
    const a = await s.acquire()
    const b = await s.acquire()
    const waiting = [3, 4].map((n) => s.acquire().then((release) => (order.push(n), release)))
    await new Promise((r) => setImmediate(r))
    assert.deepEqual(order, [], 'both permits are held')
    a()
    a()
    const c = await waiting[0]
    await new Promise((r) => setImmediate(r))
    assert.deepEqual(order, [3], 'a second release of the same permit let nobody else in')
    b()
    const d = await waiting[1]
    assert.deepEqual(order, [3, 4])
    c()
    d()
    const e = await s.acquire()
    const f = await s.acquire()
    e()
    f()
  })
})
