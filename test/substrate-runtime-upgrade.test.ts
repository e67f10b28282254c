import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ApiPromise } from '@polkadot/api'
import { Keyring } from '@polkadot/keyring'
import { ArchiveClient } from '@subsquid/util-internal-archive-client'
import type { Cluster } from '../src/server/cluster.js'
import { startChopsticks, type Chopsticks } from './helpers/chopsticks.js'
import { until } from './helpers/cli.js'
import { tempDir } from './helpers/dataset.js'
import { VARA_SS58, varaChain, varaTestnetRuntime } from './helpers/gear.js'
import { callTree, connectApi, key } from './helpers/node-view.js'
import { assertRan, runSubstrateProcessor, type Run } from './helpers/substrate-processor.js'
import { STATIC_DATA_TIMERS, ingestServed, walkRange } from './helpers/walk.js'

/*
 * A real runtime upgrade across an ingested range: chopsticks runs the Vara mainnet genesis offline
 * (runtime `vara` spec 100) and Alice, made the Sudo key, replaces it by the Vara testnet's genesis
 * runtime (`vara` spec 1000; fixtures/substrate/gear, its sign-extension instructions lowered so that
 * chopsticks' executor loads it) with `sudo(system.set_code_without_checks)`. Blocks before, at and
 * after the upgrade carry events (a remark, transfers; Vara spec 100 filters out signed balance
 * transfers, so the one before goes through `sudo(balances.force_transfer)`). The range is ingested
 * with `ingest --family substrate --rpc ws://…`, served by a router with two workers, and checked
 * against what @polkadot/api decodes from the same node (each block with the runtime of its parent,
 * the code that executed it):
 * - every header's spec version is the node's `state_getRuntimeVersion` at that block, as in squid's
 *   own archives: 100 before the upgrade, 1000 from the block that set the code (its state holds the
 *   new code), while that block was still executed, and is decoded, by spec 100;
 * - every event of every block (name, index, phase, extrinsic) on both sides of the upgrade, the
 *   transfers' and the remarks' args; the decoding runtime matters here: Gear's end-of-block event
 *   of spec 1000 (`QueueNotProcessed`) has the bytes of another one under spec 100
 *   (`QueueProcessingReverted`);
 * - the real @subsquid/substrate-processor syncs the range from the router: its runtime per block is
 *   the one that executed it (100 up to the upgrade block, 1000 from the next), and it re-encodes every event and call (the 930 KB `set_code_without_checks`
 *   included) from the archive's JSON to exactly the node's bytes, each with its block's runtime.
 *
 * `sudo(system.set_code)`, the checked form, fails under chopsticks: it asks the host for the new
 * code's version, and chopsticks' executor compiles that code without allowing unresolved imports,
 * which Vara's runtime has (Gear's own host functions); the test checks that failure too.
 */

const DATASET = 'vara-upgrade'
const UNIT = 10n ** 12n
const FIELDS = {
  block: { specName: true, specVersion: true, implName: true, implVersion: true },
  event: { name: true, args: true, phase: true },
  call: { name: true, args: true, success: true },
  extrinsic: { hash: true, success: true },
}

/** One event as the node says it. */
interface NodeEvent {
  index: number
  name: string
  phase: string
  extrinsicIndex: number | null
  args: any
  bytes: string
}

/** One block as the node says it: the runtime that executed it, its events and extrinsics. */
interface NodeBlock {
  number: number
  hash: string
  /** `state_getRuntimeVersion` at the block: the code in its state after it. */
  stateSpecVersion: number
  /** The runtime that executed it (its parent's code). */
  specVersion: number
  events: NodeEvent[]
  extrinsics: any[]
  /** `Pallet.call_name` of a call, with this block's metadata. */
  callName: (call: any) => string
  /** `Pallet.EventName` that this block's metadata gives an event's (pallet, variant) index; null if none. */
  eventNameOf: (bytes: string) => string | null
}

