import assert from 'node:assert/strict'
import type { ChildProcess } from 'node:child_process'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { STALL_TOLERANT_ROUTER, jemallocInherited, killChildren, runCli, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { slabsEnabled } from '../src/fast-path.js'
import { INITIAL_OLD_SPACE_MB } from '../src/commands/serving-thread.js'

/*
 * `worker` (like `serve` and `demo`) runs in a worker thread with a 12 MB V8 young generation
 * and a 64 MB initial old generation (src/commands/serving-thread.ts): read back from the worker's `/status` (`node`), serving real
 * anvil blocks from there, and stopping on SIGTERM / Ctrl-C forwarded by the main thread with exit
 * code 0. `BLOCK_ARCHIVE_SERVE_THREAD=off` runs it in the main thread.
 */

const exited = (child: ChildProcess) => new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))

describe('the serving thread', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let routerUrl: string

  before(async () => {
    tmp = await tempDir('ba-serving-thread-')
    await writeDataset(path.join(tmp.dir, 'data', 'anvil'), 'anvil', (await anvilRecords()).slice(0, 32), 16)
    const router = await startCli(['router', '--data', path.join(tmp.dir, 'data'), '--port', '0', ...STALL_TOLERANT_ROUTER], ['router'])
    routerUrl = router.lines.get('router')![0]
  })

  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  const worker = async (env: Record<string, string> = {}, global: string[] = []) => {
    const w = await startCli([...global, 'worker', '--router', routerUrl, '--port', '0', '--heartbeat-ms', '200'], ['worker'], env)
    const url = w.lines.get('worker')![0]
    return { child: w.child, url, status: async () => (await (await fetch(`${url}/status`)).json()) as any }
  }

  it('a worker serves from a thread with the small young generation and stops cleanly on SIGTERM', async () => {
    const w = await worker()
    assert.deepEqual((await w.status()).node, { thread: 'serving', young_generation_mb: 12, initial_old_space_mb: INITIAL_OLD_SPACE_MB, native_row_copy: slabsEnabled, plain_path: false, ...jemallocInherited() })
    const base = `${routerUrl}/datasets/anvil`
    const target = await until('the worker holds block 0', async () => {
      const r = await fetch(`${base}/0/worker`)
      return r.ok ? (await r.text()).trim() : undefined
    })
    assert.ok(target.startsWith(w.url))
    const res = await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"fromBlock":0,"toBlock":31,"includeAllBlocks":true}' })
    assert.equal(res.status, 200)
    const blocks = (await res.json()) as { header: { number: number } }[]
    assert.deepEqual(blocks.map((b) => b.header.number), Array.from({ length: 32 }, (_, i) => i))

    const code = exited(w.child)
    w.child.kill('SIGTERM')
    assert.equal(await code, 0)
    // SIGINT (Ctrl-C): the worker of the next test, which also runs in the serving thread.
  })

  it('runs in the main thread with BLOCK_ARCHIVE_SERVE_THREAD=off; a global option or BLOCK_ARCHIVE_NATIVE=off keep the thread, which stops on SIGINT; --help and bad options answer as before', async () => {
    const w = await worker({ BLOCK_ARCHIVE_SERVE_THREAD: 'off' })
    assert.deepEqual((await w.status()).node, { thread: 'main', young_generation_mb: null, initial_old_space_mb: null, native_row_copy: slabsEnabled, plain_path: false, ...jemallocInherited() })
    const code = exited(w.child)
    w.child.kill('SIGTERM')
    assert.equal(await code, 0)

    // One worker for three settings that do not touch each other: a global option before the command
    // does not hide it (still the serving thread), without the native string copy
    // (BLOCK_ARCHIVE_NATIVE=off) rows are copied as the bindings do, and
    // BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB=0 leaves the old generation to V8. It stops on SIGINT (Ctrl-C).
    const json = await worker({ BLOCK_ARCHIVE_NATIVE: 'off', BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB: '0' }, ['--log-format', 'json'])
    assert.deepEqual((await json.status()).node, { thread: 'serving', young_generation_mb: 12, initial_old_space_mb: null, native_row_copy: false, plain_path: false, ...jemallocInherited() })
    const code3 = exited(json.child)
    json.child.kill('SIGINT')
    assert.equal(await code3, 0)

    const help = await runCli(['worker', '--help'])
    assert.equal(help.code, 0)
    assert.match(help.stdout, /Usage: block-archive worker/)
    const bad = await runCli(['worker', '--router', routerUrl, '--concurrency', 'none'])
    assert.notEqual(bad.code, 0)
    assert.match(bad.stderr, /--concurrency/)
    const badOldSpace = await runCli(['worker', '--router', routerUrl], undefined, { BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB: '64MB' })
    assert.equal(badOldSpace.code, 1)
    assert.equal(badOldSpace.stderr.trim(), 'error: BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB must be a whole number of MB (0: V8\'s own sizing), not "64MB"')
  })
})
