import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Keyring } from '@polkadot/keyring'
import type { KeyringPair } from '@polkadot/keyring/types'
import { runIngest } from '../src/ingest/loop.js'
import type { Cluster } from '../src/server/cluster.js'
import { DEV_ACCOUNTS, runScenario, startChopsticks, type Chopsticks, type Scenario } from './helpers/chopsticks.js'
import { tempDir } from './helpers/dataset.js'
import { callTree, connectApi, key, nodeNames } from './helpers/node-view.js'
import {
  COMPARE,
  KINDS,
  LISTS,
  LIST_NAMES,
  OUTPUT_KEY,
  fullQuery,
  itemsOf,
  matchedItems,
  relatedItems,
  valuesOf,
  type FullBlock,
  type Obj,
} from './helpers/reference-substrate.js'
import {
  fetchRange,
  inRange,
  newStats,
  randomValues,
  readLayout,
  rng,
  startServed,
  STATIC_DATA_TIMERS,
  walkAll,
  type GenQuery,
  type Range,
  type Rng,
  type Served,
} from './helpers/walk.js'
import { SUBSTRATE_REFERENCE, randomFields, relationTallies, type RelationTally } from './helpers/walk-substrate.js'

/*
 * The independent reference evaluation of Substrate queries (helpers/reference-substrate.ts) over
 * blocks of a LIVE runtime: chopsticks runs the offline Rococo Asset Hub genesis ("statemine" 900),
 * runScenario submits its transfers / add_proxy / nested batch / proxy.proxy / failing batch_all,
 * and this test adds deeper nesting signed with the dev keyring:
 *
 *   proxy-in-batch (Charlie, Alice's Any proxy):
 *     []  Utility.batch
 *     [0]   Proxy.proxy (real Alice)
 *     [0,0]   Utility.batch_all   [0,0,0] [0,0,1] Balances.transfer
 *     [1]   Balances.transfer_keep_alive
 *   force_batch (Eve), if the runtime has it:
 *     []  Utility.force_batch  [0] transfer, [1] transfer of too much (ItemFailed), [2] Utility.batch [2,0] [2,1] transfer
 *   deep batch (Ferdie):
 *     []  Utility.batch
 *     [0]   Utility.batch
 *     [0,0]   Utility.batch       [0,0,0] [0,0,1] Balances.transfer
 *     [0,1]   Balances.transfer_keep_alive
 *     [1]   Utility.batch_all     [1,0] Balances.transfer, [1,1] System.remark (no events)
 *     [2]   Balances.transfer_keep_alive
 *   interrupted batch (Bob): Utility.batch of [transfer, transfer of too much, transfer] (BatchInterrupted)
 *
 * so that siblings (same parent) differ from "same depth", stack / subcalls / call.events from "same
 * extrinsic". Blocks 0..head are ingested through the node RPC source (runIngest, small chunks) and
 * served by a router and two workers (small size budget: answers stop early). The full answer is
 * checked against the node read directly with @polkadot/api, then generated queries are walked
 * through the router like a client and every answer is compared with the reference's `evaluate`.
 */

const DATASET = 'chopsticks'

/** What this test submitted on top of the scenario. */
interface Extra {
  label: string
  block: number
  index: number
  hash: string
  /** Expected call tree by address ('' root, '0.1' for [0,1]) when every call runs. */
  calls: Record<string, string>
  success: boolean
  /** Some items did not run (ItemFailed / BatchInterrupted): the calls must be part of `calls`, with the root. */
  partial?: boolean
}

