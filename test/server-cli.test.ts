import net from 'node:net'
import assert from 'node:assert/strict'
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { anvilRecords, tempDir, writeDataset, type AnvilRecord } from './helpers/dataset.js'
import type { ChildProcess } from 'node:child_process'
import { children, runCli, startCli, until } from './helpers/cli.js'

/*
 * The built CLI as separate processes: `router` + two `worker`s, `query` as a client, and `serve`.
 */

const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'

const ndjson = (text: string) => text.split('\n').filter(Boolean).map((l) => JSON.parse(l))

describe('CLI: router and workers as separate processes', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let routerUrl: string
  let base: string
  const workers: ChildProcess[] = []

  before(async () => {
    tmp = await tempDir()
    records = await anvilRecords()
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', records, 16)
    const hb = ['--heartbeat-ms', '500']
    const router = await startCli(['router', '--data', tmp.dir, '--port', '0', '--replication', '2', '--relist-ms', '500', ...hb], ['router', 'dataset anvil'])
    routerUrl = router.lines.get('router')![0]
    base = router.lines.get('dataset anvil')![0]
    assert.equal(base, `${routerUrl}/datasets/anvil`)
    for (let i = 0; i < 2; i++) {
      const w = await startCli(['worker', '--router', routerUrl, '--port', '0', '--max-response-bytes', '30000', ...hb], ['worker'])
      workers.push(w.child)
    }
    await until('both workers serving everything', async () => {
      const s = await (await fetch(`${routerUrl}/status`)).json()
      const alive = s.workers.filter((w: any) => w.alive && JSON.stringify(w.state.anvil) === JSON.stringify([[0, 127]]))
      return alive.length === 2 && s.datasets[0].height === 127 ? true : undefined
    })
  })

  after(async () => {
    for (const c of children) c.kill('SIGKILL')
    await tmp?.cleanup()
  })

  it('query prints every block of the range once, as NDJSON', async () => {
    const r = await runCli(['query', base, '--from', '0', '--to', '127', '{"includeAllBlocks":true,"fields":{"block":{"timestamp":true}}}'])
    assert.equal(r.code, 0, r.stderr)
    const blocks = ndjson(r.stdout)
    assert.deepEqual(blocks.map((b) => b.header.number), records.map((x) => x.number))
    for (const b of blocks) assert.equal(b.header.hash, records[b.header.number].block.hash.toLowerCase())
    assert.match(r.stderr, /done: 128 blocks/)
  })

  it('query reads a query file and runs requests in parallel, in order', async () => {
    const file = path.join(tmp.dir, 'q.json')
    await writeFile(file, JSON.stringify({ fromBlock: 999, logs: [{ topic0: [TRANSFER] }], fields: { log: { data: true } } }))
    const seq = await runCli(['query', base, '--from', '10', '--to', '100', '--query', file, '-q'])
    const par = await runCli(['query', base, '--from', '10', '--to', '100', '--query', file, '--parallel', '3', '-q'])
    assert.equal(seq.code, 0, seq.stderr)
    assert.equal(par.code, 0, par.stderr)
    assert.equal(seq.stderr, '')
    assert.equal(par.stdout, seq.stdout)
    const logs = ndjson(seq.stdout).flatMap((b) => b.logs.map((l: any) => `${b.header.number}:${l.logIndex}`))
    const expected = records
      .filter((r) => r.number >= 10 && r.number <= 100)
      .flatMap((r) => r.receipts.flatMap((rc: any) => rc.logs.filter((l: any) => l.topics[0] === TRANSFER).map((l: any) => `${r.number}:${parseInt(l.logIndex, 16)}`)))
    assert.ok(expected.length > 0)
    assert.deepEqual(logs, expected)
  })

  it('query takes its range from the query when --from/--to are not given; above the height: one message, exit code 3', async () => {
    const own = await runCli(['query', base, '-q', '{"fromBlock":120,"toBlock":127,"includeAllBlocks":true}'])
    assert.equal(own.code, 0, own.stderr)
    assert.deepEqual(own.stdout.trim().split('\n').map((l) => JSON.parse(l).header.number), [120, 121, 122, 123, 124, 125, 126, 127])
    const above = await runCli(['query', base, '--from', '100000', '{}'])
    assert.equal(above.code, 3)
    assert.match(above.stderr, /block 100000 is above the dataset height 127/)
    assert.equal(above.stderr.trim().split('\n').length, 1, above.stderr)
  })

  it('query against a closed port names the cause and does not retry a wrong address', async () => {
    // Port 1021 (RFC 4727, experiments): outside the range the OS hands out for port 0, so no server that another
    // test starts meanwhile can take it (a port freed after a probe once was, and answered 404), and
    // not one that fetch refuses to dial.
    const port = 1021
    const refused = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1')
      socket.once('connect', () => (socket.destroy(), resolve(false)))
      socket.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED'))
    })
    assert.ok(refused, `something listens on 127.0.0.1:${port}; this test needs a closed port`)
    const r = await runCli(['query', `http://127.0.0.1:${port}/datasets/x`, '{}'])
    assert.equal(r.code, 1)
    assert.match(r.stderr, /connection refused/)
    assert.doesNotMatch(r.stderr, /retry/)
  })

  it('query reports bad input clearly', async () => {
    const badJson = await runCli(['query', base, '--from', '0', '{oops'])
    assert.notEqual(badJson.code, 0)
    assert.match(badJson.stderr, /not valid JSON/)
    const badQuery = await runCli(['query', base, '--from', '0', '{"logs":[{"adress":[]}]}'])
    assert.notEqual(badQuery.code, 0)
    assert.match(badQuery.stderr, /400/)
    assert.match(badQuery.stderr, /adress/)
  })

  it('keeps serving when a worker process is killed (replica)', async () => {
    const victim = workers[0]
    victim.kill('SIGKILL')
    await new Promise((r) => victim.once('exit', r))
    const r = await runCli(['query', base, '--from', '0', '--to', '127', '--max-attempts', '10', '{"includeAllBlocks":true}'])
    assert.equal(r.code, 0, r.stderr)
    assert.deepEqual(ndjson(r.stdout).map((b) => b.header.number), records.map((x) => x.number))
    await until('router to see one live worker', async () => {
      const s = await (await fetch(`${routerUrl}/status`)).json()
      return s.workers.filter((w: any) => w.alive).length === 1 ? true : undefined
    })
  })
})

