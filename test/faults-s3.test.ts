import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { log } from '../src/log.js'
import type { ChunkRef } from '../src/chunks/layout.js'
import { ChunkCache } from '../src/storage/chunk-cache.js'
import { openDatasetStore } from '../src/storage/dataset-store.js'
import { getText, resetS3Client, uploadFile } from '../src/storage/s3.js'
import { killChildren, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeChunk, writeDataset } from './helpers/dataset.js'
import { chunkFile, FaultProxy, LIST, type FaultRule } from './helpers/fault-proxy.js'
import { sha256, within } from './helpers/faults.js'
import { setEnv, startS3, uploadDataset, type S3Server } from './helpers/s3.js'

/*
 * Object storage that answers errors, stalls and cut bodies, through a fault-injecting proxy
 * (helpers/fault-proxy.ts) between the archive and s3rver: AWS_ENDPOINT_URL points at the proxy.
 * Short S3 time limits (BLOCK_ARCHIVE_S3_SOCKET_TIMEOUT_MS, …_CONNECT_TIMEOUT_MS) keep stalls short.
 *
 * - a worker's chunk download is retried through every kind of fault and ends with the verified
 *   chunk; a chunk that cannot be downloaded leaves nothing in the cache; a cached file never
 *   differs from the source, also while a worker process downloads through random faults;
 * - the router keeps its chunk list (and logs) while listings fail or stall, and picks up new
 *   chunks once they work again.
 *
 * Ingests whose uploads fail: faults-s3-ingest.test.ts.
 */

const TIMEOUTS = { BLOCK_ARCHIVE_S3_SOCKET_TIMEOUT_MS: '700', BLOCK_ARCHIVE_S3_CONNECT_TIMEOUT_MS: '700' }

