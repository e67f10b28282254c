import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { createInterface } from 'node:readline'
import { after, before, describe, it } from 'node:test'
import { loadRecordedChain, RECORDED_CHAINS, RECORDED_STARKNET_CHAINS } from '../src/ingest/recorded.js'
import { RECORDED_SUBSTRATE_CHAINS } from '../src/ingest/substrate/rpc/replay.js'
import { children, CLI, killChildren, runCli, until } from './helpers/cli.js'
import { freePort } from './helpers/http.js'

/*
 * The README's session without a node (the ```sh block after `<!-- readme-session -->`), run line by
 * line as a reader runs it, in a fresh folder: `npx block-archive` and `node dist/src/cli.js` are the built CLI, `&` lines run in
 * the background until the lines their comment says they print (`# prints rpc: http://…`) appear,
 * `kill %1 %2` stops them. The fixed ports of the text are replaced by free ones; nothing else is
 * changed. Then: replay-rpc's printed ingest commands run as printed, and what ingest says when the
 * node lacks a block or a method.
 */

const REPO = path.resolve(path.dirname(CLI), '../..')
const USDT = '0xdac17f958d2ee523a2206206994597c13d831ec7'
const ndjson = (text: string) => text.split('\n').filter(Boolean).map((l) => JSON.parse(l))

/** Split a shell line into words (quotes, `# comment`), as sh does for these simple lines. */
function shellWords(line: string): { words: string[]; background: boolean; comment: string } {
  const words: string[] = []
  let word: string | undefined
  let i = 0
  let comment = ''
  while (i < line.length) {
    const c = line[i]
    if (c === "'") {
      const end = line.indexOf("'", i + 1)
      assert.ok(end > 0, `unclosed quote in: ${line}`)
      word = (word ?? '') + line.slice(i + 1, end)
      i = end + 1
    } else if (c === '"') {
      const end = line.indexOf('"', i + 1)
      assert.ok(end > 0, `unclosed quote in: ${line}`)
      word = (word ?? '') + line.slice(i + 1, end)
      i = end + 1
    } else if (/\s/.test(c)) {
      if (word !== undefined) words.push(word)
      word = undefined
      i++
    } else if (c === '#' && word === undefined) {
      comment = line.slice(i + 1).trim()
      break
    } else {
      word = (word ?? '') + c
      i++
    }
  }
  if (word !== undefined) words.push(word)
  const background = words[words.length - 1] === '&'
  if (background) words.pop()
  return { words, background, comment }
}

/** The lines of the sh block after the marker. */
export function readmeSession(readme: string): string[] {
  const at = readme.indexOf('<!-- readme-session -->')
  assert.ok(at >= 0, 'README.md has no <!-- readme-session --> marker')
  const m = /```sh\n([\s\S]*?)\n```/.exec(readme.slice(at))
  assert.ok(m, 'no ```sh block after the marker')
  return m[1].split('\n').filter((l) => l.trim() && !l.trim().startsWith('#'))
}

