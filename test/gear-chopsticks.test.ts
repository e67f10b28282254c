import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ApiPromise } from '@polkadot/api'
import { Keyring } from '@polkadot/keyring'
import type { KeyringPair } from '@polkadot/keyring/types'
import { ArchiveClient } from '@subsquid/util-internal-archive-client'
import type { Cluster } from '../src/server/cluster.js'
import { startChopsticks, type Chopsticks } from './helpers/chopsticks.js'
import { tempDir } from './helpers/dataset.js'
import { demoPing, VARA_SS58, varaChain } from './helpers/gear.js'
import { connectApi, key, nodeNames } from './helpers/node-view.js'
import { assertRan, runSubstrateProcessor, type Run } from './helpers/substrate-processor.js'
import { STATIC_DATA_TIMERS, ingestServed, walkRange } from './helpers/walk.js'

/*
 * Gear on a real Vara runtime: chopsticks runs the Vara mainnet genesis offline (runtime "vara" spec
 * 100, fixtures/substrate/gear). Alice uploads the demo "ping" program (gear.upload_program: a
 * Gear.MessageQueued with entry Init to the new program), then sends it "PING" (gear.send_message),
 * and Bob sends two more inside a utility.batch (events of nested calls). The blocks go through
 * `block-archive ingest --family substrate --rpc ws://…` (the CLI), a router with two workers serves
 * them, and:
 * - `gearMessagesQueued` by `programId` with the call, stack and extrinsic relations returns exactly
 *   the node's Gear.MessageQueued events for that program, as @polkadot/api decodes them from the
 *   same node (ids, source account, destination, entry; emitting call by the batch's ItemCompleted
 *   events; extrinsic hash);
 * - the real @subsquid/substrate-processor with `addGearMessageQueued` receives the same events,
 *   linked to the same calls and extrinsics, and its runtime re-encodes each to the node's bytes.
 *
 * Gear.UserMessageSent (the program's "PONG") cannot be produced here: the message queue is
 * processed by the unsigned `gear.run` extrinsic, which chopsticks applies when given it, but the
 * processing calls Gear's host functions (`ext_gear_ri_init_lazy_pages_version_1`, lazy pages), which
 * only the Gear node implements; chopsticks' executor fails the call, so the block is built without
 * it and every block ends with Gear.QueueProcessingReverted. The test checks exactly that.
 */

const DATASET = 'vara'
const GAS = 10_000_000_000n
const PING = '0x50494e47' // "PING"
const FIELDS = {
  event: { name: true, args: true, phase: true },
  call: { name: true, args: true, success: true },
  extrinsic: { hash: true, success: true },
}

/** One Gear.MessageQueued as the node says it, in the archive's terms. */
interface Queued {
  block: number
  index: number
  extrinsicIndex: number
  callAddress: number[]
  args: { id: string; source: string; destination: string; entry: { __kind: string } }
  /** The emitting call's name and, up to the root, its ancestors' addresses. */
  callName: string
  stack: number[][]
  extrinsicHash: string
  /** SCALE bytes of the event (pallet index, variant, fields). */
  bytes: string
}

