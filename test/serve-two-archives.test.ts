import assert from 'node:assert/strict'
import { readdir } from 'node:fs/promises'
import path from 'node:path'
import { after, describe, it } from 'node:test'
import { killChildren, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'

/*
 * Two `serve` processes on one machine, each over its own data folder and with the default cache:
 * each gets a cache folder of its own, so both workers build and use their local forms (with one
 * shared folder, the second found the DuckDB file locked and quietly read Parquet). Two archives
 * given the same --cache: the second warns, naming the process that holds the file.
 */

describe('two archives on one machine', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>> | undefined

  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  it('with the default cache, each serve builds and uses its own local forms; with one --cache, the second names the process holding it', async () => {
    tmp = await tempDir('ba-two-serves-')
    const records = (await anvilRecords()).slice(0, 32)
    for (const name of ['a', 'b']) await writeDataset(path.join(tmp.dir, name, 'anvil'), 'anvil', records, 16)
    // The default cache lies under the temporary folder: this test's own.
    const env = { TMPDIR: tmp.dir }
    const serve = (data: string, ...flags: string[]) =>
      startCli(['serve', '--data', path.join(tmp!.dir, data), '--port', '0', '--workers', '1', '--heartbeat-ms', '200', '--missed-heartbeats', '150', '--forms-after', '0', ...flags], ['worker', 'dataset anvil'], env)
    const [a, b] = [await serve('a'), await serve('b')]
    for (const s of [a, b]) {
      const worker = s.lines.get('worker')![0]
      const forms = await until('the worker built the local forms of both chunks', async () => {
        const f = ((await (await fetch(`${worker}/status`)).json()) as { local_forms: { built: number; pending: number } }).local_forms
        return f.built === 2 && f.pending === 0 ? f : undefined
      }, 60_000)
      assert.deepEqual(forms, { built: 2, pending: 0 })
      const answer = await fetch(`${s.lines.get('dataset anvil')![0]}/height`)
      assert.equal(await answer.text(), '31')
    }
    const caches = (await readdir(path.join(tmp.dir, 'block-archive-cache'))).sort()
    assert.equal(caches.length, 2, `one cache folder per archive: ${caches}`)
    assert.match(caches[0], /^a-[0-9a-f]{10}$/)
    assert.match(caches[1], /^b-[0-9a-f]{10}$/)
    assert.doesNotMatch(a.stderr() + b.stderr(), /in use by/)

    const shared = path.join(tmp.dir, 'block-archive-cache', caches[0])
    const second = await serve('b', '--cache', shared)
    const warning = await until('the second archive warns about the locked local forms', async () => /local forms: (\S+) is in use by process (\d+)[^"]*Give each archive its own --cache/.exec(second.stderr()) ?? undefined, 60_000)
    assert.equal(warning[1], path.join(shared, 'worker-0', 'local-forms.duckdb'))
    assert.equal(Number(warning[2]), a.child.pid)
  })
})
