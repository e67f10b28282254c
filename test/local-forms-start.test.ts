import assert from 'node:assert/strict'
import path from 'node:path'
import { after, describe, it } from 'node:test'
import { STALL_TOLERANT_ROUTER, killChildren, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { freePort } from './helpers/http.js'

/*
 * A worker with local forms started before its router (its first heartbeat fails, so its first
 * pass over the chunks finds no dataset yet) still builds the forms of the chunks it is given once
 * the router is up. Before the fix, that first empty pass stayed marked as running and every later
 * pass was turned away: the worker served from Parquet until restarted.
 */

describe('local forms of a worker started before its router', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>> | undefined

  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  it('are built once the router answers', async () => {
    tmp = await tempDir('ba-forms-start-')
    const data = path.join(tmp.dir, 'data')
    await writeDataset(path.join(data, 'anvil'), 'anvil', (await anvilRecords()).slice(0, 16), 8)
    const port = await freePort()
    const w = await startCli(['worker', '--router', `http://127.0.0.1:${port}`, '--data', data, '--cache', path.join(tmp.dir, 'forms'),
      '--local-forms', 'duckdb', '--forms-after', '0', '--id', 'w0', '--port', '0', '--heartbeat-ms', '200'], ['worker'])
    const url = w.lines.get('worker')![0].split(' ')[0]
    const status = async () => (await (await fetch(`${url}/status`)).json()) as { last_ping_error: string | null; local_forms: { built: number; pending: number } }
    assert.notEqual((await status()).last_ping_error, null, 'the first heartbeat failed: no router yet')
    await startCli(['router', '--data', data, '--port', String(port), ...STALL_TOLERANT_ROUTER], ['router'])
    const forms = await until('the worker built the forms of both chunks', async () => {
      const s = (await status()).local_forms
      return s.built === 2 && s.pending === 0 ? s : undefined
    }, 30_000)
    assert.deepEqual(forms, { built: 2, pending: 0 })
  })
})
