import assert from 'node:assert/strict'
import { readdir } from 'node:fs/promises'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks } from '../src/chunks/layout.js'
import { ChunkBuilder } from '../src/chunks/writer.js'
import { evmFamily } from '../src/families/evm.js'
import { normalizeEvmBlock } from '../src/ingest/evm/normalize.js'
import { loadRecordedChain } from '../src/ingest/recorded.js'
import { tempDir } from './helpers/dataset.js'

/*
 * Chunks closing side by side (ingest `--closes`): `ChunkBuilder.finish(top, inOrder)` writes its
 * files at once but moves the chunk into place only after `inOrder` (the previous chunk placed), so
 * a reader never sees a chunk whose predecessor is missing, and a predecessor that fails takes the
 * later chunk with it. Real recorded Ethereum blocks (1000000 and 4369999), one per chunk.
 */

describe('chunks closing side by side are placed in order', () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  const blocks = loadRecordedChain('ethereum').filter((b) => b.receipts && (b.number === 1000000 || b.number === 4369999))
  before(async () => {
    tmp = await tempDir('ba-writer-order-')
  })
  after(async () => {
    await tmp?.cleanup()
  })

  const builderOf = async (dir: string, b: (typeof blocks)[number]) => {
    const builder = new ChunkBuilder(evmFamily, dir, ['blocks', 'transactions', 'logs'])
    await builder.addBlock(b.number, b.block.hash, b.block.parentHash, normalizeEvmBlock({ block: b.block, receipts: b.receipts }))
    return builder
  }

  it('a chunk whose files are written first waits for its predecessor before it appears', async () => {
    assert.equal(blocks.length, 2)
    const dir = `${tmp.dir}/order`
    const [first, second] = [await builderOf(dir, blocks[0]), await builderOf(dir, blocks[1])]
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    const firstDone = first.finish(blocks[0].number, () => gate)
    const secondDone = second.finish(blocks[0].number, () => firstDone)
    // Both sets of files are written; neither chunk may be in place while the first one is held.
    await new Promise((r) => setTimeout(r, 300))
    assert.deepEqual(await listLocalChunks(dir), [], 'nothing placed before the first chunk')
    release()
    const refs = [await firstDone, await secondDone]
    assert.deepEqual((await listLocalChunks(dir)).map((c) => c.first), refs.map((r) => r.first))
  })

  it('a chunk whose predecessor fails is dropped with it: its error, no folder, no temp files', async () => {
    const dir = `${tmp.dir}/failed`
    const builder = await builderOf(dir, blocks[1])
    await assert.rejects(builder.finish(blocks[1].number, () => Promise.reject(new Error('the previous chunk failed'))), /the previous chunk failed/)
    assert.deepEqual(await listLocalChunks(dir), [])
    assert.deepEqual((await readdir(dir)).filter((x) => x.startsWith('.tmp-')), [], 'no temp folder left')
  })
})
