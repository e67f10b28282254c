import assert from 'node:assert/strict'
import { cp, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ChunkMeta, ChunkRef } from '../src/chunks/layout.js'
import { DatasetAssignment } from '../src/server/assignment.js'
import { RouterServer } from '../src/server/router-http.js'
import { DEFAULT_GROUP_CHUNKS } from '../src/server/defaults.js'
import { ArchiveStorage, DuplicateDataset, LocalStorage } from '../src/server/storage.js'
import { WorkerNode } from '../src/server/worker.js'
import { killChildren, runCli, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeChunk, writeDataset, type AnvilRecord } from './helpers/dataset.js'

/*
 * The router's view of storage, over real chunk folders with real worker nodes pinging it: two
 * datasets with one name are refused (in process and through the CLI), `--dataset NAME=URL` serves
 * a folder under another name, overlapping chunks and a missing chunk stop serving before them (and
 * a missing chunk put back is served again) while deliberate jumps are not problems, and a worker
 * registering with nothing to serve is logged. Also: a worker stopped mid-ping can be stopped again.
 */

const HEARTBEAT = 100
/** Nothing here is about dead workers: a busy test process must not make one look dead. */
const MISSED = 20

async function json(url: string): Promise<any> {
  const res = await fetch(url)
  assert.equal(res.status, 200, url)
  return res.json()
}

async function text(url: string): Promise<{ status: number; text: string }> {
  const res = await fetch(url)
  return { status: res.status, text: await res.text() }
}

async function setPreviousLast(dir: string, chunk: ChunkRef, previousLast: number | undefined): Promise<void> {
  const file = path.join(dir, chunk.path, 'meta.json')
  const meta = JSON.parse(await readFile(file, 'utf8')) as ChunkMeta
  if (previousLast === undefined) delete meta.previousLast
  else meta.previousLast = previousLast
  await writeFile(file, JSON.stringify(meta, null, 2))
}

async function writeDatasetJson(dir: string, name: string): Promise<void> {
  await mkdir(dir, { recursive: true })
  await writeFile(path.join(dir, 'dataset.json'), JSON.stringify({ name, family: 'evm' }))
}

function node(id: string, storage: ArchiveStorage, routerUrl: string): WorkerNode {
  // Its URL is only handed out by the router, never called here.
  return new WorkerNode({ id, publicUrl: `http://${id}.invalid:1`, storage, routerUrl, heartbeatMs: HEARTBEAT, dropGraceMs: HEARTBEAT * 2 })
}