describe('object storage faults (fault proxy in front of s3rver)', { timeout: 600_000 }, () => {
  let s3: S3Server
  let proxy: FaultProxy
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let local: string
  let chunks: ChunkRef[]
  let env: Record<string, string>
  let restoreEnv = () => {}
  let level: string
  let n = 0

  before(async () => {
    level = log.level
    log.level = 'error' // retries of cut bodies are logged as warnings: expected here
    s3 = await startS3(['archive'])
    tmp = await tempDir('ba-faults-s3-')
    local = path.join(tmp.dir, 'anvil')
    chunks = await writeDataset(local, 'anvil', (await anvilRecords()).slice(0, 64), 16)
    await uploadDataset(local, 'archive', 'evm/anvil')
    proxy = new FaultProxy(s3.endpoint, { seed: 7 })
    await proxy.start()
    env = { ...s3.env, AWS_ENDPOINT_URL: proxy.url, ...TIMEOUTS }
    restoreEnv = setEnv(env)
    resetS3Client()
  })

  after(async () => {
    log.level = level
    killChildren()
    restoreEnv()
    resetS3Client()
    await proxy?.close()
    await s3?.stop()
    await tmp?.cleanup()
  })

  /** The chunk's cached files are byte for byte the source's; nothing else but `.verified.json`. */
  const assertCachedAsSource = async (dir: string, c: ChunkRef) => {
    const want = (await readdir(path.join(local, c.path))).sort()
    assert.deepEqual((await readdir(dir)).filter((f) => f !== '.verified.json').sort(), want, dir)
    for (const f of want) assert.equal(sha256(path.join(dir, f)), sha256(path.join(local, c.path, f)), `${c.path}/${f}`)
  }
  /** Nothing but verified chunk folders under the cache root (no `.part-` folder). */
  const partFolders = async (root: string) => (existsSync(root) ? (await readdir(root, { recursive: true })).filter((p) => p.includes('.part-')) : [])

  const faults: [string, FaultRule][] = [
    ['500 InternalError', { fault: 'status', status: 500 }],
    ['503 SlowDown', { fault: 'status', status: 503 }],
    ['no answer (stall)', { fault: 'stall' }],
    ['headers and part of the body, then silence', { fault: 'stall-body', bytes: 3000 }],
    ['connection closed mid-body', { fault: 'cut', bytes: 5000 }],
    ['fewer bytes than Content-Length', { fault: 'short', bytes: 100 }],
  ]
  for (const [what, rule] of faults) {
    it(`a chunk download through "${what}" (twice) is retried and ends with the verified chunk`, async () => {
      const root = path.join(tmp.dir, `cache-${++n}`)
      const cache = new ChunkCache({ root, label: `fault-${n}` })
      const store = openDatasetStore('s3://archive/evm/anvil')
      const c = chunks[n % chunks.length]
      proxy.setRules([{ ...rule, name: what, method: 'GET', path: chunkFile('transactions.parquet'), times: 2 }])
      try {
        const dir = await within(20_000, `download through ${what}`, cache.fetch('anvil', store, c))
        assert.equal(proxy.hitCount(what), 2, 'both faults were met')
        await assertCachedAsSource(dir, c)
        assert.equal(await cache.intact('anvil', c.path), true)
        assert.deepEqual(await partFolders(root), [])
      } finally {
        proxy.clear()
      }
    })
  }

  it('a chunk whose file keeps arriving cut is refused, leaving nothing in the cache; it downloads once storage works again', async () => {
    const root = path.join(tmp.dir, `cache-${++n}`)
    const cache = new ChunkCache({ root, label: `fault-${n}` })
    const store = openDatasetStore('s3://archive/evm/anvil')
    const c = chunks[1]
    proxy.setRules([{ name: 'cut', fault: 'cut', method: 'GET', path: chunkFile('traces.parquet'), bytes: 1000 }])
    try {
      await assert.rejects(within(30_000, 'a download that keeps failing', cache.fetch('anvil', store, c)))
      assert.ok(proxy.hitCount('cut') >= 2, `tried ${proxy.hitCount('cut')} times`)
      assert.equal(existsSync(path.join(root, 'anvil', c.path)), false)
      assert.deepEqual(await partFolders(root), [])
      assert.equal(cache.bytes, 0)
      assert.equal(await cache.intact('anvil', c.path), false)
    } finally {
      proxy.clear()
    }
    await assertCachedAsSource(await cache.fetch('anvil', store, c), c)
  })

  it('a worker process downloading through random faults (about a quarter of chunk file requests, 30 % of listings) ends holding every chunk, never a file that differs from the source', async () => {
    const rules: FaultRule[] = [
      { name: 'list-503', fault: 'status', status: 503, path: LIST, probability: 0.3 },
      { name: 'get-500', fault: 'status', status: 500, method: 'GET', path: /\.parquet(\?|$)/, probability: 0.1 },
      { name: 'get-cut', fault: 'cut', method: 'GET', path: /\.parquet(\?|$)/, probability: 0.1 },
      { name: 'get-short', fault: 'short', method: 'GET', path: /\.parquet(\?|$)/, probability: 0.05 },
      { name: 'get-stall', fault: 'stall-body', method: 'GET', path: /\.parquet(\?|$)/, probability: 0.05 },
    ]
    const router = await startCli(['router', '--data', 's3://archive/evm', '--port', '0', '--relist-ms', '300', '--heartbeat-ms', '500'], ['router', 'dataset anvil'], env)
    const routerUrl = router.lines.get('router')![0]
    const base = router.lines.get('dataset anvil')![0]
    const cache = path.join(tmp.dir, 'worker-cache')
    proxy.setRules(rules)
    // Watch the cache while the worker fills it: any verified chunk folder must equal the source.
    let watching = true
    const seen = new Set<string>()
    const watcher = (async () => {
      while (watching) {
        for (const c of chunks) {
          const dir = path.join(cache, 'anvil', c.path)
          if (!existsSync(path.join(dir, '.verified.json'))) continue
          try {
            await assertCachedAsSource(dir, c)
            seen.add(c.path)
          } catch (e: any) {
            // dropped between the check and the read (e.g. re-fetched): only an existing different file counts
            if (e?.code !== 'ENOENT' && existsSync(path.join(dir, '.verified.json'))) throw e
          }
        }
        await new Promise((r) => setTimeout(r, 30))
      }
    })()
    try {
      const worker = await startCli(['worker', '--router', routerUrl, '--cache', cache, '--id', 'w0', '--port', '0', '--heartbeat-ms', '500'], ['worker'], env)
      await within(30_000, 'the worker holding every chunk', until('every chunk held', async () => {
        const s = await (await fetch(`${routerUrl}/status`)).json()
        return JSON.stringify(s.workers.find((w: any) => w.id === 'w0')?.state.anvil) === '[[0,63]]' ? true : undefined
      }, 30_000))
      assert.ok(proxy.hitCount() >= 3, `faults met: ${JSON.stringify(Object.fromEntries(proxy.hits))}`)
      proxy.clear()
      watching = false
      await watcher
      for (const c of chunks) await assertCachedAsSource(path.join(cache, 'anvil', c.path), c)
      assert.deepEqual(await partFolders(cache), [])
      assert.equal(seen.size, chunks.length)
      // And it answers from them.
      assert.equal(await (await fetch(`${base}/height`)).text(), '63')
      const res = await fetch(`${worker.lines.get('worker')![0]}/datasets/anvil/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ fromBlock: 0, toBlock: 63, includeAllBlocks: true }) })
      assert.equal(res.status, 200)
      assert.equal(((await res.json()) as any[]).at(-1).header.number, 63)
      worker.child.kill('SIGKILL')
    } finally {
      watching = false
      await watcher.catch(() => undefined)
      proxy.clear()
      router.child.kill('SIGKILL')
    }
  })

  it('the router keeps its chunk list while listings fail or stall (logged), and picks up new chunks once they work again', async () => {
    // A second dataset of its own, so that chunks can be added.
    const dsLocal = path.join(tmp.dir, 'grow')
    const all = await anvilRecords()
    const grown = await writeDataset(dsLocal, 'grow', all.slice(0, 32), 16)
    await uploadDataset(dsLocal, 'archive', 'evm2/grow')
    // Two tries per request (the SDK's retries would otherwise make each failed listing take seconds).
    const router = await startCli(['router', '--data', 's3://archive/evm2', '--port', '0', '--relist-ms', '200', '--heartbeat-ms', '200'], ['router', 'dataset grow'], { ...env, BLOCK_ARCHIVE_S3_ATTEMPTS: '2' })
    const routerUrl = router.lines.get('router')![0]
    const status = async () => (await (await fetch(`${routerUrl}/status`)).json()).datasets.find((d: any) => d.name === 'grow')
    const failures = () => router.stderr().split('\n').filter((l) => /router: cannot list/.test(l)).length
    try {
      assert.equal((await status()).chunks, 2)
      for (const rule of [{ fault: 'status', status: 503 }, { fault: 'status', status: 500 }, { fault: 'stall' }] as FaultRule[]) {
        const logged = failures()
        proxy.setRules([{ ...rule, name: 'list', path: LIST }])
        // A new chunk lands in the bucket while listings fail (uploaded with PUTs only): not seen, and the old list stays.
        const c = await writeChunk(dsLocal, all.slice(grown.at(-1)!.last + 1, grown.at(-1)!.last + 17), grown)
        const files = (await readdir(path.join(dsLocal, c.path))).sort((a, b) => Number(a === 'blocks.parquet') - Number(b === 'blocks.parquet'))
        for (const f of files) await uploadFile('archive', `evm2/grow/${c.path}/${f}`, path.join(dsLocal, c.path, f))
        await until('two failed listings logged', async () => (failures() >= logged + 2 ? true : undefined), 20_000)
        const s = await status()
        assert.equal(s.chunks, grown.length - 1, `${rule.fault} ${rule.status ?? ''}: the old list is kept`)
        assert.equal(s.lastChunkBlock, grown.at(-2)!.last)
        assert.equal(s.height, -1, 'no worker: nothing served') // the listing, not the height, is what is checked here
        proxy.clear()
        await until('the new chunk listed', async () => ((await status()).chunks === grown.length ? true : undefined), 20_000)
      }
      assert.ok(proxy.hitCount('list') >= 6)
      assert.match(router.stderr(), /"msg":"router: cannot list (datasets|chunks)"/)
    } finally {
      proxy.clear()
      router.child.kill('SIGKILL')
    }
  })

  it('the fault proxy passes everything through untouched when no rule matches', async () => {
    proxy.clear()
    assert.equal(await getText('archive', 'evm/anvil/dataset.json'), await readFile(path.join(local, 'dataset.json'), 'utf8'))
  })
})