async function submitNesting(node: Chopsticks): Promise<{ extras: Extra[]; forceBatch: boolean }> {
  const api = await connectApi(node.url)
  try {
    const keyring = new Keyring({ type: 'sr25519', ss58Format: 42 })
    const pair = Object.fromEntries(DEV_ACCOUNTS.map((n) => [n, keyring.addFromUri(`//${n}`)])) as Record<(typeof DEV_ACCOUNTS)[number], KeyringPair>
    const unit = 10n ** 12n
    const tooMuch = 1_000_000n * unit
    const tx: any = api.tx
    const forceBatch = typeof tx.utility.forceBatch === 'function'
    const extras: Extra[] = []
    const pending: Omit<Extra, 'block' | 'index'>[] = []
    const send = async (label: string, who: keyof typeof pair, ext: any, calls: Record<string, string>, opts: { success?: boolean; partial?: boolean } = {}) => {
      const nonce = await api.rpc.system.accountNextIndex(pair[who].address)
      const signed = await ext.signAsync(pair[who], { nonce })
      const hash = signed.hash.toHex()
      assert.equal((await api.rpc.author.submitExtrinsic(signed)).toHex(), hash, label)
      pending.push({ label, hash, calls, success: opts.success ?? true, partial: opts.partial })
    }
    const build = async () => {
      const b = await node.newBlock()
      const signed = await api.rpc.chain.getBlock(b.hash)
      const hashes: string[] = signed.block.extrinsics.map((e) => e.hash.toHex())
      for (const p of pending.splice(0)) {
        const index = hashes.indexOf(p.hash)
        assert.ok(index >= 0, `${p.label} is not in block ${b.number}`)
        extras.push({ ...p, block: b.number, index })
      }
    }
    const T = (to: keyof typeof pair, n: bigint) => tx.balances.transfer(pair[to].address, n * unit + 13n)
    const TKA = (to: keyof typeof pair, n: bigint) => tx.balances.transferKeepAlive(pair[to].address, n * unit + 17n)

    await send('proxy-in-batch', 'Charlie', tx.utility.batch([tx.proxy.proxy(pair.Alice.address, null, tx.utility.batchAll([T('Dave', 1n), T('Eve', 2n)])), TKA('Ferdie', 3n)]), {
      '': 'Utility.batch', '0': 'Proxy.proxy', '0.0': 'Utility.batch_all', '0.0.0': 'Balances.transfer', '0.0.1': 'Balances.transfer', '1': 'Balances.transfer_keep_alive',
    })
    if (forceBatch) {
      await send('force_batch', 'Eve', tx.utility.forceBatch([T('Ferdie', 1n), tx.balances.transfer(pair.Ferdie.address, tooMuch), tx.utility.batch([T('Bob', 1n), T('Charlie', 2n)])]), {
        '': 'Utility.force_batch', '0': 'Balances.transfer', '1': 'Balances.transfer', '2': 'Utility.batch', '2.0': 'Balances.transfer', '2.1': 'Balances.transfer',
      }, { partial: true })
    }
    await build()

    await send('deep batch', 'Ferdie', tx.utility.batch([
      tx.utility.batch([tx.utility.batch([T('Alice', 1n), T('Bob', 2n)]), TKA('Charlie', 3n)]),
      tx.utility.batchAll([T('Dave', 4n), tx.system.remark('0x0102')]),
      TKA('Eve', 5n),
    ]), {
      '': 'Utility.batch', '0': 'Utility.batch', '0.0': 'Utility.batch', '0.0.0': 'Balances.transfer', '0.0.1': 'Balances.transfer', '0.1': 'Balances.transfer_keep_alive',
      '1': 'Utility.batch_all', '1.0': 'Balances.transfer', '1.1': 'System.remark', '2': 'Balances.transfer_keep_alive',
    })
    await send('interrupted batch', 'Bob', tx.utility.batch([T('Alice', 1n), tx.balances.transfer(pair.Alice.address, tooMuch), T('Alice', 2n)]), {
      '': 'Utility.batch', '0': 'Balances.transfer', '1': 'Balances.transfer', '2': 'Balances.transfer',
    }, { partial: true })
    await build()
    await node.newBlock() // an empty block at the end
    return { extras, forceBatch }
  } finally {
    await api.disconnect()
  }
}

// ------------------------------------------------------------------------------------ generated queries