/** A long-running CLI command; resolves once the `<prefix>: …` lines are printed, with every stdout line so far. */
function background(args: string[], prefixes: string[]) {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
  children.add(child)
  child.once('exit', () => children.delete(child))
  let stderr = ''
  child.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-10_000)))
  const lines: string[] = []
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${args.join(' ')} did not print ${prefixes} in time: ${stderr}`)), 30_000)
    void exited.then((code) => reject(new Error(`${args.join(' ')} exited with ${code}: ${stderr}`)))
    createInterface({ input: child.stdout! }).on('line', (line) => {
      lines.push(line)
      if (prefixes.every((p) => lines.some((l) => l.startsWith(`${p}: `)))) {
        clearTimeout(timer)
        resolve()
      }
    })
  })
  return { child, lines, ready, exited, value: (prefix: string) => lines.find((l) => l.startsWith(`${prefix}: `))?.slice(prefix.length + 2) }
}

/** `npx block-archive …`, `node dist/src/cli.js …` (or `block-archive …`) → the CLI's arguments. */
function cliArgs(words: string[]): string[] {
  if (words[0] === 'npx' && words[1] === 'block-archive') return words.slice(2)
  if (words[0] === 'node' && words[1] === 'dist/src/cli.js') return words.slice(2)
  if (words[0] === 'block-archive') return words.slice(1)
  throw new Error(`not a block-archive command: ${words.join(' ')}`)
}

const ethereum = loadRecordedChain('ethereum').filter((b) => b.block)

/**
 * The replay nodes after the README session, one per `replay-rpc` argument list, started once and
 * shared by the tests below (each node is read-only); stopped with SIGTERM at the end of the file,
 * where each must exit with 0.
 */
const replayNodes = new Map<string, ReturnType<typeof background>>()
async function replayNode(args: string[]): Promise<ReturnType<typeof background>> {
  const k = args.join(' ')
  let node = replayNodes.get(k)
  if (!node) replayNodes.set(k, (node = background(['replay-rpc', ...args, '--port', '0'], ['rpc', 'ingest'])))
  await node.ready
  return node
}

/** Stop a shared node that no later test needs (SIGTERM: it must exit with 0). */
async function stopReplayNode(args: string[]): Promise<void> {
  const k = args.join(' ')
  const node = replayNodes.get(k)
  if (!node) return
  replayNodes.delete(k)
  node.child.kill('SIGTERM')
  assert.equal(await node.exited, 0, `replay-rpc ${k} stops cleanly on SIGTERM`)
}

/** Kill the children of a test but the shared replay nodes. */
function killOwnChildren(): void {
  const shared = new Set<ChildProcess>([...replayNodes.values()].map((n) => n.child))
  for (const c of children) if (!shared.has(c)) c.kill('SIGKILL')
}

after(async () => {
  const nodes = [...replayNodes.entries()]
  for (const [, n] of nodes) n.child.kill('SIGTERM')
  const hung = setTimeout(killChildren, 60_000)
  const codes = await Promise.all(nodes.map(([, n]) => n.exited))
  clearTimeout(hung)
  killChildren()
  assert.deepEqual(codes, nodes.map(() => 0), `replay-rpc ${nodes.map(([k]) => k).join(', ')} stop cleanly on SIGTERM`)
})

describe('the README session without a node, verbatim', { timeout: 600_000 }, () => {
  const home = process.cwd()
  let dir: string

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'ba-readme-'))
    process.chdir(dir) // the commands' relative paths (data/replay/…) are the reader's own folder
  })

  after(async () => {
    killChildren()
    process.chdir(home)
    await rm(dir, { recursive: true, force: true })
  })

  it('replay-rpc → ingest → serve → query prints the recorded blocks', async (t) => {
    const rpcPort = await freePort()
    const substratePort = await freePort()
    const httpPort = await freePort()
    const readme = await readFile(path.join(REPO, 'README.md'), 'utf8')
    const lines = readmeSession(readme).map((l) => l.replaceAll('8545', String(rpcPort)).replaceAll('9933', String(substratePort)).replaceAll('8080', String(httpPort)))
    const running: ReturnType<typeof background>[] = []
    const timings: string[] = []
    const outputs: { args: string[]; stdout: string }[] = []
    let printedIngest: string | undefined
    for (const line of lines) {
      const { words, background: bg, comment } = shellWords(line)
      const t0 = performance.now()
      if (words[0] === 'kill') {
        assert.deepEqual(words.slice(1), running.map((_, i) => `%${i + 1}`), 'kill names every background job')
        for (const r of running) r.child.kill('SIGTERM')
        const codes = await Promise.all(running.map((r) => r.exited))
        assert.deepEqual(codes, running.map(() => 0), 'background commands stop cleanly on SIGTERM')
      } else if (bg) {
        // the comment says which lines it prints: "prints rpc: http://…", "prints dataset ethereum: http://…"
        const prefixes = [...comment.matchAll(/(?:prints|and) ([\w ]+?): http/g)].map((m) => m[1])
        assert.ok(prefixes.length, `the comment of a background line names what it prints: ${line}`)
        const r = background(cliArgs(words), prefixes)
        running.push(r)
        await r.ready
        for (const m of comment.matchAll(/([\w ]+?): (http\S+)/g)) {
          const p = m[1].replace(/^.*\b(prints|and) /, '')
          assert.equal(r.value(p), m[2].replace(/,$/, ''), `${cliArgs(words)[0]} prints ${p}: as the README says`)
        }
        if (cliArgs(words)[0] === 'replay-rpc') printedIngest = await until('its ingest command', async () => r.value('ingest'))
      } else {
        const args = cliArgs(words)
        if (args[0] === 'ingest') assert.equal(line.trim(), printedIngest, 'the README ingest command is the one replay-rpc prints')
        const r = await runCli(args)
        assert.equal(r.code, 0, `${line}\n${r.stderr}`)
        outputs.push({ args, stdout: r.stdout })
      }
      timings.push(`${((performance.now() - t0) / 1000).toFixed(2)} s  ${line.replace(/\s+#.*$/, '')}`)
    }
    t.diagnostic('wall-clock per README command:')
    for (const x of timings) t.diagnostic(x)

    const ingest = outputs.find((o) => o.args[0] === 'ingest')!
    assert.match(ingest.stdout, /ingested 4 blocks into 1 chunks .*last block in the dataset: 18500000/)
    const [headers, logs, contracts] = outputs.filter((o) => o.args[0] === 'query').map((o) => ndjson(o.stdout))
    // the headers are the recorded blocks
    assert.deepEqual(headers.map((b) => b.header.number), ethereum.map((b) => b.number))
    for (const [i, b] of headers.entries()) {
      assert.equal(b.header.hash, ethereum[i].block.hash.toLowerCase())
      assert.equal(b.header.timestamp, parseInt(ethereum[i].block.timestamp, 16))
    }
    assert.equal(headers[3].header.hash, '0x80ce6bb0e244fbdf66cf0a1108273fe1ca58788efb7fb8d3a0d783d2b06d433d')
    // the USDT logs are the recorded receipts' logs
    let count = 0
    for (const r of ethereum) {
      const want = r.receipts!.flatMap((x: any) => x.logs).filter((l: any) => l.address.toLowerCase() === USDT)
        .map((l: any) => ({ transactionHash: l.transactionHash.toLowerCase(), topics: l.topics.map((x: string) => x.toLowerCase()), data: l.data.toLowerCase() }))
      const got = logs.find((b) => b.header.number === r.number)?.logs ?? []
      assert.deepEqual(got.map((l: any) => ({ transactionHash: l.transactionHash, topics: l.topics, data: l.data })), want, `USDT logs of ${r.number}`)
      count += want.length
    }
    assert.ok(count > 10, `USDT logs in the recorded blocks: ${count}`)
    // as the README says: the first block of the range comes too, with no logs
    assert.equal(logs[0].header.number, 1000000)
    assert.deepEqual(logs[0].logs ?? [], [])

    // The Substrate dataset: the contract's events, as @polkadot/types decoded the recording.
    const substrateIngest = outputs.find((o) => o.args[0] === 'ingest' && o.args.includes('substrate'))!
    assert.match(substrateIngest.stdout, /ingested 20 blocks into 1 chunks .*last block in the dataset: 2841342/)
    const oracle = JSON.parse(gunzipSync(await readFile(path.join(REPO, 'fixtures/substrate/ocelloids-sdk/derived/contracts2841323.decoded.json.gz'))).toString('utf8'))
    const emitted = oracle.blocks.flatMap((b: any) => b.events.filter((e: any) => e.name === 'contracts.ContractEmitted').map((e: any) => ({ block: b.number, index: e.index, data: e.data[1] })))
    assert.equal(emitted.length, 3)
    const got = contracts.flatMap((b) => b.events.map((e: any) => ({ block: b.header.number, index: e.index, name: e.name, data: e.args.data, extrinsic: b.extrinsics.find((x: any) => x.index === e.extrinsicIndex)?.hash })))
    assert.deepEqual(got.map(({ block, index, data }) => ({ block, index, data })), emitted)
    assert.ok(got.every((e) => e.name === 'Contracts.ContractEmitted' && /^0x[0-9a-f]{64}$/.test(e.extrinsic)), JSON.stringify(got))
  })
})

