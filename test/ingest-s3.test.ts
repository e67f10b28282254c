import assert from 'node:assert/strict'
import { CHUNK_INDEX_FILE, linksOf, parseChunkIndex } from '../src/chunks/chunk-index.js'
import { randomBytes } from 'node:crypto'
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises'
import os from 'node:os'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { hashFile, readChunkMeta, type ChunkMeta } from '../src/chunks/layout.js'
import { DatasetLocked, LeaseLost, runIngest, type IngestOptions } from '../src/ingest/loop.js'
import { loadRecordedChain } from '../src/ingest/recorded.js'
import { ReplayServer } from '../src/ingest/replay.js'
import { S3Lease } from '../src/ingest/s3-lease.js'
import { downloadObject, getText, listObjects, putText, s3Client, uploadFile } from '../src/storage/s3.js'
import { tempDir } from './helpers/dataset.js'
import { setEnv, startS3, type S3Server } from './helpers/s3.js'
import { checkChain, readTable } from './helpers/ingest-expect.js'

/*
 * `ingest --out s3://…` against a real S3 protocol server on loopback (s3rver), with recorded
 * mainnet blocks served by the replay node: same chunks as a local ingest, manifest, multipart
 * upload, resume after an interrupted upload, and the lease that keeps a second ingest out.
 */

// s3rver ships no type declarations

const BUCKET = 'archive'
const eth = loadRecordedChain('ethereum')
const light = eth.filter((b) => b.number === 1000000 || b.number === 4369999) // 2 and 22 transactions
const traced = eth.filter((b) => b.number === 18500000) // 157 transactions, 876 parity traces

/** Short lease timing for the tests (the default settle wait is 2 s). */
const lease = { ttlMs: 3000, settleMs: 50 }

let tmp: Awaited<ReturnType<typeof tempDir>>
let s3: S3Server | undefined
let restorePartSize = () => {}

before(async () => {
  tmp = await tempDir('ba-ingest-s3-test-')
  s3 = await startS3([BUCKET])
  restorePartSize = setEnv({ BLOCK_ARCHIVE_S3_PART_MB: '5' })
})

after(async () => {
  restorePartSize()
  await s3?.stop()
  await tmp?.cleanup()
})

let n = 0
const folder = () => path.join(tmp.dir, `local${++n}`)

async function serve(recorded = light, opts: ConstructorParameters<typeof ReplayServer>[1] = {}): Promise<ReplayServer> {
  const s = new ReplayServer(recorded, { repeat: { times: 100, seed: `s3-${++n}` }, ...opts })
  await s.start()
  return s
}

const ingest = (o: Pick<IngestOptions, 'rpc' | 'out' | 'dataset'> & Partial<IngestOptions>) => runIngest({ progress: 'none', lease, ...o })

/** Download every object under `prefix` into `dest` (same relative paths); returns the relative paths. */
async function download(prefix: string, dest: string): Promise<string[]> {
  const rel: string[] = []
  for (const o of await listObjects(BUCKET, prefix + '/')) {
    const name = o.key.slice(prefix.length + 1)
    await mkdir(path.dirname(path.join(dest, name)), { recursive: true })
    const r = await downloadObject(BUCKET, o.key, path.join(dest, name))
    assert.equal(r.bytes, o.size, o.key)
    rel.push(name)
  }
  return rel.sort()
}

/** Every file under `dir`, as relative paths. */
async function localFiles(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile()).map((e) => path.relative(dir, path.join(e.parentPath, e.name))).sort()
}

