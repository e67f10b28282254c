import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { loadRecordedStarknet } from '../src/ingest/recorded.js'
import { ReplayServer } from '../src/ingest/replay.js'
import { RpcClient } from '../src/ingest/rpc.js'
import { ACCEPTED_ON_L1, highestAccepted } from '../src/ingest/starknet/finality.js'
import { feltOf } from '../src/ingest/starknet/normalize.js'
import { StarknetRpcSource } from '../src/ingest/starknet/source.js'

/*
 * Starknet finality: the highest block ACCEPTED_ON_L1, from the `l1_accepted` block tag (the replay
 * node serves recorded mainnet blocks, whose recorded status is ACCEPTED_ON_L1), or, on a node
 * without the tag, by a search over the blocks' status.
 */

describe('starknet finality', () => {
  const recorded = loadRecordedStarknet('starknet-mainnet')
  let server: ReplayServer
  let source: StarknetRpcSource

  before(async () => {
    server = new ReplayServer(recorded)
    await server.start()
    source = new StarknetRpcSource(new RpcClient({ url: server.url }))
  })
  after(async () => {
    await server?.close()
  })

  it('the finalized head is the l1_accepted block; statuses and hashes are the recorded blocks\'; Starknet has no safe head', async () => {
    const numbers = recorded.map((r) => r.number).sort((a, b) => a - b)
    assert.equal(await source.finalizedHead('finalized'), server.head)
    assert.equal(await source.finalizedHead('safe'), undefined)
    for (const r of recorded) assert.equal(await source.statusOf(r.number), r.starknet!.block.status, `status of ${r.number}`)
    assert.ok(recorded.every((r) => r.starknet!.block.status === ACCEPTED_ON_L1), 'the recorded mainnet blocks are all accepted on L1')
    assert.equal(await source.statusOf(numbers[0] + 1), undefined, 'a block the node does not have')
    const hashes = await source.blockHashes([...numbers, numbers[0] + 1])
    assert.deepEqual(hashes, [...numbers.map((n) => feltOf(recorded.find((r) => r.number === n)!.starknet!.block.block_hash)), undefined])
  })

  it('a node without the l1_accepted tag: the finalized head comes from the blocks\' status (recorded: the latest block is accepted on L1)', async () => {
    const old = new ReplayServer(recorded, { noL1AcceptedTag: true })
    await old.start()
    try {
      const src = new StarknetRpcSource(new RpcClient({ url: old.url }))
      assert.equal(await src.finalizedHead('finalized'), old.head)
      assert.equal(old.calls.get('starknet_blockNumber'), 1)
      assert.ok((old.calls.get('starknet_getBlockWithTxHashes') ?? 0) >= 2, 'the tag was asked, then the status of the latest block')
    } finally {
      await old.close()
    }
  })

  it('without the tag, the boundary between L1 and L2 statuses is found in about 2·log2(distance) status reads, and a known L1 block shortens the search', async () => {
    const l1Status = recorded[0].starknet!.block.status
    for (const [boundary, latest] of [[0, 0], [0, 1000], [999, 1000], [1000, 1000], [123_456, 130_000], [5, 130_000], [64, 65]]) {
      let reads = 0
      const statusOf = async (n: number) => {
        reads++
        assert.ok(n >= 0 && n <= latest, `read ${n} outside 0..${latest}`)
        return n <= boundary ? l1Status : 'ACCEPTED_ON_L2'
      }
      assert.equal(await highestAccepted(-1, latest, statusOf), boundary, `boundary ${boundary} below ${latest}`)
      const distance = Math.max(1, latest - boundary)
      assert.ok(reads <= 2 * Math.ceil(Math.log2(distance + 1)) + 2, `${reads} reads for a distance of ${distance}`)
      reads = 0
      if (boundary > 0) {
        assert.equal(await highestAccepted(boundary - 1, latest, statusOf), boundary)
        assert.ok(reads <= Math.ceil(Math.log2(latest - boundary + 2)) + 1, `${reads} reads from a known L1 block`)
      }
    }
    // no L1 block within the bound: none is claimed
    assert.equal(await highestAccepted(-1, 1000, async () => 'ACCEPTED_ON_L2', 100), undefined)
    assert.equal(await highestAccepted(-1, 1000, async (n) => (n <= 10 ? l1Status : 'ACCEPTED_ON_L2'), 100), undefined)
  })
})
