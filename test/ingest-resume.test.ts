import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { readdir, stat } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, it } from 'node:test'
import { listLocalChunks, readChunkMeta } from '../src/chunks/layout.js'
import { ReorgError, runIngest } from '../src/ingest/loop.js'
import { loadRecordedChain } from '../src/ingest/recorded.js'
import { ReplayServer } from '../src/ingest/replay.js'
import { readTable } from './helpers/ingest-expect.js'
import { freshFolders } from './helpers/dataset.js'

/*
 * Resume, kill, reorg, follow and chunk bounds, on recorded mainnet blocks served as a long chain
 * (replay server, repeat mode: real transactions and logs, renumbered and re-linked blocks).
 */

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli.js')
const eth = loadRecordedChain('ethereum')
const light = eth.filter((b) => b.number === 1000000 || b.number === 4369999) // 2 and 22 transactions
const heavy = eth.filter((b) => b.number === 18000000 || b.number === 18500000) // 94 and 157 transactions

const folder = freshFolders('ba-ingest-resume-')
/** Folders made so far; it also seeds the replay server (`serve`). */
let n = 0
const out = () => {
  n++
  return folder()
}

async function serve(recorded = light, opts: ConstructorParameters<typeof ReplayServer>[1] = {}): Promise<ReplayServer> {
  const s = new ReplayServer(recorded, { repeat: { times: 200, seed: `t${n}` }, ...opts })
  await s.start()
  return s
}

/** Every block of the dataset exactly once, in order, each linked to the one before. */
async function checkChain(dir: string, first: number, last: number): Promise<any[]> {
  const blocks = (await readTable(dir, 'blocks')).sort((a, b) => Number(a.number) - Number(b.number))
  assert.deepEqual(blocks.map((b) => Number(b.number)), Array.from({ length: last - first + 1 }, (_, i) => first + i))
  for (let i = 1; i < blocks.length; i++) assert.equal(blocks[i].parent_hash, blocks[i - 1].hash, `block ${blocks[i].number} parent`)
  const chunks = await listLocalChunks(dir)
  for (let i = 1; i < chunks.length; i++) assert.equal(chunks[i].first, chunks[i - 1].last + 1, `gap before ${chunks[i].path}`)
  const names = await readdir(dir)
  assert.deepEqual(names.filter((x) => x.startsWith('.tmp-') || x === '.ingest.lock'), [], 'leftover temp folder or lock')
  return blocks
}

