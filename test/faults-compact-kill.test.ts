import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { watch, type FSWatcher } from 'node:fs'
import { cp, mkdir, readdir } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks, readChunkMeta, scanLocalChunks, type ChunkRef } from '../src/chunks/layout.js'
import { resolveChunks } from '../src/chunks/supersede.js'
import { getText, listObjects, putText } from '../src/storage/s3.js'
import { CLI, children, killChildren } from './helpers/cli.js'
import { answers } from './helpers/compaction.js'
import { anvilRecords, startStandaloneWorker, tempDir, writeDatasetChunks, type AnvilRecord } from './helpers/dataset.js'
import { FaultProxy, prng } from './helpers/fault-proxy.js'
import { assertNoPartialChunk, downloadDataset } from './helpers/faults.js'
import { startS3, uploadDataset, type S3Server } from './helpers/s3.js'

/*
 * `compact` killed (SIGKILL) at random moments, several rounds, in a folder and in s3rver: after
 * every kill what readers list is complete and, superseded chunks left out, covers every block once
 * (no gap, no overlap); the next run completes the work (temp folders, unfinished uploads and
 * superseded chunks removed) and the dataset answers real queries byte for byte as the small chunks
 * did. Kills land while a merged chunk is written (its temp folder exists), while one is uploaded,
 * or while superseded chunks are deleted (grace 0). Moments come from a seeded generator (printed;
 * BLOCK_ARCHIVE_TEST_SEED repeats a run).
 */

const BLOCKS = 64
const ARGS = ['--chunk-blocks', String(BLOCKS), '--compact-fanout', '4', '--compact-grace-ms', '0']

/** Readers' view after a kill: complete chunks, none overlapping another but by containment, and the uppermost cover blocks 0..BLOCKS-1 once. */
function assertCover(chunks: ChunkRef[], what: string): void {
  const kept = resolveChunks(chunks)
  assert.equal(kept[0]?.first, 0, `${what}: starts at block 0`)
  for (let i = 1; i < kept.length; i++) assert.equal(kept[i].first, kept[i - 1].last + 1, `${what}: gap or overlap before ${kept[i].path}`)
  assert.equal(kept.at(-1)!.last, BLOCKS - 1, `${what}: ends at the last block`)
}

