import assert from 'node:assert/strict'
import type { ChildProcess } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { parseDatasetHead } from '../src/chunks/head-file.js'
import { getText } from '../src/storage/s3.js'
import { callData, compile, startAnvil, TOKEN_SOURCE, type Anvil } from './helpers/anvil.js'
import { compareRows, expectTables, readTable, type NodeBlock } from './helpers/ingest-expect.js'
import { killChildren, startCli, until } from './helpers/cli.js'
import { tempDir } from './helpers/dataset.js'
import { FaultProxy } from './helpers/fault-proxy.js'
import { describeFreshness, finalizedHead, measureFreshness } from './helpers/freshness.js'
import { ArchiveClient } from '../src/client/archive-client.js'
import { startS3, type S3Server } from './helpers/s3.js'

/*
 * Freshness at the defaults: a live anvil node mining a block a second, `ingest --follow` and
 * `serve` as separate processes with no timing flag, over a folder and over a real S3 protocol
 * server (s3rver; there without local forms, see atTheDefaults). Every block the node reports
 * while the test watches becomes queryable through the router (height, worker, answer) with the
 * node's hash, without restarting anything; the lag is printed, not asserted. Beside it, on the
 * same dataset at the same time, a worker process killed (SIGKILL) in the middle of an answer while
 * our client follows the head: the client still gets every block once, with the node's hashes;
 * that router never lists storage after its start (its listing is set to an hour), so the blocks
 * mined after its start reach it through the head file alone. Then the other paths that make it
 * fast, alone: with the head file's watch and the listing off, the ingest's `--notify` tells the
 * router, and with heartbeats set to an hour the router's nudge tells the worker. Last, every value
 * of every row written by the two ingest runs in the folder is the node's.
 *
 * One dataset per place (folder, S3), written from block 0 by the ingest the first tests share; a
 * restarted ingest resumes after the last chunk. Watch windows are short (FRESHNESS_TEST_SECONDS
 * sets the first ones, for longer runs): each spans several of the default router listings (5 s)
 * and heartbeats (2 s).
 */

const DATASET = 'fresh'
const WATCH_SECONDS = Number(process.env.FRESHNESS_TEST_SECONDS ?? 12)
/** The test's own polling of the node's head and the router's height (the lag it prints is that precise). */
const POLL_MS = 100
/**
 * How often the tests wait on a process by asking it (a first height, the ingest's head.json): a
 * process starting on a loaded machine takes tens of seconds, and head.json in object storage is a
 * GET that s3rver, in this process, answers.
 */
const PROBE_MS = 250
/** The two datasets every test follows. */
const OUT = { folder: () => path.join(tmp.dir, 'fresh'), s3: () => 's3://fresh/fresh' }

let anvil: Anvil
let tmp: Awaited<ReturnType<typeof tempDir>>
let s3: S3Server
const procs: ChildProcess[] = []
/** Token transfers (a transaction and a log each) and plain transfers, sent while the tests run. */
let sending: NodeJS.Timeout | undefined

before(async () => {
  tmp = await tempDir('ba-freshness-')
  // a finalized head two blocks below the latest (anvil's default, two epochs of 32 slots, is 64)
  anvil = await startAnvil(['--block-time', '1', '--slots-in-an-epoch', '1'])
  s3 = await startS3(['fresh'])
  const token = compile(TOKEN_SOURCE).Token
  const [alice, bob] = await anvil.rpc('eth_accounts')
  const deployed = await anvil.rpc('eth_sendTransaction', [{ from: alice, data: token.bytecode }])
  let receipt: any
  while (!(receipt = await anvil.rpc('eth_getTransactionReceipt', [deployed]))) await new Promise((r) => setTimeout(r, 100))
  let i = 0
  sending = setInterval(() => {
    i++
    const tx = i % 2 ? { from: alice, to: receipt.contractAddress, data: callData(token, 'transfer(address,uint256)', bob, i) } : { from: bob, to: alice, value: '0x' + i.toString(16) }
    anvil.rpc('eth_sendTransaction', [tx]).catch(() => undefined)
  }, 700)
})
after(async () => {
  clearInterval(sending)
  killChildren()
  for (const c of procs) c.kill('SIGKILL')
  await anvil?.stop()
  await s3?.stop()
  await tmp?.cleanup()
})

/** Stop a child and wait for it (SIGTERM: the ingest writes its open chunk). */
function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    child.once('exit', () => resolve())
    child.kill('SIGTERM')
    setTimeout(() => child.kill('SIGKILL'), 10_000).unref()
  })
}

