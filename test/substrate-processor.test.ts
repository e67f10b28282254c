import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { ApiPromise } from '@polkadot/api'
import { runIngest } from '../src/ingest/loop.js'
import type { Cluster } from '../src/server/cluster.js'
import { runScenario, startChopsticks, type Chopsticks, type Scenario, type Submitted } from './helpers/chopsticks.js'
import { tempDir } from './helpers/dataset.js'
import { callTree, connectApi, key, nodeNames } from './helpers/node-view.js'
import { startServed } from './helpers/walk.js'
import { assertRan, runSubstrateProcessor, type Run } from './helpers/substrate-processor.js'

/*
 * The real `@subsquid/substrate-processor@8.5.1` (in a child process: it exits when its range is
 * done) with a live chopsticks node as its RPC endpoint (runtime versions and metadata only: RPC data
 * ingestion is disabled) and our router as its gateway. The chain: the Rococo Asset Hub genesis run
 * offline, with the scenario of helpers/chopsticks.ts (a transfer, add_proxy, a utility.batch with a
 * nested batch_all, a proxy.proxy, a failing batch_all), ingested from the same node and served by a
 * router with two workers. What the processor's handler receives is compared with what the node says
 * through @polkadot/api (an independent decoder): headers and runtime versions, every
 * Balances.Transfer with its call, stack and extrinsic, every Utility batch call with its subcalls,
 * siblings and events; and the args must decode with the processor's own runtime (built from the
 * node's metadata) and re-encode to the node's bytes.
 */

const BATCHES = ['Utility.batch', 'Utility.batch_all']

const FIELDS = {
  block: { timestamp: true },
  event: { name: true, args: true, phase: true },
  call: { name: true, args: true, success: true, origin: true, error: true },
  extrinsic: { hash: true, fee: true, tip: true, success: true, error: true, signature: true, version: true },
}

/** What the node says about one block, through @polkadot/api. */
interface NodeBlock {
  number: number
  hash: string
  parentHash: string
  version: { specName: string; specVersion: number; implName: string; implVersion: number }
  timestamp: number
  extrinsics: any[]
  records: any[]
}