function randomRequest(r: Rng, list: string, blocks: FullBlock[], all: FullBlock[]): Obj {
  const decl = LISTS[list]
  const req: Obj = {}
  const keys = Object.keys(decl.filters)
  for (let i = r.pick([0, 1, 1, 2]); i > 0; i--) {
    const k = r.pick(keys)
    const roll = r.next()
    if (roll < 0.05) req[k] = null
    else if (roll < 0.09) req[k] = []
    else {
      let values = valuesOf(blocks, list, k)
      if (values.length === 0) values = valuesOf(all, list, k)
      req[k] = randomValues(r, values, decl.filters[k].values === 'hex' ? '0x' + '77'.repeat(20) : 'No.such_name', (v) => (r.chance(0.1) ? v.toLowerCase() : v))
    }
  }
  for (const flag of Object.keys(decl.relations)) if (r.chance(0.4)) req[flag] = r.chance(0.85)
  return req
}

function generateQueries(data: FullBlock[], interesting: number[], seed: number): GenQuery[] {
  const r = rng(seed)
  const out: GenQuery[] = []
  const last = data[data.length - 1].header.number as number
  const ranges: Range[] = [
    { fromBlock: 0 },
    { fromBlock: 0, toBlock: last },
    { fromBlock: 1, toBlock: last - 1 },
    { fromBlock: interesting[0] },
    ...interesting.map((n) => ({ fromBlock: n, toBlock: n })),
    { fromBlock: last, toBlock: last },
  ]
  const add = (name: string, range: Range, body: Obj) => out.push({ name, q: { type: 'substrate', ...range, ...body } })
  const lists = ['events', 'calls']

  // 1. Names alone: every name, several at once, wrong case, misses.
  for (const list of lists) {
    const names = valuesOf(data, list, 'name')
    for (const n of names) add(`${list}.name=${n}`, r.pick(ranges.slice(0, 4)), { [list]: [{ name: [n] }], fields: randomFields(r) })
    const sets = [names.slice(0, 3), [names[0].toLowerCase(), 'No.such_name'], [names.at(-1)!, names[1]], [names[0].toUpperCase()], []]
    // each set on one of the two ranges, taking turns (the same set on the other range repeats the same filter)
    for (const [si, vs] of sets.entries()) add(`${list}.name=${JSON.stringify(vs)}`, ranges[si % 2], { [list]: [{ name: vs }], fields: randomFields(r) })
  }
  // The lists without items in this runtime: `{}` selects nothing, every flag on a miss too.
  for (const list of LIST_NAMES.filter((l) => !lists.includes(l))) {
    add(`${list} {}`, ranges[0], { [list]: [{}] })
    const k = Object.keys(LISTS[list].filters)[0]
    add(`${list}.${k} miss`, ranges[1], { [list]: [{ [k]: ['0x' + '77'.repeat(20)], ...Object.fromEntries(Object.keys(LISTS[list].relations).map((f) => [f, true])) }] })
  }

  // 2. Every relation flag: alone and all at once from `{}` (every item); from every name all at
  //    once and one flag alone, the flag taking turns across the names, so that every flag also runs
  //    alone from several names (the relation tallies below check that these cases are not
  //    trivial). Calls: a flag alone on the whole range, every flag at once on the whole range and
  //    another one.
  for (const list of lists) {
    const flags = Object.keys(LISTS[list].relations)
    const seeds: Obj[] = [{}, ...valuesOf(data, list, 'name').map((n) => ({ name: [n] }))]
    for (const [si, base] of seeds.entries()) {
      for (const flag of si === 0 ? [...flags, '*'] : [flags[(si - 1) % flags.length], '*']) {
        const req = flag === '*' ? { ...base, ...Object.fromEntries(flags.map((f) => [f, true])) } : { ...base, [flag]: true }
        const where = list !== 'calls' ? [r.pick(ranges)] : flag === '*' ? [ranges[0], r.pick(ranges.slice(1))] : [ranges[0]]
        for (const range of where) add(`${list}[${JSON.stringify(req)}]`, range, { [list]: [req], fields: randomFields(r) })
      }
    }
  }

  // 3. Set rules: unions across requests and lists, null, [], flags false, includeAllBlocks.
  const [e0, e1] = valuesOf(data, 'events', 'name')
  const eRare = valuesOf(data, 'events', 'name').at(-1)!
  const [c0, c1] = valuesOf(data, 'calls', 'name')
  const cRare = valuesOf(data, 'calls', 'name').at(-1)!
  const fields = { event: { name: true, phase: true }, call: { name: true, success: true }, extrinsic: { hash: true, success: true } }
  const setCases: Obj[] = [
    { events: [{ name: [e0] }, { name: [e1], extrinsic: true }, { name: [e0, e1] }], calls: [{ name: [cRare], events: true }] },
    { events: [{ name: ['Balances.Transfer'], stack: true }], calls: [{ name: ['System.remark'], siblings: true }] },
    { calls: [{ name: ['Utility.batch_all'], subcalls: true }, { name: ['Balances.transfer_keep_alive'], siblings: true, stack: true }] },
    { calls: [{ name: ['Proxy.proxy'], events: true, subcalls: true }, { name: ['Utility.force_batch'], events: true }] },
    { events: [{ name: ['Utility.ItemFailed', 'Utility.BatchInterrupted'], call: true, stack: true, extrinsic: true }] },
    { events: [{ name: null, call: true }] },
    { events: [{ name: [eRare], extrinsic: false, call: false, stack: false }] },
    { events: [{ name: [] }, { name: [e0], extrinsic: true }], calls: [{ name: [], subcalls: true, events: true }] },
    { calls: [{ name: [c0] }, { name: [c0], stack: true }, { name: [c1], siblings: true }] },
    { events: [{}], includeAllBlocks: false },
    { calls: [{ extrinsic: true, stack: true, subcalls: true, siblings: true, events: true }] },
    { events: [] },
    {},
    { includeAllBlocks: true },
    { includeAllBlocks: true, calls: [{ name: ['No.such_call'], subcalls: true }] },
  ]
  // each case on one of the first three ranges, taking turns: the set rules do not depend on the range
  for (const [i, c] of setCases.entries()) add(`set ${JSON.stringify(c).slice(0, 140)}`, ranges[i % 3], { fields, ...c })
  add('identifiers false', ranges[0], {
    events: [{}], calls: [{ extrinsic: true }],
    fields: { block: { number: false, hash: false, parentHash: false }, event: { index: false, extrinsicIndex: false, callAddress: false }, call: { address: false, extrinsicIndex: false }, extrinsic: { index: false } },
  })
  add('no fields', ranges[1], { events: [{ call: true }], calls: [{ extrinsic: true, subcalls: true }] })
  add('invalid: call on calls', ranges[0], { calls: [{ call: true }] })
  add('invalid: subcalls on events', ranges[0], { events: [{ subcalls: true }] })
  add('invalid: name not a list', ranges[0], { calls: [{ name: 'Utility.batch' }] })

  // 4. Random combinations: several requests and lists, flags, field subsets, includeAllBlocks, ranges.
  for (let i = 0; i < 40; i++) {
    const range = r.pick(ranges)
    const blocks = inRange(data, range)
    const q: Obj = { fields: randomFields(r) }
    for (let j = 1 + r.int(4); j > 0; j--) {
      const list = r.chance(0.9) ? r.pick(lists) : r.pick(LIST_NAMES)
      ;(q[list] ??= []).push(randomRequest(r, list, blocks, data))
    }
    if (r.chance(0.3)) q.includeAllBlocks = r.chance(0.7)
    add(`random #${i}`, range, q)
  }
  return out
}