describe('CLI: serve and help', { timeout: 600_000 }, () => {
  after(() => {
    for (const c of children) c.kill('SIGKILL')
  })

  it('serve runs a router and workers over one dataset folder and stops on SIGTERM', async () => {
    const tmp = await tempDir()
    try {
      const records = (await anvilRecords()).slice(0, 40)
      await writeDataset(path.join(tmp.dir, 'small'), 'small', records, 16)
      // Local forms (serve's default) are not what this test is about: the README session's serve builds them.
      const s = await startCli(['serve', '--data', path.join(tmp.dir, 'small'), '--port', '0', '--workers', '3', '--heartbeat-ms', '500', '--local-forms', 'off', '--cache', path.join(tmp.dir, 'cache')], ['router', 'dataset small'])
      assert.equal(s.lines.get('worker')?.length, 3)
      const base = s.lines.get('dataset small')![0]
      await until('height', async () => ((await (await fetch(`${base}/height`)).text()) === '39' ? true : undefined))
      const r = await runCli(['query', base, '--from', '0', '{"includeAllBlocks":true}'])
      assert.equal(r.code, 0, r.stderr)
      assert.deepEqual(ndjson(r.stdout).map((b) => b.header.number), records.map((x) => x.number))
      // --compression auto (the default): plain JSON for a client on this machine, whatever it accepts.
      const worker = (await (await fetch(`${base}/0/worker`)).text()).trim()
      const res = await fetch(worker, { method: 'POST', headers: { 'content-type': 'application/json', 'accept-encoding': 'gzip, br' }, body: '{"fromBlock":0,"toBlock":5,"includeAllBlocks":true}' })
      assert.equal(res.status, 200)
      assert.equal(res.headers.get('content-encoding'), null)
      assert.equal((await res.json()).length, 6)
      const exited = new Promise((resolve) => s.child.once('exit', resolve))
      s.child.kill('SIGTERM')
      assert.equal(await exited, 0)
    } finally {
      await tmp.cleanup()
    }
  })

  it('every command has --help, and bad flags fail clearly', async () => {
    const expectations: [string, RegExp[]][] = [
      ['serve', [/--data/, /--workers/, /--replication/, /--heartbeat-ms/, /--body-limit/, /--concurrency/, /BLOCK_ARCHIVE_PORT/]],
      ['router', [/--data/, /--replication/, /--missed-heartbeats/, /--relist-ms/]],
      ['worker', [/--router/, /--public-url/, /--max-response-bytes/, /--queue/, /--compression/, /BLOCK_ARCHIVE_COMPRESSION/]],
      ['query', [/--from/, /--to/, /--query/, /--parallel/, /--follow/]],
    ]
    for (const [cmd, patterns] of expectations) {
      const r = await runCli([cmd, '--help'])
      assert.equal(r.code, 0, cmd)
      for (const p of patterns) assert.match(r.stdout, p, `${cmd} --help lacks ${p}`)
    }
    const bad = await runCli(['serve', '--data', '/nonexistent', '--workers', 'two'])
    assert.notEqual(bad.code, 0)
    assert.match(bad.stderr, /--workers/)
    const badMode = await runCli(['serve', '--data', '/nonexistent', '--compression', 'fast'])
    assert.notEqual(badMode.code, 0)
    assert.match(badMode.stderr, /--compression/)
    assert.match(badMode.stderr, /always/)
    // a --data folder that does not exist: the test below
  })

  // DuckDB once started while the folder was checked, and exiting before it was up aborted the
  // process natively now and then on a busy machine (`terminate called after throwing an instance of
  // 'Napi::Error'`). The folder is now checked before DuckDB or the servers load.
  it('a data folder that does not exist gets its one-line error every time, with exit code 1', async () => {
    for (let i = 0; i < 5; i++) {
      const r = await runCli(['serve', '--data', '/nonexistent/folder', '--port', '0'], undefined, { LOG_LEVEL: 'warn' })
      assert.equal(r.code, 1, r.stderr)
      assert.equal(r.stderr, 'data folder /nonexistent/folder does not exist\n')
    }
  })
})