/** `ingest --follow` from the anvil node, in the background; resolves once its head file exists. */
async function startIngest(out: string, extra: string[] = [], env: Record<string, string> = {}): Promise<ChildProcess> {
  const { spawn } = await import('node:child_process')
  const { CLI } = await import('./helpers/cli.js')
  const child = spawn(process.execPath, [CLI, 'ingest', '--rpc', anvil.url, '--dataset', DATASET, '--out', out, '--follow', '--progress', 'none', ...extra], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
  })
  let stderr = ''
  child.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-5000)))
  child.once('exit', (code) => {
    if (code !== 0 && code !== null) console.error(`ingest exited with ${code}: ${stderr}`)
  })
  procs.push(child)
  await until('the ingest\'s head.json', async () => ((await readHead(out))?.chunks.length ? true : undefined), 60_000, PROBE_MS)
  return child
}

/** The ingest at the defaults following `out`, shared by the tests that run at once (started, resuming, when none is). */
const shared = new Map<string, Promise<ChildProcess>>()
function sharedIngest(out: string): Promise<ChildProcess> {
  const prior = shared.get(out)
  const next = (async () => {
    const running = await prior?.catch(() => undefined)
    if (running && running.exitCode === null && running.signalCode === null) return running
    return startIngest(out, [], s3.env)
  })()
  shared.set(out, next)
  return next
}
async function stopSharedIngest(out: string): Promise<void> {
  const child = await shared.get(out)?.catch(() => undefined)
  shared.delete(out)
  if (child) await stop(child)
}

async function readHead(out: string) {
  const text = out.startsWith('s3://') ? await getText('fresh', `${out.slice('s3://fresh/'.length)}/head.json`) : await readFile(path.join(out, 'head.json'), 'utf8').catch(() => undefined)
  return text === undefined ? undefined : parseDatasetHead(text)
}

async function startServe(data: string, extra: string[] = [], env: Record<string, string> = {}) {
  const s = await startCli(['serve', '--data', data, '--port', '0', '--cache', path.join(tmp.dir, `cache-${procs.length}`), ...extra], ['router'], env, 180_000)
  procs.push(s.child)
  return { child: s.child, url: s.lines.get('router')![0] }
}

async function heightOf(router: string): Promise<number | undefined> {
  const r = await fetch(`${router}/datasets/${DATASET}/height`)
  return r.ok ? Number(await r.text()) : undefined
}

/** Lag gauges of the router's /metrics for the dataset. */
async function lagMetrics(router: string): Promise<{ blocks?: number; seconds?: number }> {
  const text = await (await fetch(`${router}/metrics`)).text()
  const value = (name: string) => {
    const line = text.split('\n').find((l) => l.startsWith(`${name}{dataset="${DATASET}"}`))
    return line === undefined ? undefined : Number(line.split(' ').at(-1))
  }
  return { blocks: value('block_archive_router_head_lag_blocks'), seconds: value('block_archive_router_head_lag_seconds') }
}

/**
 * Every block the node mines while we watch is served through `serve` at its defaults, with the
 * node's hash; the lag is on /metrics, /status and the status page. In a folder every default holds,
 * local forms included: their builds read the chunks in place, which compaction merges and deletes
 * under them. In object storage the workers build forms from their own downloaded copies, as from
 * any folder; there they are off (`--local-forms off`, the one flag) and the test is about what
 * object storage changes: the listing, the head file's watch and the downloads.
 */
async function atTheDefaults(where: 'folder' | 's3'): Promise<void> {
  const out = OUT[where]()
  await sharedIngest(out)
  const serve = await startServe(out, where === 's3' ? ['--local-forms', 'off'] : [], s3.env)
  try {
    await until('a first height', async () => ((await heightOf(serve.url)) ?? -1) >= 0 ? true : undefined, 60_000, PROBE_MS)
    // The stage "in storage" (head.json read every 50 ms) is timed in the folder only: in object
    // storage each read is a GET that s3rver, in this process, answers, for a figure the test only
    // prints (bench/freshness.ts times that stage in object storage).
    const storageLast = where === 'folder' ? async () => (await readHead(out))?.last : undefined
    const run = await measureFreshness({ anvil, head: () => finalizedHead(anvil), router: serve.url, dataset: DATASET, seconds: WATCH_SECONDS, drainMs: 120_000, pollMs: POLL_MS, storageLast, storagePollMs: 50 })
    console.log(describeFreshness(where === 's3' ? 'defaults (local forms off), s3' : 'defaults, folder', run))
    assert.deepEqual(run.mismatches, [])
    assert.deepEqual(run.unanswered, [])
    assert.ok(run.blocks.length >= WATCH_SECONDS / 3, `only ${run.blocks.length} blocks mined in ${WATCH_SECONDS} s`)

    // Operators see the lag: from the head file, in blocks and seconds, on /metrics, /status and the status page.
    const lag = await lagMetrics(serve.url)
    assert.ok(lag.blocks !== undefined && lag.blocks >= 0, `lag in blocks on /metrics: ${JSON.stringify(lag)}`)
    assert.ok(lag.seconds !== undefined && lag.seconds >= 0, `lag in seconds on /metrics: ${JSON.stringify(lag)}`)
    const status = await (await fetch(`${serve.url}/status`)).json()
    const ds = status.datasets.find((d: any) => d.name === DATASET)
    assert.ok(ds.lag && ds.lag.nodeHead >= run.blocks.at(-1)!.block, `/status lag: ${JSON.stringify(ds.lag)}`)
    const page = await (await fetch(`${serve.url}/`, { headers: { accept: 'text/html' } })).text()
    assert.match(page, /class="lag[^"]*"[^>]*data-lag-blocks="\d+"/)
  } finally {
    await stop(serve.child)
  }
}