describe('compact killed at random moments', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let small: string
  let want: string[]

  before(async () => {
    tmp = await tempDir('ba-compact-kill-')
    records = await anvilRecords()
    small = path.join(tmp.dir, 'small')
    await writeDatasetChunks(small, 'k', records, Array(BLOCKS).fill(1))
    const worker = await startStandaloneWorker(small)
    want = await answers(`${worker.url}/datasets/k/query`, BLOCKS - 1)
    await worker.stop()
  })
  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  /**
   * One `compact` run; killed (SIGKILL) once `when` says so (polled every 5 ms), or, with `mergeK`,
   * as soon as the k-th merge temp folder of this run (named by its PID) appears in `watchDir` (inotify: a merge of
   * one-block chunks can take less than a poll interval on a fast machine).
   */
  const run = (out: string, env: Record<string, string>, when?: () => Promise<boolean>, mergeK?: { dir: string; k: number }) =>
    new Promise<{ code: number | null; signal: string | null; stderr: string; stdout: string }>((resolve) => {
      const child = spawn(process.execPath, [CLI, 'compact', '--out', out, ...ARGS], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn', ...env } })
      children.add(child)
      let stderr = ''
      let stdout = ''
      let exited = false
      child.stderr!.on('data', (d) => (stderr += d))
      child.stdout!.on('data', (d) => (stdout += d))
      let watcher: FSWatcher | undefined
      if (mergeK) {
        const seen = new Set<string>()
        watcher = watch(mergeK.dir, (_event, name) => {
          if (!name?.startsWith(`.tmp-${child.pid}-merge-`) || seen.has(name)) return
          seen.add(name)
          if (seen.size >= mergeK.k) child.kill('SIGKILL')
        })
      }
      if (when) {
        void (async () => {
          while (!exited) {
            if (await when().catch(() => false)) return void child.kill('SIGKILL')
            await new Promise((r) => setTimeout(r, 5))
          }
        })()
      }
      child.once('exit', (code, signal) => {
        exited = true
        watcher?.close()
        children.delete(child)
        resolve({ code, signal, stderr, stdout })
      })
    })

  async function assertDone(dir: string): Promise<void> {
    const chunks = await scanLocalChunks(dir)
    assert.deepEqual(chunks.map((c) => [c.first, c.last]), [[0, BLOCKS - 1]], 'one merged chunk, nothing superseded left')
    const meta = await readChunkMeta(dir, chunks[0])
    assert.equal(meta.blockCount, BLOCKS)
    assert.deepEqual(await listLocalChunks(dir), chunks)
    const worker = await startStandaloneWorker(dir)
    try {
      assert.deepEqual(await answers(`${worker.url}/datasets/k/query`, BLOCKS - 1), want)
    } finally {
      await worker.stop()
    }
  }

  it('in a folder: every kill leaves a consistent dataset, the next run completes it', async (t) => {
    const seed = Number(process.env.BLOCK_ARCHIVE_TEST_SEED ?? Date.now() % 1_000_000)
    t.diagnostic(`seed ${seed}`)
    const random = prng(seed)
    const dir = path.join(tmp.dir, 'folder')
    await cp(small, dir, { recursive: true })
    const temps = async (kind: string) => (await readdir(dir)).filter((n) => n.startsWith('.tmp-') && n.includes(kind))
    const log: string[] = []
    let killed = 0
    let midMerge = 0
    for (let round = 0; round < 8 && killed < 5; round++) {
      // kill while the k-th merged chunk of this run is being written, or after a random time
      const k = 1 + Math.floor(random() * 4)
      const ms = Math.round(300 + random() * 2500)
      const t0 = Date.now()
      // three merge kills first (at most 12 of the 21 merges), so at least three kills always land
      const r = round % 4 === 3
        ? await run(dir, {}, async () => Date.now() - t0 >= ms)
        : await run(dir, {}, undefined, { dir, k })
      if (r.signal !== 'SIGKILL') {
        assert.equal(r.code, 0, r.stderr)
        log.push(`round ${round}: finished`)
        break
      }
      killed++
      const left = await temps('-merge-')
      if (left.length) midMerge++
      assertCover(await scanLocalChunks(dir), `round ${round}`)
      log.push(`round ${round}: killed ${round % 4 === 3 ? `after ${ms} ms` : `in merge ${k}`}, ${(await scanLocalChunks(dir)).length} complete chunks, ${left.length} merge temp folders`)
    }
    t.diagnostic(log.join('; '))
    assert.ok(killed >= 3, `killed ${killed} times`)
    assert.ok(midMerge >= 1, 'some kill landed in the middle of writing a merged chunk')
    const last = await run(dir, {})
    assert.equal(last.code, 0, last.stderr)
    assert.deepEqual(await temps(''), [], 'temp folders of killed runs removed')
    await assertDone(dir)
  })

  describe('in s3rver', () => {
    let s3: S3Server
    let proxy: FaultProxy
    before(async () => {
      s3 = await startS3(['archive'])
      proxy = new FaultProxy(s3.endpoint)
      await proxy.start()
    })
    after(async () => {
      await proxy?.close()
      await s3?.stop()
    })

    it('every kill leaves what readers list complete and consistent, the next run completes it', async (t) => {
      const seed = Number(process.env.BLOCK_ARCHIVE_TEST_SEED ?? Date.now() % 1_000_000) + 1
      t.diagnostic(`seed ${seed}`)
      const random = prng(seed)
      const PREFIX = 'k'
      await uploadDataset(small, 'archive', PREFIX)
      const tmpdir = path.join(tmp.dir, 'tmp')
      await mkdir(tmpdir)
      // The runs talk to S3 through the proxy, which counts the requests that change the bucket
      // (listing it to find out would cost s3rver, in this process, far more than the compaction).
      const env = { ...s3.env, AWS_ENDPOINT_URL: proxy.url, TMPDIR: tmpdir }
      const changesSince = (from: number) =>
        proxy.log.slice(from).filter((e) => e.status !== undefined && e.status < 300 && (e.method === 'DELETE' || (e.method === 'PUT' && !/[?&]partNumber=/.test(e.path)) || (e.method === 'POST' && /[?&](uploadId=|delete)/.test(e.path)))).length
      const log: string[] = []
      let killed = 0
      let unfinished = 0
      for (let round = 0; round < 8 && killed < 4; round++) {
        // kill once the run made a random number of changes to the bucket (uploads of a merged chunk, deletions of superseded ones)
        const from = proxy.log.length
        const changes = 1 + Math.floor(random() * 12)
        const r = await run(`s3://archive/${PREFIX}`, env, async () => changesSince(from) >= changes)
        if (r.signal !== 'SIGKILL') {
          assert.equal(r.code, 0, r.stderr)
          log.push(`round ${round}: finished`)
          break
        }
        killed++
        const visible = await assertNoPartialChunk('archive', PREFIX)
        const all = await listObjects('archive', `${PREFIX}/`)
        const folders = new Set(all.map((o) => o.key.split('/').slice(1, 3).join('/')).filter((f) => /\d{10}-/.test(f)))
        unfinished += folders.size - visible.length
        assertCover(visible.map((p) => ({ top: 0, first: Number(p.split('/')[1].split('-')[0]), last: Number(p.split('/')[1].split('-')[1]), hash: '', path: p })), `round ${round}`)
        log.push(`round ${round}: killed after ${changes} object changes, ${visible.length} complete chunks, ${folders.size - visible.length} unfinished`)
        // the killed run's lease would block the next one for 60 s: let it expire
        const lease = await getText('archive', `${PREFIX}/.ingest-lease.json`)
        if (lease) await putText('archive', `${PREFIX}/.ingest-lease.json`, JSON.stringify({ ...JSON.parse(lease), expiresAt: new Date(Date.now() - 1000).toISOString() }))
      }
      t.diagnostic(log.join('; '))
      assert.ok(killed >= 3, `killed ${killed} times`)
      const last = await run(`s3://archive/${PREFIX}`, env)
      assert.equal(last.code, 0, last.stderr)
      await assertNoPartialChunk('archive', PREFIX)
      const copy = path.join(tmp.dir, 's3-copy')
      await downloadDataset('archive', PREFIX, copy)
      await assertDone(copy)
      assert.equal(await getText('archive', `${PREFIX}/.ingest-lease.json`), undefined, 'the last run released its lease')
      assert.deepEqual((await readdir(tmpdir)).filter((x) => x.startsWith('ba-ingest-s3-')), [], 'staging folders of killed runs removed')
      t.diagnostic(`${unfinished} unfinished chunk folders seen after kills`)
    })
  })
})
