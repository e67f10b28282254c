import assert from 'node:assert/strict'
import { mkdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ChunkRef } from '../src/chunks/layout.js'
import { DatasetAssignment } from '../src/server/assignment.js'
import { mergeRanges, rangesContain } from '../src/server/ranges.js'
import { RouterServer } from '../src/server/router-http.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerNode } from '../src/server/worker.js'
import { anvilRecords, tempDir, writeChunk, writeDataset, type AnvilRecord } from './helpers/dataset.js'

/*
 * Router over real chunk folders with real worker nodes pinging it over HTTP (the query side of the
 * workers is not needed here: the router never calls workers, it only answers clients).
 */

// a worker silent for 2 s is dead: short enough for the test, long enough for a busy machine's stalls
const HEARTBEAT = 200
const MISSED = 10

async function get(url: string) {
  const res = await fetch(url)
  return { status: res.status, type: res.headers.get('content-type') ?? '', retryAfter: res.headers.get('retry-after'), text: await res.text() }
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await probe()
    if (v !== undefined) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

function startNode(storage: LocalStorage, routerUrl: string, id: string): WorkerNode {
  // The URL is only handed out by the router, never called in this test.
  return new WorkerNode({ id, publicUrl: `http://${id}.invalid:1`, storage, routerUrl, heartbeatMs: HEARTBEAT, dropGraceMs: HEARTBEAT * 2 })
}

describe('router', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let denseChunks: ChunkRef[]
  let sparseChunks: ChunkRef[]
  let growingChunks: ChunkRef[]
  let storage: LocalStorage
  let router: RouterServer
  const nodes: WorkerNode[] = []
  const base = (name: string) => router.datasetUrl(name)

  before(async () => {
    tmp = await tempDir()
    records = await anvilRecords()
    denseChunks = await writeDataset(path.join(tmp.dir, 'dense'), 'dense', records, 16)
    // Isolated blocks with gaps between and before them (docs/protocol.md §3.5).
    const sparse = records.filter((r) => [3, 4, 10, 11, 20, 40, 41, 42].includes(r.number))
    sparseChunks = await writeDataset(path.join(tmp.dir, 'sparse'), 'sparse', sparse, 2)
    growingChunks = await writeDataset(path.join(tmp.dir, 'growing'), 'growing', records.slice(0, 32), 16)
    await mkdir(path.join(tmp.dir, 'empty'))
    await writeFile(path.join(tmp.dir, 'empty', 'dataset.json'), JSON.stringify({ name: 'empty', family: 'evm' }))
    storage = new LocalStorage(tmp.dir)
    router = new RouterServer({ storage, replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: MISSED, relistMs: 100, groupChunks: 1 })
    await router.start('127.0.0.1', 0)
  })

  after(async () => {
    for (const n of nodes) await n.stop()
    await router?.stop()
    await tmp?.cleanup()
  })

  it('announces no height and routes nowhere while no worker serves the data', async () => {
    for (const name of ['dense', 'sparse', 'growing', 'empty']) {
      const h = await get(`${base(name)}/height`)
      assert.equal(h.status, 200)
      assert.match(h.type, /^text\/plain/)
      assert.equal(h.text, '-1')
    }
    const status = router.state.status()
    assert.equal(status.datasets.find((d) => d.name === 'dense')!.lastChunkBlock, denseChunks.at(-1)!.last)
    const w = await get(`${base('dense')}/0/worker`)
    assert.equal(w.status, 503)
    assert.ok(Number(w.retryAfter) >= 1)
    const body = JSON.parse(w.text)
    assert.equal(typeof body.error, 'string')
    assert.match(body.message, /block 0\b/)
    assert.match(body.message, /dense/)
  })

  it('GET / and GET /datasets list the datasets with their base URLs as the client reached the router', async () => {
    for (const url of [`${router.url}/`, `${router.url}/datasets`]) {
      const r = await get(url)
      assert.equal(r.status, 200, url)
      assert.match(r.type, /application\/json/)
      const { datasets } = JSON.parse(r.text)
      assert.deepEqual(datasets.map((d: any) => d.name).sort(), ['dense', 'empty', 'growing', 'sparse'])
      for (const d of datasets) {
        assert.equal(d.baseUrl, base(d.name))
        assert.equal(d.family, 'evm')
        assert.equal(typeof d.height, 'number')
      }
    }
  })

  it('answers 404 for unknown datasets and routes, 400 for bad blocks and pings', async () => {
    for (const url of [`${base('nope')}/height`, `${base('nope')}/0/worker`, `${router.url}/datasets/dense/height/x`, `${router.url}/nothing`]) {
      const r = await get(url)
      assert.equal(r.status, 404, url)
      assert.match(r.type, /application\/json/)
      assert.ok(JSON.parse(r.text).message, url)
    }
    for (const block of ['abc', '-1', '1.5', '0x10', '99999999999999999999']) {
      const r = await get(`${base('dense')}/${block}/worker`)
      assert.equal(r.status, 400, block)
      assert.equal(JSON.parse(r.text).error, 'invalid-block')
    }
    for (const body of ['{', '[]', '{"worker_id":"a"}', '{"worker_id":"a","worker_url":"http://x","state":{"dense":[[5,1]]}}']) {
      const r = await fetch(`${router.url}/ping`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
      assert.equal(r.status, 400, body)
      const j = await r.json()
      assert.ok(j.error && j.message, body)
    }
  })

  it('registers workers, assigns each chunk by rendezvous hashing and announces the height once served', async () => {
    nodes.push(startNode(storage, router.url, 'w1'), startNode(storage, router.url, 'w2'))
    await Promise.all(nodes.map((n) => n.start()))
    // Replication 1: every chunk ends up on exactly the worker the rendezvous hashing of the same inputs picks.
    const expected = new DatasetAssignment('dense', { replication: 1, groupChunks: 1 })
    expected.setLive(['w1', 'w2'])
    expected.setChunks(denseChunks)
    const shares = nodes.map((n) => expected.rangesOf(n.opts.id!))
    assert.ok(shares.every((r) => r.length > 0), `both workers get chunks: ${JSON.stringify(shares)}`)
    await until('both workers serving their share', async () => {
      const h = await get(`${base('dense')}/height`)
      const s = nodes.map((n) => n.state().dense ?? [])
      return h.text === String(denseChunks.at(-1)!.last) && JSON.stringify(s) === JSON.stringify(shares) ? true : undefined
    })
  })

  it('sends each block to a worker that holds it', async () => {
    for (const c of denseChunks) {
      for (const block of [c.first, c.last, Math.floor((c.first + c.last) / 2)]) {
        const r = await get(`${base('dense')}/${block}/worker`)
        assert.equal(r.status, 200)
        assert.match(r.type, /^text\/plain/)
        const node = nodes.find((n) => r.text === `${n.opts.publicUrl}/datasets/dense/query`)
        assert.ok(node, `unexpected worker URL ${r.text}`)
        assert.ok(rangesContain(node.state().dense, c.first, c.last), `${node.opts.id} does not hold block ${block}`)
      }
    }
    const above = await get(`${base('dense')}/${denseChunks.at(-1)!.last + 1}/worker`)
    assert.equal(above.status, 503)
    assert.ok(above.retryAfter)
    assert.match(JSON.parse(above.text).message, new RegExp(`block ${denseChunks.at(-1)!.last + 1}\\b.*dense`))
  })

  it('routes blocks in gaps of a sparse dataset to the next chunk', async () => {
    assert.equal((await get(`${base('sparse')}/height`)).text, String(sparseChunks.at(-1)!.last))
    const holderOf = async (block: number) => {
      const r = await get(`${base('sparse')}/${block}/worker`)
      assert.equal(r.status, 200, `block ${block}: ${r.text}`)
      return nodes.find((n) => r.text.startsWith(n.opts.publicUrl))!
    }
    // Every block up to the height (gap or not) goes to a worker holding the first chunk ending at or after it.
    for (let block = 0; block <= sparseChunks.at(-1)!.last; block++) {
      const chunk = sparseChunks.find((c) => c.last >= block)!
      const node = await holderOf(block)
      assert.ok(rangesContain(node.state().sparse, chunk.first, chunk.last), `block ${block} → ${node.opts.id}, chunk ${chunk.path}`)
    }
    assert.equal((await get(`${base('sparse')}/${sparseChunks.at(-1)!.last + 1}/worker`)).status, 503)
  })

  it('keeps an empty dataset at height -1', async () => {
    assert.equal((await get(`${base('empty')}/height`)).text, '-1')
    const r = await get(`${base('empty')}/0/worker`)
    assert.equal(r.status, 503)
    assert.match(JSON.parse(r.text).message, /empty/)
  })

  it('picks up chunks written while running, once a worker serves them', async () => {
    const before = Number((await get(`${base('growing')}/height`)).text)
    assert.equal(before, growingChunks.at(-1)!.last)
    await writeChunk(path.join(tmp.dir, 'growing'), records.slice(32, 48), growingChunks)
    const grown = await until('height to grow', async () => {
      const h = Number((await get(`${base('growing')}/height`)).text)
      return h > before ? h : undefined
    })
    assert.equal(grown, 47)
    const r = await get(`${base('growing')}/40/worker`)
    const node = nodes.find((n) => r.text.startsWith(n.opts.publicUrl))!
    assert.ok(rangesContain(node.state().growing, 32, 47))
  })

  it('exposes prometheus metrics', async () => {
    const m = await get(`${router.url}/metrics`)
    assert.equal(m.status, 200)
    assert.match(m.text, /^block_archive_router_workers_alive 2$/m)
    assert.match(m.text, new RegExp(`^block_archive_router_dataset_height\\{dataset="dense"\\} ${denseChunks.at(-1)!.last}$`, 'm'))
    assert.match(m.text, /block_archive_http_requests_total\{service="router",route="\/datasets\/:name\/height",status="200"\}/)
  })

  it('stops routing to a dead worker within the heartbeat timeout and hands its chunks to the live one', async () => {
    const [w1, w2] = nodes
    const w2Chunks = denseChunks.filter((c) => rangesContain(w2.state().dense, c.first, c.last))
    assert.ok(w2Chunks.length > 0)
    await w2.stop()
    const stoppedAt = Date.now()
    // Routing to w2 ends once it misses MISSED heartbeats; its chunks then move to w1.
    await until('w2 no longer routed to', async () => {
      const urls = await Promise.all(w2Chunks.map((c) => get(`${base('dense')}/${c.first}/worker`)))
      return urls.every((u) => !u.text.startsWith(w2.opts.publicUrl)) ? true : undefined
    })
    const elapsed = Date.now() - stoppedAt
    // not long after the timeout (a generous bound: a busy machine delays timers)
    assert.ok(elapsed <= HEARTBEAT * MISSED * 4, `took ${elapsed} ms`)
    await until('w1 serving everything', async () => {
      const rs = await Promise.all(denseChunks.map((c) => get(`${base('dense')}/${c.last}/worker`)))
      return rs.every((r) => r.status === 200 && r.text.startsWith(w1.opts.publicUrl)) ? true : undefined
    })
    assert.ok(denseChunks.every((c) => rangesContain(w1.state().dense, c.first, c.last)))
    // The height never goes down.
    assert.equal((await get(`${base('dense')}/height`)).text, String(denseChunks.at(-1)!.last))
    const m = await get(`${router.url}/metrics`)
    assert.match(m.text, /^block_archive_router_workers_alive 1$/m)
  })

  it('answers 503 with Retry-After for served-before blocks when no worker is alive', async () => {
    await nodes[0].stop()
    await until('no live worker', async () => ((await get(`${base('dense')}/0/worker`)).status === 503 ? true : undefined))
    const r = await get(`${base('dense')}/0/worker`)
    assert.ok(Number(r.retryAfter) >= 1)
    assert.equal(JSON.parse(r.text).error, 'no-worker')
    assert.equal((await get(`${base('dense')}/height`)).text, String(denseChunks.at(-1)!.last))
  })
})

describe('router with replication 2', { timeout: 600_000 }, () => {
  it('puts every chunk on both workers', async () => {
    const tmp = await tempDir()
    const nodes: WorkerNode[] = []
    const storage = new LocalStorage(path.join(tmp.dir, 'd'))
    const chunks = await writeDataset(path.join(tmp.dir, 'd'), 'd', (await anvilRecords()).slice(0, 64), 16)
    const router = new RouterServer({ storage, replication: 2, heartbeatMs: HEARTBEAT, missedHeartbeats: MISSED, relistMs: 1000 })
    try {
      await router.start('127.0.0.1', 0)
      nodes.push(startNode(storage, router.url, 'r1'), startNode(storage, router.url, 'r2'), startNode(storage, router.url, 'r3'))
      await Promise.all(nodes.map((n) => n.start()))
      await until('two replicas of every chunk', async () => {
        const states = nodes.map((n) => n.state().d ?? [])
        const perChunk = chunks.map((c) => states.filter((s) => rangesContain(s, c.first, c.last)).length)
        return perChunk.every((n) => n === 2) ? true : undefined
      })
      // Consecutive lookups of one block alternate between its two holders.
      const seen = new Set<string>()
      for (let i = 0; i < 4; i++) seen.add((await get(`${router.datasetUrl('d')}/20/worker`)).text)
      assert.equal(seen.size, 2)
    } finally {
      for (const n of nodes) await n.stop()
      await router.stop()
      await tmp.cleanup()
    }
  })
})

describe('router rebalancing', { timeout: 600_000 }, () => {
  it('gives a worker back after missed heartbeats its own chunks, served by the other until it holds them', async () => {
    const tmp = await tempDir()
    const storage = new LocalStorage(path.join(tmp.dir, 'd'))
    const chunks = await writeDataset(path.join(tmp.dir, 'd'), 'd', (await anvilRecords()).slice(0, 64), 16)
    const router = new RouterServer({ storage, replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: MISSED, relistMs: 1000, groupChunks: 1 })
    // Fake workers: each ping reports what they hold and returns what the router wants them to hold.
    const ping = async (id: string, held: ChunkRef[]) => {
      const res = await fetch(`${router.url}/ping`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ worker_id: id, worker_url: `http://${id}.invalid:1`, state: { d: mergeRanges(held) } }),
      })
      assert.equal(res.status, 200)
      return ((await res.json()) as { desired: Record<string, [number, number][]> }).desired.d ?? []
    }
    const wanted = (desired: [number, number][]) => chunks.filter((c) => rangesContain(desired, c.first, c.last))
    try {
      await router.start('127.0.0.1', 0)
      // `a` alone holds everything (while `b` was gone, its chunks moved to `a`).
      await until('everything assigned to a', async () => (wanted(await ping('a', chunks)).length === chunks.length ? true : undefined))
      // `b` comes back with its share (as rendezvous hashing gives it with both alive) still on disk.
      const expected = new DatasetAssignment('d', { replication: 1, groupChunks: 1 })
      expected.setLive(['a', 'b'])
      expected.setChunks(chunks)
      const bHolds = [...expected.chunksOf('b')]
      assert.ok(bHolds.length > 0 && bHolds.length < chunks.length)
      const forB = await until('b assigned its share', async () => {
        await ping('a', chunks)
        const got = wanted(await ping('b', bHolds))
        return got.length === bHolds.length ? got : undefined
      })
      assert.deepEqual(forB.map((c) => c.path), bHolds.map((c) => c.path))
      // `a` gives b's chunks up only now that b reports them.
      assert.deepEqual(wanted(await ping('a', chunks)).map((c) => c.path), expected.chunksOf('a').map((c) => c.path))
      // b without its chunks on disk: a keeps serving them until b has them.
      await ping('b', [])
      assert.deepEqual(wanted(await ping('a', chunks)).length, chunks.length)
    } finally {
      await router.stop()
      await tmp.cleanup()
    }
  })
})