// ------------------------------------------------------------------------------------ the test

describe('Substrate reference evaluation over a live chopsticks node (RPC ingest, router + 2 workers)', { timeout: 600_000 }, () => {
  const t0 = performance.now()
  let node: Chopsticks
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let scenario: Scenario
  let extras: Extra[]
  let forceBatch: boolean
  let last: number
  let s: Served<FullBlock>
  const stats = newStats()

  before(async () => {
    tmp = await tempDir('ba-substrate-node-ref-')
    node = await startChopsticks({ timeoutMs: 180_000 }) // generous: a loaded machine starts the runtime slowly
    scenario = await runScenario(node)
    ;({ extras, forceBatch } = await submitNesting(node))
    last = parseInt((await node.rpc('chain_getHeader', [])).number, 16)
    const store = path.join(tmp.dir, 'store')
    const out = path.join(store, DATASET)
    // Small chunks: several chunks spread over the two workers.
    const r = await runIngest({ family: 'substrate', rpc: node.url, dataset: DATASET, out, from: 0, to: last, progress: 'none', confirmations: 0, chunkBlocks: 3, workers: 0 })
    assert.equal(r.blocks, last + 1)
    let heights: Record<string, number>
    ;({ cluster, heights } = await startServed(store, { [DATASET]: last }, { concurrency: 4, queue: 64, budgets: { sizeBytes: 20_000 }, ...STATIC_DATA_TIMERS }))
    assert.equal(heights[DATASET], last)
    s = { name: DATASET, base: cluster.datasets.get(DATASET)!, height: last, chunks: readLayout(out), data: [], workerUrls: new Map(), stats, reference: SUBSTRATE_REFERENCE }
    assert.ok(s.chunks.length >= 3, `${s.chunks.length} chunks`)
    s.data = await fetchRange(s, fullQuery(0), 0, last, (b) => {
      for (const k of KINDS) assert.ok(Array.isArray((b as Obj)[OUTPUT_KEY[k]]), `block ${b.header.number}: no ${OUTPUT_KEY[k]}`)
    })
    console.log(`# setup (chopsticks, scenario + nesting, ingest of ${last + 1} blocks, cluster, full answer): ${((performance.now() - t0) / 1000).toFixed(1)} s`)
  })

  after(async () => {
    await cluster?.stop()
    await node?.stop()
    await tmp?.cleanup()
    console.log(`# total ${((performance.now() - t0) / 1000).toFixed(1)} s`)
  })

  it('the full answer agrees with the node read through @polkadot/api', async () => {
    const api = await connectApi(node.url)
    try {
      const { eventName, callName } = nodeNames(() => api)
      /** Call names by address. */
      const callNames = (call: any) => new Map([...callTree(call)].map(([a, c]) => [a, callName(c)]))
      assert.deepEqual(s.data.map((b) => b.header.number), Array.from({ length: last + 1 }, (_, i) => i))
      let nExtrinsics = 0
      let nEvents = 0
      let nCalls = 0
      let unattributed = 0
      for (const b of s.data) {
        const n = b.header.number
        const hash = (await api.rpc.chain.getBlockHash(n)).toHex()
        const header = await api.rpc.chain.getHeader(hash)
        assert.deepEqual([b.header.hash, b.header.parentHash], [hash, header.parentHash.toHex()], `block ${n} header`)
        const signed = await api.rpc.chain.getBlock(hash)
        const records = (await (await api.at(hash)).query.system.events()) as any
        const exs = signed.block.extrinsics
        // extrinsics: hashes, success (ExtrinsicSuccess / ExtrinsicFailed of their phase)
        const outcome = (i: number) => records.find((r: any) => r.phase.isApplyExtrinsic && r.phase.asApplyExtrinsic.toNumber() === i && r.event.section === 'system' && /^Extrinsic(Success|Failed)$/.test(r.event.method))
        assert.deepEqual(b.extrinsics.map((x) => [x.index, x.hash, x.success]), exs.map((ex, i) => [i, ex.hash.toHex(), outcome(i).event.method === 'ExtrinsicSuccess']), `block ${n} extrinsics`)
        // events: names, order, phase, extrinsic
        assert.deepEqual(
          b.events.map((e) => [e.index, e.name, e.phase, e.extrinsicIndex ?? null]),
          records.map((r: any, i: number) => [i, eventName(r), r.phase.type, r.phase.isApplyExtrinsic ? r.phase.asApplyExtrinsic.toNumber() : null]),
          `block ${n} events`,
        )
        // calls: one root per extrinsic with its name; the whole tree of a successful one where every item ran
        assert.deepEqual(b.calls.filter((c) => c.address.length === 0).map((c) => [c.extrinsicIndex, c.name]), exs.map((ex, i) => [i, callName(ex.method)]), `block ${n} root calls`)
        for (const [i, ex] of exs.entries()) {
          const got = b.calls.filter((c) => c.extrinsicIndex === i)
          const tree = callNames(ex.method)
          const own = records.filter((r: any) => r.phase.isApplyExtrinsic && r.phase.asApplyExtrinsic.toNumber() === i)
          const partial = own.some((r: any) => r.event.section === 'utility' && /^(ItemFailed|BatchInterrupted)$/.test(r.event.method))
          for (const c of got) assert.equal(tree.get(key(c.address)), c.name, `block ${n} extrinsic ${i} call [${c.address}]`)
          if (!b.extrinsics[i].success) assert.equal(got.length, 1, `block ${n} extrinsic ${i}: a failed extrinsic has its root call only`)
          else if (!partial) assert.deepEqual(got.map((c) => key(c.address)).sort(), [...tree.keys()].sort(), `block ${n} extrinsic ${i} call tree`)
        }
        for (const k of KINDS) {
          const arr: Obj[] = (b as Obj)[OUTPUT_KEY[k]]
          assert.ok(arr.every((x, j) => j === 0 || COMPARE[k](arr[j - 1], x) < 0), `block ${n} ${OUTPUT_KEY[k]} out of order`)
        }
        for (const e of b.events) {
          if (e.extrinsicIndex === null) assert.equal(e.callAddress, null, `block ${n} event ${e.index}: callAddress outside extrinsics`)
          // docs/protocol.md §7: as squid's call parser assigns them, the outcome event
          // (System.ExtrinsicSuccess / Failed) and every event of a failed extrinsic have no
          // callAddress; exactly these, counted, reported.
          else if (e.callAddress === null) {
            const ok = /^System\.Extrinsic(Success|Failed)$/.test(e.name) || !b.extrinsics[e.extrinsicIndex].success
            assert.ok(ok, `block ${n} event ${e.index} (${e.name}, extrinsic ${e.extrinsicIndex}): no callAddress`)
            unattributed++
          }
          if (e.callAddress) assert.ok(b.calls.some((c) => c.extrinsicIndex === e.extrinsicIndex && key(c.address) === key(e.callAddress)), `block ${n} event ${e.index}: no call at [${e.callAddress}]`)
        }
        nExtrinsics += exs.length
        nEvents += records.length
        nCalls += b.calls.length
      }
      // what was submitted: the call trees as built
      for (const x of [...scenario.submitted, ...extras]) {
        const b = s.data[x.block]
        assert.equal(b.extrinsics[x.index].hash, x.hash, x.label)
        assert.equal(b.extrinsics[x.index].success, x.success, x.label)
        const got = Object.fromEntries(b.calls.filter((c) => c.extrinsicIndex === x.index).map((c) => [key(c.address), c.name]))
        if (!x.success) assert.deepEqual(got, { '': x.calls[''] }, x.label)
        else if ('partial' in x && x.partial) for (const [a, name] of Object.entries(got)) assert.equal(x.calls[a], name, `${x.label} [${a}]`)
        else assert.deepEqual(got, x.calls, x.label)
      }
      const deep = extras.find((x) => x.label === 'deep batch')!
      assert.deepEqual(
        s.data[deep.block].events.filter((e) => e.extrinsicIndex === deep.index && e.name === 'Balances.Transfer').map((e) => key(e.callAddress)),
        ['0.0.0', '0.0.1', '0.1', '1.0', '2'],
      )
      console.log(
        `# node check: ${s.data.length} blocks, ${nExtrinsics} extrinsics, ${nEvents} events, ${nCalls} calls against @polkadot/api; submitted ${scenario.submitted.length} + ${extras.length} (${extras.map((x) => x.label).join(', ')}; force_batch ${forceBatch ? 'present' : 'absent'}); ${unattributed} events in extrinsics with callAddress null (outcome events, events of failed extrinsics)`,
      )
      for (const x of extras.filter((x) => x.partial)) {
        const b = s.data[x.block]
        console.log(`#   ${x.label}: calls ${b.calls.filter((c) => c.extrinsicIndex === x.index).map((c) => `[${c.address}] ${c.name}${c.success ? '' : ' (failed)'}`).join(', ')}`)
      }
    } finally {
      await api.disconnect()
    }
  })

  it('generated queries through the router agree with the reference evaluation; relations are non-trivial', async () => {
    const t1 = performance.now()
    const interesting = [...new Set([...scenario.blocks.map((b) => b.number), ...extras.map((x) => x.block)])].sort((a, b) => a - b)
    const queries = generateQueries(s.data, interesting, 20260601)
    const nonEmpty = await walkAll(s, queries)
    console.log(
      `# node reference: ${queries.length} generated queries (${nonEmpty} selecting items), ${stats.requests} requests, ${stats.answers} answers compared, ${stats.items} items compared, ${stats.refusals} expected 400s, ${((performance.now() - t1) / 1000).toFixed(1)} s`,
    )
    // The cover: every relation flag of events and calls runs alone; every name is filtered on alone.
    for (const list of ['events', 'calls']) {
      const flags = Object.keys(LISTS[list].relations)
      const single = queries.map((g) => g.q[list]).filter((reqs) => reqs?.length === 1).map((reqs) => reqs[0])
      for (const flag of flags) assert.ok(single.some((req) => req[flag] === true && flags.filter((f) => req[f]).length === 1), `${list}.${flag} alone`)
      for (const n of valuesOf(s.data, list, 'name')) assert.ok(single.some((req) => Object.keys(req).join() === 'name' && req.name.length === 1 && req.name[0] === n), `${list}.name=${n} alone`)
    }
    assert.ok(queries.length >= 150, `${queries.length} queries`)
    assert.ok(nonEmpty >= queries.length / 2, `only ${nonEmpty} of ${queries.length} selected items`)
    assert.ok(stats.answers > stats.queries - stats.refusals, 'no answer stopped early')
    // the data nests 3 levels deep
    assert.ok(itemsOf(s.data, 'call').some((x) => x.item.address.length >= 3), 'no call 3 levels deep')

    const tallies = relationTallies([{ data: s.data, queries }])
    console.log(`# node relations (cases / strict subset of same extrinsic / ≠ alternative): ${[...tallies].filter(([, t]) => t.cases).map(([k, t]) => `${k} ${t.cases}/${t.notSameExtrinsic}/${t.notAlternative}`).join(', ')}`)
    const need: [string, keyof RelationTally][] = [
      ['calls.extrinsic', 'cases'],
      ['calls.stack', 'notSameExtrinsic'],
      ['calls.subcalls', 'notSameExtrinsic'],
      ['calls.siblings', 'notSameExtrinsic'],
      ['calls.siblings', 'notAlternative'], // ≠ same depth
      ['calls.events', 'notSameExtrinsic'],
      ['calls.events', 'notAlternative'], // ≠ the call's own events
      ['events.extrinsic', 'cases'],
      ['events.call', 'notSameExtrinsic'],
      ['events.stack', 'notSameExtrinsic'],
      ['events.stack', 'notAlternative'], // ≠ the emitting call only
    ]
    for (const [k, what] of need) assert.ok((tallies.get(k)?.[what] ?? 0) >= 2, `${k}: ${what} ${tallies.get(k)?.[what]}`)

    // The deep batch itself: siblings by parent, not by depth.
    const deep = extras.find((x) => x.label === 'deep batch')!
    const b = s.data[deep.block]
    const at = (request: Obj, flag: string, addr: string) =>
      relatedItems(b, 'calls', flag, matchedItems(b, 'calls', request).filter((c) => c.extrinsicIndex === deep.index && key(c.address) === addr))
        .filter((c) => c.extrinsicIndex === deep.index)
        .map((c) => key(c.address))
    assert.deepEqual(at({ name: ['System.remark'] }, 'siblings', '1.1'), ['1.0', '1.1'])
    assert.deepEqual(at({ name: ['Balances.transfer'] }, 'stack', '0.0.1'), ['', '0', '0.0'])
    assert.deepEqual(at({ name: ['Utility.batch'] }, 'subcalls', '0'), ['0.0', '0.0.0', '0.0.1', '0.1'])
  })
})