/** A worker process killed in the middle of an answer while our client follows the head of the dataset at `where`. */
async function workerKilledMidAnswer(where: 'folder' | 's3'): Promise<void> {
  const out = OUT[where]()
  const t0 = performance.now()
  const marks: string[] = []
  const mark = (what: string) => marks.push(`${what} ${((performance.now() - t0) / 1000).toFixed(1)} s`)
  await sharedIngest(out)
  mark('ingest')
  // A router and two worker processes (consecutive chunks on alternate workers); clients reach
  // the first worker through a proxy that passes its answers on, and kills it once half of the
  // armed answer is sent. A silent worker is dead after 3 s (pings every 500 ms, 6 missed). The
  // router lists storage at its start only (its listing is set to an hour): the chunks published
  // after that reach it through the head file's watch (in object storage read once a second, not
  // every 250 ms: this test is not about how soon, and s3rver answers in this process). The workers read the Parquet files (no local
  // forms: this test is about the client and the dead worker; `serve` beside it builds forms at the
  // defaults).
  const cluster: ChildProcess[] = []
  const start = async (args: string[], prefix: string) => {
    const p = await startCli(args, [prefix], s3.env, 180_000)
    cluster.push(p.child)
    return p
  }
  // Every process listens on a port of its own choosing (a port found free beforehand can be taken
  // by another process of a busy machine before the command listens on it): the router first, then
  // the workers, the proxy passing requests on to the first worker once it printed its address.
  const proxy = new FaultProxy('http://127.0.0.1:1')
  await proxy.start()
  const stopFollowing = new AbortController()
  const got: { number: number; hash: string }[] = []
  try {
    const router = await start(['router', '--data', out, '--port', '0', '--relist-ms', '3600000', '--head-poll-s3-ms', '1000', '--heartbeat-ms', '500', '--missed-heartbeats', '6', '--replication', '1', '--group-chunks', '1'], 'router')
    const routerUrl = router.lines.get('router')![0]
    const worker = (i: number, extra: string[]) => start(['worker', '--router', routerUrl, '--cache', path.join(tmp.dir, `cache-kill-${where}-${i}`), '--id', `w${i}`, '--port', '0', '--heartbeat-ms', '500', '--local-forms', 'off', ...extra], 'worker')
    const [first] = await Promise.all([worker(0, ['--public-url', proxy.url]), worker(1, [])])
    const victim = first.child
    proxy.setUpstream(first.lines.get('worker')![0])
    mark('router and workers')
    const base = `${routerUrl}/datasets/${DATASET}`
    await until('a first height', async () => ((await heightOf(routerUrl)) ?? -1) >= 0 ? true : undefined, 60_000, PROBE_MS)
    mark('height')
    const client = new ArchiveClient(base)
    const following = (async () => {
      try {
        for await (const b of client.blocks({ includeAllBlocks: true, fields: { block: { number: true, hash: true } } }, { fromBlock: 0, follow: true, pollMs: 200, signal: stopFollowing.signal })) {
          got.push({ number: b.header.number, hash: b.header.hash as string })
        }
      } catch (e) {
        if (!stopFollowing.signal.aborted) throw e
      }
    })()
    // The client is at the head; then the next answer the first worker gives is cut half-way by its death.
    const caughtUp = Number(await (await fetch(`${base}/height`)).text())
    await until(`the client at block ${caughtUp}`, async () => ((got.at(-1)?.number ?? -1) >= caughtUp ? true : undefined), 120_000)
    mark('caught up')
    let killedAt = -1
    proxy.setRules([{ name: 'killed', method: 'POST', path: /\/query/, fault: 'cut', times: 1, then: () => {
      killedAt = got.at(-1)!.number
      victim.kill('SIGKILL')
    } }])
    await until('the first worker killed mid-answer', async () => (proxy.hitCount('killed') ? true : undefined), 120_000)
    mark('killed')
    // Blocks mined after the kill reach the client too (served by the other worker alone; the router
    // learnt of their chunks from the head file).
    const target = (await finalizedHead(anvil)) + 3
    await until(`the client at block ${target}`, async () => ((got.at(-1)?.number ?? -1) >= target ? true : undefined), 120_000)
    mark('followed on')
    stopFollowing.abort()
    await following

    assert.equal(victim.signalCode, 'SIGKILL')
    const numbers = got.map((b) => b.number)
    assert.deepEqual(numbers, [...Array(numbers.length).keys()], 'every block from 0 once, in order')
    for (const b of got) assert.equal(b.hash, (await anvil.rpc('eth_getBlockByNumber', ['0x' + b.number.toString(16), false])).hash, `hash of block ${b.number}`)
    assert.ok(killedAt >= caughtUp && numbers.at(-1)! > killedAt, `killed at block ${killedAt}, followed to ${numbers.at(-1)}`)
    console.log(`worker killed mid-answer (${where}): the client had block ${killedAt}, followed on to ${numbers.at(-1)} (${marks.join(', ')})`)
  } finally {
    stopFollowing.abort()
    await proxy.close()
    await Promise.all(cluster.map(stop))
  }
}