describe('replay-rpc prints the ingest commands that fit what it serves', { timeout: 600_000 }, () => {
  let dir: string
  const home = process.cwd()
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'ba-replay-cmd-'))
    process.chdir(dir)
  })
  after(async () => {
    killOwnChildren()
    process.chdir(home)
    await rm(dir, { recursive: true, force: true })
  })

  it('ethereum (the default): every recorded block, no traces; traces for the blocks they were recorded for', async () => {
    const node = await replayNode([])
    await until('the lines after the ingest command', async () => (node.lines.length >= 5 ? true : undefined))
    const url = node.value('rpc')!
    assert.equal(node.value('blocks'), '1000000,4369999,18000000,18500000 (only these: other numbers answer null, so ingest them with --blocks)')
    assert.equal(node.value('ingest'), `npx block-archive ingest --rpc ${url} --dataset ethereum --out data/replay/ethereum --blocks 1000000,4369999,18000000,18500000`)
    const commands = node.lines.map((l) => /(npx block-archive ingest .*)$/.exec(l)?.[1]).filter((c): c is string => c != null)
    assert.deepEqual(commands.slice(1).map((c) => / --blocks (\S+) (--traces \S+)/.exec(c)?.slice(1)), [['1000000,18500000', '--traces trace_block'], ['1000000', '--traces callTracer']])
    // The first command is the README's ingest line, which the session above ran verbatim after
    // checking that it is the line replay-rpc prints ("ingested 4 blocks"): only the trace commands run here.
    for (const [i, command] of commands.entries()) {
      if (i === 0) continue
      const r = await runCli(cliArgs(shellWords(command).words))
      assert.equal(r.code, 0, `${command}\n${r.stderr}`)
      assert.match(r.stdout, new RegExp(`^ingested ${[4, 2, 1][i]} blocks `))
      assert.match(r.stdout, /, [1-9]\d* traces\)/)
    }
  })

  it('repeat mode: a consecutive range, with the traces every repeated block has', async () => {
    const node = background(['replay-rpc', '--only', '18500000', '--repeat', '3', '--first', '100', '--port', '0'], ['rpc', 'ingest'])
    await node.ready
    const url = node.value('rpc')!
    assert.equal(node.value('blocks'), '100-102')
    const command = node.value('ingest')!
    assert.equal(command, `npx block-archive ingest --rpc ${url} --dataset ethereum --out data/replay/ethereum --from 100 --to 102 --traces trace_block`)
    // as printed, but beside the dataset of the test before (another chain under the same name)
    const r = await runCli(cliArgs(shellWords(command.replace('data/replay/ethereum', 'data/replay/ethereum-repeat')).words))
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /^ingested 3 blocks .* 2628 traces\)/)
    node.child.kill('SIGTERM')
    await node.exited
  })

  it('every other recorded chain: each printed command, run as printed, succeeds', async () => {
    // rococo-contracts prints one command, the README's, which the session above ran verbatim
    // after checking that it is the line replay-rpc prints.
    const chains = [...RECORDED_CHAINS, ...RECORDED_STARKNET_CHAINS, ...RECORDED_SUBSTRATE_CHAINS].filter((c) => c !== 'ethereum' && c !== 'rococo-contracts')
    const runChain = async (chain: string) => {
      const node = await replayNode(['--chain', chain])
      await new Promise((r) => setTimeout(r, 300)) // the alternative commands come right after the ingest line
      const commands = node.lines.map((l) => /(npx block-archive ingest .*)$/.exec(l)?.[1]).filter((c): c is string => c != null)
      for (const command of commands) {
        const r = await runCli(cliArgs(shellWords(command).words))
        assert.equal(r.code, 0, `${chain}: ${command}\n${r.stderr}`)
        assert.match(r.stdout, /ingested [1-9]\d* blocks/)
      }
      // polygon and stable serve the next tests too
      if (chain !== 'polygon' && chain !== 'stable') await stopReplayNode(['--chain', chain])
      return commands
    }
    const all: string[][] = []
    for (let i = 0; i < chains.length; i += 3) all.push(...(await Promise.all(chains.slice(i, i + 3).map(runChain))))
    const joined = all.flat().join('\n')
    assert.match(joined, /--dataset cronos .*--missing-receipts null/) // 6541's receipt is 6542's
    assert.match(joined, /--dataset starknet-sepolia .*--state-updates/) // its one block has a recorded state update
    assert.match(joined, /--dataset starknet-mainnet-traces .*--blocks 25 --traces starknet/)
    assert.match(joined, /--family substrate .*--dataset polkadot .*--blocks 16037760,18977445/)
  })
})

