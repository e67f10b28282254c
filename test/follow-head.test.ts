import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ArchiveClient } from '../src/client/archive-client.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { startAnvil, type Anvil } from './helpers/anvil.js'
import { CLI, until } from './helpers/cli.js'
import { stallTolerant, tempDir } from './helpers/dataset.js'
import { RUNNER } from './helpers/processor-expect.js'

/** The merged chunks in the dataset folder `dir`: their path, last block and the chunks they replace (meta.json). */
function mergedChunks(dir: string): { path: string; last: number; replaces: string[] }[] {
  return readdirSync(dir).filter((d) => /^\d{10}$/.test(d)).flatMap((top) =>
    readdirSync(path.join(dir, top)).flatMap((c) => {
      const meta = path.join(dir, top, c, 'meta.json')
      const replaces = existsSync(meta) ? JSON.parse(readFileSync(meta, 'utf8')).replaces : undefined
      return Array.isArray(replaces) ? [{ path: `${top}/${c}`, last: Number(c.split('-')[1]), replaces }] : []
    }))
}

/*
 * Clients following the head of a live chain: anvil mines a block a second; `ingest --follow`
 * writes a chunk per block and compacts them in the background (fanout 2, chunks more than 4 blocks
 * below the head, a short grace, so merged chunks are swapped in and their parts deleted during the
 * run); the ingest is killed with SIGKILL and started again once a merged chunk has replaced its
 * parts under the following clients, and the run goes on until the restarted ingest has done so too.
 * Our client (`blocks()` with `follow`) and the real `@subsquid/evm-processor` (no `to`: it follows
 * the archive's height) must each receive every block exactly once, in order, with the node's
 * hashes.
 */