// In each place, the measurement at the defaults and the worker kill follow the same ingest at
// once (neither waits for the other's processes to start); the folder's ingest is stopped before the
// --notify test, which runs one of its own. Object storage comes first, while the chain is short:
// there the ingest's catching up from block 0 uploads, in a folder it writes in place.
describe('freshness: ingest --follow and serve at their defaults', { timeout: 900_000 }, () => {
  describe('in object storage', { concurrency: 2 }, () => {
    after(() => stopSharedIngest(OUT.s3()))
    it("every block the node mines is served through the router, with the node's hash (s3)", () => atTheDefaults('s3'))
    it("a worker killed in the middle of an answer: a client following the head gets every block once, with the node's hashes (s3)", () => workerKilledMidAnswer('s3'))
  })

  describe('in a folder', { concurrency: 2 }, () => {
    after(() => stopSharedIngest(OUT.folder()))
    it("every block the node mines is served through the router, with the node's hash (folder)", () => atTheDefaults('folder'))
    it("a worker killed in the middle of an answer: a client following the head gets every block once, with the node's hashes (folder)", () => workerKilledMidAnswer('folder'))
  })

  it("with no listing and no head file watch, the ingest's --notify tells the router; with heartbeats an hour apart, the router's nudge tells the worker", async () => {
    const out = OUT.folder()
    await stopSharedIngest(out)
    // Listing once an hour, head file unwatched, heartbeats once an hour (a worker stays alive that
    // long): only the ingest's POST /notify can move the router, and only its nudge the worker. Local
    // forms are not what this is about. The router needs the dataset folder to exist: the tests
    // before wrote it.
    const serve = await startServe(out, ['--relist-ms', '3600000', '--head-poll-ms', '0', '--heartbeat-ms', '3600000', '--missed-heartbeats', '1', '--workers', '1', '--replication', '1', '--local-forms', 'off'])
    const ingest = await startIngest(out, ['--notify', serve.url])
    try {
      const first = await until('a first height', async () => {
        const h = (await heightOf(serve.url)) ?? -1
        return h >= 0 ? h : undefined
      }, 60_000, PROBE_MS)
      const run = await measureFreshness({ anvil, head: () => finalizedHead(anvil), router: serve.url, dataset: DATASET, seconds: 6, drainMs: 120_000, pollMs: POLL_MS })
      console.log(describeFreshness('--notify, no listing, no head watch, heartbeat at 1 h', run))
      assert.deepEqual(run.mismatches, [])
      assert.deepEqual(run.unanswered, [])
      assert.ok(run.blocks.length >= 3 && run.blocks[0].block > first, `blocks after ${first}: ${run.blocks.map((b) => b.block)}`)
    } finally {
      await stop(serve.child)
      await stop(ingest)
    }
  })

  it("every value of every row the two ingest runs wrote is the node's (folder)", async () => {
    // Chunks spooled while catching up, chunks normalised in JS near the head, merged chunks, and
    // the chunks of the ingest that resumed after the first one stopped.
    const out = OUT.folder()
    const last = (await readHead(out))!.last
    const want: Record<string, any[]> = {}
    for (let n = 0; n <= last; n++) {
      const q = '0x' + n.toString(16)
      const node: NodeBlock = { block: await anvil.rpc('eth_getBlockByNumber', [q, true]), receipts: await anvil.rpc('eth_getBlockReceipts', [q]) }
      for (const [t, rows] of Object.entries(expectTables(node))) (want[t] ??= []).push(...rows)
    }
    assert.ok(want.logs.length > 3, `${want.logs.length} logs`)
    for (const t of ['blocks', 'transactions', 'logs']) compareRows(t, want[t] ?? [], await readTable(out, t))
  })
})
