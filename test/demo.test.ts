import assert from 'node:assert/strict'
import { execFile, spawn } from 'node:child_process'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { after, describe, it } from 'node:test'
import { promisify } from 'node:util'
import { CLI, children, killChildren, runCli } from './helpers/cli.js'
import { tempDir } from './helpers/dataset.js'

/*
 * The README's first command, as a newcomer runs it: `demo` (what `npm start` runs after the build)
 * in a fresh folder. Every dataset the guide promises is announced, and the commands the demo prints
 * are run as printed (the curl lines through bash) and answer real blocks.
 */

const DATASETS = ['ethereum-mainnet', 'starknet-mainnet', 'moonbeam', 'kusama', 'polkadot']
const sh = promisify(execFile)

describe('npm start (the demo) in a fresh folder', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>> | undefined
  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  it('builds and serves every bundled dataset; the printed height and query commands work as printed', async () => {
    tmp = await tempDir('ba-demo-')
    const t0 = performance.now()
    const { child, lines, stderr } = await startDemo(tmp.dir)
    const startMs = performance.now() - t0
    // The human part comes without a flood of log lines before it.
    assert.equal(stderr().trim(), '', stderr())
    const text = lines.join('\n')
    for (const name of DATASETS) {
      const m = new RegExp(`^dataset ${name}: (\\S+)$`, 'm').exec(text)
      assert.ok(m, `${name} announced:\n${text}`)
      const base = m[1]
      const section = text.slice(m.index).split('\n\n')[0].split('\n')
      // height: curl -s <base>/height
      const heightCmd = section.find((l) => l.trim().startsWith('height:'))!.replace(/^\s*height:\s*/, '')
      const height = Number((await sh('bash', ['-c', heightCmd])).stdout)
      assert.ok(height > 0, `${name} height ${height}`)
      // query: a curl command over three lines, run as printed.
      const q = section.findIndex((l) => l.trim().startsWith('query:'))
      const queryCmd = section.slice(q, q + 3).join('\n').replace(/^\s*query:\s*/, '')
      const answer = JSON.parse((await sh('bash', ['-c', queryCmd], { maxBuffer: 64 << 20 })).stdout)
      assert.ok(Array.isArray(answer) && answer.length > 0, `${name}: ${JSON.stringify(answer).slice(0, 300)}`)
      const items = answer.reduce((n: number, b: any) => n + Object.entries(b).filter(([k, v]) => k !== 'header' && Array.isArray(v)).reduce((m, [, v]) => m + (v as unknown[]).length, 0), 0)
      assert.ok(items > 0, `${name}: the example query returns items`)
      // The client line, with the example query and the first answered block.
      const example = /-d '(.*)' \\$/.exec(section[q + 1])![1]
      const first = answer[0].header.number
      const r = await runCli(['query', base, '--from', String(first), '--to', String(first), example])
      assert.equal(r.code, 0, r.stderr)
      assert.equal(JSON.parse(r.stdout.trim().split('\n')[0]).header.number, first)
    }
    console.log(`# demo: first start (builds the datasets) to printed URLs in ${(startMs / 1000).toFixed(1)} s`)
    assert.equal(lines.filter((l) => l.startsWith('preparing ')).length, DATASETS.length)

    // Started again: the datasets are there, nothing is prepared.
    child.kill('SIGTERM')
    await new Promise((resolve) => child.once('exit', resolve))
    const again = await startDemo(tmp.dir)
    assert.deepEqual(again.lines.filter((l) => l.startsWith('preparing ')), [])
    assert.equal(again.stderr().trim(), '', again.stderr())
  })
})

/** `demo` over `<dir>/demo`, until it has printed its instructions. */
async function startDemo(dir: string) {
  const child = spawn(process.execPath, [CLI, 'demo', '--data', path.join(dir, 'demo'), '--port', '0'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
  children.add(child)
  let stderr = ''
  child.stderr.on('data', (d) => (stderr += d))
  const lines: string[] = []
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the demo did not finish starting: ${lines.join('\n')}\n${stderr}`)), 150_000)
    child.once('exit', (code) => reject(new Error(`the demo exited with ${code}: ${stderr}`)))
    createInterface({ input: child.stdout }).on('line', (line) => {
      lines.push(line)
      if (line.startsWith('or with the client')) {
        clearTimeout(timer)
        resolve()
      }
    })
  })
  return { child, lines, stderr: () => stderr }
}
