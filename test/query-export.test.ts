import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile, stat, truncate, writeFile } from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ndjsonToTable, plainStrings } from '../src/client/export.js'
import { connect, lit } from '../src/db.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { CLI, children, killChildren, runCli, until } from './helpers/cli.js'
import { stallTolerant, anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'

/*
 * `block-archive query --out/--format/--resume` and its progress display, as a child process against
 * a router and two workers over the 128 recorded anvil blocks. Small answers (30 kB) make the range
 * loop take many steps. Every format is read back with DuckDB and compared with the NDJSON export;
 * an export killed half-way (SIGKILL) and resumed equals a one-shot export byte for byte.
 */

const QUERY = {
  includeAllBlocks: true,
  fields: {
    block: { timestamp: true, gasUsed: true, baseFeePerGas: true, stateRoot: true },
    transaction: { hash: true, from: true, to: true, value: true, nonce: true, gasPrice: true, input: true },
    log: { address: true, data: true, topics: true },
  },
  transactions: [{}],
  logs: [{}],
}

type Block = { header: Record<string, unknown>; transactions: unknown[]; logs: unknown[] }

const lines = (text: string) => text.split('\n').filter(Boolean)
const ndjson = (text: string): Block[] => lines(text).map((l) => JSON.parse(l))

async function sql(query: string): Promise<Record<string, unknown>[]> {
  const con = await connect()
  try {
    return (await con.runAndReadAll(query)).getRowObjectsJS() as Record<string, unknown>[]
  } finally {
    con.closeSync()
  }
}

/**
 * An HTTP proxy in front of the router that delays every worker query: `/worker` answers are
 * rewritten to point through it. Makes an export slow enough to be killed half-way.
 */
async function slowProxy(routerOrigin: string, delayMs: number): Promise<{ origin: string; close: () => Promise<void> }> {
  let origin = ''
  const server = http.createServer(async (req, res) => {
    try {
      const body: Buffer[] = []
      for await (const c of req) body.push(c as Buffer)
      const m = /^\/__worker\/(\d+)(\/.*)$/.exec(req.url!)
      if (m) await new Promise((r) => setTimeout(r, delayMs))
      const target = m ? `http://127.0.0.1:${m[1]}${m[2]}` : routerOrigin + req.url
      const r = await fetch(target, { method: req.method, headers: { 'content-type': req.headers['content-type'] ?? 'text/plain' }, body: body.length ? Buffer.concat(body) : undefined })
      let text = Buffer.from(await r.arrayBuffer())
      if (r.ok && req.url!.endsWith('/worker')) text = Buffer.from(text.toString().replace(/^http:\/\/127\.0\.0\.1:(\d+)/, `${origin}/__worker/$1`))
      res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'text/plain' })
      res.end(text)
    } catch (e) {
      res.writeHead(502).end(String(e))
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { origin, close: () => new Promise((resolve) => server.close(() => resolve())) }
}

describe('query --out, --format, --resume and progress', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let base: string
  let queryFile: string
  /** The one-shot NDJSON export of blocks 0..127: what every other output is compared with. */
  let reference: string
  let blocks: Block[]
  /** What the reference export (not -q, --out, stderr not a terminal) printed on stderr. */
  let referenceStderr: string
  let n = 0
  const file = (ext: string) => path.join(tmp.dir, 'out', `export${++n}.${ext}`)
  const query = (...args: string[]) => runCli(['query', base, '--query', queryFile, ...args])

  before(async () => {
    tmp = await tempDir('ba-export-')
    await writeDataset(path.join(tmp.dir, 'data', 'anvil'), 'anvil', await anvilRecords(), 16)
    // Pings every second: the cluster does not change during the tests (a ping costs the test process CPU).
    cluster = await startCluster({ storage: new LocalStorage(path.join(tmp.dir, 'data')), workers: 2, ...stallTolerant(1000), budgets: { sizeBytes: 30_000 } })
    base = cluster.datasets.get('anvil')!
    await until('workers serving every block', async () => ((await (await fetch(`${base}/127/worker`)).ok) ? true : undefined))
    await writeFile((queryFile = path.join(tmp.dir, 'query.json')), JSON.stringify(QUERY))
    await mkdir(path.join(tmp.dir, 'out'))
    const out = file('ndjson')
    const r = await query('--out', out)
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout, '', 'nothing on stdout with --out')
    assert.match(r.stderr, /done: 128 blocks, \d+ items in .* into .*export1\.ndjson \(ndjson\)/)
    referenceStderr = r.stderr
    reference = await readFile(out, 'utf8')
    blocks = ndjson(reference)
  })

  after(async () => {
    killChildren()
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('the NDJSON file equals stdout, holds blocks 0..127 once and in order, and took many range steps', async () => {
    assert.deepEqual(blocks.map((b) => b.header.number), Array.from({ length: 128 }, (_, i) => i))
    const stdout = await query('-q')
    assert.equal(stdout.code, 0, stdout.stderr)
    assert.equal(stdout.stdout, reference)
    assert.ok(reference.length > 10 * 30_000, `${reference.length} bytes: the 30 kB budget makes more than 10 steps`)
    assert.ok(blocks.some((b) => b.transactions.length > 0) && blocks.some((b) => b.logs.length > 0))
    // The format follows the extension: .jsonl is NDJSON too; an unknown extension is NDJSON. (Blocks
    // 0..40, still many range steps: what a format changes shows in any range.)
    for (const ext of ['jsonl', 'txt']) {
      const out = file(ext)
      const r = await query('-q', '--out', out, '--to', '40')
      assert.equal(r.code, 0)
      assert.equal(r.stderr, '', '-q: nothing on stderr')
      assert.equal(await readFile(out, 'utf8'), lines(reference).slice(0, 41).join('\n') + '\n')
    }
  })

  it('--format json (stdout or file) is one JSON array of the same blocks; DuckDB reads it', async () => {
    const stdout = await query('-q', '--format', 'json')
    assert.equal(stdout.code, 0, stdout.stderr)
    assert.deepEqual(JSON.parse(stdout.stdout), blocks)
    const out = file('json')
    const r = await query('-q', '--out', out)
    assert.equal(r.code, 0, r.stderr)
    const text = await readFile(out, 'utf8')
    assert.equal(text, stdout.stdout)
    assert.deepEqual(JSON.parse(text), blocks)
    const rows = await sql(`SELECT header.number AS number, header.hash AS hash, len(transactions) AS txs, len(logs) AS logs FROM read_json(${lit(out)}, format = 'array')`)
    assert.deepEqual(
      rows.map((r) => [Number(r.number), r.hash, Number(r.txs), Number(r.logs)]),
      blocks.map((b) => [b.header.number, b.header.hash, b.transactions.length, b.logs.length]),
    )
  })

  it('--format parquet: one row per block, header fields as columns, item lists nested; every value comes back', async () => {
    const out = file('parquet')
    const r = await query('--out', out)
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stderr, /writing .*\.parquet \(parquet\) with DuckDB/)
    const types = Object.fromEntries((await sql(`DESCRIBE SELECT * FROM read_parquet(${lit(out)})`)).map((c) => [c.column_name, c.column_type]))
    assert.equal(types.number, 'BIGINT')
    assert.equal(types.timestamp, 'BIGINT')
    assert.equal(types.hash, 'VARCHAR')
    assert.equal(types.gasUsed, 'VARCHAR', 'hex quantities stay strings')
    assert.match(String(types.transactions), /^STRUCT\(.*\)\[\]$/)
    assert.match(String(types.logs), /topics VARCHAR\[\]/)
    // Every row back as JSON, the header rebuilt: exactly the NDJSON blocks (numbers, hex strings, nulls, order).
    const rows = await sql(`SELECT to_json(t)::VARCHAR AS j FROM read_parquet(${lit(out)}) t`)
    const back = rows.map((row) => {
      const { transactions, logs, ...header } = JSON.parse(String(row.j))
      return { header, transactions, logs }
    })
    assert.deepEqual(back, blocks)
    const [sums] = await sql(`SELECT count(*) AS n, sum(len(transactions)) AS txs, sum(len(logs)) AS logs, max(number) AS top FROM read_parquet(${lit(out)})`)
    assert.deepEqual([Number(sums.n), Number(sums.txs), Number(sums.logs), Number(sums.top)], [128, sum(blocks, 'transactions'), sum(blocks, 'logs'), 127])
  })

  it('--format csv: header fields as columns, item lists as JSON text', async () => {
    const out = file('csv')
    const r = await query('-q', '--out', out)
    assert.equal(r.code, 0, r.stderr)
    const rows = await sql(`SELECT * FROM read_csv(${lit(out)}, header = true, all_varchar = true)`)
    assert.equal(rows.length, 128)
    const header = Object.keys(blocks[0].header)
    assert.deepEqual(Object.keys(rows[0]), [...header, 'transactions', 'logs'])
    rows.forEach((row, i) => {
      const b = blocks[i]
      for (const k of header) assert.equal(row[k], b.header[k] === null ? null : String(b.header[k]), `block ${i} ${k}`)
      assert.deepEqual(JSON.parse(String(row.transactions)), b.transactions)
      assert.deepEqual(JSON.parse(String(row.logs)), b.logs)
    })
  })

  it('leaves no temporary files behind, and --format overrides the extension', async () => {
    const out = file('data')
    const r = await query('-q', '--out', out, '--format', 'parquet', '--to', '40')
    assert.equal(r.code, 0, r.stderr)
    const [c] = await sql(`SELECT count(*) AS n, max(number) AS top FROM read_parquet(${lit(out)})`)
    assert.deepEqual([Number(c.n), Number(c.top)], [41, 40])
    const names = await readdir(path.join(tmp.dir, 'out'))
    assert.deepEqual(names.filter((f) => f.includes('.part-')), [])
  })

  it('--resume after a SIGKILL half-way gives the one-shot file, every block once, in order', async () => {
    const proxy = await slowProxy(new URL(base).origin, 150)
    try {
      const out = file('ndjson')
      const child = spawn(process.execPath, [CLI, 'query', proxy.origin + new URL(base).pathname, '--query', queryFile, '--out', out, '-q'], { stdio: 'ignore' })
      children.add(child)
      const exited = new Promise((resolve) => child.once('exit', resolve))
      await until('some lines in the file', async () => ((await readFile(out, 'utf8').catch(() => '')).split('\n').length > 3 ? true : undefined), 60_000)
      child.kill('SIGKILL')
      await exited
      children.delete(child)
      const partial = await readFile(out, 'utf8')
      const held = lines(partial).length
      assert.ok(held > 2 && held < 128, `killed with ${held} lines`)
      const r = await query('--out', out, '--resume', '--parallel', '3')
      assert.equal(r.code, 0, r.stderr)
      assert.match(r.stderr, /resuming .* after block \d+/)
      assert.equal(await readFile(out, 'utf8'), reference)
    } finally {
      await proxy.close()
    }
  })

  it('--resume drops a last line cut in half; starts anew on a file without a complete line or a missing file', async () => {
    const offsets = [0]
    for (const l of lines(reference)) offsets.push(offsets[offsets.length - 1] + Buffer.byteLength(l) + 1)
    // Files that start anew are exports of blocks 0..40 (`--to 40`): starting anew does not depend on the range.
    const upTo40 = lines(reference).slice(0, 41).join('\n') + '\n'
    const cases: [string, number, string[]][] = [
      ['half of line 50', offsets[50] + Math.floor((offsets[51] - offsets[50]) / 2), []],
      ['exactly 77 lines', offsets[77], []],
      ['half of the first line', Math.floor(offsets[1] / 2), ['--to', '40']],
      ['empty', 0, ['--to', '40']],
    ]
    for (const [what, size, range] of cases) {
      const out = file('ndjson')
      await writeFile(out, reference)
      await truncate(out, size)
      const r = await query('--out', out, '--resume', ...range)
      assert.equal(r.code, 0, `${what}: ${r.stderr}`)
      if (what === 'half of line 50') assert.match(r.stderr, /resuming .* after block 49 \(dropped a partial last line of \d+ bytes\)/)
      if (what === 'exactly 77 lines') assert.match(r.stderr, /resuming .* after block 76\n/)
      if (what === 'half of the first line') assert.match(r.stderr, /holds no complete block \(dropped .*\); starting at block 0/)
      assert.equal(await readFile(out, 'utf8'), range.length ? upTo40 : reference, what)
      assert.match(r.stderr, /done: \d+ blocks/)
    }
    const missing = file('ndjson')
    const r = await query('-q', '--out', missing, '--resume', '--to', '40')
    assert.equal(r.code, 0, r.stderr)
    assert.equal(await readFile(missing, 'utf8'), upTo40)
  })

  it('--resume of a complete file says so and exits 0 without touching it (also for a narrower --to)', async () => {
    const out = file('ndjson')
    await writeFile(out, reference)
    const before = await stat(out)
    const r = await query('--out', out, '--resume')
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stderr, /is complete: it ends at block 127, the range ends at 127/)
    assert.doesNotMatch(r.stderr, /done:/)
    const narrower = await query('--out', out, '--resume', '--to', '100')
    assert.equal(narrower.code, 0, narrower.stderr)
    assert.match(narrower.stderr, /is complete: it ends at block 127, the range ends at 100/)
    assert.equal((await stat(out)).mtimeMs, before.mtimeMs)
    assert.equal(await readFile(out, 'utf8'), reference)
    // A range of its own: --from/--to are kept when resuming.
    const part = file('ndjson')
    await writeFile(part, lines(reference).slice(10, 20).join('\n') + '\n' + lines(reference)[20].slice(0, 40))
    const rest = await query('-q', '--out', part, '--resume', '--from', '10', '--to', '40')
    assert.equal(rest.code, 0, rest.stderr)
    assert.equal(await readFile(part, 'utf8'), lines(reference).slice(10, 41).join('\n') + '\n')
  })

  it('refuses bad combinations with a clear message and a non-zero exit, before touching any file', async () => {
    const bad: [string[], RegExp][] = [
      [['--format', 'parquet'], /--format parquet is written to a file: give --out <file>/],
      [['--format', 'csv'], /--format csv is written to a file/],
      [['--format', 'xml', '--out', file('x')], /--format.*Allowed choices are ndjson, json, parquet, csv/s],
      [['--resume'], /--resume continues an export file: give --out <file>/],
      [['--resume', '--out', file('parquet')], /--resume continues NDJSON files only, not --format parquet/],
      [['--resume', '--out', file('json')], /--resume continues NDJSON files only, not --format json/],
      [['--resume', '--out', file('ndjson'), '--format', 'csv'], /--resume continues NDJSON files only, not --format csv/],
      [['--follow', '--out', file('csv')], /--follow needs --format ndjson/],
      [['--follow', '--format', 'json'], /--follow needs --format ndjson/],
    ]
    for (const [args, message] of bad) {
      const r = await query(...args)
      assert.notEqual(r.code, 0, args.join(' '))
      assert.match(r.stderr, message, args.join(' '))
      assert.equal(r.stdout, '')
      const out = args[args.indexOf('--out') + 1]
      if (args.includes('--out')) assert.equal(existsSync(out), false, `${out} was not created`)
    }
    // A file that is not an export, or one that ends below the range: nothing is appended.
    const notExport = file('ndjson')
    await writeFile(notExport, 'hello\n')
    const r1 = await query('--out', notExport, '--resume')
    assert.notEqual(r1.code, 0)
    assert.match(r1.stderr, /does not end with a block of an NDJSON export .*cannot resume it/)
    assert.equal(await readFile(notExport, 'utf8'), 'hello\n')
    const below = file('ndjson')
    await writeFile(below, lines(reference).slice(0, 10).join('\n') + '\n')
    const r2 = await query('--out', below, '--resume', '--from', '50')
    assert.notEqual(r2.code, 0)
    assert.match(r2.stderr, /ends at block 9, below the first block 50: it is not an export of this range/)
  })

  it('stderr not a terminal: progress lines; a terminal: a bar with blocks, blocks/s, items/s and ETA; -q: nothing', async () => {
    // Not a terminal: the reference export of `before` (its `done:` line checked there); -q with
    // --out printed nothing in the first test.
    assert.doesNotMatch(referenceStderr, /\[[█░]+\]/)
    assert.match(referenceStderr, /done: 128 blocks, \d+ items/)
    // A terminal: blocks 0..40 (many range steps): what is displayed does not depend on the range.
    if (spawnSync('script', ['--version']).status !== 0) return // no `script` (util-linux) for a terminal
    const underTerminal = async (extra: string) => {
      const cmd = [process.execPath, CLI, 'query', base, '--query', queryFile, '--out', file('ndjson'), '--to', '40', extra].filter(Boolean).join(' ')
      const env = { ...process.env }
      delete env.CI
      // Not spawnSync: the cluster runs in this process.
      // A wide terminal: cli-progress cuts the line at the terminal's width (80 under `script`), and
      // a fast run's rates have digits enough to cut off the items/s the test looks for.
      const child = spawn('script', ['-qfec', `stty cols 200; ${cmd}`, '/dev/null'], { env, stdio: ['ignore', 'pipe', 'pipe'] })
      children.add(child)
      let output = ''
      child.stdout.on('data', (d) => (output += d))
      child.stderr.on('data', (d) => (output += d))
      const code = await new Promise((resolve) => child.once('exit', resolve))
      children.delete(child)
      assert.equal(code, 0, output)
      return output
    }
    const tty = await underTerminal('')
    assert.match(tty, /query \[[█░]+\] \d+% eta \S+ \| \d+\/41 blocks \| [\d.]+ blocks\/s \| \d+ items\/s/)
    assert.doesNotMatch(tty, /progress: up to block/)
    assert.match(tty, /done: 41 blocks/)
    assert.equal((await underTerminal('-q')).trim(), '')
  })
})

