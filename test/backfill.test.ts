import assert from 'node:assert/strict'
import { readdir } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { CHUNK_INDEX_FILE, parseChunkIndex } from '../src/chunks/chunk-index.js'
import { listLocalChunks, readChunkMeta, type ChunkMeta, type ChunkRef } from '../src/chunks/layout.js'
import { DatasetLocked, rangeResume, runIngest, type IngestOptions } from '../src/ingest/loop.js'
import { FolderClaims, RangeClaim, readClaims } from '../src/ingest/range-claims.js'
import { loadRecordedChain } from '../src/ingest/recorded.js'
import { ReplayServer } from '../src/ingest/replay.js'
import { getText, listObjects } from '../src/storage/s3.js'
import { killChildren, runCli, startCli, until } from './helpers/cli.js'
import { tempDir } from './helpers/dataset.js'
import { checkChain } from './helpers/ingest-expect.js'
import { startS3, type S3Server } from './helpers/s3.js'

/*
 * A backfill in parallel (docs/ingest.md, "Backfill in parallel"): ingests of disjoint block ranges
 * write one dataset at once, in a folder and in object storage (s3rver), and give the chunks one
 * ingest of the whole range gives (same ranges, byte-identical Parquet files); a range overlapping
 * a running ingest's is refused, naming it; a restarted backfill resumes after its own last chunk;
 * and the router serves a completed range while the range below it is still written, answering 503
 * for the blocks missing between them and reporting that gap until it is filled.
 *
 * Recorded mainnet blocks (1000000 and 4369999) served again and again as one chain by the replay
 * node: 80 blocks. The in-process ingests fetch on their own thread (`workers: 0`): what is checked
 * here is ranges and claims, not the fetch pool (ingest-recorded.test.ts and the CLI ingests use it).
 */

const BUCKET = 'archive'
const eth = loadRecordedChain('ethereum')
const light = eth.filter((b) => b.number === 1000000 || b.number === 4369999)
const claimTiming = { ttlMs: 60_000, settleMs: 50 }

let tmp: Awaited<ReturnType<typeof tempDir>>
let s3: S3Server | undefined
let n = 0
const folder = () => path.join(tmp.dir, `d${++n}`)
/** The replay node of the tests that neither fork it nor move its head. */
let chain: ReplayServer | undefined
/** Blocks 0–59 written by one ingest of the whole range: what the parallel ingests are compared with. */
let whole: string

before(async () => {
  tmp = await tempDir('ba-backfill-test-')
  s3 = await startS3([BUCKET])
  chain = await serve()
  whole = folder()
  await ingest({ rpc: chain.url, out: whole, from: 0, to: 59 })
})

after(async () => {
  killChildren()
  await chain?.close()
  await s3?.stop()
  await tmp?.cleanup()
})

async function serve(opts: ConstructorParameters<typeof ReplayServer>[1] = {}): Promise<ReplayServer> {
  const s = new ReplayServer(light, { repeat: { times: 40, seed: 'backfill' }, ...opts })
  await s.start()
  return s
}

const ingest = (o: Pick<IngestOptions, 'rpc' | 'out'> & Partial<IngestOptions>) =>
  runIngest({ dataset: 'bf', progress: 'none', chunkBlocks: 10, workers: 0, lease: { ttlMs: 60_000, settleMs: 50 }, claim: claimTiming, ...o })

const ranges = (chunks: ChunkRef[]) => chunks.map((c) => [c.first, c.last])

/** Each chunk's Parquet files (name → SHA-256 from its manifest) and the block it was written after. */
const contents = (m: ChunkMeta) => ({ first: m.first, last: m.last, previousLast: m.previousLast, files: Object.fromEntries(Object.entries(m.files ?? {}).map(([k, v]) => [k, v.sha256])) })

async function json(url: string): Promise<any> {
  const res = await fetch(url)
  assert.equal(res.status, 200, url)
  return res.json()
}