describe('@subsquid/substrate-processor on chopsticks (RPC) + our router (gateway)', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let node: Chopsticks
  let scenario: Scenario
  let cluster: Cluster
  let api: ApiPromise
  let gateway: string
  let last: number
  let nodeBlocks: Map<number, NodeBlock>
  const runs: Record<'events' | 'calls' | 'siblings', Run> = {} as any
  const t0 = Date.now()
  const lap = (what: string) => console.log(`${what}: ${Date.now() - t0} ms`)

  before(async () => {
    tmp = await tempDir('ba-substrate-processor-')
    node = await startChopsticks({ timeoutMs: 180_000 }) // generous: a loaded machine starts the runtime slowly
    lap('chopsticks started')
    scenario = await runScenario(node)
    last = scenario.blocks.at(-1)!.number
    lap(`scenario submitted (blocks ${scenario.blocks.map((b) => b.number)})`)

    const ingest = await runIngest({ family: 'substrate', rpc: node.url, dataset: 'asset-hub', out: path.join(tmp.dir, 'asset-hub'), from: 0, to: last, progress: 'none', confirmations: 0, workers: 1 }) // through a fetch worker
    lap(`ingested blocks 0..${ingest.last} (${JSON.stringify(ingest.rows)})`)

    let heights: Record<string, number>
    ;({ cluster, heights } = await startServed(tmp.dir, { 'asset-hub': last }))
    gateway = cluster.datasets.get('asset-hub')!
    assert.ok(heights['asset-hub'] >= last, `${gateway}/height never reached ${last}`)
    lap('served')

    // Three processors side by side, so that each relation is seen alone (an item another request
    // selects anyway would hide a missing relation).
    const common = { gateway, rpc: node.url, from: 0, to: last, fields: FIELDS }
    ;[runs.events, runs.calls, runs.siblings] = await Promise.all([
      runSubstrateProcessor(tmp.dir, 'events', {
        ...common,
        events: [{ name: ['Balances.Transfer'], call: true, extrinsic: true, stack: true }],
      }),
      runSubstrateProcessor(tmp.dir, 'calls', {
        ...common,
        // `subcalls` (and `siblings` below) are not in 8.5.1's CallRequest type (extrinsic, stack,
        // events); the processor passes request objects to the gateway unchanged, so they reach the query.
        calls: [{ name: BATCHES, subcalls: true, events: true, extrinsic: true }],
      }),
      runSubstrateProcessor(tmp.dir, 'siblings', {
        ...common,
        calls: [{ name: ['Utility.batch_all'], siblings: true }],
      }),
    ])
    lap(`processors done (${Object.entries(runs).map(([k, r]) => `${k}: ${r.batches} batch(es), ${r.queries.length} query(ies)`).join('; ')})`)
    for (const [k, r] of Object.entries(runs)) console.log(`queries sent by the "${k}" run:\n${r.queries.join('\n')}`)

    api = await connectApi(node.url)
    nodeBlocks = new Map()
    for (let n = 0; n <= last; n++) {
      const hash = (await api.rpc.chain.getBlockHash(n)).toHex()
      const signed = await api.rpc.chain.getBlock(hash)
      const at = await api.at(hash)
      const v = await node.rpc('state_getRuntimeVersion', [hash])
      nodeBlocks.set(n, {
        number: n,
        hash,
        parentHash: signed.block.header.parentHash.toHex(),
        version: { specName: v.specName, specVersion: v.specVersion, implName: v.implName, implVersion: v.implVersion },
        timestamp: ((await at.query.timestamp.now()) as any).toNumber(),
        extrinsics: [...signed.block.extrinsics],
        records: [...((await at.query.system.events()) as any)],
      })
    }
    lap('node view read')
  })

  after(async () => {
    await api?.disconnect()
    await cluster?.stop()
    await node?.stop()
    await tmp?.cleanup()
    lap('cleaned up')
  })

  // ------------------------------------------------------------ the node's view (@polkadot/api)

  const { eventName, callName, accountHex } = nodeNames(() => api)
  /** Event records of one extrinsic, with their index in the block. */
  function extrinsicRecords(b: NodeBlock, i: number): { index: number; record: any }[] {
    return b.records.map((record, index) => ({ index, record })).filter(({ record }) => record.phase.isApplyExtrinsic && record.phase.asApplyExtrinsic.toNumber() === i)
  }
  function extrinsicOutcome(b: NodeBlock, i: number): any {
    return extrinsicRecords(b, i).find(({ record }) => /^System\.Extrinsic(Success|Failed)$/.test(eventName(record)))!.record
  }
  /**
   * How a successful extrinsic's calls ran, read off the node's event list: `spans` gives each
   * call's [begin, end) event indexes (a batch's item i ends at its Utility.ItemCompleted, the batch
   * with its BatchCompleted; a proxied call ends before Proxy.ProxyExecuted); `owner` the call that
   * emitted an event, where the structure says it (a batch's ItemCompleted / BatchCompleted, a
   * proxy's ProxyExecuted, the events of a leaf call). Around the root call: the fee's
   * Balances.Withdraw before, Balances.Deposit and System.ExtrinsicSuccess after.
   */
  function callLayout(b: NodeBlock, i: number): { spans: Map<string, [number, number]>; owner: Map<number, string> } {
    const recs = extrinsicRecords(b, i)
    const names = recs.map((r) => eventName(r.record))
    const spans = new Map<string, [number, number]>()
    const owner = new Map<number, string>()
    let pos = 0
    const expect = (name: string, address: number[]) => {
      assert.equal(names[pos], name, `block ${b.number} extrinsic ${i}: event ${recs[pos]?.index}`)
      owner.set(recs[pos].index, key(address))
      pos++
    }
    const visit = (call: any, address: number[]) => {
      const begin = pos
      const name = callName(call)
      if (BATCHES.includes(name)) {
        call.args[0].forEach((sub: any, j: number) => {
          visit(sub, [...address, j])
          expect('Utility.ItemCompleted', address)
        })
        expect('Utility.BatchCompleted', address)
      } else if (name === 'Proxy.proxy') {
        visit(call.args[2].unwrap(), [...address, 0])
        expect('Proxy.ProxyExecuted', address)
      } else {
        while (pos < names.length && !/^(Utility\.|Proxy\.ProxyExecuted|System\.Extrinsic)/.test(names[pos]) && !(address.length === 0 && names[pos] === 'Balances.Deposit')) {
          owner.set(recs[pos].index, key(address))
          pos++
        }
      }
      spans.set(key(address), [recs[begin].index, recs[pos - 1].index + 1])
    }
    assert.equal(names[0], 'Balances.Withdraw')
    pos = 1
    visit(b.extrinsics[i].method, [])
    assert.deepEqual(names.slice(pos), ['Balances.Deposit', 'System.ExtrinsicSuccess'], `block ${b.number} extrinsic ${i}`)
    return { spans, owner }
  }
  function submittedAt(block: number, index: number): Submitted {
    const s = scenario.submitted.find((x) => x.block === block && x.index === index)
    assert.ok(s, `no submitted extrinsic at ${block}/${index}`)
    return s
  }
  const signerKey = (s: Submitted) => Object.values(scenario.accounts).find((a) => a.address === s.signer)!.publicKey
  /** Blocks the processor should hand over: the first of the range, those with items, the last. */
  const expectedHeights = (withItems: number[]) => [...new Set([0, ...withItems, last])].sort((a, b) => a - b)
  const sorted = (xs: string[]) => [...xs].sort()

  /** A call the processor got = the node's call at that address: name, bytes re-encoded from its args, success, origin. */
  function checkCall(height: number, c: any, where: string): void {
    const n = nodeBlocks.get(height)!
    const tree = callTree(n.extrinsics[c.extrinsicIndex].method)
    const s = submittedAt(height, c.extrinsicIndex)
    const ref = tree.get(key(c.address))
    assert.ok(ref, `${where}: no call at [${key(c.address)}] on the node`)
    assert.equal(c.name, callName(ref), where)
    assert.equal(c.name, s.calls[key(c.address)], where)
    assert.equal(c._decodeError, undefined, `${where}: ${c._decodeError}`)
    assert.equal(c._encoded, ref.toHex(), `${where}: args re-encoded with the processor's runtime = the node's call bytes`)
    assert.equal(c.success, s.success, where)
    if (c.address.length === 0) {
      assert.deepEqual(c.origin, { __kind: 'system', value: { __kind: 'Signed', value: signerKey(s) } }, where)
      if (!s.success) {
        const err = extrinsicOutcome(n, c.extrinsicIndex).event.data[0].asModule
        assert.deepEqual(c.error, { __kind: 'Module', value: { index: err.index.toNumber(), error: err.error.toHex() } }, where)
      }
    }
    if (c.name === 'Balances.transfer') {
      assert.deepEqual(c._decoded.dest, { __kind: 'Id', value: accountHex(ref.args[0]) })
      assert.equal(c._decoded.value, ref.args[1].toBigInt().toString())
    }
  }

  /** An extrinsic the processor got = the node's: hash, fee (the Balances.Withdraw charged), tip, success, bytes. */
  function checkExtrinsic(height: number, x: any, where: string): void {
    const n = nodeBlocks.get(height)!
    const ex = n.extrinsics[x.index]
    const s = submittedAt(height, x.index)
    assert.equal(x.hash, s.hash, where)
    assert.equal(x.hash, ex.hash.toHex(), where)
    assert.equal(x.success, s.success, where)
    assert.equal(x.version, 4)
    assert.equal(x.tip, ex.tip.toBigInt().toString(), where)
    const withdraw = extrinsicRecords(n, x.index).find(({ record }) => eventName(record) === 'Balances.Withdraw')!.record
    assert.equal(x.fee, withdraw.event.data[1].toBigInt().toString(), where)
    assert.deepEqual(x.signature.address, { __kind: 'Id', value: signerKey(s) }, where)
    assert.equal(x.signature.signature.value, ex.signature.toHex(), where)
    // the processor links the extrinsic to its root call whenever that call came too
    if (x._call !== null) assert.deepEqual(x._call, [], where)
    if (x._encoded !== undefined) assert.equal(x._encoded, ex.toHex(), `${where}: Extrinsic.encode() = the node's extrinsic bytes`)
  }

  /** An event the processor got = the node's record: name, phase, args decoded with the runtime and re-encoded. */
  function checkEvent(height: number, e: any, where: string): void {
    const r = nodeBlocks.get(height)!.records[e.index]
    assert.equal(e.name, eventName(r), where)
    assert.equal(e.phase, r.phase.type, where)
    // (the processor leaves out members the archive sent as null)
    assert.equal(e.extrinsicIndex ?? null, r.phase.isApplyExtrinsic ? r.phase.asApplyExtrinsic.toNumber() : null, where)
    assert.equal(e._decodeError, undefined, `${where}: ${e._decodeError}`)
    assert.equal(e._encoded, r.event.toHex(), `${where}: args re-encoded with the processor's runtime = the node's event bytes`)
    if (e.name === 'Balances.Transfer') {
      assert.deepEqual(e._decoded, { from: r.event.data[0].toHex(), to: r.event.data[1].toHex(), amount: r.event.data[2].toBigInt().toString() }, where)
    }
  }

  // ------------------------------------------------------------ tests

  it('runs to the end of its range from our gateway without an error', () => {
    for (const [name, run] of Object.entries(runs)) {
      assertRan(run, name)
      assert.ok(run.queries.length > 0, `the "${name}" processor queried the workers`)
      for (const q of run.queries) assert.equal(JSON.parse(q).type, 'substrate')
    }
  })

  it('headers equal the node: hashes, runtime version (state_getRuntimeVersion), timestamp', () => {
    let checked = 0
    for (const run of Object.values(runs)) {
      for (const { header } of run.blocks) {
        const n = nodeBlocks.get(header.height)!
        assert.equal(header.hash, n.hash)
        assert.equal(header.parentHash, n.parentHash)
        assert.equal(header.timestamp, n.timestamp)
        assert.deepEqual({ specName: header.specName, specVersion: header.specVersion, implName: header.implName, implVersion: header.implVersion }, n.version)
        // the runtime the processor built from the node's metadata for this block is that version
        assert.deepEqual(header._runtime, n.version)
        checked++
      }
    }
    assert.ok(checked >= 6, `${checked} headers`)
  })

  it('events + call/extrinsic/stack: every Balances.Transfer, decoded like @polkadot/api, with the call, stack and extrinsic submitted', () => {
    const run = runs.events
    const nodeTransfers: string[] = []
    for (const n of nodeBlocks.values()) n.records.forEach((r, i) => eventName(r) === 'Balances.Transfer' && nodeTransfers.push(`${n.number}/${i}`))
    assert.deepEqual(run.blocks.map((b) => b.header.height), expectedHeights(nodeTransfers.map((t) => Number(t.split('/')[0]))))
    assert.deepEqual(run.blocks.flatMap((b) => b.events.map((e: any) => `${b.header.height}/${e.index}`)), nodeTransfers)
    let inExtrinsics = 0
    for (const b of run.blocks) {
      const height = b.header.height
      const n = nodeBlocks.get(height)!
      const calls = new Map<string, any>(b.calls.map((c: any) => [`${c.extrinsicIndex}/${key(c.address)}`, c]))
      const wantCalls = new Set<string>()
      const wantExtrinsics = new Set<number>()
      for (const e of b.events) {
        const where = `block ${height} event ${e.index}`
        checkEvent(height, e, where)
        if (e.extrinsicIndex == null) {
          // emitted outside extrinsics (here: in the block's initialization): no call, no extrinsic
          assert.equal(e.phase, 'Initialization', where)
          assert.deepEqual([e.callAddress ?? null, e._call, e._extrinsic, e._stack], [null, null, null, null], where)
          continue
        }
        inExtrinsics++
        // the emitting call: the transfer at its place in the submitted call tree (the k-th Transfer
        // of the extrinsic comes from its k-th transfer call, in address order)
        const s = submittedAt(height, e.extrinsicIndex)
        const own = extrinsicRecords(n, e.extrinsicIndex).filter(({ record }) => eventName(record) === 'Balances.Transfer').map(({ index }) => index)
        const transferCalls = Object.keys(s.calls).filter((a) => s.calls[a] === 'Balances.transfer').sort()
        assert.equal(own.length, transferCalls.length, `${where} (${s.label})`)
        const address = transferCalls[own.indexOf(e.index)]
        assert.equal(key(e.callAddress), address, `${where} (${s.label}): callAddress`)
        assert.equal(key(e._call), address, `${where}: the call the processor linked`)
        assert.equal(e._callName, 'Balances.transfer', where)
        const call = calls.get(`${e.extrinsicIndex}/${address}`)
        assert.equal(call._decoded.value, e._decoded.amount, `${where}: the call's value is the amount transferred`)
        assert.equal(call._decoded.dest.value, e._decoded.to, `${where}: the call's dest is the receiver`)
        // the stack: the emitting call and every ancestor up to the root, linked through parentCall
        const stack = address === '' ? [''] : address.split('.').map((_x, i, all) => all.slice(0, all.length - i).join('.')).concat([''])
        assert.deepEqual(e._stack.map(key), stack, `${where}: stack`)
        for (const a of stack) wantCalls.add(`${e.extrinsicIndex}/${a}`)
        assert.equal(e._extrinsic, e.extrinsicIndex, where)
        wantExtrinsics.add(e.extrinsicIndex)
      }
      // nothing but the selected items and their relations
      assert.deepEqual(sorted([...calls.keys()]), sorted([...wantCalls]), `block ${height}: calls`)
      for (const c of b.calls) checkCall(height, c, `block ${height} call ${c.extrinsicIndex}/[${key(c.address)}]`)
      assert.deepEqual(b.extrinsics.map((x: any) => x.index), [...wantExtrinsics].sort((p, q) => p - q), `block ${height}: extrinsics`)
      for (const x of b.extrinsics) {
        checkExtrinsic(height, x, `block ${height} extrinsic ${x.index}`)
        assert.ok(x._encoded, `block ${height} extrinsic ${x.index}: re-encoded (its root call came with the stack)`)
      }
    }
    assert.equal(inExtrinsics, 5) // plain transfer, batch [0], [1.0], [1.1], proxied [0]
    console.log(`events run: ${run.blocks.length} blocks, ${run.blocks.reduce((k, b) => k + b.events.length, 0)} Balances.Transfer, ${run.blocks.reduce((k, b) => k + b.calls.length, 0)} calls, ${run.blocks.reduce((k, b) => k + b.extrinsics.length, 0)} extrinsics checked`)
  })

  it('calls + subcalls/events/extrinsic: every Utility batch, with its subcalls and the events the node lists inside it', () => {
    const run = runs.calls
    const nodeBatches: string[] = []
    for (const n of nodeBlocks.values()) {
      n.extrinsics.forEach((x, i) => {
        for (const [a, c] of callTree(x.method)) if (BATCHES.includes(callName(c))) nodeBatches.push(`${n.number}/${i}/${a}`)
      })
    }
    assert.deepEqual(run.blocks.map((b) => b.header.height), expectedHeights(nodeBatches.map((t) => Number(t.split('/')[0]))))
    const got: string[] = []
    const sdkMissing: string[] = []
    for (const b of run.blocks) {
      const height = b.header.height
      const n = nodeBlocks.get(height)!
      const calls = new Map<string, any>(b.calls.map((c: any) => [`${c.extrinsicIndex}/${key(c.address)}`, c]))
      const events = new Map<number, any>(b.events.map((e: any) => [e.index, e]))
      const wantCalls = new Set<string>()
      const wantEvents = new Set<number>()
      for (const c of b.calls.filter((x: any) => BATCHES.includes(x.name))) {
        const where = `block ${height} call ${c.extrinsicIndex}/[${key(c.address)}]`
        got.push(`${height}/${c.extrinsicIndex}/${key(c.address)}`)
        const s = submittedAt(height, c.extrinsicIndex)
        assert.equal(c._extrinsic, c.extrinsicIndex, where)
        // subcalls: every descendant as submitted (a failed extrinsic's inner calls were rolled back: none)
        const prefix = c.address.length ? key(c.address) + '.' : ''
        const descendants = s.success ? Object.keys(s.calls).filter((a) => a !== key(c.address) && a.startsWith(prefix)).sort() : []
        assert.deepEqual(c._subcalls.map(key).sort(), descendants, `${where}: subcalls`)
        wantCalls.add(`${c.extrinsicIndex}/${key(c.address)}`)
        for (const a of descendants) {
          wantCalls.add(`${c.extrinsicIndex}/${a}`)
          assert.equal(calls.get(`${c.extrinsicIndex}/${a}`)?.name, s.calls[a], `${where}: subcall [${a}]`)
          assert.equal(key(calls.get(`${c.extrinsicIndex}/${a}`)._parent), a.split('.').slice(0, -1).join('.'), `${where}: parent of [${a}]`)
        }
        // events: what the node lists for the extrinsic inside the batch; for the root, everything
        // the extrinsic emitted but its outcome (System.ExtrinsicSuccess), fee withdrawal and deposit
        // included. A failed extrinsic's events carry no call address (as @subsquid/substrate-data
        // parses them), so its root call has none.
        let expected: number[] = []
        if (s.success) {
          const own = extrinsicRecords(n, c.extrinsicIndex)
          const [begin, end] = callLayout(n, c.extrinsicIndex).spans.get(key(c.address))!
          expected = c.address.length === 0
            ? own.filter(({ record }) => eventName(record) !== 'System.ExtrinsicSuccess').map(({ index }) => index)
            : own.filter(({ index }) => index >= begin && index < end).map(({ index }) => index)
          assert.ok(expected.length >= 4, where)
        }
        for (const i of expected) {
          wantEvents.add(i)
          assert.ok(events.has(i), `${where}: event ${i} (${eventName(n.records[i])}) is missing`)
          assert.equal(events.get(i).extrinsicIndex, c.extrinsicIndex)
          assert.ok(key(events.get(i).callAddress).startsWith(key(c.address)), `${where}: event ${i} at [${events.get(i).callAddress}]`)
        }
        // the processor links call.events itself (setUpItems); 8.5.1 attaches an event to an ancestor
        // only while the calls after the emitting one (in its child-before-parent order) are ancestors,
        // so events of a call with a later sibling ([0], [1, 0]) do not reach their ancestors' lists
        assert.ok(c._events.every((i: number) => expected.includes(i)), `${where}: call.events ${c._events} ⊄ ${expected}`)
        const missing = expected.filter((i) => !c._events.includes(i))
        if (missing.length) sdkMissing.push(`${where}: ${missing.map((i) => `${i}@[${events.get(i).callAddress}]`)}`)
      }
      assert.deepEqual(sorted([...calls.keys()]), sorted([...wantCalls]), `block ${height}: calls`)
      assert.deepEqual(b.events.map((e: any) => e.index), [...wantEvents].sort((p, q) => p - q), `block ${height}: events`)
      for (const c of b.calls) checkCall(height, c, `block ${height} call ${c.extrinsicIndex}/[${key(c.address)}]`)
      for (const e of b.events) {
        const where = `block ${height} event ${e.index}`
        checkEvent(height, e, where)
        // who emitted it, where the node's event structure says it
        const owner = callLayout(n, e.extrinsicIndex).owner.get(e.index)
        if (owner !== undefined) assert.equal(key(e.callAddress), owner, `${where} (${e.name})`)
        if (e.callAddress) assert.equal(key(e._call), key(e.callAddress), `${where}: the call the processor linked`)
      }
      assert.deepEqual(b.extrinsics.map((x: any) => x.index), [...new Set(b.calls.map((c: any) => c.extrinsicIndex))], `block ${height}: extrinsics`)
      for (const x of b.extrinsics) checkExtrinsic(height, x, `block ${height} extrinsic ${x.index}`)
    }
    assert.deepEqual(sorted(got), sorted(nodeBatches))
    assert.equal(got.length, 3) // the batch [], its batch_all [1], the failing batch_all []
    console.log(`calls run: ${run.blocks.length} blocks, ${got.length} batch calls, ${run.blocks.reduce((k, b) => k + b.calls.length, 0)} calls, ${run.blocks.reduce((k, b) => k + b.events.length, 0)} events, ${run.blocks.reduce((k, b) => k + b.extrinsics.length, 0)} extrinsics checked`)
    if (sdkMissing.length) console.log(`events the archive delivered that 8.5.1's call.events does not list:\n${sdkMissing.join('\n')}`)
  })

  it('calls + siblings: a nested batch_all brings the other calls under its parent, not its own subcalls', () => {
    const run = runs.siblings
    const batch = scenario.submitted.find((s) => s.label === 'batch')!
    const failing = scenario.submitted.find((s) => s.label === 'failing batch_all')!
    assert.deepEqual(run.blocks.map((b) => b.header.height), expectedHeights([batch.block, failing.block]))
    const got = run.blocks.flatMap((b) => b.calls.map((c: any) => `${b.header.height}/${c.extrinsicIndex}/${key(c.address)}:${c.name}`))
    assert.deepEqual(sorted(got), sorted([
      `${batch.block}/${batch.index}/0:Balances.transfer`,
      `${batch.block}/${batch.index}/1:Utility.batch_all`,
      `${failing.block}/${failing.index}/:Utility.batch_all`,
    ]))
    for (const b of run.blocks) {
      for (const c of b.calls) checkCall(b.header.height, c, `block ${b.header.height} call ${c.extrinsicIndex}/[${key(c.address)}]`)
      assert.deepEqual([b.events.length, b.extrinsics.length], [0, 0])
    }
  })
})