describe('resume, kill, reorg, follow', () => {
  it('killed at arbitrary moments, a restart resumes after the last complete chunk: no gap, no duplicate, no partial chunk', async () => {
    const server = await serve()
    const dir = out()
    const args = ['ingest', '--rpc', server.url, '--dataset', 'kill', '--out', dir, '--from', '0', '--to', '299',
      '--chunk-blocks', '7', '--batch-size', '5', '--concurrency', '2', '--progress', 'none']
    const run = (killAfterMs?: number) => new Promise<{ code: number | null; signal: string | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
      let stderr = ''
      child.stderr!.on('data', (d) => (stderr += d))
      const t = killAfterMs == null ? undefined : setTimeout(() => child.kill('SIGKILL'), killAfterMs)
      child.once('exit', (code, signal) => {
        clearTimeout(t)
        resolve({ code, signal, stderr })
      })
    })
    try {
      let killed = 0
      let before = -1
      for (const ms of [1500, 1900, 1300, 2300, 1700, 2100]) {
        const r = await run(ms)
        if (r.signal !== 'SIGKILL') {
          assert.equal(r.code, 0, r.stderr)
          break
        }
        killed++
        // whatever is visible is complete: every listed chunk has all its files, chunks never overlap
        const chunks = await listLocalChunks(dir)
        for (const c of chunks) {
          const files = (await readdir(path.join(dir, c.path))).sort()
          assert.deepEqual(files, ['blocks.parquet', 'logs.parquet', 'meta.json', 'transactions.parquet'], c.path)
          const meta = await readChunkMeta(dir, c)
          assert.equal(meta.last - meta.first + 1, meta.blockCount)
          assert.ok(meta.blockCount <= 7)
        }
        const last = chunks.length ? chunks[chunks.length - 1].last : -1
        assert.ok(last >= before, 'the dataset never shrinks')
        before = last
      }
      assert.ok(killed >= 2, `killed ${killed} times`)
      const r = await run()
      assert.equal(r.code, 0, r.stderr)
      await checkChain(dir, 0, 299)
      const txs = await readTable(dir, 'transactions')
      assert.equal(txs.length, 150 * (2 + 22))
      assert.equal(new Set(txs.map((t) => `${t.block_number}/${t.transaction_index}`)).size, txs.length)
    } finally {
      await server.close()
    }
  })

  it('a reorg above the confirmations is re-read from the fork point, in the open chunk and below written chunks; one deeper than --max-reorg-depth stops the ingest naming both blocks', async () => {
    const server = await serve(light, { head: 20 })
    const dir = out()
    const ac = new AbortController()
    const hashesAreTheNode = async (last: number) => {
      const blocks = await checkChain(dir, 0, last)
      for (const b of blocks) assert.equal(b.hash, server.identity(Number(b.number)).hash, `block ${b.number}`)
    }
    try {
      const first = runIngest({
        rpc: server.url, dataset: 'reorg', out: dir, follow: true, confirmations: 2, chunkBlocks: 5, pollMs: 20, flushAfterMs: 50, progress: 'none', signal: ac.signal,
        onChunk: (c) => c.last >= 28 && ac.abort(),
      })
      first.catch(() => undefined)
      // caught up (0..18 fetched, 15..18 in the open chunk) once it polls the head again and again
      while ((server.calls.get('eth_blockNumber') ?? 0) < 4) await new Promise((r) => setTimeout(r, 20))
      server.fork(16) // blocks 16.. get other hashes
      server.head = 30
      const r = await first
      assert.equal(r.last, 28)
      assert.equal(r.reorgs.length, 1)
      assert.equal(r.reorgs[0].forkPoint, 15)
      await hashesAreTheNode(28)

      server.fork(12) // below the written chunks (chunk 10-14 holds the old 12..14)
      server.head = 40
      const second = await runIngest({ rpc: server.url, dataset: 'reorg', out: dir, to: 35, confirmations: 2, chunkBlocks: 5, progress: 'none' })
      assert.deepEqual(second.reorgs.map((x) => [x.forkPoint, x.tip, x.resumeAt, x.deletedChunks.length]), [[11, 28, 10, 4]])
      await hashesAreTheNode(35)

      server.fork(20)
      server.head = 50
      await assert.rejects(runIngest({ rpc: server.url, dataset: 'reorg', out: dir, to: 45, confirmations: 2, chunkBlocks: 5, maxReorgDepth: 10, progress: 'none' }), (e: any) => {
        assert.ok(e instanceof ReorgError)
        assert.match(e.message, /deeper than --max-reorg-depth \(10\): block 36 \(0x\w+\) has parent hash 0x\w+, but block 35 has hash 0x\w+ \(chunk 0000000000\/0000000035-0000000035-\w+\)/)
        return true
      })
      const blocks = await checkChain(dir, 0, 35)
      assert.notEqual(blocks[20].hash, server.identity(20).hash, 'nothing was deleted')
    } finally {
      ac.abort()
      await server.close()
    }
  })

  it('a reorg to a shorter chain (a block the head had announced is gone) is waited for and re-read, not fatal', async () => {
    let server: ReplayServer
    let gone = false
    let asked15 = 0
    const mutate = (method: string, params: any[], result: unknown) => {
      if (method === 'eth_getBlockByNumber' && params[0] === '0xf') {
        asked15++
        if (!gone) {
          gone = true // the node answered its head is 20, then lost 13.. to a shorter fork
          server.fork(13)
          server.head = 14
          return null
        }
      }
      return result
    }
    server = await serve(light, { head: 20, mutate })
    const dir = out()
    const ac = new AbortController()
    try {
      const running = runIngest({
        rpc: server.url, dataset: 'shorter', out: dir, follow: true, finality: 'latest', chunkBlocks: 5, batchSize: 5, concurrency: 1, pollMs: 20, flushAfterMs: 50,
        workers: 0, progress: 'none', signal: ac.signal, onChunk: (c) => c.last >= 24 && ac.abort(),
      })
      running.catch(() => undefined)
      // block 15 is asked for 5 times (a lagging node would have it by then), then the loop sees the head below it and polls the head
      while (asked15 < 5) await new Promise((r) => setTimeout(r, 20))
      const polls = server.calls.get('eth_blockNumber')!
      while (server.calls.get('eth_blockNumber')! < polls + 5) await new Promise((r) => setTimeout(r, 20))
      assert.equal(asked15, 5, 'block 15 is not asked for while the head is below it')
      server.head = 24
      const r = await running
      assert.equal(r.last, 24)
      assert.deepEqual(r.reorgs.map((x) => [x.forkPoint, x.tip]), [[12, 14]])
      const blocks = await checkChain(dir, 0, 24)
      for (const b of blocks) assert.equal(b.hash, server.identity(Number(b.number)).hash, `block ${b.number}`)
    } finally {
      ac.abort()
      await server.close()
    }
  })

  it('--follow keeps up with a moving head, never fetching above head − confirmations', async () => {
    const fetchedAbove: string[] = []
    let server: ReplayServer
    const mutate = (method: string, params: any[], result: unknown) => {
      if (method === 'eth_getBlockByNumber' && parseInt(params[0], 16) > server.head - 3) fetchedAbove.push(`${parseInt(params[0], 16)} at head ${server.head}`)
      return result
    }
    server = await serve(light, { head: 5, mutate })
    const dir = out()
    const ac = new AbortController()
    const grow = setInterval(() => {
      if (server.head < 60) server.head++
    }, 15)
    try {
      const seen: number[] = []
      const r = await runIngest({
        rpc: server.url, dataset: 'follow', out: dir, follow: true, confirmations: 3, chunkBlocks: 10, pollMs: 10, flushAfterMs: 50,
        batchSize: 4, progress: 'none', signal: ac.signal,
        onChunk: (c) => {
          seen.push(c.last)
          if (c.last >= 57) ac.abort()
        },
      })
      assert.deepEqual(fetchedAbove, [])
      assert.equal(r.last, 57)
      assert.ok(seen.length >= 6)
      await checkChain(dir, 0, 57)
    } finally {
      clearInterval(grow)
      await server.close()
    }
  })

  it('chunks are bounded by bytes and block count; a block bigger than the byte bound is a chunk of its own, never split', async () => {
    const server = await serve(heavy)
    const dir = out()
    try {
      // rows (as NDJSON) of 18000000 ≈ 0.92 MB, of 18500000 ≈ 0.65 MB: with a 1 MB bound a chunk closes after
      // two blocks (0.92 MB is below the bound, 1.57 MB is not), before the count bound of 3 is reached
      // (eight blocks: four chunks of two show it as well as more would; each heavy block costs its normalisation)
      const r = await runIngest({ rpc: server.url, dataset: 'bytes', out: dir, from: 0, to: 7, chunkBlocks: 3, chunkBytes: 1_000_000, progress: 'none' })
      assert.equal(r.blocks, 8)
      const metas = await Promise.all((await listLocalChunks(dir)).map((c) => readChunkMeta(dir, c)))
      assert.deepEqual(metas.map((m) => m.blockCount), Array(4).fill(2))
      await checkChain(dir, 0, 7)
      const txs = await readTable(dir, 'transactions')
      assert.equal(txs.length, 4 * (94 + 157))
      const small = out()
      const r2 = await runIngest({ rpc: server.url, dataset: 'bytes', out: small, from: 0, to: 3, chunkBlocks: 4, chunkBytes: 1, progress: 'none' })
      assert.equal(r2.chunks.length, 4) // one block per chunk: the bound never cuts a block
      const r3 = await runIngest({ rpc: server.url, dataset: 'bytes', out: out(), from: 0, to: 4, chunkBlocks: 2, progress: 'none' })
      assert.deepEqual(r3.chunks.map((c) => [c.first, c.last]), [[0, 1], [2, 3], [4, 4]])
      assert.ok((await stat(path.join(small, r2.chunks[0].path, 'transactions.parquet'))).size > 0)
    } finally {
      await server.close()
    }
  })
})
