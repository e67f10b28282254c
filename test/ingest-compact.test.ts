import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { watch } from 'node:fs'
import { mkdir, readdir } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks, readChunkMeta, scanLocalChunks } from '../src/chunks/layout.js'
import { tailBound } from '../src/compact/plan.js'
import { runIngest } from '../src/ingest/loop.js'
import { registry } from '../src/metrics.js'
import { startAnvil, type Anvil } from './helpers/anvil.js'
import { answers } from './helpers/compaction.js'
import { startStandaloneWorker, tempDir } from './helpers/dataset.js'
import { CLI, children, killChildren } from './helpers/cli.js'
import { prng } from './helpers/fault-proxy.js'

/*
 * `ingest --follow` with compaction, from a real anvil node that gets a block (with a transfer) once
 * the one before is in a chunk: the ingest writes a chunk at every idle poll (flush after 0 ms), its compactor merges
 * them while it runs, the end of the dataset stays within the tier bound, and the dataset answers as
 * a one-shot ingest of the same blocks into one chunk does.
 */

describe('ingest --follow with compaction', { timeout: 600_000 }, () => {
  let anvil: Anvil
  let tmp: Awaited<ReturnType<typeof tempDir>>

  before(async () => {
    anvil = await startAnvil()
    tmp = await tempDir('ba-ingest-compact-')
  })
  after(async () => {
    killChildren()
    await anvil?.stop()
    await tmp?.cleanup()
  })

  it('merges the chunks of every poll in the background, within the bound, answering as one chunk', async () => {
    const out = path.join(tmp.dir, 'follow')
    const bounds = { fanout: 3, chunkBlocks: 40 }
    const ac = new AbortController()
    // the last block in a chunk the ingest wrote, as the ingest tells it (not by listing the folder every 10 ms)
    let upTo = -1
    const ingest = runIngest({
      rpc: anvil.url, dataset: 'a', out, follow: true, finality: 'latest', maxReorgDepth: 0, chunkBlocks: bounds.chunkBlocks, pollMs: 20, flushAfterMs: 0, workers: 0, progress: 'none', signal: ac.signal,
      compact: { fanout: bounds.fanout, graceMs: 0, intervalMs: 50 },
      onChunk: (c) => (upTo = Math.max(upTo, c.last)),
    })
    ingest.catch(() => undefined)
    const [from, to] = await anvil.rpc('eth_accounts')
    // each transfer is a block; the next one is sent once it is in a chunk, so every block gets its own
    // (the block its receipt names: eth_blockNumber read right after the send can still answer the one before)
    let head = -1
    for (let i = 0; i < 60; i++) {
      const tx = await anvil.rpc('eth_sendTransaction', [{ from, to, value: '0x' + (1000 + i).toString(16) }])
      let receipt = await anvil.rpc('eth_getTransactionReceipt', [tx])
      while (!receipt) {
        await new Promise((r) => setTimeout(r, 10))
        receipt = await anvil.rpc('eth_getTransactionReceipt', [tx])
      }
      head = parseInt(receipt.blockNumber, 16)
      while (upTo < head) await new Promise((r) => setTimeout(r, 10))
    }
    // let the compactor catch up with the last chunks, then stop
    const merges = async () => Number((await registry.getSingleMetricAsString('block_archive_compaction_merges_total')).match(/ (\d+)$/m)?.[1] ?? 0)
    let settled = -1
    for (let still = 0; still < 10; ) {
      await new Promise((r) => setTimeout(r, 100))
      const m = await merges()
      still = m === settled ? still + 1 : 0
      settled = m
    }
    ac.abort()
    const r = await ingest
    assert.equal(r.last, head)
    assert.ok(r.chunks.length >= 40, `${r.chunks.length} chunks written by the ingest`)
    assert.ok(settled >= 6, `${settled} merged chunks`)

    const chunks = await listLocalChunks(out)
    assert.deepEqual((await scanLocalChunks(out)).map((c) => c.path), chunks.map((c) => c.path), 'superseded chunks deleted (grace 0)')
    for (let i = 1; i < chunks.length; i++) assert.equal(chunks[i].first, chunks[i - 1].last + 1)
    const metas = await Promise.all(chunks.map((c) => readChunkMeta(out, c)))
    const open = metas.filter((m) => !m.sealed && m.blockCount < bounds.chunkBlocks)
    assert.ok(open.length <= tailBound(bounds), `${open.length} open chunks (bound ${tailBound(bounds)}); chunks: ${metas.map((m) => `${m.first}-${m.last}/t${m.tier ?? 0}`).join(' ')}`)
    assert.ok(metas.every((m) => m.blockCount <= bounds.chunkBlocks))
    assert.ok(chunks.length < r.chunks.length / 4, `${chunks.length} chunks after compaction, ${r.chunks.length} written`)

    const reference = path.join(tmp.dir, 'reference')
    await runIngest({ rpc: anvil.url, dataset: 'a', out: reference, to: head, finality: 'latest', chunkBlocks: 1000, workers: 0, progress: 'none' })
    const refWorker = await startStandaloneWorker(reference)
    const worker = await startStandaloneWorker(out)
    try {
      const want = await answers(`${refWorker.url}/datasets/a/query`, head, [0, 1, 5])
      assert.ok(JSON.parse(want[1]).length >= 60, 'the transfers are there')
      assert.deepEqual(await answers(`${worker.url}/datasets/a/query`, head, [0, 1, 5]), want)
    } finally {
      await refWorker.stop()
      await worker.stop()
    }
  })

  it('ingest --follow with compaction killed (SIGKILL) at random moments, mid-merge among them: each restart completes a consistent dataset', async (t) => {
    const seed = Number(process.env.BLOCK_ARCHIVE_TEST_SEED ?? Date.now() % 1_000_000)
    t.diagnostic(`seed ${seed}`)
    const random = prng(seed)
    const out = path.join(tmp.dir, 'killed')
    const args = ['ingest', '--rpc', anvil.url, '--dataset', 'k', '--out', out, '--follow', '--finality', 'latest', '--max-reorg-depth', '0', '--chunk-blocks', '40', '--flush-after-ms', '0', '--poll-ms', '20',
      '--workers', '0', '--progress', 'none', '--compact-fanout', '3', '--compact-grace-ms', '0']
    // the chain grows all along (ten blocks a second: a chunk each, a merge every three)
    let mining = true
    const miner = (async () => {
      while (mining) {
        await anvil.rpc('evm_mine').catch(() => undefined)
        await new Promise((r) => setTimeout(r, 100))
      }
    })()
    const merging = async (pid: number | undefined) => (await readdir(out).catch(() => [] as string[])).some((n) => n.startsWith(`.tmp-${pid}-merge-`))
    const log: string[] = []
    let midMerge = 0
    try {
      for (let round = 0; round < 5; round++) {
        const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
        children.add(child)
        let stderr = ''
        child.stderr!.on('data', (d) => (stderr += d))
        const exited = new Promise<string | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)))
        // mid-merge in rounds 0, 2, 4: killed the moment this run's first merge temp folder appears
        // (inotify; a merge can be shorter than a poll), or after 60 s if none does; after a random
        // time in the others
        const t0 = Date.now()
        const ms = 1000 + random() * 3000
        let inMerge = false
        if (round % 2 === 0) {
          await mkdir(out, { recursive: true })
          await new Promise<void>((resolve) => {
            const timer = setTimeout(() => (watcher.close(), resolve()), 60_000)
            const watcher = watch(out, (_event, name) => {
              if (!name?.startsWith(`.tmp-${child.pid}-merge-`)) return
              child.kill('SIGKILL')
              inMerge = true
              clearTimeout(timer)
              watcher.close()
              resolve()
            })
          })
        } else {
          await new Promise((r) => setTimeout(r, ms))
          inMerge = await merging(child.pid)
        }
        child.kill('SIGKILL')
        assert.equal(await exited, 'SIGKILL', stderr)
        children.delete(child)
        if (inMerge) midMerge++
        const chunks = await listLocalChunks(out) // throws on overlaps that are not containment
        for (let i = 1; i < chunks.length; i++) assert.equal(chunks[i].first, chunks[i - 1].last + 1, `round ${round}: gap before ${chunks[i].path}`)
        if (chunks.length) assert.equal(chunks[0].first, 0)
        log.push(`round ${round}: killed ${inMerge ? 'mid-merge' : `after ${Date.now() - t0} ms`}, ${chunks.length} chunks up to ${chunks.at(-1)?.last ?? -1}`)
      }
      t.diagnostic(log.join('; '))
      assert.ok(midMerge >= 1, 'a kill landed while a merged chunk was written')
      // a last run, stopped properly
      const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
      children.add(child)
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
      await new Promise((r) => setTimeout(r, 3000))
      mining = false
      await miner
      const head = parseInt(await anvil.rpc('eth_blockNumber'), 16)
      while (((await listLocalChunks(out)).at(-1)?.last ?? -1) < head) await new Promise((r) => setTimeout(r, 50))
      child.kill('SIGTERM')
      assert.equal(await exited, 0)
      children.delete(child)
    } finally {
      mining = false
      await miner
    }
    assert.deepEqual((await readdir(out)).filter((n) => n.startsWith('.tmp-') || n === '.ingest.lock'), [], 'nothing left of the killed runs')
    const chunks = await listLocalChunks(out)
    for (let i = 1; i < chunks.length; i++) assert.equal(chunks[i].first, chunks[i - 1].last + 1)
    const last = chunks.at(-1)!.last
    const reference = path.join(tmp.dir, 'killed-reference')
    await runIngest({ rpc: anvil.url, dataset: 'k', out: reference, to: last, finality: 'latest', chunkBlocks: 100_000, workers: 0, progress: 'none' })
    const refWorker = await startStandaloneWorker(reference)
    const worker = await startStandaloneWorker(out)
    try {
      assert.deepEqual(await answers(`${worker.url}/datasets/k/query`, last, [0, 1]), await answers(`${refWorker.url}/datasets/k/query`, last, [0, 1]))
    } finally {
      await refWorker.stop()
      await worker.stop()
    }
  })
})