describe('Gear on a real Vara runtime (chopsticks, Vara genesis): ingest, router + 2 workers, substrate-processor', { timeout: 600_000 }, () => {
  const t0 = Date.now()
  const lap = (what: string) => console.log(`# ${what}: ${((Date.now() - t0) / 1000).toFixed(1)} s`)
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let node: Chopsticks
  let api: ApiPromise
  let cluster: Cluster
  let client: ArchiveClient
  let gateway: string
  let alice: KeyringPair
  let bob: KeyringPair
  let programId: string
  let last: number
  let runAttempt: { hash: string; number: number }
  let queued: Queued[]
  const blockHashes: string[] = []
  let processor: Run

  before(async () => {
    tmp = await tempDir('ba-gear-')
    node = await startChopsticks({ chain: varaChain(['Alice', 'Bob'], 10n ** 18n), timeoutMs: 120_000 })
    api = await connectApi(node.url)
    lap(`chopsticks on the Vara genesis (${api.runtimeVersion.specName.toString()} ${api.runtimeVersion.specVersion.toNumber()})`)
    // Chopsticks builds block 1 as it starts; a signature is checked against System.BlockHash(0),
    // which only that block sets (genesis holds a placeholder), so make sure it exists.
    if (parseInt((await node.rpc('chain_getHeader', [])).number, 16) === 0) await node.newBlock()
    const keyring = new Keyring({ type: 'sr25519', ss58Format: VARA_SS58 })
    alice = keyring.addFromUri('//Alice')
    bob = keyring.addFromUri('//Bob')

    await api.tx.gear.uploadProgram('0x' + demoPing().toString('hex'), '0x01', '0x', GAS, 0).signAndSend(alice, { nonce: -1 })
    const upload = await node.newBlock()
    const uploadEvents: any[] = [...((await (await api.at(upload.hash)).query.system.events()) as any)]
    const init = uploadEvents.find((r) => r.event.section === 'gear' && r.event.method === 'MessageQueued')
    assert.ok(init, `no Gear.MessageQueued in the upload block: ${uploadEvents.map((r) => `${r.event.section}.${r.event.method}`)}`)
    programId = init.event.data[2].toHex()

    const send = (to: string) => api.tx.gear.sendMessage(to, PING, GAS, 0, ...(api.tx.gear.sendMessage.meta.args.length > 4 ? [false] : []))
    await send(programId).signAndSend(alice, { nonce: -1 })
    await api.tx.utility.batch([send(programId), send(programId)]).signAndSend(bob, { nonce: -1 })
    await node.newBlock()
    // The queue's processing: given to the block builder as an extrinsic (it is unsigned).
    const run = api.tx.gear.run(...(api.tx.gear.run.meta.args.length ? [null] : [])).toHex()
    runAttempt = await node.rpc('dev_newBlock', [{ transactions: [run] }]).then(async (hash: string) => ({ hash, number: parseInt((await node.rpc('chain_getHeader', [hash])).number, 16) }))
    await node.newBlock()
    last = parseInt((await node.rpc('chain_getHeader', [])).number, 16)
    lap(`scenario: blocks 0..${last}, program ${programId}`)

    // The node's view, through @polkadot/api.
    const { eventName, callName, accountHex } = nodeNames(() => api)
    queued = []
    for (let n = 0; n <= last; n++) {
      const hash = (await api.rpc.chain.getBlockHash(n)).toHex()
      blockHashes.push(hash)
      const { block } = await api.rpc.chain.getBlock(hash)
      const records: any[] = [...((await (await api.at(hash)).query.system.events()) as any)]
      records.forEach((r, index) => {
        if (eventName(r) !== 'Gear.MessageQueued' || r.event.data[2].toHex() !== programId) return
        const x = r.phase.asApplyExtrinsic.toNumber()
        const call = block.extrinsics[x].method
        // In a batch, item k's events come before the k-th Utility.ItemCompleted of the extrinsic.
        const batched = callName(call) === 'Utility.batch'
        const item = records.slice(0, index).filter((e) => e.phase.isApplyExtrinsic && e.phase.asApplyExtrinsic.toNumber() === x && eventName(e) === 'Utility.ItemCompleted').length
        const address = batched ? [item] : []
        const [id, source, destination, entry] = r.event.data
        queued.push({
          block: n,
          index,
          extrinsicIndex: x,
          callAddress: address,
          args: { id: id.toHex(), source: accountHex(source), destination: destination.toHex(), entry: { __kind: entry.type } },
          callName: callName(batched ? (call.args[0] as any)[item] : call),
          stack: batched ? [address, []] : [[]],
          extrinsicHash: block.extrinsics[x].hash.toHex(),
          bytes: r.event.toHex(),
        })
      })
    }
    assert.deepEqual(queued.map((q) => [q.args.entry.__kind, q.callAddress, q.callName]), [
      ['Init', [], 'Gear.upload_program'],
      ['Handle', [], 'Gear.send_message'],
      ['Handle', [0], 'Gear.send_message'],
      ['Handle', [1], 'Gear.send_message'],
    ])
    lap('node view read')

    ;({ cluster, gateway, client } = await ingestServed(node.url, path.join(tmp.dir, 'store'), DATASET, last, 2, STATIC_DATA_TIMERS))
    lap('ingested through the CLI and served')

    processor = await runSubstrateProcessor(tmp.dir, 'gear', {
      gateway,
      rpc: node.url,
      from: 0,
      to: last,
      fields: FIELDS,
      gearMessagesQueued: [{ programId: [programId], call: true, stack: true, extrinsic: true }],
    })
    lap(`processor done (${processor.batches} batch(es))`)
  })

  after(async () => {
    await api?.disconnect()
    await cluster?.stop()
    await node?.stop()
    await tmp?.cleanup()
  })

  const query = (q: object) => walkRange(0, last, (next) => client.query<any, any>({ type: 'substrate', fromBlock: next, toBlock: last, ...q }))

  it('gearMessagesQueued by programId: the node\'s Gear.MessageQueued events with their calls, stacks and extrinsics', async () => {
    const blocks = (await query({ gearMessagesQueued: [{ programId: [programId.toUpperCase().replace('0X', '0x')], call: true, stack: true, extrinsic: true }], fields: FIELDS }))
      .filter((b) => b.events?.length)
    const events = blocks.flatMap((b) => b.events.map((e: any) => ({ block: b.header.number, ...e })))
    assert.deepEqual(events, queued.map((q) => ({ block: q.block, index: q.index, extrinsicIndex: q.extrinsicIndex, callAddress: q.callAddress, name: 'Gear.MessageQueued', args: q.args, phase: 'ApplyExtrinsic' })))
    for (const q of queued) {
      const b = blocks.find((x) => x.header.number === q.block)
      assert.equal(b.header.hash, blockHashes[q.block])
      const calls = b.calls.filter((c: any) => c.extrinsicIndex === q.extrinsicIndex)
      // The emitting calls of the extrinsic's selected events and their ancestors: exactly their stacks.
      const stacks = new Set(queued.filter((o) => o.block === q.block && o.extrinsicIndex === q.extrinsicIndex).flatMap((o) => o.stack.map(key)))
      assert.deepEqual(calls.map((c: any) => key(c.address)).sort(), [...stacks].sort(), `calls of event ${q.block}/${q.index}`)
      const emitting = calls.find((c: any) => key(c.address) === key(q.callAddress))
      assert.equal(emitting.name, q.callName)
      assert.equal(emitting.success, true)
      if (q.callName === 'Gear.send_message') {
        assert.equal(emitting.args.destination, programId)
        assert.equal(emitting.args.payload, PING)
      }
      const x = b.extrinsics.find((e: any) => e.index === q.extrinsicIndex)
      assert.deepEqual({ hash: x.hash, success: x.success }, { hash: q.extrinsicHash, success: true })
    }
  })

  it('gearMessagesQueued of another program and gearUserMessagesSent select nothing (no queue was processed)', async () => {
    const other = await query({ gearMessagesQueued: [{ programId: ['0x' + '00'.repeat(32)] }], fields: FIELDS })
    assert.equal(other.flatMap((b) => b.events ?? []).length, 0)
    const sent = await query({ gearUserMessagesSent: [{ programId: [programId] }], fields: FIELDS })
    assert.equal(sent.flatMap((b) => b.events ?? []).length, 0)
  })

  it('gear.run cannot run under chopsticks: Gear\'s lazy-pages host function is missing, the queue is reverted in every block', async () => {
    const { block } = await api.rpc.chain.getBlock(runAttempt.hash)
    const { callName, eventName } = nodeNames(() => api)
    assert.deepEqual(block.extrinsics.map((x) => callName(x.method)), ['Timestamp.set'], 'gear.run was not left out of the block')
    assert.match(node.log(), /unresolved function `env`:`ext_gear_ri_init_lazy_pages_version_1`/)
    const records: any[] = [...((await (await api.at(runAttempt.hash)).query.system.events()) as any)]
    assert.deepEqual(records.filter((r) => r.phase.isFinalization).map(eventName), ['Gear.QueueProcessingReverted'])
    // The archive has them too, in the Finalization phase.
    const blocks = await query({ events: [{ name: ['Gear.QueueProcessingReverted'] }], fields: FIELDS })
    const reverted = blocks.flatMap((b) => (b.events ?? []).map((e: any) => ({ block: b.header.number, phase: e.phase })))
    assert.ok(reverted.some((e) => e.block === runAttempt.number && e.phase === 'Finalization'), JSON.stringify(reverted))
  })

  it('the real substrate-processor (addGearMessageQueued) receives the same events, calls and extrinsics; its runtime re-encodes them to the node\'s bytes', () => {
    assertRan(processor, 'gear')
    const events = processor.blocks.flatMap((b) => b.events.map((e: any) => ({ block: b.header.height, ...e })))
    assert.deepEqual(events.map((e) => ({ block: e.block, index: e.index, extrinsicIndex: e.extrinsicIndex, callAddress: e.callAddress, name: e.name, args: e.args, phase: e.phase })),
      queued.map((q) => ({ block: q.block, index: q.index, extrinsicIndex: q.extrinsicIndex, callAddress: q.callAddress, name: 'Gear.MessageQueued', args: q.args, phase: 'ApplyExtrinsic' })))
    for (const [i, e] of events.entries()) {
      const q = queued[i]
      assert.deepEqual({ call: e._call, callName: e._callName, stack: e._stack, extrinsic: e._extrinsic }, { call: q.callAddress, callName: q.callName, stack: q.stack, extrinsic: q.extrinsicIndex })
      assert.equal(e._decodeError, undefined, e._decodeError)
      assert.equal(e._encoded, q.bytes, `event ${q.block}/${q.index} re-encoded`)
    }
    for (const b of processor.blocks) {
      assert.equal(b.header.hash, blockHashes[b.header.height])
      assert.deepEqual(b.header._runtime, { specName: 'vara', specVersion: 100, implName: 'vara', implVersion: 1 })
    }
  })
})