describe('NDJSON to Parquet/CSV with DuckDB', () => {
  it('keeps strings that look like dates, times or UUIDs as strings, and big integers as numbers', async () => {
    const tmp = await tempDir('ba-export-')
    try {
      const src = path.join(tmp.dir, 'in.ndjson')
      const rows = [
        { header: { number: 1, hash: '0xab', day: '2024-01-02', at: '2024-01-02 03:04:05', time: '12:00:00', id: '123e4567-e89b-12d3-a456-426614174000', big: 2 ** 53 - 1 }, events: [] },
        { header: { number: 2, hash: '0xcd', day: '2024-01-03', at: '2024-01-03T03:04:05Z', time: '13:00:00', id: '123e4567-e89b-12d3-a456-426614174001', big: -1 }, events: [{ at: '2024-01-03', n: 1 }] },
      ]
      const text = rows.map((r) => JSON.stringify(r)).join('\n') + '\n'
      await writeFile(src, text)
      const sizes = { longestLine: Math.max(...text.split('\n').map((l) => l.length)), averageLine: text.length / 2 }
      await ndjsonToTable(src, path.join(tmp.dir, 'out.parquet'), 'parquet', sizes)
      await ndjsonToTable(src, path.join(tmp.dir, 'out.csv'), 'csv', sizes)
      const parquet = await sql(`SELECT to_json(t)::VARCHAR AS j FROM read_parquet(${lit(path.join(tmp.dir, 'out.parquet'))}) t`)
      assert.deepEqual(parquet.map((r) => JSON.parse(String(r.j))), rows.map(({ header, events }) => ({ ...header, events })))
      const csv = await sql(`SELECT * FROM read_csv(${lit(path.join(tmp.dir, 'out.csv'))}, header = true, all_varchar = true)`)
      assert.deepEqual(csv, rows.map(({ header, events }) => ({ ...Object.fromEntries(Object.entries(header).map(([k, v]) => [k, String(v)])), events: JSON.stringify(events) })))
    } finally {
      await tmp.cleanup()
    }
  })

  it('plainStrings leaves quoted field names alone', () => {
    assert.equal(plainStrings('STRUCT("date" DATE, "time" TIME, ts TIMESTAMP WITH TIME ZONE, u UUID, n BIGINT)[]'), 'STRUCT("date" VARCHAR, "time" VARCHAR, ts VARCHAR, u VARCHAR, n BIGINT)[]')
  })
})

function sum(blocks: Block[], key: 'transactions' | 'logs'): number {
  return blocks.reduce((s, b) => s + b[key].length, 0)
}