describe('backfill in parallel', { timeout: 600_000 }, () => {
  it('where a range resumes: after the chunks that follow each other from its start, up to the next chunk in it', () => {
    const c = (first: number, last: number) => ({ top: 0, first, last, hash: 'x', path: `${first}-${last}` })
    const chunks = [c(0, 9), c(10, 19), c(30, 39), c(50, 59), c(60, 69)]
    assert.deepEqual(rangeResume(chunks, 0, 69), { resumeAt: 20, stopAt: 29 })
    assert.deepEqual(rangeResume(chunks, 40, 59), { resumeAt: 40, stopAt: 49 })
    assert.deepEqual(rangeResume(chunks, 50, 69), { resumeAt: 70, stopAt: 69 }, 'complete')
    assert.deepEqual(rangeResume(chunks, 5, 14), { resumeAt: 20, stopAt: 14 }, 'inside chunks written by others')
    assert.deepEqual(rangeResume(chunks, 70, 99), { resumeAt: 70, stopAt: 99 }, 'above every chunk')
    assert.deepEqual(rangeResume([], 100, 199), { resumeAt: 100, stopAt: 199 })
  })

  it('a claim of a process that no longer runs is taken over; one of a running process is not', async () => {
    const dir = folder()
    const { mkdir, writeFile } = await import('node:fs/promises')
    const os = await import('node:os')
    await mkdir(dir, { recursive: true })
    const record = (pid: number, from: number, to: number | null) => JSON.stringify({ owner: `o${pid}`, host: os.hostname(), pid, from, to, acquiredAt: new Date().toISOString(), expiresAt: new Date(Date.now() + 60_000).toISOString() })
    // pid 2^22 + 1 is above Linux's pid_max: no such process
    await writeFile(path.join(dir, '.ingest-lease-0-99.json'), record(4194305, 0, 99))
    await writeFile(path.join(dir, '.ingest-lease-100-head.json'), record(4194305, 100, null))
    const store = new FolderClaims(dir)
    const mine = new RangeClaim(store, { from: 0, to: 199 }, claimTiming)
    await mine.acquire()
    assert.deepEqual((await readClaims(store)).map((x) => [x.from, x.to, x.owner === mine.owner]), [[0, 199, true]])
    const other = new RangeClaim(store, { from: 150, to: 250 }, claimTiming)
    await assert.rejects(other.acquire(), /blocks 0–199\) until .*, which overlaps blocks 150–250/)
    await mine.release(true)
    assert.deepEqual(await readClaims(store), [])
  })

  it('two ingests of disjoint ranges into one folder write the chunks one ingest of the whole range writes (same ranges, byte-identical Parquet)', async () => {
    const server = chain!
    const both = folder()
    const [low, high] = await Promise.all([ingest({ rpc: server.url, out: both, from: 0, to: 29 }), ingest({ rpc: server.url, out: both, from: 30, to: 59 })])
    assert.deepEqual(ranges(low.chunks), [[0, 9], [10, 19], [20, 29]])
    assert.deepEqual(ranges(high.chunks), [[30, 39], [40, 49], [50, 59]])
    const a = await listLocalChunks(whole)
    const b = await listLocalChunks(both)
    assert.deepEqual(ranges(b), ranges(a))
    for (let i = 0; i < a.length; i++) {
      assert.deepEqual(contents(await readChunkMeta(both, b[i])), contents(await readChunkMeta(whole, a[i])), a[i].path)
    }
    await checkChain(both, 0, 59)
    const left = (await readdir(both)).filter((x) => x.startsWith('.'))
    assert.deepEqual(left, [], 'no claim, lock or temp folder left once both ranges are complete')
  })

  // Compared with the whole range ingested into a folder: an ingest into s3:// writes the same
  // meta.json and Parquet bytes as one into a folder (ingest-s3.test.ts).
  it('the same into object storage (s3rver): same chunk ranges and Parquet files as one ingest of the whole range', async () => {
    const server = chain!
    await Promise.all([
      ingest({ rpc: server.url, out: `s3://${BUCKET}/par`, from: 30, to: 59 }),
      ingest({ rpc: server.url, out: `s3://${BUCKET}/par`, from: 0, to: 29 }),
    ])
    const metas = async (prefix: string) => {
      const keys = (await listObjects(BUCKET, prefix + '/')).map((o) => o.key).filter((k) => k.endsWith('/meta.json')).sort()
      const out: ReturnType<typeof contents>[] = []
      for (const k of keys) out.push(contents(JSON.parse((await getText(BUCKET, k))!)))
      return out.sort((x, y) => x.first - y.first)
    }
    const one: ReturnType<typeof contents>[] = []
    for (const c of await listLocalChunks(whole)) one.push(contents(await readChunkMeta(whole, c)))
    assert.equal(one.length, 6)
    assert.deepEqual(await metas('par'), one)
    const rest = (await listObjects(BUCKET, 'par/')).map((o) => o.key).filter((k) => k.split('/')[1].startsWith('.'))
    assert.deepEqual(rest, [], 'no lease or claim left')
    // Both ingests rewrote the one chunk index object: neither dropped the other's lines.
    const chunkPaths = (await listObjects(BUCKET, 'par/')).map((o) => o.key).filter((k) => k.endsWith('/meta.json')).map((k) => k.split('/').slice(1, 3).join('/')).sort()
    assert.deepEqual([...parseChunkIndex((await getText(BUCKET, `par/${CHUNK_INDEX_FILE}`))!).keys()].sort(), chunkPaths, 'the chunk index names every chunk')
  })

  it('a range overlapping a running ingest\'s is refused with a message naming that ingest\'s range (in process and through the CLI); an ingest up to the head starting inside it too', async () => {
    const server = chain!
    const dir = folder()
    const claim = new RangeClaim(new FolderClaims(dir), { from: 20, to: 49 }, claimTiming)
    try {
      await ingest({ rpc: server.url, out: dir, from: 0, to: 9 })
      await claim.acquire()
      await assert.rejects(ingest({ rpc: server.url, out: dir, from: 10, to: 29 }), (e: any) => {
        assert.ok(e instanceof DatasetLocked, e.message)
        assert.match(e.message, /another ingest is writing .*: owner \w+ \(host [^,]+, pid \d+\) holds its lease \(\.ingest-lease-20-49\.json, blocks 20–49\) until \d{4}-.*, which overlaps blocks 10–29/)
        return true
      })
      const cli = await runCli(['ingest', '--rpc', server.url, '--dataset', 'bf', '--out', dir, '--from', '45', '--to', '59', '--progress', 'none'], undefined, { LOG_LEVEL: 'warn' })
      assert.equal(cli.code, 1)
      assert.match(cli.stderr, /holds its lease \(\.ingest-lease-20-49\.json, blocks 20–49\).*which overlaps blocks 45–59/)
      // up to the head: it would start after the last chunk (block 10), inside the claimed range
      await assert.rejects(ingest({ rpc: server.url, out: dir }), /blocks 20–49.*which overlaps blocks 10–head/)
      // a disjoint range is fine meanwhile
      const r = await ingest({ rpc: server.url, out: dir, from: 50, to: 59 })
      assert.deepEqual(ranges(r.chunks), [[50, 59]])
      assert.deepEqual((await readClaims(new FolderClaims(dir))).map((c) => [c.from, c.to]), [[20, 49]], 'only the running claim is left')
    } finally {
      await claim.release(false, true)
    }
  })

  it('a restarted backfill resumes after its own last chunk in its range, not after the dataset\'s last chunk', async () => {
    const server = chain!
    const dir = folder()
    const ac = new AbortController()
    const first = await ingest({ rpc: server.url, out: dir, from: 0, to: 39, signal: ac.signal, batchSize: 2, concurrency: 1, onChunk: () => ac.abort() })
    const stoppedAt = first.chunks.at(-1)!.last
    assert.ok(stoppedAt < 39, `stopped early: ${JSON.stringify(ranges(first.chunks))}`)
    const kept = await readClaims(new FolderClaims(dir))
    assert.deepEqual(kept.map((c) => [c.from, c.to, !!c.stoppedAt]), [[0, 39, true]], 'the claim of a range left unfinished stays, marked stopped')
    await ingest({ rpc: server.url, out: dir, from: 40, to: 59 })
    const again = await ingest({ rpc: server.url, out: dir, from: 0, to: 39 })
    assert.equal(again.chunks[0].first, stoppedAt + 1)
    assert.equal(again.chunks.at(-1)!.last, 39)
    assert.equal(again.last, 39)
    await checkChain(dir, 0, 59)
    assert.deepEqual(await readClaims(new FolderClaims(dir)), [], 'complete: the claim is gone')
    const meta40 = (await readChunkMeta(dir, (await listLocalChunks(dir)).find((c) => c.first === 40)!))
    assert.equal(meta40.previousLast, 39, 'a range declares the block before it')
  })

  it('a range with chunks of other runs in it is written hole by hole in one run, under one claim', async () => {
    const server = chain!
    const dir = folder()
    await ingest({ rpc: server.url, out: dir, from: 10, to: 19 })
    await ingest({ rpc: server.url, out: dir, from: 30, to: 39 })
    const claimsSeen: string[][] = []
    const all = await ingest({
      rpc: server.url, out: dir, from: 0, to: 59,
      onChunk: () => void readClaims(new FolderClaims(dir)).then((cs) => claimsSeen.push(cs.map((c) => `${c.from}-${c.to}${c.stoppedAt ? ' stopped' : ''}`))),
    })
    assert.deepEqual(ranges(all.chunks), [[0, 9], [20, 29], [40, 49], [50, 59]], 'the three holes, in one run')
    assert.equal(all.blocks, 40)
    assert.equal(all.last, 59)
    const a = await listLocalChunks(whole)
    const b = await listLocalChunks(dir)
    assert.deepEqual(ranges(b), ranges(a))
    for (let i = 0; i < a.length; i++) assert.deepEqual(contents(await readChunkMeta(dir, b[i])), contents(await readChunkMeta(whole, a[i])), a[i].path)
    await checkChain(dir, 0, 59)
    assert.deepEqual(await readClaims(new FolderClaims(dir)), [], 'complete: the claim is gone')
    await until('the claims read while writing', async () => claimsSeen.length === all.chunks.length || undefined)
    assert.ok(claimsSeen.every((cs) => cs.length === 1 && cs[0] === '0-59'), `one running claim of the range throughout: ${JSON.stringify(claimsSeen)}`)
  })

  it('a range that ends below a range written before checks the join: a block that is not the parent of the next range\'s first block stops it, naming both', async () => {
    const server = await serve()
    const dir = folder()
    try {
      await ingest({ rpc: server.url, out: dir, from: 10, to: 19 })
      server.fork(5) // blocks 5 on get other hashes: the lower range is read from another fork
      await assert.rejects(ingest({ rpc: server.url, out: dir, from: 0, to: 9 }), /block 9 \(0x[0-9a-f]+\) written by this run is not the parent of block 10 in chunk 0000000010\/0000000010-0000000019-\w+ \(its parent hash is 0x[0-9a-f]+\): the two ranges were read from different chains or forks/)
      assert.deepEqual((await readClaims(new FolderClaims(dir))).map((c) => [c.from, c.to, !!c.stoppedAt]), [[0, 9, true]], 'the range is not taken for complete')
    } finally {
      await server.close()
    }
  })

  it('the router serves a completed range while the range below it is still written: 503 for the blocks between, /height below them, the gap on the status page and in /metrics until filled', async () => {
    const server = await serve({ head: 59 })
    const dir = path.join(folder(), 'bf')
    const ac = new AbortController()
    let low: Promise<unknown> | undefined
    try {
      await ingest({ rpc: server.url, out: dir, from: 30, to: 59 })
      // the lower range: blocks 0–9 written, then the node's head is made to stay at 9 while it waits for 29
      server.head = 9
      const written: number[] = []
      low = ingest({ rpc: server.url, out: dir, from: 0, to: 29, flushAfterMs: 0, pollMs: 100, signal: ac.signal, onChunk: (c) => written.push(c.last) })
      low.catch(() => undefined)
      await until('blocks 0–9 written', async () => (written.includes(9) ? true : undefined), 60_000)

      const s = await startCli(['serve', '--data', dir, '--port', '0', '--workers', '1', '--local-forms', 'off', '--relist-ms', '250', '--heartbeat-ms', '200', '--missed-heartbeats', '150', '--cache', path.join(tmp.dir, 'cache')], ['router', 'dataset bf'], {}, 120_000)
      const router = s.lines.get('router')![0]
      const base = s.lines.get('dataset bf')![0]
      const status = async () => (await json(`${router}/status`)).datasets.find((d: any) => d.name === 'bf')
      const st = await until('both ranges served', async () => {
        const d = await status()
        return d?.chunks === 4 ? d : undefined
      }, 60_000)
      assert.deepEqual(st.gaps, [[10, 29]])
      assert.deepEqual(st.backfills.map((b: any) => [b.from, b.to, b.running]), [[0, 29, true]])
      assert.equal(st.problems.length, 0, JSON.stringify(st.problems))
      await until('height 9', async () => ((await (await fetch(`${base}/height`)).text()) === '9' ? true : undefined))

      const gap = await fetch(`${base}/15/worker`)
      assert.equal(gap.status, 503)
      assert.ok(gap.headers.get('retry-after'))
      const body = await gap.json()
      assert.equal(body.error, 'block-not-available')
      assert.match(body.message, /blocks 10–29 are still being written by an ingest of 0–29 \(running: host .*, pid \d+\)/)

      // the completed range is answered, from its first block, though above the height
      const worker = await until('block 35 routed', async () => {
        const r = await fetch(`${base}/35/worker`)
        return r.status === 200 ? r.text() : undefined
      })
      const answer = await (await fetch(worker, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ fromBlock: 35, fields: { block: { number: true } }, includeAllBlocks: true }) })).json()
      assert.deepEqual(answer.map((b: any) => b.header.number), Array.from({ length: 25 }, (_, i) => 35 + i))
      // an answer from below the gap ends before it: it never skips the missing blocks
      const belowWorker = await (await fetch(`${base}/5/worker`)).text()
      const below = await (await fetch(belowWorker, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ fromBlock: 5, toBlock: 40, fields: { block: { number: true } }, includeAllBlocks: true }) })).json()
      assert.deepEqual(below.map((b: any) => b.header.number), [5, 6, 7, 8, 9])
      const page = await (await fetch(`${router}/`, { headers: { accept: 'text/html' } })).text()
      assert.match(page, /blocks 10–29 still being written/)
      const metrics = await (await fetch(`${router}/metrics`)).text()
      assert.match(metrics, /block_archive_router_backfill_gaps\{dataset="bf"\} 1/)
      assert.match(metrics, /block_archive_router_backfill_gap_blocks\{dataset="bf"\} 20/)

      // the lower range completes: the gap is filled, the height reaches the top, the claim is gone
      server.head = 79
      await low
      // Once the range is complete its chunks are listed, though they lie below the last chunk: the
      // router never takes them for missing (nor serves less than before) meanwhile.
      const seen: string[] = []
      const filled = await until('gap filled', async () => {
        const d = await status()
        seen.push(...d.problems)
        return d.gaps.length === 0 && d.height === 59 && d.backfills.length === 0 ? d : undefined
      }, 120_000).catch(async (e) => {
        console.log(JSON.stringify(await json(`${router}/status`)), await readdir(dir))
        throw e
      })
      assert.deepEqual(filled.backfills, [])
      assert.deepEqual(seen, [], 'no chunk taken for missing once the range is complete')
      assert.equal((await fetch(`${base}/15/worker`)).status, 200)
      assert.equal(await (await fetch(`${base}/height`)).text(), '59')
      assert.match(await (await fetch(`${router}/metrics`)).text(), /block_archive_router_backfill_gap_blocks\{dataset="bf"\} 0/)
    } finally {
      ac.abort()
      await low?.catch(() => undefined)
      killChildren()
      await server.close()
    }
  })
})
