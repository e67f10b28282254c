import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks } from '../src/chunks/layout.js'
import { EvmRpcSource } from '../src/ingest/evm/source.js'
import { FinalityHead } from '../src/ingest/finality.js'
import { runIngest, type IngestResult } from '../src/ingest/loop.js'
import { RpcClient } from '../src/ingest/rpc.js'
import { startAnvil, type Anvil } from './helpers/anvil.js'
import { runCli } from './helpers/cli.js'
import { startStandaloneWorker, tempDir } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'
import { readTable } from './helpers/ingest-expect.js'

/*
 * Finality and reorgs on a live anvil node: the finalized / safe / latest heads it announces (anvil
 * finalizes 64 blocks and marks safe 32 blocks below its latest block), a finalized head that goes
 * backwards (anvil_rollback), and reorgs made with anvil_reorg (which replaces the last N blocks)
 * while and before the ingest follows the chain.
 */

let anvil: Anvil
let tmp: { dir: string; cleanup: () => Promise<void> }
before(async () => {
  tmp = await tempDir('ba-ingest-finality-')
})
after(async () => {
  await anvil?.stop()
  await tmp?.cleanup()
})

const hexq = (n: number) => '0x' + n.toString(16)
const numberOf = async (tag: string) => parseInt((await anvil.rpc('eth_getBlockByNumber', [tag, false])).number, 16)
const until = async (what: string, ok: () => Promise<boolean>) => {
  const end = Date.now() + 120_000
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}
const lastChunk = async (dir: string) => (await listLocalChunks(dir).catch(() => [])).at(-1)?.last ?? -1

/** Every block of the dataset, in order, has the node's hash, and its transactions are the node's. */
async function sameAsNode(dir: string, last: number): Promise<void> {
  const blocks = (await readTable(dir, 'blocks')).sort((a, b) => Number(a.number) - Number(b.number))
  assert.deepEqual(blocks.map((b) => Number(b.number)), Array.from({ length: last + 1 }, (_, i) => i))
  const txs = (await readTable(dir, 'transactions')).map((t) => `${t.block_number}/${t.hash}`).sort()
  const nodeTxs: string[] = []
  for (let n = 0; n <= last; n++) {
    const b = await anvil.rpc('eth_getBlockByNumber', [hexq(n), false])
    assert.equal(blocks[n].hash, b.hash, `hash of block ${n}`)
    nodeTxs.push(...b.transactions.map((h: string) => `${n}/${h}`))
  }
  assert.deepEqual(txs, nodeTxs.sort())
}