/** Wait until `done()`; fail if `running` (an ingest) ends first or after `ms`. */
async function waitFor(done: () => boolean | Promise<boolean>, running: Promise<unknown>, ms = 20_000): Promise<void> {
  let ended = false
  running.then(() => (ended = true), () => (ended = true))
  const deadline = Date.now() + ms
  while (!(await done())) {
    if (ended) await running.then(() => assert.fail('the ingest ended before the awaited state'))
    if (Date.now() > deadline) assert.fail(`waited ${ms} ms`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** The lease object, read again on failure: s3rver rewrites objects in place, so a read that meets a renewal can fail. */
async function readLease(prefix: string): Promise<any> {
  for (let i = 1; ; i++) {
    try {
      return JSON.parse((await getText(BUCKET, `${prefix}/.ingest-lease.json`, AbortSignal.timeout(5000))) ?? 'null')
    } catch (e) {
      if (i >= 5) throw e
      await new Promise((r) => setTimeout(r, 100 * i))
    }
  }
}

/** This process's staging folders (other test processes on the machine ingest into s3:// too). */
const stagingFolders = async () => (await readdir(os.tmpdir())).filter((x) => x.startsWith(`ba-ingest-s3-${process.pid}-`))

describe('ingest into object storage (s3rver)', { timeout: 600_000 }, () => {
  it('an ingest into s3://archive/eth writes the same chunks as into a local folder; meta.json lists each uploaded file with its size and SHA-256', async (t) => {
    const server = await serve(traced, { repeat: { times: 6, seed: 'same' } })
    const local = folder()
    const staging0 = await stagingFolders()
    try {
      // three chunks of two traced blocks (157 transactions, 876 traces each)
      const opts = { rpc: server.url, dataset: 'eth', from: 0, to: 5, chunkBlocks: 2, traces: 'trace_block' as const }
      const a = await ingest({ ...opts, out: local })
      const b = await ingest({ ...opts, out: `s3://${BUCKET}/eth` })
      assert.deepEqual(b.chunks.map((c) => c.path), a.chunks.map((c) => c.path))
      assert.equal(b.chunks.length, 3)
      assert.equal(b.upload!.chunks, 3)
      t.diagnostic(`uploaded ${(b.upload!.bytes / 1e6).toFixed(2)} MB in ${b.upload!.ms.toFixed(0)} ms of publishing (${(b.upload!.bytes / 1e6 / (b.upload!.ms / 1000)).toFixed(1)} MB/s)`)

      const copy = folder()
      const keys = await download('eth', copy)
      // the same files (the lease is released, nothing is left of the NDJSON temp files), byte for byte
      assert.deepEqual(keys, await localFiles(local))
      assert.ok(keys.includes('0000000000/0000000000-0000000001-' + a.chunks[0].hash + '/traces.parquet'))
      assert.deepEqual(keys.filter((k) => !/^(dataset\.json|chunk-index\.ndjson|\d{10}\/\d{10}-\d{10}-\w{8}\/(blocks|transactions|logs|traces)\.parquet|\d{10}\/\d{10}-\d{10}-\w{8}\/meta\.json)$/.test(k)), [])
      // byte for byte, so every table holds the same rows as the folder ingest's
      const copyHashes = new Map<string, { size: number; sha256: string }>()
      for (const k of keys) {
        copyHashes.set(k, await hashFile(path.join(copy, k)))
        assert.equal(copyHashes.get(k)!.sha256, (await hashFile(path.join(local, k))).sha256, k)
      }
      await checkChain(copy, 0, 5)
      // the chunk index names every chunk with its meta's links (the same bytes as the folder ingest's: compared above)
      const index = parseChunkIndex(await readFile(path.join(copy, CHUNK_INDEX_FILE), 'utf8'))
      for (const c of b.chunks) assert.deepEqual(index.get(c.path), linksOf(await readChunkMeta(local, c)), c.path)

      // the manifest: every object of the chunk but meta.json, with the size and hash of the object as stored
      const objects = new Map((await listObjects(BUCKET, 'eth/')).map((o) => [o.key, o.size]))
      const chunkBytes = [...objects].filter(([k]) => /\/\d{10}-/.test(k)).reduce((n, [, size]) => n + size, 0)
      assert.equal(b.upload!.bytes, chunkBytes, 'upload statistics: every chunk object counted once')
      for (const c of b.chunks) {
        const meta: ChunkMeta = JSON.parse((await getText(BUCKET, `eth/${c.path}/meta.json`))!)
        assert.deepEqual(Object.keys(meta.files!).sort(), ['blocks.parquet', 'logs.parquet', 'traces.parquet', 'transactions.parquet'])
        assert.deepEqual(meta, await readChunkMeta(local, c))
        for (const [name, info] of Object.entries(meta.files!)) {
          assert.equal(objects.get(`eth/${c.path}/${name}`), info.size, name)
          // the object as downloaded above (download() checked its size against the listing)
          assert.deepEqual(copyHashes.get(`${c.path}/${name}`), info, `${c.path}/${name}`)
        }
      }
      assert.equal(await getText(BUCKET, 'eth/.ingest-lease.json'), undefined, 'lease released')
      assert.deepEqual(await stagingFolders(), staging0, 'staging folder removed')

      // a different dataset at the same prefix is refused, as for a folder
      await assert.rejects(ingest({ ...opts, dataset: 'other', out: `s3://${BUCKET}/eth` }), /s3:\/\/archive\/eth holds dataset \{"name":"eth","family":"evm"\}/)
    } finally {
      await server.close()
    }
  })

  it('a file above the part size is uploaded in parts (multipart) and downloads identical', async (t) => {
    const file = path.join(tmp.dir, 'big.bin')
    await writeFile(file, randomBytes(12 * 1024 * 1024))
    const commands: string[] = []
    ;(await s3Client()).middlewareStack.add((next, context) => (args) => {
      commands.push(context.commandName ?? '?')
      return next(args)
    }, { step: 'initialize', name: 'recordCommands' })
    const t0 = performance.now()
    try {
      assert.equal(await uploadFile(BUCKET, 'multi/big.bin', file), 12 * 1024 * 1024)
    } finally {
      ;(await s3Client()).middlewareStack.remove('recordCommands')
    }
    const ms = performance.now() - t0
    t.diagnostic(`12 MiB in 5 MiB parts: ${ms.toFixed(0)} ms (${(12.58 / (ms / 1000)).toFixed(1)} MB/s)`)
    assert.deepEqual(commands, ['CreateMultipartUploadCommand', 'UploadPartCommand', 'UploadPartCommand', 'UploadPartCommand', 'CompleteMultipartUploadCommand'])
    assert.equal((await listObjects(BUCKET, 'multi/'))[0].size, 12 * 1024 * 1024)
    const r = await downloadObject(BUCKET, 'multi/big.bin', path.join(tmp.dir, 'big.back'))
    assert.deepEqual({ size: r.bytes, sha256: r.sha256 }, await hashFile(file))
  })

  it('resume: an interrupted upload is deleted, the ingest continues after the last complete chunk (continuity hash from its meta.json); no gap, no duplicate', async () => {
    const server = await serve()
    const url = `s3://${BUCKET}/resume`
    try {
      const first = await ingest({ rpc: server.url, dataset: 'resume', out: url, from: 0, to: 13, chunkBlocks: 7 })
      assert.deepEqual(first.chunks.map((c) => [c.first, c.last]), [[0, 6], [7, 13]])
      // a killed upload: some files of the next chunk, no blocks.parquet
      const leftover = 'resume/0000000000/0000000014-0000000020-deadbeef'
      await putText(BUCKET, `${leftover}/transactions.parquet`, 'partial')
      await putText(BUCKET, `${leftover}/meta.json`, '{}')
      const second = await ingest({ rpc: server.url, dataset: 'resume', out: url, to: 30, chunkBlocks: 7 })
      assert.equal(second.blocks, 17)
      assert.equal(second.chunks[0].first, 14)
      assert.deepEqual(await listObjects(BUCKET, leftover + '/'), [])
      const copy = folder()
      await download('resume', copy)
      await checkChain(copy, 0, 30)
      // every chunk names the chunk it was written after, across the two runs (the router's gap check relies on it)
      const metas = [...first.chunks, ...second.chunks].map((c) => JSON.parse(readFileSync(path.join(copy, c.path, 'meta.json'), 'utf8')))
      assert.deepEqual(metas.map((m) => m.previousLast), [-1, ...metas.slice(0, -1).map((m) => m.last)])
      const txs = await readTable(copy, 'transactions')
      assert.equal(new Set(txs.map((x) => `${x.block_number}/${x.transaction_index}`)).size, txs.length)
      assert.equal(txs.length, 15 * (2 + 22) + 2)

      // the next run checks the new blocks against the last chunk's hash, read from the bucket; a reorg inside a
      // written chunk deletes it and the chunks after it (newest first; the hashes below the last one from its blocks.parquet)
      server.fork(25)
      const third = await ingest({ rpc: server.url, dataset: 'resume', out: url, to: 35, chunkBlocks: 7 })
      assert.deepEqual(third.reorgs.map((x) => [x.forkPoint, x.tip, x.resumeAt, x.deletedChunks.map((p) => p.split('/')[1].slice(0, 21))]),
        [[24, 30, 21, ['0000000028-0000000030', '0000000021-0000000027']]])
      const after = folder()
      await download('resume', after)
      await checkChain(after, 0, 35)
      for (const b of await readTable(after, 'blocks')) assert.equal(b.hash, server.identity(Number(b.number)).hash, `block ${b.number}`)
    } finally {
      await server.close()
    }
  })

  it('the lease: a second ingest is refused while the first runs; an expired lease is taken over; of two starting together one wins; a lost lease stops the ingest before it publishes', async () => {
    const server = await serve(light, { head: 9 })
    const url = `s3://${BUCKET}/lease`
    const ac = new AbortController()
    try {
      const published: number[] = []
      // no renewal during the test (TTL 60 s): the pre-publish check is what notices the lease was taken
      const running = ingest({ rpc: server.url, dataset: 'lease', out: url, follow: true, chunkBlocks: 5, pollMs: 100, signal: ac.signal, lease: { ttlMs: 60_000, settleMs: 50 }, onChunk: (c) => published.push(c.last) })
      running.catch(() => undefined)
      await waitFor(() => published.length >= 2, running)
      const holder = JSON.parse((await getText(BUCKET, 'lease/.ingest-lease.json'))!)
      await assert.rejects(ingest({ rpc: server.url, dataset: 'lease', out: url, to: 20 }), (e: any) => {
        assert.ok(e instanceof DatasetLocked, e.message)
        assert.equal(e.message.includes(`another ingest is writing ${url}: owner ${holder.owner} (host ${os.hostname()}, pid ${process.pid}) holds its lease`), true, e.message)
        assert.match(e.message, /until \d{4}-\d\d-\d\dT/)
        return true
      })

      // someone else takes the lease (as after an expiry): the running ingest stops before publishing its next chunk
      await putText(BUCKET, 'lease/.ingest-lease.json', JSON.stringify({ ...holder, owner: 'intruder', expiresAt: new Date(Date.now() + 60_000).toISOString() }))
      server.head = 14
      await assert.rejects(running, (e: any) => {
        assert.ok(e instanceof LeaseLost, e.message)
        assert.match(e.message, /lost the ingest lease on s3:\/\/archive\/lease: owner intruder .* holds it now/)
        return true
      })
      assert.deepEqual(published, [4, 9])
      assert.deepEqual((await listObjects(BUCKET, 'lease/')).filter((o) => o.key.endsWith('/blocks.parquet')).length, 2)
      assert.equal(JSON.parse((await getText(BUCKET, 'lease/.ingest-lease.json'))!).owner, 'intruder', 'a lost lease is not deleted')

      // an expired lease is taken over (and released at the end) by an ingest up to the head (one with --to claims its range only)
      await putText(BUCKET, 'lease/.ingest-lease.json', JSON.stringify({ ...holder, owner: 'dead', expiresAt: new Date(Date.now() - 1000).toISOString() }))
      const r = await ingest({ rpc: server.url, dataset: 'lease', out: url, chunkBlocks: 5 })
      assert.deepEqual(r.chunks.map((c) => [c.first, c.last]), [[10, 14]])
      assert.equal(await getText(BUCKET, 'lease/.ingest-lease.json'), undefined)

      // two at once: both write, the read-back after the settle wait tells the loser
      const a = new S3Lease(BUCKET, 'race/.ingest-lease.json', 's3://archive/race', { settleMs: 300 })
      const b = new S3Lease(BUCKET, 'race/.ingest-lease.json', 's3://archive/race', { settleMs: 300 })
      const results = await Promise.allSettled([a.acquire(), b.acquire()])
      assert.deepEqual(results.map((x) => x.status).sort(), ['fulfilled', 'rejected'])
      const lost = results.find((x) => x.status === 'rejected') as PromiseRejectedResult
      assert.ok(lost.reason instanceof DatasetLocked)
      assert.match(lost.reason.message, /another ingest took the lease on s3:\/\/archive\/race at the same time/)
      const winner = results[0].status === 'fulfilled' ? a : b
      await winner.check()
      await winner.release()
      await a.release()
      await b.release()
      assert.equal(await getText(BUCKET, 'race/.ingest-lease.json'), undefined)
    } finally {
      ac.abort()
      await server.close()
    }
  })

  // s3rver rewrites objects in place: a lease write whose request is aborted on a stalled machine
  // leaves the object cut short ("… is not a lease (not JSON)" before).
  it('a lease object cut short by an aborted write is taken over, written again by its holder, and deleted on release', async () => {
    const key = 'torn/.ingest-lease.json'
    const cut = (record: string) => putText(BUCKET, key, record.slice(0, 40))
    const a = new S3Lease(BUCKET, key, 's3://archive/torn', { settleMs: 50 })
    await cut(JSON.stringify({ owner: 'someone', host: 'h', pid: 1, acquiredAt: '', expiresAt: new Date(Date.now() + 60_000).toISOString() }))
    await a.acquire()
    const mine = JSON.parse((await getText(BUCKET, key))!)
    assert.equal(mine.owner, a.owner)
    await cut(JSON.stringify(mine, null, 2))
    await a.check()
    assert.equal(JSON.parse((await getText(BUCKET, key))!).owner, a.owner, 'the holder wrote its lease again')
    await cut(JSON.stringify(mine, null, 2))
    await a.release()
    assert.equal(await getText(BUCKET, key), undefined)
  })

  it('the lease is renewed while the ingest runs (TTL shorter than the ingest)', async () => {
    const server = await serve(light, { head: 4 })
    const url = `s3://${BUCKET}/renew`
    const ac = new AbortController()
    try {
      const published: number[] = []
      const running = ingest({ rpc: server.url, dataset: 'renew', out: url, follow: true, chunkBlocks: 5, pollMs: 100, signal: ac.signal, lease: { ttlMs: 4000, settleMs: 20 }, onChunk: (c) => published.push(c.last) })
      running.catch(() => undefined)
      await waitFor(() => published.length >= 1, running)
      const first = await readLease('renew')
      await new Promise((r) => setTimeout(r, 5000)) // longer than the TTL
      const later = await readLease('renew')
      assert.equal(later.owner, first.owner)
      assert.ok(Date.parse(later.expiresAt) > Date.now(), 'still valid')
      server.head = 9
      await waitFor(() => published.length >= 2, running)
      ac.abort()
      const r = await running
      assert.deepEqual(r.chunks.map((c) => [c.first, c.last]), [[0, 4], [5, 9]])
    } finally {
      ac.abort()
      await server.close()
    }
  })
})
