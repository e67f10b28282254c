import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { tempDir } from './helpers/dataset.js'

/*
 * `bench suite` (bench/suite.ts) over two small test files of its own: each file's CPU and that of
 * the processes it started are put on that file, and the run's CPU is at least what they burned.
 */

const BENCH = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../bench/run.js')
const BURN_MS = 400

/** A test file (CommonJS) whose process uses BURN_MS of CPU, then starts `children` Node processes in turn that each use as much (CPU time, not wall: the machine may be busy). */
const burner = (children: number) => `
const { test } = require('node:test')
const { execFileSync } = require('node:child_process')
const burn = 'while (process.cpuUsage().user < ${BURN_MS * 1000});'
test('burns', () => {
  eval(burn)
  for (let i = 0; i < ${children}; i++) execFileSync(process.execPath, ['-e', burn])
})
`

/** The body rows of the Markdown table titled `title`, as cell lists. */
function table(out: string, title: string): string[][] {
  const at = out.indexOf(`### ${title}`)
  assert.ok(at >= 0, `no table "${title}" in:\n${out}`)
  const rows: string[] = []
  for (const line of out.slice(at).split('\n').slice(1)) {
    if (line.startsWith('|')) rows.push(line)
    else if (rows.length) break
  }
  return rows.slice(2).map((l) => l.split('|').slice(1, -1).map((c) => c.trim()))
}

describe('bench suite', { timeout: 120_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  before(async () => {
    tmp = await tempDir('ba-bench-suite-test-')
    await writeFile(path.join(tmp.dir, 'alone.test.js'), burner(0))
    await writeFile(path.join(tmp.dir, 'starter.test.js'), burner(2))
  })
  after(async () => {
    await tmp?.cleanup()
  })

  it("puts each test file's CPU and that of the processes it started on that file", async () => {
    const files = ['alone', 'starter'].map((f) => path.join(tmp.dir, `${f}.test.js`))
    const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(process.execPath, [BENCH, 'suite', '--concurrency', '1', ...files], (err, stdout, stderr) => resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr })),
    )
    assert.equal(run.code, 0, run.stderr)
    assert.match(run.stdout, /^# pass 2$/m)
    const rows = new Map(table(run.stdout, 'test files by CPU').map(([file, ...cells]) => [file, cells.map(Number)]))
    const burned = BURN_MS / 1000
    const [, aloneOwn, aloneStarted, aloneN] = rows.get('alone') ?? assert.fail(`no row for alone: ${[...rows.keys()]}`)
    const [, starterOwn, starterStarted, starterN] = rows.get('starter') ?? assert.fail(`no row for starter: ${[...rows.keys()]}`)
    assert.ok(aloneOwn >= burned, `alone's own CPU ${aloneOwn} s`)
    assert.deepEqual([aloneStarted, aloneN], [0, 0], 'alone started nothing')
    assert.ok(starterOwn >= burned, `starter's own CPU ${starterOwn} s`)
    assert.equal(starterN, 2, 'starter started two processes')
    assert.ok(starterStarted >= 2 * burned, `the processes starter started: ${starterStarted} s`)
    const summary = new Map(table(run.stdout, 'the run').map(([k, v]) => [k, v]))
    const total = parseFloat(summary.get('CPU of the runner and every process under it') ?? 'NaN')
    assert.ok(total >= aloneOwn + starterOwn + starterStarted - 0.2, `run CPU ${total} s`)
    assert.equal(summary.get('runner exit code'), '0')
  })
})
