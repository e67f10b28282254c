import assert from 'node:assert/strict'
import { mkdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { chromium, type Browser } from 'playwright-core'
import type { ChunkRef } from '../src/chunks/layout.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { rangesContain } from '../src/server/ranges.js'
import { RouterServer } from '../src/server/router-http.js'
import { RouterState } from '../src/server/router.js'
import { renderStatusPage, type RouterStatus } from '../src/server/status-page.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'
import { until } from './helpers/cli.js'
import { CHROMIUM_HINT, findChromium } from './helpers/chromium.js'

/*
 * The operator view: /health, /ready, /status and the status page of a real router with two workers
 * (one copy of each chunk, so each worker holds different ranges), the page checked as a browser
 * renders it (headless Chromium): one coverage bar per worker and dataset, segments placed and sized
 * in proportion to the blocks held, together covering every bar.
 * STATUS_SCREENSHOT=<file.png> saves a screenshot of the page.
 */

const CHROMIUM = findChromium()
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']
const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8'
const HEARTBEAT = 100

async function getJson(url: string, accept?: string) {
  const res = await fetch(url, accept ? { headers: { accept } } : {})
  const text = await res.text()
  return { status: res.status, type: res.headers.get('content-type') ?? '', vary: res.headers.get('vary') ?? '', text, json: () => JSON.parse(text) }
}

describe('operator view', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  const chunks: Record<string, ChunkRef[]> = {}
  const status = async (): Promise<RouterStatus> => (await getJson(`${cluster.router.url}/status`)).json()

  before(async () => {
    tmp = await tempDir()
    const records = await anvilRecords()
    chunks.alpha = await writeDataset(path.join(tmp.dir, 'alpha'), 'alpha', records, 16)
    chunks.beta = await writeDataset(path.join(tmp.dir, 'beta'), 'beta', records.slice(0, 64), 8)
    // Nothing here is about dead workers: a generous miss count keeps a worker that a loaded CI machine
    // stalls for a few heartbeats from being declared dead, which would move its chunks mid-test.
    cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 2, replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: 50, groupChunks: 1 })
    // Both workers serve (chunk by chunk, worker ids worker-0 and worker-1: a fixed assignment), and every chunk is on exactly one of them.
    await until('chunks spread over both workers, one copy each', async () => {
      const s = await status()
      const spread = Object.entries(chunks).every(([name, cs]) => {
        const held = s.workers.map((w) => w.state[name] ?? [])
        const d = s.datasets.find((x) => x.name === name)
        return d?.height === cs.at(-1)!.last && held.every((r) => r.length > 0) && cs.every((c) => held.filter((r) => rangesContain(r, c.first, c.last)).length === 1)
      })
      return spread ? true : undefined
    })
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('answers /health and /ready on the router and the workers, without counting them as queries', async () => {
    const answered = async () => Promise.all(cluster.workers.map(async (w) => (await getJson(`${w.url}/status`)).json().queries.answered as number))
    const before = await answered()
    for (const base of [cluster.router.url, ...cluster.workers.map((w) => w.url)]) {
      const health = await getJson(`${base}/health`)
      assert.equal(health.status, 200, base)
      assert.deepEqual(health.json(), { status: 'ok' })
      const ready = await getJson(`${base}/ready`)
      assert.equal(ready.status, 200, `${base}: ${ready.text}`)
      assert.deepEqual(ready.json(), { status: 'ready' })
    }
    assert.deepEqual(await answered(), before)
  })

  it('is not ready before storage is listed (router) or while the router cannot be reached (worker)', async () => {
    const storage = new LocalStorage(tmp.dir)
    const router = new RouterServer({ storage, replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: 3, relistMs: 1000 })
    try {
      const r = await router.app.inject({ url: '/ready' })
      assert.equal(r.statusCode, 503)
      assert.equal(r.json().status, 'starting')
      assert.match(r.json().reason, /storage/)
      assert.equal((await router.app.inject({ url: '/health' })).statusCode, 200)
    } finally {
      await router.app.close()
    }
    // Port 1: nothing listens there, every ping fails.
    const lonely = new WorkerServer({ storage, routerUrl: 'http://127.0.0.1:1', heartbeatMs: HEARTBEAT, dropGraceMs: 200, concurrency: 1, queue: 1, queueTimeoutMs: 1000 })
    try {
      assert.equal((await lonely.app.inject({ url: '/ready' })).statusCode, 503)
      await lonely.start('127.0.0.1', 0)
      const ready = await getJson(`${lonely.url}/ready`)
      assert.equal(ready.status, 503)
      assert.equal(ready.json().status, 'starting')
      assert.match(ready.json().reason, /no successful ping to the router/)
      assert.equal((await getJson(`${lonely.url}/health`)).status, 200)
    } finally {
      await lonely.stop()
    }
  })

  it('keeps GET / a JSON listing for scripts and serves HTML to browsers', async () => {
    const listing = (await getJson(`${cluster.router.url}/datasets`)).json()
    for (const accept of [undefined, '*/*', 'application/json', 'application/json, text/html;q=0.5', 'text/html;q=0.1, */*']) {
      const r = await getJson(`${cluster.router.url}/`, accept)
      assert.equal(r.status, 200)
      assert.match(r.type, /application\/json/, `accept: ${accept}`)
      assert.deepEqual(r.json(), listing)
      assert.match(r.vary, /accept/i)
    }
    assert.deepEqual(listing.datasets.map((d: { name: string }) => d.name).sort(), ['alpha', 'beta'])
    for (const accept of [BROWSER_ACCEPT, 'text/html']) {
      const page = await getJson(`${cluster.router.url}/`, accept)
      assert.equal(page.status, 200)
      assert.match(page.type, /^text\/html/)
      assert.match(page.text, /^<!doctype html>/)
      assert.match(page.text, /location\.reload/)
      assert.doesNotMatch(page.text, /<(link|img)\b|src=|https?:\/\/(?!127\.0\.0\.1)/, 'no external asset')
    }
    // Bad refresh values fall back to the default; 0 turns reloading off.
    assert.match((await getJson(`${cluster.router.url}/?refresh=abc&refresh=2`, 'text/html')).text, /location\.reload\(\)\},5000\)/)
    assert.doesNotMatch((await getJson(`${cluster.router.url}/?refresh=0`, 'text/html')).text, /location\.reload/)
  })

  it('reports queries per second per worker in /status, from the counts in their pings', async () => {
    for (const queries of [-1, 'many', [1], true, { n: 1 }]) {
      const r = await postJson(`${cluster.router.url}/ping`, { worker_id: 'x', worker_url: 'http://x.invalid:1', state: {}, queries })
      assert.equal(r.status, 400, String(queries))
      assert.equal(JSON.parse(r.text).error, 'invalid-ping')
    }
    for (const bad of [
      { state: {}, delta: { base: 'v', added: {}, removed: {} } },
      { delta: 'v' },
      { delta: { base: 1, added: {}, removed: {} } },
      { delta: { base: 'v', added: { sim: [[5, 2]] }, removed: {} } },
      { state: {}, desired_version: 3 },
    ]) {
      const r = await postJson(`${cluster.router.url}/ping`, { worker_id: 'x', worker_url: 'http://x.invalid:1', ...bad })
      assert.equal(r.status, 400, JSON.stringify(bad))
      assert.equal(JSON.parse(r.text).error, 'invalid-ping')
    }
    // a delta from a worker the router does not know: it asks for the full state, and registers nobody
    const unknown = await postJson(`${cluster.router.url}/ping`, { worker_id: 'x', worker_url: 'http://x.invalid:1', delta: { base: 'v', added: {}, removed: {} } })
    assert.equal(unknown.status, 200, unknown.text)
    assert.equal(JSON.parse(unknown.text).resync, true)
    const s0 = await status()
    assert.equal(s0.workers.length, 2, 'the invalid pings registered nobody')
    for (const d of s0.datasets) {
      assert.deepEqual(d.problems, [])
      for (const key of ['name', 'family', 'height', 'chunks', 'lastChunkBlock']) assert.ok(key in d, key)
    }
    for (const w of s0.workers) {
      assert.ok('queriesPerSecond' in w)
      for (const key of ['id', 'url', 'alive', 'lastPingMsAgo', 'state', 'assignedChunks']) assert.ok(key in w, key)
    }

    // Queries over every chunk of both datasets (so both workers get some) until the router sees them.
    let stop = false
    let answered = 0
    const targets = Object.entries(chunks).flatMap(([name, cs]) => cs.map((c) => ({ name, c })))
    const load = async (offset: number) => {
      for (let i = offset; !stop; i++) {
        const { name, c } = targets[i % targets.length]
        const worker = await fetch(`${cluster.datasets.get(name)}/${c.first}/worker`)
        if (!worker.ok) continue
        const r = await postJson(await worker.text(), { fromBlock: c.first, toBlock: c.last, includeAllBlocks: true, fields: { block: { timestamp: true } } })
        if (r.status === 200) answered++
      }
    }
    const loaders = [0, 1, 2].map((i) => load(i * 5))
    try {
      const rates = await until('queries/s > 0 for both workers', async () => {
        const s = await status()
        return s.workers.every((w) => w.alive && (w.queriesPerSecond ?? 0) > 0) ? s.workers.map((w) => w.queriesPerSecond) : undefined
      })
      assert.ok(rates.every((q) => typeof q === 'number' && q > 0 && q < 10_000), `rates ${rates}`)
    } finally {
      stop = true
      await Promise.all(loaders)
    }
    assert.ok(answered > 0)
    const counts = await Promise.all(cluster.workers.map(async (w) => (await getJson(`${w.url}/status`)).json().queries.answered as number))
    assert.ok(counts.every((n) => n > 0), `answered per worker: ${counts}`)
  })

  it('renders a coverage bar per worker and dataset, segments proportional to the ranges held', async (t) => {
    if (!CHROMIUM) {
      if (process.env.CI) assert.fail(`no Chromium found: ${CHROMIUM_HINT}`)
      t.skip(`no Chromium found: ${CHROMIUM_HINT}`)
      return
    }
    const browser: Browser = await chromium.launch({ executablePath: CHROMIUM!, args: CHROMIUM_ARGS })
    try {
      const page = await browser.newPage({ viewport: { width: 1200, height: 800 } })
      // A real navigation: the browser's own Accept header must get the HTML page.
      // The page and /status must describe the same assignment: load the page until /status reads the
      // same worker states just before and just after it.
      const states = (x: RouterStatus) => JSON.stringify(x.workers.map((w) => [w.id, w.state]).sort())
      let contentType = ''
      const s = await until('a page rendered while the assignment held still', async () => {
        const before = await status()
        contentType = (await page.goto(`${cluster.router.url}/?refresh=0`))!.headers()['content-type']
        const after = await status()
        return states(before) === states(after) ? after : undefined
      })
      assert.match(contentType, /^text\/html/)
      const rendered = await page.evaluate(() => {
        const box = (e: Element) => {
          const r = e.getBoundingClientRect()
          return { x: r.x, width: r.width, height: r.height }
        }
        return {
          bars: [...document.querySelectorAll('.coverage')].map((bar) => ({
            worker: bar.getAttribute('data-worker')!,
            dataset: bar.getAttribute('data-dataset')!,
            last: Number(bar.getAttribute('data-last')),
            box: box(bar),
            segments: [...bar.querySelectorAll('.segment')].map((seg) => ({ from: Number(seg.getAttribute('data-from')), to: Number(seg.getAttribute('data-to')), box: box(seg) })),
          })),
          datasets: [...document.querySelectorAll('tr.dataset')].map((tr) => ({
            name: tr.getAttribute('data-dataset')!,
            height: tr.querySelector('.height')!.textContent!.trim(),
            chunks: tr.querySelector('.chunks')!.textContent!.trim(),
          })),
          workers: [...document.querySelectorAll('article.worker')].map((a) => ({
            id: a.getAttribute('data-worker')!,
            health: a.querySelector('.health')!.textContent!.trim(),
            lastPing: a.querySelector('.last-ping')!.textContent!.trim(),
            qps: a.querySelector('.qps')!.textContent!.trim(),
          })),
        }
      })

      // Datasets with their heights as served.
      assert.deepEqual(rendered.datasets.map((d) => d.name).sort(), ['alpha', 'beta'])
      for (const d of rendered.datasets) {
        const want = s.datasets.find((x) => x.name === d.name)!
        assert.equal(Number(d.height.replace(/,/g, '')), want.height, d.name)
        assert.equal(want.height, chunks[d.name].at(-1)!.last)
        assert.equal(Number(d.chunks), chunks[d.name].length)
      }
      // Workers: alive, pinged within a second or so, a rate shown.
      assert.deepEqual(rendered.workers.map((w) => w.id).sort(), s.workers.map((w) => w.id).sort())
      for (const w of rendered.workers) {
        assert.equal(w.health, 'alive')
        assert.match(w.lastPing, /^\d+(\.\d)? s ago$/)
        assert.match(w.qps, /^(\d+(\.\d+)?|–)$/)
      }

      // One bar per worker × dataset, all of them visible.
      assert.equal(rendered.bars.length, 4)
      assert.equal(new Set(rendered.bars.map((b) => `${b.worker}|${b.dataset}`)).size, 4)
      for (const bar of rendered.bars) {
        const label = `${bar.worker} / ${bar.dataset}`
        assert.ok(bar.box.width > 200 && bar.box.height > 0, `${label}: bar ${JSON.stringify(bar.box)}`)
        assert.equal(bar.last, chunks[bar.dataset].at(-1)!.last)
        // The segments are the ranges the router has for the worker, placed in proportion over [0, last].
        const held = s.workers.find((w) => w.id === bar.worker)!.state[bar.dataset]
        assert.deepEqual(bar.segments.map((g) => [g.from, g.to]), held, label)
        const px = bar.box.width / (bar.last + 1)
        for (const g of bar.segments) {
          assert.ok(g.box.width > 0, `${label}: empty segment ${g.from}-${g.to}`)
          assert.ok(Math.abs(g.box.width - (g.to - g.from + 1) * px) <= 2, `${label}: segment ${g.from}-${g.to} is ${g.box.width}px, expected ${(g.to - g.from + 1) * px}`)
          assert.ok(Math.abs(g.box.x - bar.box.x - g.from * px) <= 2, `${label}: segment ${g.from}-${g.to} starts at ${g.box.x - bar.box.x}px, expected ${g.from * px}`)
        }
      }
      // Per dataset, the segments of both workers together cover the whole bar.
      for (const name of Object.keys(chunks)) {
        const bars = rendered.bars.filter((b) => b.dataset === name)
        assert.ok(bars.every((b) => b.segments.length > 0), `${name}: every worker holds some of it`)
        const left = bars[0].box.x
        const right = left + bars[0].box.width
        const pieces = bars.flatMap((b) => b.segments.map((g) => [g.box.x - b.box.x + left, g.box.x - b.box.x + left + g.box.width])).sort((a, b) => a[0] - b[0])
        let covered = left
        for (const [a, b] of pieces) {
          assert.ok(a <= covered + 1, `${name}: gap from ${covered - left}px to ${a - left}px`)
          covered = Math.max(covered, b)
        }
        assert.ok(covered >= right - 1, `${name}: covered up to ${covered - left}px of ${right - left}px`)
      }

      if (process.env.STATUS_SCREENSHOT) await page.screenshot({ path: process.env.STATUS_SCREENSHOT, fullPage: true })
    } finally {
      await browser.close()
    }
  })

  it('finds Chromium on the PATH under its usual names, or at CHROMIUM_PATH', async () => {
    const bin = path.join(tmp.dir, 'bin')
    await mkdir(bin, { recursive: true })
    const fake = path.join(bin, 'chromium-browser')
    await writeFile(fake, '#!/bin/sh\n', { mode: 0o755 })
    assert.equal(findChromium({ PATH: ['/nonexistent', bin].join(path.delimiter) }), fake)
    assert.equal(findChromium({ PATH: '/nonexistent' }), undefined)
    assert.equal(findChromium({ PATH: bin, CHROMIUM_PATH: '/nonexistent/chrome' }), undefined)
    assert.equal(findChromium({ PATH: '', CHROMIUM_PATH: fake }), fake)
  })

  it('coverage counts the blocks the chunks cover: a sparse dataset held whole is 100 %', () => {
    const sparse = [[1000000, 1000000], [4369999, 4369999], [18000000, 18000000], [18500000, 18500000]] as [number, number][]
    const status: RouterStatus = {
      datasets: [{ name: 'eth', family: 'evm', height: 18500000, chunks: 1, lastChunkBlock: 18500000, problems: [], spans: sparse }],
      workers: [
        { id: 'all', url: 'http://a.invalid', alive: true, lastPingMsAgo: 10, queriesPerSecond: 0, assignedChunks: 1, state: { eth: [[1000000, 18500000]] } },
        { id: 'half', url: 'http://b.invalid', alive: true, lastPingMsAgo: 10, queriesPerSecond: 0, assignedChunks: 1, state: { eth: [[1000000, 4369999]] } },
      ],
    }
    const html = renderStatusPage(status, { refreshSeconds: 0 })
    const shares = [...html.matchAll(/<span class="share">\(([^)]*)\)<\/span>/g)].map((m) => m[1])
    assert.deepEqual(shares, ['100 %', '50 %'])
  })

  it('says in problems when every worker is dead', async () => {
    const state = new RouterState(new LocalStorage(tmp.dir), { replication: 1, heartbeatMs: 100, missedHeartbeats: 3 })
    await state.relist(true)
    const t0 = Date.now()
    state.ping({ worker_id: 'w', worker_url: 'http://w.invalid:1', state: {} }, t0)
    assert.deepEqual(state.status(t0).datasets.map((d) => d.problems), [[], []])
    const later = state.status(t0 + 10_000).datasets
    for (const d of later) assert.deepEqual(d.problems, ['every worker is dead (1 registered, none pinged in the last 300 ms): no block is served'])
    // coverage spans: one per run of adjacent chunks
    assert.deepEqual(later.find((d) => d.name === 'alpha')!.spans, [[0, 127]])
  })

  it('escapes what workers send (ids, URLs) and dataset problems', async (t) => {
    const hostile = '<img src=x onerror="window.pwned=1">'
    const status: RouterStatus = {
      datasets: [{ name: 'd<b>', family: 'evm', height: 9, chunks: 1, lastChunkBlock: 9, problems: ['chunk <script>window.pwned=2</script> missing'] }],
      workers: [{ id: hostile, url: 'http://x"><script>window.pwned=3</script>', alive: true, lastPingMsAgo: 1200, queriesPerSecond: 1.5, assignedChunks: 1, state: { 'd<b>': [[0, 9]] } }],
    }
    const html = renderStatusPage(status, { refreshSeconds: 0 })
    assert.doesNotMatch(html, /<img|<script>window|<b>/)
    assert.match(html, /1\.2 s ago/)
    if (!CHROMIUM) {
      t.skip(`no Chromium found: ${CHROMIUM_HINT}`)
      return
    }
    const browser = await chromium.launch({ executablePath: CHROMIUM!, args: CHROMIUM_ARGS })
    try {
      const page = await browser.newPage()
      await page.setContent(html)
      const seen = await page.evaluate(() => ({
        pwned: (window as unknown as { pwned?: number }).pwned,
        id: document.querySelector('article.worker .id')!.textContent,
        worker: document.querySelector('.coverage')!.getAttribute('data-worker'),
        problem: document.querySelector('.problem')!.textContent,
        segment: document.querySelector('.segment')!.getBoundingClientRect().width === document.querySelector('.coverage')!.getBoundingClientRect().width,
      }))
      assert.equal(seen.pwned, undefined)
      assert.equal(seen.id, hostile)
      assert.equal(seen.worker, hostile)
      assert.equal(seen.problem, 'chunk <script>window.pwned=2</script> missing')
      assert.ok(seen.segment, 'a worker holding everything fills its bar')
    } finally {
      await browser.close()
    }
  })
})
