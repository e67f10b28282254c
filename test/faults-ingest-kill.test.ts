import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdir, readdir } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { runIngest } from '../src/ingest/loop.js'
import { loadRecordedChain } from '../src/ingest/recorded.js'
import { ReplayServer } from '../src/ingest/replay.js'
import { getText, putText } from '../src/storage/s3.js'
import { CLI, children, killChildren } from './helpers/cli.js'
import { tempDir } from './helpers/dataset.js'
import { chunkFile, FaultProxy, prng } from './helpers/fault-proxy.js'
import { assertNoPartialChunk, assertSameDataset, chunkFolders, downloadDataset } from './helpers/faults.js'
import { startS3, type S3Server } from './helpers/s3.js'

/*
 * `ingest --out s3://…` killed (SIGKILL) at random moments, several rounds, resumed each time:
 * after every kill, what readers can see of the bucket is complete (every chunk whose
 * blocks.parquet exists has exactly the files its meta.json lists, with their sizes and hashes;
 * chunks follow each other without gap or overlap; the dataset never shrinks), and the final
 * dataset is object for object the one a one-shot ingest writes: every block exactly once. The
 * local staging folders the killed runs leave are deleted by the next run.
 *
 * The runs talk to S3 through a fault proxy, which sees each upload without listing the bucket.
 * One kill lands at a random time; one in the middle of a chunk's upload, for certain: the proxy
 * holds one blocks.parquet upload (the chunk's last object) unanswered, and the run is killed while
 * it waits; the others once the run uploaded a random number of chunk files (between two uploads
 * of a chunk, or right after one). The moments come from
 * a seeded generator (the seed is printed; BLOCK_ARCHIVE_TEST_SEED repeats a run). A killed ingest leaves its lease, valid for 60 s; the test marks it expired, as
 * that much waiting would (taking over an expired lease is tested in ingest-s3.test.ts). The same
 * for a folder (`--out <folder>`) is ingest-resume.test.ts ("killed at arbitrary moments").
 */

const eth = loadRecordedChain('ethereum')
const light = eth.filter((b) => b.number === 1000000 || b.number === 4369999) // 2 and 22 transactions
const LAST = 79
const PREFIX = 'killed'