describe('router listing', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  /** Datasets with listing problems (or deliberate jumps), served by one router and one worker. */
  let data: string
  let overlapChunks: ChunkRef[]
  let gapChunks: ChunkRef[]
  /** Where the missing middle chunk of `gap` waits to be put back. */
  let parked: string
  let router: RouterServer
  const nodes: WorkerNode[] = []

  before(async () => {
    tmp = await tempDir('ba-router-listing-')
    records = await anvilRecords()
    data = path.join(tmp.dir, 'data')

    // overlap: 0–15 in one chunk, then 8–23 and 24–39 written elsewhere and copied in.
    overlapChunks = await writeDataset(path.join(data, 'overlap'), 'overlap', records.slice(0, 16), 16)
    const elsewhere = path.join(tmp.dir, 'elsewhere')
    const later: ChunkRef[] = []
    await writeChunk(elsewhere, records.slice(8, 24), later)
    await writeChunk(elsewhere, records.slice(24, 40), later)
    const top = later[0].path.split('/')[0]
    assert.equal(later[1].path.split('/')[0], top)
    await cp(path.join(elsewhere, top), path.join(data, 'overlap', top), { recursive: true })
    overlapChunks.push(...later)

    // gap, jump, nojump: chunks 0–15, 16–31, 32–47 without the middle one; the third says which
    // chunk it was written after: 31 (so 16–31 is missing), 15 (a deliberate jump), or nothing.
    const template = path.join(tmp.dir, 'template')
    gapChunks = await writeDataset(template, 'template', records.slice(0, 48), 16)
    parked = path.join(tmp.dir, 'parked')
    for (const [name, previousLast] of [['gap', 31], ['jump', 15], ['nojump', undefined]] as const) {
      const dir = path.join(data, name)
      await cp(template, dir, { recursive: true })
      await writeDatasetJson(dir, name)
      await setPreviousLast(dir, gapChunks[2], previousLast)
      if (name === 'gap') await rename(path.join(dir, gapChunks[1].path), parked)
      else await rm(path.join(dir, gapChunks[1].path), { recursive: true })
    }

    const storage = new LocalStorage(data)
    router = new RouterServer({ storage, replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: MISSED, relistMs: 100 })
    await router.start('127.0.0.1', 0)
    const w = node('w1', new ArchiveStorage({}), router.url)
    nodes.push(w)
    await w.start()
    await until('jump served', async () => ((await text(`${router.datasetUrl('jump')}/height`)).text === '47' ? true : undefined))
  })

  after(async () => {
    for (const n of nodes) await n.stop()
    await router?.stop()
    killChildren()
    await tmp?.cleanup()
  })

  it('refuses two datasets with the same name, naming both URLs (in process and through the CLI)', async () => {
    const a = path.join(tmp.dir, 'dup-a')
    const b = path.join(tmp.dir, 'dup-b')
    await writeDatasetJson(path.join(a, 'x'), 'same')
    await writeDatasetJson(path.join(b, 'y'), 'same')
    const both = (e: unknown) => {
      assert.ok(e instanceof DuplicateDataset, String(e))
      assert.match(e.message, /"same"/)
      assert.ok(e.message.includes(path.join(a, 'x')) && e.message.includes(path.join(b, 'y')), e.message)
      return true
    }
    const dup = new RouterServer({ storage: new ArchiveStorage({ roots: [a, b] }), replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: MISSED, relistMs: 100 })
    await assert.rejects(dup.start('127.0.0.1', 0), both)
    await dup.stop()
    // An explicit NAME=URL colliding with a discovered dataset is the same mistake.
    const named = new RouterServer({ storage: new ArchiveStorage({ roots: [a], datasets: [{ name: 'same', url: path.join(b, 'y') }] }), replication: 1, heartbeatMs: HEARTBEAT, missedHeartbeats: MISSED, relistMs: 100 })
    await assert.rejects(named.start('127.0.0.1', 0), both)
    await named.stop()

    const r = await runCli(['router', '--data', a, '--data', b, '--port', '0'])
    assert.notEqual(r.code, 0)
    assert.equal(r.stdout, '')
    const lines = r.stderr.trim().split('\n')
    assert.equal(lines.length, 1, `one line on stderr: ${r.stderr}`)
    assert.match(lines[0], /^two datasets are named "same": /)
    assert.ok(lines[0].includes(path.join(a, 'x')) && lines[0].includes(path.join(b, 'y')), lines[0])
    assert.doesNotMatch(r.stderr, /^\s+at /m)
  })

  it('serves a folder under another name with --dataset NAME=URL', async () => {
    const jump = path.join(data, 'jump')
    const cli = await startCli(['router', '--data', data, '--dataset', `other=${jump}`, '--port', '0', '--replication', '1', '--heartbeat-ms', String(HEARTBEAT), '--missed-heartbeats', String(MISSED), '--relist-ms', '100'], ['router', 'dataset other', 'dataset jump'])
    const url = cli.lines.get('router')![0]
    assert.equal(cli.lines.get('dataset other')![0], `${url}/datasets/other`)
    const { datasets } = await json(`${url}/datasets`)
    assert.deepEqual(datasets.map((d: any) => d.name), ['gap', 'jump', 'nojump', 'other', 'overlap'])
    const other = datasets.find((d: any) => d.name === 'other')
    assert.equal(other.family, 'evm')
    assert.equal(other.baseUrl, `${url}/datasets/other`)
    const status = await json(`${url}/status`)
    const st = (name: string) => status.datasets.find((d: any) => d.name === name)
    assert.equal(st('other').url, jump)
    assert.equal(st('jump').url, jump)
    assert.deepEqual(st('other').problems, [])
    assert.equal(st('other').chunks, 2)
    // A worker learns the dataset under that name and serves it.
    const w = node('w-other', new ArchiveStorage({}), url)
    nodes.push(w)
    await w.start()
    await until('other served', async () => ((await text(`${url}/datasets/other/height`)).text === '47' ? true : undefined))
    assert.deepEqual(w.state().other, [[0, 15], [32, 47]])
    await w.stop()
    cli.child.kill('SIGTERM')
  })

  it('stops serving before overlapping chunks and names both', async () => {
    await until('overlap served', async () => ((await text(`${router.datasetUrl('overlap')}/height`)).text === '15' ? true : undefined))
    const s = (await json(`${router.url}/status`)).datasets.find((d: any) => d.name === 'overlap')
    assert.equal(s.problems.length, 1, JSON.stringify(s.problems))
    const [problem] = s.problems
    assert.ok(problem.includes(overlapChunks[0].path) && problem.includes(overlapChunks[1].path), problem)
    assert.match(problem, /overlap \(blocks 8–15 are in both\); served up to block 15/)
    assert.equal(s.chunks, 1)
    assert.equal(s.lastChunkBlock, 15)
    assert.equal(s.height, 15)
    for (const block of [0, 8, 15]) assert.equal((await text(`${router.datasetUrl('overlap')}/${block}/worker`)).status, 200, `block ${block}`)
    for (const block of [16, 23, 24, 39]) {
      const r = await text(`${router.datasetUrl('overlap')}/${block}/worker`)
      assert.equal(r.status, 503, `block ${block}`)
      assert.match(JSON.parse(r.text).message, /not available yet \(height 15\)/)
    }
    // The worker is not asked to hold anything past it either.
    assert.deepEqual(nodes[0].state().overlap, [[0, 15]])
  })

  it('reports a missing chunk, tells deliberate jumps apart, and serves again once the chunk is back', async () => {
    const st = async (name: string) => (await json(`${router.url}/status`)).datasets.find((d: any) => d.name === name)
    const gap = await until('gap served up to the missing chunk', async () => {
      const d = await st('gap')
      return d.height === 15 ? d : undefined
    })
    assert.equal(gap.problems.length, 1, JSON.stringify(gap.problems))
    assert.match(gap.problems[0], /a chunk is missing \(blocks 16–31\); served up to block 15/)
    assert.ok(gap.problems[0].includes(gapChunks[2].path), gap.problems[0])
    assert.equal(gap.height, 15)
    assert.equal(gap.chunks, 1)
    for (const block of [16, 32, 47]) assert.equal((await text(`${router.datasetUrl('gap')}/${block}/worker`)).status, 503, `block ${block}`)

    for (const name of ['jump', 'nojump']) {
      await until(`${name} served`, async () => ((await text(`${router.datasetUrl(name)}/height`)).text === '47' ? true : undefined))
      const d = await st(name)
      assert.deepEqual(d.problems, [], name)
      assert.equal(d.chunks, 2, name)
      // A block in the jump goes to the next chunk's worker.
      assert.equal((await text(`${router.datasetUrl(name)}/20/worker`)).status, 200, name)
    }

    await rename(parked, path.join(data, 'gap', gapChunks[1].path))
    const healed = await until('gap healed', async () => {
      const d = await st('gap')
      return d.problems.length === 0 && d.height === 47 ? d : undefined
    }).catch(async (e) => {
      console.log(JSON.stringify(await json(`${router.url}/status`)), JSON.stringify(nodes[0].status()))
      throw e
    })
    assert.equal(healed.chunks, 3)
    assert.equal((await text(`${router.datasetUrl('gap')}/47/worker`)).status, 200)
    assert.deepEqual(nodes[0].state().gap, [[0, 47]])
  })

  it('logs a worker that registers with nothing to serve', async () => {
    const root = path.join(tmp.dir, 'logs')
    const fresh = path.join(root, 'fresh')
    await writeDatasetJson(fresh, 'fresh')
    const cli = await startCli(['router', '--data', root, '--port', '0', '--replication', '1', '--heartbeat-ms', String(HEARTBEAT), '--missed-heartbeats', String(MISSED), '--relist-ms', '100'], ['router'])
    const url = cli.lines.get('router')![0]
    // The router's log: JSON lines on stderr (startCli runs it at LOG_LEVEL=warn, the level of these messages).
    const logged = (msg: RegExp, worker: string) => async () =>
      cli
        .stderr()
        .split('\n')
        .flatMap((l) => {
          try {
            return [JSON.parse(l)]
          } catch {
            return []
          }
        })
        .find((l) => msg.test(l.msg) && l.worker === worker)
    const noChunks = /a worker registered, but there are no chunks to serve yet/
    const replicated = /a worker registered with nothing to serve \(every chunk already has its replicas\)/

    const w1 = node('lone-1', new ArchiveStorage({}), url)
    nodes.push(w1)
    await w1.start()
    const first = await until('the no-chunks warning', logged(noChunks, 'lone-1'))
    assert.equal(first.level, 40)
    assert.equal(first.chunks, 0)
    assert.equal(first.datasets, 1)

    const chunks: ChunkRef[] = []
    await writeChunk(fresh, records.slice(0, 16), chunks)
    await until('fresh served', async () => ((await text(`${url}/datasets/fresh/height`)).text === '15' ? true : undefined))

    // A second worker that the rendezvous hashing does not give the one chunk to (replication 1).
    const secondId = Array.from({ length: 20 }, (_, i) => `lone-${i + 2}`).find((id) => {
      const a = new DatasetAssignment('fresh', { replication: 1, groupChunks: DEFAULT_GROUP_CHUNKS })
      a.setLive(['lone-1', id])
      a.setChunks(chunks)
      return a.chunksOf(id).length === 0
    })!
    const w2 = node(secondId, new ArchiveStorage({}), url)
    nodes.push(w2)
    await w2.start()
    const second = await until('the nothing-to-serve warning', logged(replicated, secondId))
    assert.equal(second.chunks, 1)
    assert.equal(second.replication, 1)
    assert.equal(second.liveWorkers, 2)
    assert.deepEqual(w2.state().fresh ?? [], [])
    assert.deepEqual(w1.state().fresh, [[0, 15]])
    assert.equal(await logged(replicated, 'lone-1')(), undefined)
    assert.equal(await logged(noChunks, secondId)(), undefined)
    await Promise.all([w1.stop(), w2.stop()])
    cli.child.kill('SIGTERM')
  })

  it('stops a worker whose ping was in flight when it was stopped, and stops it again', async () => {
    // A router that answers pings slowly (a plain HTTP server: the real one answers too fast to stop a worker mid-ping).
    const slow = http.createServer((_req, res) => setTimeout(() => res.end(JSON.stringify({ desired: {}, datasets: [] })), 200))
    await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve))
    try {
      const w = node('mid-ping', new ArchiveStorage({}), `http://127.0.0.1:${(slow.address() as AddressInfo).port}`)
      const beat = w.heartbeat()
      await w.stop()
      await beat
      // Stopping again (as an after hook does) must not wait on a fetch pass that never ends.
      assert.equal((w as unknown as { syncing?: Promise<void> }).syncing, undefined)
      await w.stop()
    } finally {
      slow.close()
    }
  })
})
