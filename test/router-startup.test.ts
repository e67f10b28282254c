import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ApiError } from '../src/errors.js'
import { RouterState } from '../src/server/router.js'
import { LocalStorage } from '../src/server/storage.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'

/*
 * A router that just started (or restarted under running workers) knows the stored chunks but only
 * the workers it has heard from yet, so its height is low for a moment. A client with a `toBlock`
 * ends its range at the height when told a block is above it: for a stored block the router must
 * answer "not ready, ask again" during its first moments, or such a client ends its sync early and
 * silently (seen under load when a router was restarted mid-sync). Once the start-up window is over,
 * a block no live worker serves is above the height as before.
 */

const HEARTBEAT = 1000
const OPTS = { replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: 3 }

const codeOf = (f: () => unknown) => {
  try {
    f()
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e))
    return `${e.status} ${e.code}`
  }
  return 'routed'
}

describe('a router in its first moments', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let last: number

  before(async () => {
    tmp = await tempDir('ba-router-startup-')
    const chunks = await writeDataset(path.join(tmp.dir, 'd'), 'd', (await anvilRecords()).slice(0, 32), 8)
    last = chunks.at(-1)!.last
  })
  after(async () => {
    await tmp?.cleanup()
  })

  it('answers a retryable not-ready for stored blocks it cannot route yet; above the height once the window is over', async () => {
    const router = new RouterState(new LocalStorage(tmp.dir), OPTS)
    await router.relist(true)
    const t0 = 1_000_000
    // one worker comes back holding the first two chunks only
    router.ping({ worker_id: 'w1', worker_url: 'http://w1.invalid', state: { d: [[0, 15]] } }, t0)
    assert.equal(router.height('d', t0), 15)
    assert.equal(codeOf(() => router.route('d', 3, t0)), 'routed')
    assert.equal(codeOf(() => router.route('d', 20, t0 + 100)), '503 not-ready')
    assert.equal(codeOf(() => router.route('d', last + 1, t0 + 100)), '503 block-not-available', 'above every stored block')
    // long after the start, a stored block nobody serves is above the height
    const later = t0 + 60_000
    router.ping({ worker_id: 'w1', worker_url: 'http://w1.invalid', state: { d: [[0, 15]] } }, later)
    assert.equal(codeOf(() => router.route('d', 20, later)), '503 block-not-available')
  })
})