describe('following the head across compactions and an ingest restart', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let anvil: Anvil
  let cluster: Cluster
  let ingest: ChildProcess | undefined
  let processor: ChildProcess | undefined
  const data = () => path.join(tmp.dir, 'data')
  let ingestErr = ''

  const startIngest = () => {
    const child = spawn(process.execPath, [
      CLI, 'ingest', '--rpc', anvil.url, '--dataset', 'live', '--out', path.join(data(), 'live'), '--follow',
      '--finality', 'latest', '--max-reorg-depth', '4', '--compact-fanout', '2', '--compact-grace-ms', '3000', '--progress', 'none',
    ], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
    child.stderr!.on('data', (d) => (ingestErr = (ingestErr + d).slice(-5000)))
    child.once('exit', (code, signal) => {
      if (code && signal !== 'SIGKILL') console.error(`ingest exited with ${code}: ${ingestErr}`)
    })
    return child
  }

  before(async () => {
    tmp = await tempDir('ba-follow-')
    anvil = await startAnvil(['--block-time', '1'])
  })

  after(async () => {
    ingest?.kill('SIGKILL')
    processor?.kill('SIGKILL')
    await cluster?.stop()
    await anvil?.stop()
    await tmp?.cleanup()
  })

  it('our client and the real evm-processor get every block once, with the node hashes', async () => {
    ingest = startIngest()
    await until('the first chunk', async () => (existsSync(path.join(data(), 'live', 'dataset.json')) ? true : undefined), 60_000)
    cluster = await startCluster({ storage: new LocalStorage(data()), workers: 2, replication: 1, ...stallTolerant(200) })
    const gateway = cluster.datasets.get('live') ?? (await until('the dataset at the router', async () => cluster.datasets.get('live'), 30_000))

    // our client, following from block 0
    const client = new ArchiveClient(gateway)
    const stop = new AbortController()
    const got: { number: number; hash: string }[] = []
    let clientEnd: string | undefined
    const following = (async () => {
      try {
        for await (const b of client.blocks({ includeAllBlocks: true, fields: { block: { number: true, hash: true } } }, { fromBlock: 0, follow: true, pollMs: 200, signal: stop.signal })) {
          got.push({ number: b.header.number, hash: b.header.hash as string })
        }
        clientEnd = `our client's stream ended at block ${got.at(-1)?.number}`
      } catch (e) {
        if (!stop.signal.aborted) clientEnd = `our client failed at block ${got.at(-1)?.number}: ${(e as Error).stack}`
      }
    })()

    // the real SDK, following from block 0 (its handler appends each batch to a file)
    const out = path.join(tmp.dir, 'processor.ndjson')
    const config = path.join(tmp.dir, 'processor.json')
    await writeFile(config, JSON.stringify({ gateway, from: 0, includeAllBlocks: true, fields: { block: { hash: true } }, out }))
    processor = spawn(process.execPath, [RUNNER], { env: { ...process.env, PROCESSOR_RUN_CONFIG: config, SQD_DEBUG: '' }, stdio: ['ignore', 'ignore', 'pipe'] })
    let processorErr = ''
    let processorEnd: string | undefined
    processor.stderr!.on('data', (d) => (processorErr = (processorErr + d).slice(-10_000)))
    processor.once('exit', (code, signal) => (processorEnd = `the processor exited (${code ?? signal}): ${processorErr.slice(-2000)}`))
    const processed = () => (existsSync(out) ? readFileSync(out, 'utf8').split('\n').filter(Boolean).flatMap((l) => JSON.parse(l).blocks) : [])

    // Once a merged chunk has replaced its parts (they are deleted) and both clients have followed
    // past it, the ingest dies without warning and is started again; then the same for a merged
    // chunk of the restarted ingest.
    const live = path.join(data(), 'live')
    const where = () => `our client at ${got.at(-1)?.number}, the processor at ${processed().at(-1)?.header.height}; ingest: ${ingestErr.slice(-1000)}; processor: ${processorErr.slice(-1000)}`
    const mergeSettled = (before: Set<string>) => until('a merged chunk in place of its deleted parts, both clients past it', async () => {
      if (clientEnd || processorEnd) return true // reported below
      const followed = Math.min(got.at(-1)?.number ?? -1, processed().at(-1)?.header.height ?? -1)
      return mergedChunks(live).some((m) => !before.has(m.path) && m.last <= followed && m.replaces.every((p) => !existsSync(path.join(live, p)))) ? true : undefined
    }, 180_000, 250).catch((e) => assert.fail(`${e.message}: ${where()}`))
    await mergeSettled(new Set())
    ingest.kill('SIGKILL')
    await new Promise((r) => ingest!.once('exit', r))
    const beforeRestart = new Set(mergedChunks(live).map((m) => m.path))
    ingest = startIngest()
    await mergeSettled(beforeRestart)

    // Both clients are past a merged chunk of the restarted ingest: every block up to where the
    // slower one is must be there once, with the node's hash. (The real SDK asks an archive for its
    // height every 20 s, so waiting for it to reach the node's head would only add that wait.)
    assert.equal(clientEnd, undefined)
    assert.equal(processorEnd, undefined)
    const target = Math.min(got.at(-1)!.number, processed().at(-1).header.height)
    stop.abort()
    await following
    processor.kill('SIGTERM')

    const node = new Map<number, string>()
    for (let n = 0; n <= target; n++) node.set(n, (await anvil.rpc('eth_getBlockByNumber', ['0x' + n.toString(16), false])).hash)

    const check = (who: string, blocks: { number: number; hash: string }[]) => {
      const upTo = blocks.filter((b) => b.number <= target)
      assert.deepEqual(upTo.map((b) => b.number), [...node.keys()], `${who}: every block from 0 to ${target} once, in order`)
      for (const b of upTo) assert.equal(b.hash, node.get(b.number), `${who}: hash of block ${b.number}`)
      const all = blocks.map((b) => b.number)
      assert.equal(new Set(all).size, all.length, `${who}: no block twice`)
    }
    check('ArchiveClient', got)
    check('evm-processor', processed().map((b: any) => ({ number: b.header.height, hash: b.header.hash })))

    // compaction ran during the run: merged chunks (meta.json names the chunks they replace) were served
    const merged = mergedChunks(live)
    assert.ok(merged.length > 0, `expected merged chunks; processor stderr: ${processorErr.slice(-500)}`)
    console.log(`followed ${target + 1} blocks; ${merged.length} merged chunks in storage`)
  })
})