describe('ingest says what to do when the node lacks a block or a method', { timeout: 600_000 }, () => {
  let dir: string
  let eth: string
  let polygon: string
  let stable: string

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'ba-ingest-errors-'))
    // the replay nodes of the tests above (started here if those did not run)
    const nodes = await Promise.all([replayNode([]), replayNode(['--chain', 'polygon']), replayNode(['--chain', 'stable'])])
    ;[eth, polygon, stable] = nodes.map((n) => n.value('rpc')!)
  })

  after(async () => {
    killOwnChildren()
    await rm(dir, { recursive: true, force: true })
  })

  let runs = 0
  /**
   * One ingest that must fail: exit code 1, one line on stderr (warnings shown: no "asking again"
   * retries before it), in a few seconds (most of them the CLI's start; the bound is loose, for a
   * loaded machine: the one line is what shows that nothing was retried).
   */
  async function fails(args: string[]): Promise<string> {
    const t0 = performance.now()
    const r = await runCli(['ingest', '--dataset', 'x', '--out', path.join(dir, `d${runs++}`), ...args], undefined, { LOG_LEVEL: 'warn' })
    const secs = (performance.now() - t0) / 1000
    assert.equal(r.code, 1, r.stderr)
    const lines = r.stderr.trim().split('\n')
    assert.equal(lines.length, 1, `one line, no retry warnings or stack trace:\n${r.stderr}`)
    assert.ok(secs < 60, `failed after ${secs.toFixed(1)} s`)
    return lines[0]
  }

  const hint = /ingest only blocks the node has: --from\/--to within its range, or --blocks <list> for a node that serves isolated blocks/

  it('a block the sparse node does not have: named at once, with --from/--to and --blocks', async () => {
    const line = await fails(['--rpc', eth, '--from', '1000000', '--to', '1000001'])
    assert.match(line, /^block 1000001 is not available from the node \(eth_getBlockByNumber returned no block; the node's head is 18500000\); /)
    assert.match(line, hint)
    // no range at all: the reader's first try against the replay node
    assert.match(await fails(['--rpc', eth]), /^block 0 is not available from the node .*the node's head is 18500000/)
    // a listed block above the head
    assert.match(await fails(['--rpc', eth, '--blocks', '18500000,18500001']), /^block 18500001 is not available from the node \(it is above the confirmed head\); .*--blocks/)
  })

  it('a method the node lacks: the method and the flag that avoids it', async () => {
    const trace = await fails(['--rpc', polygon, '--blocks', '50000000', '--traces', 'trace_block'])
    assert.match(trace, /^the node does not support trace_block, which --traces trace_block asks for \(block 50000000: .*\(code -32601\)\); pass --traces callTracer .* or --traces none/)
    assert.match(await fails(['--rpc', polygon, '--blocks', '50000000', '--traces', 'callTracer']), /does not support debug_traceBlockByNumber, which --traces callTracer asks for .*--traces none/)
    assert.match(await fails(['--rpc', polygon, '--blocks', '50000000', '--state-diffs', 'replay']), /does not support trace_replayBlockTransactions, which --state-diffs replay asks for .*--state-diffs none/)
    assert.match(await fails(['--rpc', polygon, '--blocks', '50000000', '--state-diffs', 'prestateTracer']), /does not support debug_traceBlockByNumber, which --state-diffs prestateTracer asks for .*--state-diffs none/)
    assert.match(await fails(['--rpc', stable, '--blocks', '13683593', '--receipts', 'block']), /does not support eth_getBlockReceipts, which --receipts block asks for .*--receipts transaction/)
  })

  it('a method the node answers an error for at one block: the block, the method and the flag', async () => {
    const line = await fails(['--rpc', eth, '--blocks', '4369999', '--traces', 'trace_block'])
    assert.match(line, /^block 4369999: trace_block, which --traces trace_block asks for, failed: trace_block of block 4369999 was not recorded \(code -32000\); .*--traces none/)
    assert.match(await fails(['--rpc', eth, '--blocks', '18000000', '--state-diffs', 'replay']), /^block 18000000: trace_replayBlockTransactions, which --state-diffs replay asks for, failed: .*--state-diffs none/)
  })
})