describe('ingest into s3:// killed at random moments', { timeout: 600_000 }, () => {
  let s3: S3Server
  let proxy: FaultProxy
  let node: ReplayServer
  let tmp: Awaited<ReturnType<typeof tempDir>>
  /** The ingests' temp folder (their staging folders), apart from the system one other tests look at. */
  let tmpdir: string

  before(async () => {
    s3 = await startS3(['archive'])
    proxy = new FaultProxy(s3.endpoint)
    await proxy.start()
    tmp = await tempDir('ba-faults-kill-')
    tmpdir = path.join(tmp.dir, 'tmp')
    await mkdir(tmpdir)
    node = new ReplayServer(light, { repeat: { times: 100, seed: 'faults-kill' } })
    await node.start()
  })

  after(async () => {
    killChildren()
    await node?.close()
    await proxy?.close()
    await s3?.stop()
    await tmp?.cleanup()
  })

  const args = () => ['ingest', '--rpc', node.url, '--dataset', 'eth', '--out', `s3://archive/${PREFIX}`, '--to', String(LAST),
    '--chunk-blocks', '5', '--batch-size', '5', '--concurrency', '2', '--workers', '0', '--progress', 'none']

  /** Chunk files whose upload S3 confirmed through the proxy, from log entry `from` on (a PUT, or a multipart upload's completion). */
  const uploadedSince = (from: number) =>
    proxy.log.slice(from).filter((e) => /\/\d{10}-\d{10}-\w+\//.test(e.path) && e.status !== undefined && e.status < 300 && ((e.method === 'PUT' && !/[?&]partNumber=/.test(e.path)) || (e.method === 'POST' && /[?&]uploadId=/.test(e.path)))).length

  /**
   * One run of the CLI, talking to S3 through the proxy; with `kill`, killed (SIGKILL) after `ms`
   * milliseconds, once it has uploaded `objects` chunk files (the kill then lands between two
   * uploads of a chunk, or right after one), or, with `midUpload`, once it waits on the
   * (midUpload)th blocks.parquet upload, which the proxy holds: the chunk's other files are
   * uploaded, blocks.parquet is not.
   */
  const run = (kill?: { ms?: number; objects?: number; midUpload?: number }) => new Promise<{ code: number | null; signal: string | null; stderr: string; ms: number }>((resolve) => {
    const t0 = performance.now()
    proxy.clear()
    const child = spawn(process.execPath, [CLI, ...args()], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...s3.env, AWS_ENDPOINT_URL: proxy.url, LOG_LEVEL: 'warn', TMPDIR: tmpdir } })
    children.add(child)
    let stderr = ''
    let exited = false
    child.stderr!.on('data', (d) => (stderr += d))
    const t = kill?.ms == null ? undefined : setTimeout(() => child.kill('SIGKILL'), kill.ms)
    if (kill?.objects != null) {
      const from = proxy.log.length
      void (async () => {
        while (!exited) {
          if (uploadedSince(from) >= kill.objects!) {
            child.kill('SIGKILL')
            return
          }
          await new Promise((r) => setTimeout(r, 5))
        }
      })()
    }
    if (kill?.midUpload != null) {
      const blocksPut = { method: 'PUT', path: chunkFile('blocks.parquet') }
      proxy.setRules([
        // Forwarded unchanged: the chunks before the one killed mid-upload.
        ...(kill.midUpload > 1 ? [{ ...blocksPut, name: 'passed', fault: 'replace' as const, rewrite: (b: Buffer) => b, times: kill.midUpload - 1 }] : []),
        { ...blocksPut, name: 'held', fault: 'stall' as const, times: 1 },
      ])
      void (async () => {
        while (!exited) {
          if (proxy.hitCount('held') > 0) {
            child.kill('SIGKILL')
            return
          }
          await new Promise((r) => setTimeout(r, 5))
        }
      })()
    }
    child.once('exit', (code, signal) => {
      exited = true
      children.delete(child)
      clearTimeout(t)
      resolve({ code, signal, stderr, ms: Math.round(performance.now() - t0) })
    })
  })

  it('after every kill no partial chunk is visible; the resumed dataset equals a one-shot ingest', async (t) => {
    const seed = Number(process.env.BLOCK_ARCHIVE_TEST_SEED ?? Date.now() % 1_000_000)
    t.diagnostic(`seed ${seed}`)
    const random = prng(seed)
    const reference = path.join(tmp.dir, 'reference')
    await runIngest({ rpc: node.url, dataset: 'eth', out: reference, to: LAST, chunkBlocks: 5, workers: 0, progress: 'none' })

    let killed = 0
    let before: string[] = []
    const log: string[] = []
    let unfinished = 0
    let staged = 0
    for (let round = 0; round < 6 && killed < 4; round++) {
      // Round 0 is killed at a random time (start-up, the lease, fetching, the first uploads: ≈ 2.5–4 s
      // pass before chunks are uploaded); round 1 in the middle of the upload of its 1st–3rd chunk
      // (a chunk is 4 objects, blocks.parquet last); the others once it uploaded 1–10 chunk files.
      const kill = round === 0 ? { ms: Math.round(500 + random() * 3500) } : round === 1 ? { midUpload: 1 + Math.floor(random() * 3) } : { objects: 1 + Math.floor(random() * 10) }
      const r = await run(kill)
      if (r.signal !== 'SIGKILL') {
        assert.equal(r.code, 0, r.stderr)
        log.push(`round ${round}: finished in ${r.ms} ms`)
        break
      }
      killed++
      const visible = await assertNoPartialChunk('archive', PREFIX, tmp.dir)
      const invisible = [...(await chunkFolders('archive', PREFIX))].filter(([, files]) => !files.has('blocks.parquet')).length
      unfinished += invisible
      staged = Math.max(staged, (await readdir(tmpdir)).filter((x) => x.startsWith('ba-ingest-s3-')).length)
      const ranges = visible.map((c) => c.split('/')[1].split('-').slice(0, 2).map(Number))
      ranges.forEach(([first], i) => assert.equal(first, i === 0 ? 0 : ranges[i - 1][1] + 1, `gap or overlap before ${visible[i]}`))
      assert.deepEqual(visible.slice(0, before.length), before, 'the dataset never shrinks, chunks are never replaced')
      before = visible
      const when = kill.ms ? `after ${kill.ms} ms` : kill.midUpload ? `uploading blocks.parquet of its chunk ${kill.midUpload}` : `after uploading ${kill.objects} chunk files`
      log.push(`round ${round}: killed ${when} with ${visible.length} chunks visible, ${invisible} unfinished`)
      // The killed ingest's lease would block the next one for up to 60 s: let it expire.
      const lease = await getText('archive', `${PREFIX}/.ingest-lease.json`)
      if (lease) await putText('archive', `${PREFIX}/.ingest-lease.json`, JSON.stringify({ ...JSON.parse(lease), expiresAt: new Date(Date.now() - 1000).toISOString() }))
    }
    t.diagnostic(log.join('; '))
    assert.ok(killed >= 3, `killed ${killed} times`)
    assert.ok(unfinished >= 1, 'the kill held in the middle of a chunk upload left an unfinished chunk folder')
    const last = await run()
    assert.equal(last.code, 0, last.stderr)
    await assertNoPartialChunk('archive', PREFIX)
    const copy = path.join(tmp.dir, 'copy')
    await downloadDataset('archive', PREFIX, copy)
    await assertSameDataset(copy, reference, LAST)
    assert.equal(await getText('archive', `${PREFIX}/.ingest-lease.json`), undefined, 'the last run released its lease')
    // Killed runs leave their staging folder; the next run deletes those of dead processes, the last its own.
    assert.ok(staged >= 1, 'a killed run left its staging folder')
    assert.deepEqual((await readdir(tmpdir)).filter((x) => x.startsWith('ba-ingest-s3-')), [], 'staging folders of killed runs removed')
  })
})