describe('finality on anvil', () => {
  it('finalized, safe, latest and a number of confirmations publish up to the heads the node announces; the default is finalized', async () => {
    anvil = await startAnvil()
    await anvil.rpc('anvil_mine', [hexq(100)])
    const want = { finalized: await numberOf('finalized'), safe: await numberOf('safe'), latest: await numberOf('latest') }
    assert.ok(want.finalized < want.safe && want.safe < want.latest, JSON.stringify(want))
    const ingest = (o: Parameters<typeof runIngest>[0] extends infer T ? Partial<T> : never) =>
      runIngest({ rpc: anvil.url, dataset: 'heads', out: path.join(tmp.dir, `heads-${Object.values(o).join('-') || 'default'}`), workers: 0, progress: 'none', ...o })
    const byDefault = await ingest({})
    assert.equal(byDefault.finality, 'finalized')
    assert.equal(byDefault.last, want.finalized)
    for (const level of ['finalized', 'safe', 'latest'] as const) {
      const r = await ingest({ finality: level })
      assert.equal(r.finality, level)
      assert.equal(r.last, want[level], level)
    }
    assert.equal((await ingest({ confirmations: 10 })).last, want.latest - 10)
    assert.equal((await ingest({ finality: 7 })).last, want.latest - 7)
    await assert.rejects(ingest({ finality: 'latest', confirmations: 3 }), /--finality or --confirmations/)

    // a finalized head that goes backwards (the node rolled its chain back) is reported, not followed
    const heads = new FinalityHead(new EvmRpcSource(new RpcClient({ url: anvil.url })), 'finalized')
    assert.equal(await heads.read(), want.finalized)
    await anvil.rpc('anvil_rollback', [10])
    assert.equal(await numberOf('finalized'), want.finalized - 10)
    assert.equal(await heads.read(), want.finalized)
    assert.equal(heads.regressions, 1)
  })

  it('the CLI logs the finality it chose, and refuses --finality with --confirmations', async () => {
    const dir = path.join(tmp.dir, 'cli-default')
    const r = await runCli(['ingest', '--rpc', anvil.url, '--dataset', 'cli', '--out', dir, '--progress', 'none', '--workers', '0'], undefined, { LOG_LEVEL: 'info' })
    assert.equal(r.code, 0, r.stderr)
    const out = r.stdout + r.stderr
    assert.match(out, /publishing blocks up to the node's finalized head \(the default where the node tells it\)/)
    assert.match(r.stdout, new RegExp(`last block in the dataset: ${await numberOf('finalized')}`))
    const both = await runCli(['ingest', '--rpc', anvil.url, '--dataset', 'cli', '--out', dir, '--finality', 'safe', '--confirmations', '2'])
    assert.equal(both.code, 1)
    assert.match(both.stderr, /--finality and --confirmations say the same thing/)
    const bad = await runCli(['ingest', '--rpc', anvil.url, '--dataset', 'cli', '--out', dir, '--finality', 'soon'])
    assert.notEqual(bad.code, 0)
    assert.match(bad.stderr, /expected finalized, safe, latest or a number of confirmations, got "soon"/)
  })
})

describe('reorgs on anvil', () => {
  let dir: string
  let followed: IngestResult

  it('a reorg of depth 3 during --follow --finality latest is re-read: the ingest goes on, and the dataset holds exactly the node\'s chain', async () => {
    await anvil?.stop()
    anvil = await startAnvil()
    dir = path.join(tmp.dir, 'reorg')
    const [alice, bob] = await anvil.rpc('eth_accounts')
    for (let i = 0; i < 10; i++) await anvil.rpc('eth_sendTransaction', [{ from: alice, to: bob, value: hexq(1000 + i) }]) // blocks 1..10, one transfer each
    const orphanedTxs = (await anvil.rpc('eth_getBlockByNumber', [hexq(9), false])).transactions
    const ac = new AbortController()
    const ingest = runIngest({
      rpc: anvil.url, dataset: 'reorg', out: dir, follow: true, finality: 'latest', chunkBlocks: 4, pollMs: 50, flushAfterMs: 100,
      workers: 0, progress: 'none', signal: ac.signal,
    })
    ingest.catch(() => undefined)
    await until('blocks 0..10 in chunks', async () => (await lastChunk(dir)) >= 10)
    const old = await anvil.rpc('eth_getBlockByNumber', [hexq(8), false])
    await anvil.rpc('anvil_reorg', [3, []]) // blocks 8, 9, 10 replaced by empty ones
    assert.notEqual((await anvil.rpc('eth_getBlockByNumber', [hexq(8), false])).hash, old.hash)
    await anvil.rpc('anvil_mine', [hexq(3)])
    await until('blocks up to 13 in chunks', async () => (await lastChunk(dir)) >= 13)
    ac.abort()
    followed = await ingest
    assert.equal(followed.last, 13)
    assert.equal(followed.reorgs.length, 1)
    assert.deepEqual({ ...followed.reorgs[0], deletedChunks: undefined }, { forkPoint: 7, tip: 10, resumeAt: 8, deletedChunks: undefined })
    assert.ok(followed.reorgs[0].deletedChunks.length >= 1)
    await sameAsNode(dir, 13)
    assert.equal((await readTable(dir, 'transactions')).filter((t) => orphanedTxs.includes(t.hash)).length, 0)
    const chunks = await listLocalChunks(dir)
    for (let i = 1; i < chunks.length; i++) assert.equal(chunks[i].first, chunks[i - 1].last + 1)

    // queries answer the node's chain
    const worker = await startStandaloneWorker(dir)
    try {
      const res = await postJson(`${worker.url}/datasets/reorg/query`, {
        type: 'evm', fromBlock: 0, toBlock: 13, includeAllBlocks: true, fields: { block: { hash: true }, transaction: { hash: true } }, transactions: [{}],
      })
      assert.equal(res.status, 200, res.text.slice(0, 300))
      const blocks: any[] = JSON.parse(res.text)
      assert.equal(blocks.length, 14)
      for (const b of blocks) {
        const node = await anvil.rpc('eth_getBlockByNumber', [hexq(b.header.number), false])
        assert.equal(b.header.hash, node.hash, `block ${b.header.number}`)
        assert.deepEqual((b.transactions ?? []).map((t: any) => t.hash), node.transactions, `transactions of block ${b.header.number}`)
      }
    } finally {
      await worker.stop()
    }
  })

  it('a reorg deeper than --max-reorg-depth stops the CLI with one line naming both blocks; within the bound a restart re-reads it, written chunks included', async () => {
    await anvil.rpc('anvil_reorg', [3, []]) // blocks 11, 12, 13: below the dataset's last written chunk
    await anvil.rpc('anvil_mine', [hexq(1)])
    const before = (await readTable(dir, 'blocks')).map((b) => b.hash).sort()
    const r = await runCli(['ingest', '--rpc', anvil.url, '--dataset', 'reorg', '--out', dir, '--finality', 'latest', '--max-reorg-depth', '2', '--progress', 'none'])
    assert.equal(r.code, 1, r.stderr)
    const line = r.stderr.trim().split('\n').filter((l) => /chain mismatch/.test(l))
    assert.equal(line.length, 1, r.stderr)
    const node13 = await anvil.rpc('eth_getBlockByNumber', [hexq(13), false])
    const node14 = await anvil.rpc('eth_getBlockByNumber', [hexq(14), false])
    assert.match(line[0], new RegExp(`chain mismatch deeper than --max-reorg-depth \\(2\\): block 14 \\(${node14.hash}\\) has parent hash ${node13.hash}, but block 13 has hash 0x[0-9a-f]{64} \\(chunk `))
    assert.deepEqual((await readTable(dir, 'blocks')).map((b) => b.hash).sort(), before, 'nothing was written or deleted')

    const again = await runIngest({ rpc: anvil.url, dataset: 'reorg', out: dir, finality: 'latest', workers: 0, progress: 'none' })
    assert.equal(again.reorgs.length, 1)
    assert.equal(again.reorgs[0].forkPoint, 10)
    assert.equal(again.last, 14)
    await sameAsNode(dir, 14)
  })

  it('a reorg below the finalized head the node announced is re-read, and logged as an error naming both hashes', async () => {
    await anvil.stop()
    anvil = await startAnvil(['--slots-in-an-epoch', '1']) // finalized = latest − 2
    const d = path.join(tmp.dir, 'below-finalized')
    await anvil.rpc('anvil_mine', [hexq(12)])
    const first = await runCli(['ingest', '--rpc', anvil.url, '--dataset', 'f', '--out', d, '--finality', 'latest', '--progress', 'none', '--workers', '0'])
    assert.equal(first.code, 0, first.stderr)
    const old10 = (await anvil.rpc('eth_getBlockByNumber', [hexq(10), false])).hash
    await anvil.rpc('anvil_reorg', [3, []]) // replaces 10..12; the node had announced 10 finalized
    await anvil.rpc('anvil_mine', [hexq(1)])
    const finalized = await numberOf('finalized')
    assert.ok(finalized >= 10, `finalized ${finalized}`)
    const r = await runCli(['ingest', '--rpc', anvil.url, '--dataset', 'f', '--out', d, '--finality', 'latest', '--progress', 'none', '--workers', '0'], undefined, { LOG_LEVEL: 'info' })
    assert.equal(r.code, 0, r.stderr)
    const errors = (r.stdout + r.stderr).split('\n').filter((l) => l.includes('"level":50'))
    assert.equal(errors.length, 1, r.stdout + r.stderr)
    const e = JSON.parse(errors[0])
    assert.deepEqual({ block: e.block, datasetHash: e.datasetHash, nodeHash: e.nodeHash }, { block: 10, datasetHash: old10, nodeHash: (await anvil.rpc('eth_getBlockByNumber', [hexq(10), false])).hash })
    assert.match(e.msg, /below the finalized head \d+ the node announced/)
    assert.match(r.stdout, /last block in the dataset: 13/)
    await sameAsNode(d, 13)
  })
})
