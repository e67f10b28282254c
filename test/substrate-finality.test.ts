import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { FinalityNotAvailable } from '../src/ingest/finality.js'
import { runIngest } from '../src/ingest/loop.js'
import { SubstrateNodeSource } from '../src/ingest/substrate/rpc/block-source.js'
import { runScenario, startChopsticks, type Chopsticks } from './helpers/chopsticks.js'
import { tempDir } from './helpers/dataset.js'
import { readTable } from './helpers/ingest-expect.js'

/*
 * Substrate finality and reorgs on a real runtime (chopsticks, offline Rococo Asset Hub genesis):
 * the finalized head read through chain_getFinalizedHead, and a fork made with dev_setHead (the
 * node builds on an earlier block, replacing the blocks above it).
 */

describe('substrate finality on chopsticks', { timeout: 600_000 }, () => {
  let node: Chopsticks
  let tmp: { dir: string; cleanup: () => Promise<void> }
  /** The head before the scenario's blocks: where the fork goes back to. */
  let base: { number: number; hash: string }
  const ingest = (o: Partial<Parameters<typeof runIngest>[0]> = {}) =>
    runIngest({ family: 'substrate', rpc: node.url, dataset: 'hub', out: path.join(tmp.dir, 'hub'), chunkBlocks: 2, workers: 0, progress: 'none', ...o })

  before(async () => {
    tmp = await tempDir('ba-substrate-finality-')
    node = await startChopsticks({ timeoutMs: 180_000 }) // generous: a loaded machine starts the runtime slowly
    const head = await node.rpc('chain_getHeader', [])
    base = { number: parseInt(head.number, 16), hash: await node.rpc('chain_getBlockHash', [parseInt(head.number, 16)]) }
    await runScenario(node) // blocks 1 and 2 carry transfers
    await node.newBlock()
  })
  after(async () => {
    await node?.stop()
    await tmp?.cleanup()
  })

  it('the finalized head is chain_getFinalizedHead\'s header; "safe" is not a Substrate head; the default finality is finalized', async () => {
    const finalized = parseInt((await node.rpc('chain_getHeader', [await node.rpc('chain_getFinalizedHead')])).number, 16)
    const source = new SubstrateNodeSource({ url: node.url })
    try {
      assert.equal(await source.finalizedHead('finalized'), finalized)
      assert.equal(await source.finalizedHead('safe'), undefined)
      const hashes = await source.blockHashes([0, 1, finalized, finalized + 1])
      assert.deepEqual(hashes, [
        await node.rpc('chain_getBlockHash', [0]),
        await node.rpc('chain_getBlockHash', [1]),
        await node.rpc('chain_getBlockHash', [finalized]),
        undefined,
      ])
    } finally {
      await source.close()
    }
    await assert.rejects(ingest({ finality: 'safe' }), (e: any) => {
      assert.ok(e instanceof FinalityNotAvailable)
      assert.match(e.message, /^--finality safe: the node does not tell its safe head .*pass --finality latest or a number of confirmations/)
      return true
    })
    const r = await ingest()
    assert.equal(r.finality, 'finalized')
    assert.equal(r.last, finalized)
  })

  it('a fork below the written chunks (dev_setHead back to the block before the scenario) is re-read: the dataset holds the node\'s new chain', async () => {
    const before = await readTable(path.join(tmp.dir, 'hub'), 'blocks')
    const oldLast = Math.max(...before.map((b) => Number(b.number)))
    const calls = async () => (await readTable(path.join(tmp.dir, 'hub'), 'calls')).map((x) => x.name as string)
    assert.ok((await calls()).includes('Proxy.add_proxy'), JSON.stringify(await calls())) // the scenario's
    await node.rpc('dev_setHead', [base.hash])
    for (let n = base.number + 1; n <= oldLast + 1; n++) await node.newBlock() // empty blocks in place of the scenario's, and one more
    const r = await ingest({ finality: 'latest' })
    assert.deepEqual(r.reorgs.map((x) => [x.forkPoint, x.tip]), [[base.number, oldLast]])
    assert.ok(r.reorgs[0].deletedChunks.length >= 1)
    assert.equal(r.last, oldLast + 1)
    const blocks = (await readTable(path.join(tmp.dir, 'hub'), 'blocks')).sort((a, b) => Number(a.number) - Number(b.number))
    assert.deepEqual(blocks.map((b) => Number(b.number)), Array.from({ length: oldLast + 2 }, (_, i) => i))
    for (const b of blocks) assert.equal(b.hash, await node.rpc('chain_getBlockHash', [Number(b.number)]), `block ${b.number}`)
    assert.deepEqual([...new Set(await calls())].sort(), ['ParachainSystem.set_validation_data', 'Timestamp.set'], 'only the new blocks\' inherents: the scenario\'s calls are gone')
  })
})