describe('Runtime upgrade on a real chain (chopsticks, Vara spec 100 → 1000): ingest, router + 2 workers, substrate-processor', { timeout: 420_000 }, () => {
  const t0 = Date.now()
  const lap = (what: string) => console.log(`# ${what}: ${((Date.now() - t0) / 1000).toFixed(1)} s`)
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let node: Chopsticks
  let api: ApiPromise
  let cluster: Cluster
  let client: ArchiveClient
  let gateway: string
  /** Blocks of the scenario: the refused set_code, the upgrade, the first block of the new code. */
  let beforeUpgrade: number
  let refused: number
  let upgrade: number
  let first: number
  let last: number
  let rejectedTransfer: string
  const nodeBlocks: NodeBlock[] = []
  let processor: Run

  before(async () => {
    tmp = await tempDir('ba-upgrade-')
    node = await startChopsticks({ chain: varaChain(['Alice', 'Bob'], 10n ** 18n, 'Alice'), timeoutMs: 120_000 })
    api = await connectApi(node.url)
    assert.equal(api.runtimeVersion.specVersion.toNumber(), 100)
    // Chopsticks builds block 1 as it starts; signatures are checked against System.BlockHash(0), which only that block sets.
    if (parseInt((await node.rpc('chain_getHeader', [])).number, 16) === 0) await node.newBlock()
    const keyring = new Keyring({ type: 'sr25519', ss58Format: VARA_SS58 })
    const alice = keyring.addFromUri('//Alice')
    const bob = keyring.addFromUri('//Bob')
    const tx = () => api.tx as any
    const asRoot = (call: any) => tx().sudo.sudoUncheckedWeight(call, { refTime: 1, proofSize: 1 })

    // Before: spec 100 refuses a signed transfer (its call filter), Root may move funds.
    rejectedTransfer = await tx().balances.transferKeepAlive(bob.address, UNIT).signAndSend(alice, { nonce: -1 }).then(() => 'accepted', (e: Error) => e.message)
    await tx().system.remarkWithEvent('0x6265666f7265').signAndSend(bob, { nonce: -1 })
    await tx().sudo.sudo(tx().balances.forceTransfer(alice.address, bob.address, 12_345n * UNIT)).signAndSend(alice, { nonce: -1 })
    beforeUpgrade = (await node.newBlock()).number
    const code = varaTestnetRuntime()
    await asRoot(tx().system.setCode(code)).signAndSend(alice, { nonce: -1 })
    refused = (await node.newBlock()).number
    await asRoot(tx().system.setCodeWithoutChecks(code)).signAndSend(alice, { nonce: -1 })
    const up = await node.newBlock()
    upgrade = up.number
    // @polkadot/api follows the node's runtime version; transactions after this are signed for spec 1000.
    await until('@polkadot/api on spec 1000', async () => (api.runtimeVersion.specVersion.toNumber() === 1000 ? true : undefined), 60_000)

    // After: the first block of the new code has transactions too, and spec 1000 lets signed transfers through.
    await tx().balances.transferKeepAlive(bob.address, 777n * UNIT).signAndSend(alice, { nonce: -1 })
    await tx().system.remarkWithEvent('0x6166746572').signAndSend(bob, { nonce: -1 })
    first = (await node.newBlock()).number
    await tx().utility.batch([tx().balances.transferKeepAlive(alice.address, 3n * UNIT + 1n), tx().balances.transferKeepAlive(alice.address, 5n * UNIT + 2n)]).signAndSend(bob, { nonce: -1 })
    last = (await node.newBlock()).number
    assert.deepEqual([refused, upgrade, first, last], [beforeUpgrade + 1, beforeUpgrade + 2, beforeUpgrade + 3, beforeUpgrade + 4])
    lap(`scenario: blocks 0..${last}, upgrade in block ${upgrade}`)

    // The node's view, each block decoded by @polkadot/api with its own runtime.
    for (let n = 0; n <= last; n++) {
      const hash = (await api.rpc.chain.getBlockHash(n)).toHex()
      const at = await api.at(hash)
      const { block } = await api.rpc.chain.getBlock(hash)
      const pallet = (index: number) => at.registry.metadata.pallets.find((p) => p.index.toNumber() === index)!.name.toString()
      const records: any[] = [...((await at.query.system.events()) as any)]
      nodeBlocks.push({
        number: n,
        hash,
        stateSpecVersion: (await node.rpc('state_getRuntimeVersion', [hash])).specVersion,
        specVersion: at.runtimeVersion.specVersion.toNumber(),
        extrinsics: [...block.extrinsics],
        callName: (call) => `${pallet(call.callIndex[0])}.${at.registry.findMetaCall(call.callIndex).meta.name.toString()}`,
        eventNameOf: (bytes) => {
          const [palletIndex, variant] = Buffer.from(bytes.slice(2, 6), 'hex')
          const p = at.registry.metadata.pallets.find((x) => x.index.toNumber() === palletIndex)
          if (!p || p.events.isNone) return null
          const v = at.registry.lookup.getSiType(p.events.unwrap().type).def.asVariant.variants.find((x) => x.index.toNumber() === variant)
          return v ? `${p.name.toString()}.${v.name.toString()}` : null
        },
        events: records.map((r, index) => ({
          index,
          name: `${pallet(r.event.index[0])}.${r.event.method}`,
          phase: r.phase.type,
          extrinsicIndex: r.phase.isApplyExtrinsic ? r.phase.asApplyExtrinsic.toNumber() : null,
          args: r.event.data,
          bytes: r.event.toHex(),
        })),
      })
    }
    lap('node view read')

    ;({ cluster, gateway, client } = await ingestServed(node.url, path.join(tmp.dir, 'store'), DATASET, last, 3, STATIC_DATA_TIMERS))
    lap('ingested through the CLI and served')

    processor = await runSubstrateProcessor(tmp.dir, 'upgrade', {
      gateway,
      rpc: node.url,
      from: 0,
      to: last,
      fields: FIELDS,
      events: [{}],
      calls: [{}],
      includeAllBlocks: true,
    })
    lap(`processor done (${processor.batches} batch(es))`)
  })

  after(async () => {
    await api?.disconnect()
    await cluster?.stop()
    await node?.stop()
    await tmp?.cleanup()
  })

  const archive = () => walkRange(0, last, (next) => client.query<any, any>({ type: 'substrate', fromBlock: next, toBlock: last, includeAllBlocks: true, events: [{}], fields: FIELDS }))
  const named = (b: NodeBlock, name: string) => b.events.filter((e) => e.name === name)
  const accountHex = (a: any) => api.createType('AccountId', a.toString()).toHex()

  it('the scenario: spec 100 refuses set_code and signed transfers; set_code_without_checks upgrades to spec 1000', () => {
    assert.match(rejectedTransfer, /1010.*invalid.*call/i)
    const sudid = (n: number) => named(nodeBlocks[n], 'Sudo.Sudid').map((e) => e.args[0].toJSON())
    assert.deepEqual(sudid(refused), [{ err: { module: { index: 0, error: '0x02000000' } } }], 'System error 2: FailedToExtractRuntimeVersion')
    assert.equal(named(nodeBlocks[refused], 'System.CodeUpdated').length, 0)
    assert.deepEqual(sudid(upgrade), [{ ok: null }])
    assert.equal(named(nodeBlocks[upgrade], 'System.CodeUpdated').length, 1)
    assert.deepEqual(nodeBlocks.map((b) => b.specVersion), nodeBlocks.map((b) => (b.number <= upgrade ? 100 : 1000)), 'the runtime that executed each block')
    assert.deepEqual(nodeBlocks.map((b) => b.stateSpecVersion), nodeBlocks.map((b) => (b.number < upgrade ? 100 : 1000)), 'the code in each block\'s state')
  })

  it('the runtime matters: events of the new code name other events (or none) under the old metadata', () => {
    const old = nodeBlocks[upgrade]
    const renamed = nodeBlocks.slice(first).flatMap((b) => b.events.filter((e) => old.eventNameOf(e.bytes) !== e.name).map((e) => `${e.name} (spec 100: ${old.eventNameOf(e.bytes)})`))
    // Gear's end-of-block event: its bytes under spec 1000 are another event's under spec 100.
    assert.deepEqual([...new Set(renamed)], ['Gear.QueueNotProcessed (spec 100: Gear.QueueProcessingReverted)'])
  })

  it('headers: the node\'s state_getRuntimeVersion at each block (squid\'s convention): 100, then 1000 from the upgrade block on', async () => {
    const blocks = await archive()
    assert.deepEqual(blocks.map((b) => b.header.number), nodeBlocks.map((b) => b.number))
    assert.deepEqual(blocks.map((b) => [b.header.hash, b.header.specName, b.header.specVersion, b.header.implName, b.header.implVersion]), nodeBlocks.map((b) => [b.hash, 'vara', b.stateSpecVersion, 'vara', 1]))
  })

  it('every event on both sides of the upgrade, decoded with the runtime that emitted it: names, order, phases, args as the node decodes them', async () => {
    const blocks = await archive()
    for (const [n, b] of blocks.entries()) {
      const want = nodeBlocks[n].events
      assert.deepEqual(b.events.map((e: any) => [e.index, e.name, e.phase, e.extrinsicIndex]), want.map((e) => [e.index, e.name, e.phase, e.extrinsicIndex]), `events of block ${n}`)
      for (const [i, e] of want.entries()) {
        const got = b.events[i].args
        if (e.name === 'Balances.Transfer') assert.deepEqual(got, { from: accountHex(e.args[0]), to: accountHex(e.args[1]), amount: e.args[2].toString() }, `block ${n} event ${i}`)
        if (e.name === 'System.Remarked') assert.deepEqual(got, { sender: accountHex(e.args[0]), hash: e.args[1].toHex() }, `block ${n} event ${i}`)
      }
    }
    const transfers = blocks.flatMap((b) => b.events.filter((e: any) => e.name === 'Balances.Transfer').map((e: any) => [b.header.number, e.args.amount]))
    assert.deepEqual(transfers, [[beforeUpgrade, String(12_345n * UNIT)], [first, String(777n * UNIT)], [last, String(3n * UNIT + 1n)], [last, String(5n * UNIT + 2n)]])
    // Blocks end with a Gear event in Finalization; the name changed with the runtime.
    const finalization = blocks.filter((b) => b.header.number > 0).map((b) => [b.header.number, b.events.filter((e: any) => e.phase === 'Finalization').map((e: any) => e.name)])
    assert.deepEqual(finalization, nodeBlocks.slice(1).map((b) => [b.number, b.events.filter((e) => e.phase === 'Finalization').map((e) => e.name)]))
  })

  it('the real substrate-processor syncs across the upgrade: its runtime per block, and every event and call re-encoded to the node\'s bytes', () => {
    assertRan(processor, 'upgrade')
    assert.deepEqual(processor.blocks.map((b) => [b.header.height, b.header.hash, b.header.specVersion, b.header._runtime]), nodeBlocks.map((b) => [b.number, b.hash, b.stateSpecVersion, { specName: 'vara', specVersion: b.specVersion, implName: 'vara', implVersion: 1 }]))
    let calls = 0
    for (const b of processor.blocks) {
      const ref = nodeBlocks[b.header.height]
      assert.deepEqual(b.events.map((e: any) => [e.index, e.name]), ref.events.map((e) => [e.index, e.name]), `events of block ${ref.number}`)
      for (const e of b.events) {
        assert.equal(e._decodeError, undefined, e._decodeError)
        assert.equal(e._encoded, ref.events[e.index].bytes, `block ${ref.number} event ${e.index} re-encoded with spec ${b.header._runtime.specVersion}`)
      }
      for (const c of b.calls) {
        const call = callTree(ref.extrinsics[c.extrinsicIndex].method).get(key(c.address))
        assert.ok(call, `block ${ref.number} call ${c.extrinsicIndex}/${key(c.address)}`)
        assert.equal(c.name, ref.callName(call))
        assert.equal(c._decodeError, undefined, c._decodeError)
        assert.equal(c._encoded, call.toHex(), `block ${ref.number} call ${c.name} re-encoded with spec ${b.header._runtime.specVersion}`)
        calls++
      }
    }
    const names = processor.blocks.flatMap((b) => b.calls.map((c: any) => `${b.header.height}:${c.name}`))
    for (const want of [`${upgrade}:System.set_code_without_checks`, `${refused}:System.set_code`, `${beforeUpgrade}:Balances.force_transfer`, `${first}:Balances.transfer_keep_alive`, `${last}:Utility.batch`]) assert.ok(names.includes(want), `${want} in ${names}`)
    lap(`${calls} calls and ${processor.blocks.reduce((s, b) => s + b.events.length, 0)} events re-encoded`)
  })
})
