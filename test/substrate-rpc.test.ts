import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import type { ApiPromise } from '@polkadot/api'
import { Metadata, TypeRegistry } from '@polkadot/types'
import { compactToU8a, hexToU8a, u8aConcat, u8aToHex } from '@polkadot/util'
import { decodeAddress } from '@polkadot/util-crypto'
import { RpcError, type RpcCall } from '../src/ingest/rpc.js'
import { SubstrateRpcSource, SYSTEM_EVENTS_KEY } from '../src/ingest/substrate/rpc/fetch.js'
import type { SubstrateTransport } from '../src/ingest/substrate/rpc/transport.js'
import type { DecodedSubstrateBlock, Json, RuntimeVersion, SubstrateCall } from '../src/ingest/substrate/rpc/types.js'
import { runScenario, startChopsticks, type Chopsticks, type Scenario } from './helpers/chopsticks.js'
import { REPO_ROOT } from './helpers/dataset.js'
import { callTree, connectApi, key, nodeNames } from './helpers/node-view.js'

/*
 * The Substrate JSON-RPC source against a real runtime: chopsticks runs the Rococo Asset Hub
 * genesis ("statemine" spec 900) offline; dev accounts sign transfers, a nested utility.batch /
 * batch_all, an add_proxy + proxy.proxy and a failing batch_all. The blocks are fetched over ws://
 * and http:// and decoded; every field is checked against what the node says, decoded by
 * @polkadot/api (an independent decoder): names, args, phases, extrinsic hashes and signers,
 * success and errors, fees (= the Balances.Withdraw the runtime charged), the call trees of the
 * nested calls and which call emitted which event.
 */

describe('substrate rpc source on chopsticks (offline Rococo Asset Hub genesis)', { timeout: 600_000 }, () => {
  let node: Chopsticks
  let scenario: Scenario
  let api: ApiPromise
  let numbers: number[]
  let wsBlocks: DecodedSubstrateBlock[]
  let httpBlocks: DecodedSubstrateBlock[]
  let wsStats: SubstrateRpcSource['stats']

  before(async () => {
    const t0 = Date.now()
    const lap = (what: string) => console.log(`${what}: ${Date.now() - t0} ms`)
    node = await startChopsticks({ timeoutMs: 180_000 }) // generous: a loaded machine starts the runtime slowly
    lap('chopsticks started')
    scenario = await runScenario(node)
    lap('scenario submitted')
    await node.newBlock() // an empty block after the scenario
    const head = parseInt((await node.rpc('chain_getHeader', [])).number, 16)
    numbers = Array.from({ length: head + 1 }, (_, i) => i)
    const ws = new SubstrateRpcSource({ url: node.url })
    try {
      wsBlocks = await ws.fetchBlocks(numbers)
      wsStats = { ...ws.stats }
    } finally {
      await ws.close()
    }
    const http = new SubstrateRpcSource({ url: node.httpUrl, batchSize: 3 })
    try {
      httpBlocks = await http.fetchBlocks([...numbers].reverse())
    } finally {
      await http.close()
    }
    lap('blocks fetched and decoded')
    api = await connectApi(node.url)
  })

  after(async () => {
    await api?.disconnect()
    await node?.stop()
  })

  const { palletName, accountHex, callName } = nodeNames(() => api)

  it('fetches every block over ws:// and http:// with the same result; one metadata download', () => {
    assert.equal(wsBlocks.length, numbers.length)
    assert.deepEqual(wsBlocks.map((b) => b.header.number), numbers)
    assert.deepEqual([...httpBlocks].reverse(), wsBlocks)
    assert.equal(wsStats.metadataFetched, 1)
    // plain JSON: survives a round trip unchanged
    assert.deepEqual(JSON.parse(JSON.stringify(wsBlocks)), wsBlocks)
  })

  it('headers match the node (hashes, roots, digest, runtime version, timestamp, author)', async () => {
    for (const b of wsBlocks) {
      const hash = await api.rpc.chain.getBlockHash(b.header.number)
      const header = await api.rpc.chain.getHeader(hash)
      const version = await api.rpc.state.getRuntimeVersion(hash)
      assert.equal(b.header.hash, hash.toHex())
      assert.equal(b.header.parentHash, header.parentHash.toHex())
      assert.equal(b.header.stateRoot, header.stateRoot.toHex())
      assert.equal(b.header.extrinsicsRoot, header.extrinsicsRoot.toHex())
      assert.deepEqual(b.header.digest.logs, header.digest.logs.map((l) => l.toHex()))
      assert.equal(b.header.specName, version.specName.toString())
      assert.equal(b.header.specVersion, version.specVersion.toNumber())
      assert.equal(b.header.implName, version.implName.toString())
      assert.equal(b.header.implVersion, version.implVersion.toNumber())
      if (b.header.number === 0) continue
      const at = await api.at(hash)
      assert.equal(b.header.timestamp, ((await at.query.timestamp.now()) as any).toNumber())
      // Aura: author = Session.Validators[slot % n] (the slot is the pre-runtime digest's u64)
      const pre = header.digest.logs.find((l) => l.isPreRuntime)!.asPreRuntime
      assert.equal(pre[0].toString(), 'aura')
      const slot = api.createType('u64', pre[1].toU8a(true)).toBigInt()
      const validators = (await at.query.session.validators()) as any
      assert.equal(b.header.validator, validators[Number(slot % BigInt(validators.length))].toHex())
    }
  })

  it('extrinsics, calls and events match @polkadot/api decoding of the same blocks', async () => {
    let checkedTransfers = 0
    for (const b of wsBlocks) {
      const signed = await api.rpc.chain.getBlock(b.header.hash)
      const at = await api.at(b.header.hash)
      const records = (await at.query.system.events()) as any
      const exs = signed.block.extrinsics
      assert.equal(b.extrinsics.length, exs.length, `block ${b.header.number}: extrinsic count`)

      // events: names, phases, topics
      assert.equal(b.events.length, records.length, `block ${b.header.number}: event count`)
      records.forEach((r: any, i: number) => {
        const e = b.events[i]
        assert.equal(e.index, i)
        assert.equal(e.name, `${palletName(r.event.index[0])}.${r.event.method}`)
        assert.equal(e.phase, r.phase.type)
        assert.equal(e.extrinsicIndex, r.phase.isApplyExtrinsic ? r.phase.asApplyExtrinsic.toNumber() : undefined)
        assert.deepEqual(e.topics, r.topics.map((t: any) => t.toHex()))
        if (e.name === 'Balances.Transfer' || e.name === 'Balances.Withdraw' || e.name === 'Balances.Deposit') {
          const amount = r.event.data[e.name === 'Balances.Transfer' ? 2 : 1].toBigInt().toString()
          assert.equal((e.args as any).amount, amount)
          assert.match((e.args as any).amount, /^\d+$/)
        }
        if (e.name === 'Balances.Transfer') {
          assert.equal((e.args as any).from, r.event.data[0].toHex())
          assert.equal((e.args as any).to, r.event.data[1].toHex())
        }
      })

      exs.forEach((ex: any, i: number) => {
        const x = b.extrinsics[i]
        assert.equal(x.index, i)
        assert.equal(x.hash, ex.hash.toHex())
        assert.equal(x.version, ex.type)
        const own = records.filter((r: any) => r.phase.isApplyExtrinsic && r.phase.asApplyExtrinsic.toNumber() === i)
        const outcome = own.find((r: any) => r.event.section === 'system' && /^Extrinsic(Success|Failed)$/.test(r.event.method))
        assert.equal(x.success, outcome.event.method === 'ExtrinsicSuccess')
        if (!x.success) {
          const err = outcome.event.data[0]
          assert.ok(err.isModule)
          assert.deepEqual(x.error, { __kind: 'Module', value: { index: err.asModule.index.toNumber(), error: err.asModule.error.toHex() } })
        }
        if (ex.isSigned) {
          const sig = x.signature as any
          assert.deepEqual(sig.address, { __kind: 'Id', value: accountHex(ex.signer) })
          assert.equal(sig.signature.value, ex.signature.toHex())
          assert.equal(sig.signedExtensions.checkNonce, ex.nonce.toNumber())
          assert.equal(x.tip, ex.tip.toBigInt().toString())
          // the fee the runtime charged
          const withdraw = own.find((r: any) => r.event.section === 'balances' && r.event.method === 'Withdraw')
          assert.equal(x.fee, withdraw.event.data[1].toBigInt().toString())
        } else {
          assert.equal(x.signature, undefined)
        }

        // the call tree: every call of a successful extrinsic; only the root of a failed one
        const calls = b.calls.filter((c) => c.extrinsicIndex === i)
        const tree = callTree(ex.method)
        const expected = x.success ? [...tree.keys()] : ['']
        assert.deepEqual(calls.map((c) => key(c.address)), expected.sort((p, q) => (p === '' ? -1 : q === '' ? 1 : p.localeCompare(q))))
        for (const c of calls) {
          const ref = tree.get(key(c.address))
          assert.equal(c.name, callName(ref), `block ${b.header.number} extrinsic ${i} call [${c.address}]`)
          assert.equal(c.success, x.success)
          if (c.name === 'Balances.transfer') {
            checkedTransfers++
            assert.deepEqual(c.args, { dest: { __kind: 'Id', value: accountHex(ref.args[0]) }, value: ref.args[1].toBigInt().toString() })
          }
          if (ex.isSigned && c.address.length === 0) {
            assert.deepEqual(c.origin, { __kind: 'system', value: { __kind: 'Signed', value: accountHex(ex.signer) } })
          }
        }
      })
    }
    assert.ok(checkedTransfers >= 5, `${checkedTransfers} transfers checked`)
  })

  it('builds the submitted call trees and assigns events to the calls that emitted them', () => {
    const byBlock = new Map(wsBlocks.map((b) => [b.header.number, b]))
    for (const s of scenario.submitted) {
      const b = byBlock.get(s.block)!
      assert.equal(b.header.hash, s.blockHash)
      const x = b.extrinsics[s.index]
      assert.equal(x.hash, s.hash, s.label)
      assert.equal(x.success, s.success, s.label)
      assert.deepEqual((x.signature as any).address.value, scenario.accounts[Object.keys(scenario.accounts).find((n) => scenario.accounts[n].address === s.signer)!].publicKey)
      const calls = new Map(b.calls.filter((c) => c.extrinsicIndex === s.index).map((c) => [key(c.address), c.name]))
      if (s.success) assert.deepEqual(Object.fromEntries(calls), s.calls, s.label)
      else assert.deepEqual(Object.fromEntries(calls), { '': s.calls[''] }, s.label)
    }

    const find = (label: string) => {
      const s = scenario.submitted.find((x) => x.label === label)!
      const b = byBlock.get(s.block)!
      const events = b.events.filter((e) => e.extrinsicIndex === s.index)
      const calls = b.calls.filter((c) => c.extrinsicIndex === s.index)
      const call = (addr: number[]) => calls.find((c) => key(c.address) === key(addr)) as SubstrateCall
      return { events, calls, call }
    }
    const pk = (n: string) => scenario.accounts[n].publicKey

    // every Transfer comes from the transfer call at its address, with that call's dest and value
    for (const label of ['transfer', 'batch', 'proxy']) {
      const { events, call } = find(label)
      const transfers = events.filter((e) => e.name === 'Balances.Transfer')
      assert.ok(transfers.length > 0)
      for (const t of transfers) {
        const c = call(t.callAddress!)
        assert.equal(c.name, 'Balances.transfer', `${label}: Transfer at [${t.callAddress}]`)
        assert.equal((t.args as any).to, (c.args as any).dest.value)
        assert.equal((t.args as any).amount, (c.args as any).value)
      }
    }

    const batch = find('batch')
    const transfers = batch.events.filter((e) => e.name === 'Balances.Transfer')
    assert.deepEqual(transfers.map((e) => key(e.callAddress!)), ['0', '1.0', '1.1'])
    assert.deepEqual(transfers.map((e) => (e.args as any).amount), [scenario.amounts.batch0, scenario.amounts.batch10, scenario.amounts.batch11].map(String))
    assert.deepEqual(transfers.map((e) => (e.args as any).to), [pk('Charlie'), pk('Dave'), pk('Eve')])
    assert.deepEqual(transfers.map((e) => (e.args as any).from), [pk('Bob'), pk('Bob'), pk('Bob')])
    // the inner batch_all's completion events belong to it; the outer ones to the root
    const completions = batch.events.filter((e) => e.name.startsWith('Utility.')).map((e) => `${e.name}@${key(e.callAddress!)}`)
    assert.deepEqual(completions, ['Utility.ItemCompleted@', 'Utility.ItemCompleted@1', 'Utility.ItemCompleted@1', 'Utility.BatchCompleted@1', 'Utility.ItemCompleted@', 'Utility.BatchCompleted@'])
    assert.deepEqual(batch.call([1, 1]).args, { dest: { __kind: 'Id', value: pk('Eve') }, value: String(scenario.amounts.batch11) })

    const proxy = find('proxy')
    assert.deepEqual(proxy.call([]).args && (proxy.call([]).args as any).real, pk('Alice'))
    assert.deepEqual(proxy.call([]).origin, { __kind: 'system', value: { __kind: 'Signed', value: pk('Charlie') } })
    // the proxied call runs as Alice
    assert.deepEqual(proxy.call([0]).origin, { __kind: 'system', value: { __kind: 'Signed', value: pk('Alice') } })
    const executed = proxy.events.find((e) => e.name === 'Proxy.ProxyExecuted')!
    assert.deepEqual(executed.callAddress, [])
    assert.deepEqual(executed.args, { result: { __kind: 'Ok' } })
    const proxied = proxy.events.find((e) => e.name === 'Balances.Transfer')!
    assert.deepEqual(proxied.callAddress, [0])
    assert.equal((proxied.args as any).from, pk('Alice'))
    assert.equal((proxied.args as any).amount, String(scenario.amounts.proxied))

    const failing = find('failing batch_all')
    assert.equal(failing.calls.length, 1)
    assert.equal(failing.call([]).success, false)
    assert.deepEqual(failing.call([]).error, { __kind: 'Module', value: { index: 10, error: '0x02000000' } })
    assert.ok(failing.events.some((e) => e.name === 'System.ExtrinsicFailed'))
    assert.ok(!failing.events.some((e) => e.name === 'Balances.Transfer'))
  })

  it('decodes a block with the runtime of its parent and fetches new metadata after an upgrade', async () => {
    // The runtime cannot really be upgraded here (no second wasm, no sudo), so the transport
    // reports a new spec version for the state from the block after the scenario on; the source
    // must then decode that block with the old runtime (its parent's) and fetch metadata again
    // for the next block, at a block whose state has the new version.
    const upgradeAt = scenario.blocks[scenario.blocks.length - 1].number
    const hashes = new Map(wsBlocks.map((b) => [b.header.hash, b.header.number]))
    const log: RpcCall[] = []
    const inner = new SubstrateRpcSource({ url: node.httpUrl }).rpc
    const bump = (method: string, params: unknown[], result: any) => {
      if (method === 'state_getRuntimeVersion' && result && (hashes.get(params[0] as string) ?? -1) >= upgradeAt) return { ...result, specVersion: result.specVersion + 1 }
      return result
    }
    const transport: SubstrateTransport = {
      url: inner.url,
      async call(method, params = []) {
        log.push({ method, params })
        return bump(method, params, await inner.call(method, params))
      },
      async batch(calls) {
        log.push(...calls)
        const results = await inner.batch(calls)
        return results.map((r, i) => (r instanceof RpcError ? r : bump(calls[i].method, calls[i].params, r)))
      },
      close: () => inner.close(),
    }
    const src = new SubstrateRpcSource({ url: node.httpUrl, transport })
    try {
      const blocks = await src.fetchBlocks(numbers.slice(1))
      assert.equal(src.stats.metadataFetched, 2)
      const metadataAt = log.filter((c) => c.method === 'state_getMetadata').map((c) => hashes.get(c.params[0] as string))
      assert.equal(metadataAt.length, 2)
      assert.ok(metadataAt.includes(upgradeAt), `metadata fetched at ${metadataAt}`)
      for (const b of blocks) {
        assert.equal(b.header.specVersion, b.header.number >= upgradeAt ? 901 : 900)
        // decoding is unchanged (same metadata), whichever runtime object decoded it
        assert.deepEqual(b.events, wsBlocks[b.header.number].events)
        assert.deepEqual(b.calls, wsBlocks[b.header.number].calls)
      }
    } finally {
      await src.close()
    }
    // the upgrade block alone: only the parent's runtime (the old one) is needed to decode it
    log.length = 0
    const alone = new SubstrateRpcSource({ url: node.httpUrl, transport })
    const [b] = await alone.fetchBlocks([upgradeAt])
    assert.equal(b.header.specVersion, 901)
    assert.equal(alone.stats.metadataFetched, 1)
    assert.deepEqual(log.filter((c) => c.method === 'state_getMetadata').map((c) => hashes.get(c.params[0] as string)), [upgradeAt - 1])
  })
})

/*
 * Recorded real blocks (fixtures/substrate/ocelloids-sdk: SCALE SignedBlocks and event records captured
 * from live networks, with the metadata of their runtime) served by a transport that answers the
 * same JSON-RPC methods a node would; checked against the @polkadot/types oracle decoded next to
 * them. These cover what the dev chain cannot: Contracts.ContractEmitted (the `_contractAddress`
 * helper), multisig call trees, Polkadot's relay-chain runtime, and deep call trees with failing
 * items: a 4-deep batch / batch_all nesting with BatchInterrupted (Westend), force_batch with
 * ItemFailed and a nested batch interrupted half-way (Rococo), multisig > proxy > proxy (Polkadot).
 *
 * The oracle's `callTree` is the extrinsic as submitted; @subsquid/substrate-data lists the calls
 * that ran, as squid's processor does: a failed item (BatchInterrupted's index, ItemFailed, an Err
 * result of a proxy / multisig) is a call with success=false and no sub-calls, and the items of an
 * interrupted batch after the failed one are absent. Events are attributed by walking them
 * backwards: everything before a call's completion event that no inner call claims (including the
 * pre-dispatch fee Withdraw and a multisig's deposit Unreserved) goes to the innermost call that ran
 * first; the tests assert that rule.
 */

const DATA = path.join(REPO_ROOT, 'fixtures/substrate/ocelloids-sdk')
/** A fixture file (gzip-compressed copy of the recording, see fixtures/SOURCES.md) as text. */
const readFixture = async (...p: string[]) => gunzipSync(await readFile(path.join(DATA, ...p) + '.gz')).toString('utf8')

interface RecordedSet {
  name: string
  metadataFile: string
  version: RuntimeVersion
  /**
   * false: the runtime has no TransactionFeePaid event, so substrate-data computes fees from
   * TransactionPayment.NextFeeMultiplier of the parent state, which the recording does not hold.
   */
  fee?: false
}

const RECORDED: RecordedSet[] = [
  { name: 'contracts2841323', metadataFile: 'rococoContracts-hex.ts', version: { specName: 'contracts-rococo', specVersion: 9420, implName: 'contracts-rococo', implVersion: 0 } },
  { name: 'polkadot18977445', metadataFile: 'polkadot-hex-18977445.ts', version: { specName: 'polkadot', specVersion: 1000001, implName: 'parity-polkadot', implVersion: 0 } },
  // March 2022; the runtime version is the metadata's System.Version constant
  { name: 'westend10091936', metadataFile: 'westend-hex.ts', version: { specName: 'westend', specVersion: 9180, implName: 'parity-westend', implVersion: 0 }, fee: false },
  { name: 'rococo8695536', metadataFile: 'rococo-hex.ts', version: { specName: 'rococo', specVersion: 1006001, implName: 'parity-rococo-v2.0', implVersion: 0 } },
  { name: 'rococo8695659', metadataFile: 'rococo-hex.ts', version: { specName: 'rococo', specVersion: 1006001, implName: 'parity-rococo-v2.0', implVersion: 0 } },
  // The chain ran an older spec at this height; the only metadata recorded is that of spec 1000001
  // (as for the oracle, which decoded it with the same file). Every extrinsic (paraInherent
  // included) and event of the block decodes with it; names are those of spec 1000001.
  { name: 'polkadot16037760', metadataFile: 'polkadot-hex-18977445.ts', version: { specName: 'polkadot', specVersion: 1000001, implName: 'parity-polkadot', implVersion: 0 } },
]

async function recordedTransport(set: RecordedSet): Promise<{ transport: SubstrateTransport; numbers: number[]; calls: RpcCall[] }> {
  const ts = await readFixture('packages/test/src/__data__/metadata', set.metadataFile)
  const metadataHex = /'(0x[0-9a-f]+)'/.exec(ts)![1]
  const records: { block: string; events: string[] }[] = JSON.parse(await readFixture('derived', `${set.name}.raw.json`))
  const registry = new TypeRegistry()
  registry.setMetadata(new Metadata(registry, metadataHex as `0x${string}`))
  const byHash = new Map<string, { header: any; extrinsics: string[]; events: string }>()
  const byNumber = new Map<number, string>()
  for (const r of records) {
    const signed: any = registry.createType('SignedBlock', r.block)
    const h = signed.block.header
    const header = {
      parentHash: h.parentHash.toHex(),
      number: '0x' + h.number.toNumber().toString(16),
      stateRoot: h.stateRoot.toHex(),
      extrinsicsRoot: h.extrinsicsRoot.toHex(),
      digest: { logs: h.digest.logs.map((l: any) => l.toHex()) },
    }
    const events = u8aToHex(u8aConcat(compactToU8a(r.events.length), ...r.events.map((e) => hexToU8a(e))))
    byHash.set(h.hash.toHex(), { header, extrinsics: signed.block.extrinsics.map((x: any) => x.toHex()), events })
    byNumber.set(h.number.toNumber(), h.hash.toHex())
  }
  const calls: RpcCall[] = []
  const answer = (method: string, params: any[]): unknown => {
    calls.push({ method, params })
    switch (method) {
      case 'chain_getBlockHash': return byNumber.get(params[0]) ?? null
      case 'chain_getBlock': {
        const b = byHash.get(params[0])
        return b ? { block: { header: b.header, extrinsics: b.extrinsics }, justifications: null } : null
      }
      case 'chain_getHeader': {
        const b = byHash.get(params[0])
        if (b) return b.header
        // the parent of the first recorded block: a header that only names its number
        const child = [...byHash.values()].find((x) => x.header.parentHash === params[0])
        return child ? { ...child.header, number: '0x' + (parseInt(child.header.number, 16) - 1).toString(16), parentHash: '0x' + '00'.repeat(32) } : null
      }
      case 'state_getStorage': return params[0] === SYSTEM_EVENTS_KEY ? byHash.get(params[1])?.events ?? null : null
      case 'state_getRuntimeVersion': return { ...set.version, transactionVersion: 0, stateVersion: 0, apis: [] }
      case 'state_getMetadata': return metadataHex
      default: return new RpcError(method, params, -32601, 'Method not found')
    }
  }
  const transport: SubstrateTransport = {
    url: `recorded:${set.name}`,
    async call(method, params = []) {
      const r = answer(method, params)
      if (r instanceof RpcError) throw r
      return r
    },
    async batch(list) {
      return list.map((c) => answer(c.method, c.params))
    },
    async close() {},
  }
  return { transport, numbers: [...byNumber.keys()].sort((a, b) => a - b), calls }
}

/** `Pallet.call_name` → the oracle's `pallet.callName`. */
function polkadotJsName(name: string): string {
  const [pallet, item] = name.split('.')
  const camel = item.includes('_') || /^[a-z]/.test(item) ? item.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase()) : item
  return `${pallet[0].toLowerCase()}${pallet.slice(1)}.${camel}`
}

function ss58Hex(address: string): string {
  return u8aToHex(decodeAddress(address))
}

/** A recorded set decoded once (shared by the tests of that set). */
const decodedSets = new Map<string, Promise<{ blocks: DecodedSubstrateBlock[]; oracle: any; rpcCalls: RpcCall[]; metadataFetched: number }>>()
function decodeRecorded(set: RecordedSet) {
  let p = decodedSets.get(set.name)
  if (!p) {
    p = (async () => {
      const { transport, numbers, calls: rpcCalls } = await recordedTransport(set)
      const oracle = JSON.parse(await readFixture('derived', `${set.name}.decoded.json`))
      const src = new SubstrateRpcSource({ url: transport.url, transport, validator: false, fee: set.fee })
      const blocks = await src.fetchBlocks(numbers)
      return { blocks, oracle, rpcCalls, metadataFetched: src.stats.metadataFetched }
    })()
    decodedSets.set(set.name, p)
  }
  return p
}

/** The oracle's call tree in squid addresses: `calls[j]` of a node at `a` is at `[...a, j]`. */
function oracleTree(root: any): Map<string, string> {
  const out = new Map<string, string>()
  const walk = (node: any, address: number[]) => {
    out.set(key(address), node.call)
    ;(node.calls ?? []).forEach((sub: any, j: number) => walk(sub, [...address, j]))
  }
  walk(root, [])
  return out
}

/** A @polkadot/types DispatchError JSON (`{arithmetic: 'Underflow'}`, `{module: {...}}`) in squid's form. */
function squidDispatchError(o: any): Json {
  const [k, v] = Object.entries(o)[0] as [string, any]
  const kind = k[0].toUpperCase() + k.slice(1)
  return typeof v === 'string' ? { __kind: kind, value: { __kind: v } } : v == null ? { __kind: kind } : { __kind: kind, value: v }
}

describe('substrate rpc source on recorded real blocks', () => {
  for (const set of RECORDED) {
    it(`${set.name}: decodes like the @polkadot/types oracle`, async () => {
      const { blocks, oracle, rpcCalls, metadataFetched } = await decodeRecorded(set)
      assert.equal(metadataFetched, 1)
      assert.ok(!rpcCalls.some((c) => c.method === 'state_getStorage' && c.params[0] !== SYSTEM_EVENTS_KEY), 'no storage besides System.Events is needed')
      assert.equal(blocks.length, oracle.blocks.length)
      let emitted = 0
      let nested = 0
      blocks.forEach((b, bi) => {
        const o = oracle.blocks[bi]
        for (const f of ['number', 'hash', 'parentHash', 'stateRoot', 'extrinsicsRoot'] as const) assert.equal(b.header[f], o[f], `${f} of ${o.number}`)
        assert.equal(b.header.specVersion, set.version.specVersion)
        const ts = o.extrinsics.find((x: any) => x.callTree.call === 'timestamp.set')
        assert.equal(b.header.timestamp, ts.callTree.args.now)
        assert.equal(b.extrinsics.length, o.extrinsics.length)
        o.extrinsics.forEach((ox: any, i: number) => {
          const x = b.extrinsics[i]
          assert.equal(x.hash, ox.hash)
          assert.equal(x.signature != null, ox.signed)
          if (ox.signed && set.fee === false) {
            assert.equal((x.signature as any).address.value ?? (x.signature as any).address, ss58Hex(ox.signer))
            assert.equal(x.fee, undefined)
          } else if (ox.signed) {
            assert.equal((x.signature as any).address.value ?? (x.signature as any).address, ss58Hex(ox.signer))
            const paid = b.events.find((e) => e.extrinsicIndex === i && e.name === 'TransactionPayment.TransactionFeePaid')!
            assert.equal(x.fee, (paid.args as any).actualFee)
            assert.match(x.fee!, /^\d+$/)
          }
          // the call tree, with the oracle's nesting turned into squid addresses
          const expected = oracleTree(ox.callTree)
          const mine = b.calls.filter((c) => c.extrinsicIndex === i)
          if (x.success) {
            const at = new Map(mine.map((c) => [key(c.address), c]))
            const where = `block ${o.number} extrinsic ${i}`
            // every call squid lists is the oracle's call at that address
            for (const [a, c] of at) assert.equal(polkadotJsName(c.name), expected.get(a), `${where} [${a}]`)
            assert.equal(at.size, mine.length, `${where}: one call per address`)
            assert.equal(at.get('')?.success, true, where)
            // an oracle call squid leaves out did not run: its parent failed (no sub-calls of a
            // failed call are listed), or it follows the failed item of an interrupted batch
            for (const a of expected.keys()) {
              if (at.has(a)) continue
              const path = a.split('.').map(Number)
              const parentKey = key(path.slice(0, -1))
              const parent = at.get(parentKey)
              if (!parent) {
                assert.ok(expected.has(parentKey), `${where} [${a}]`)
                continue
              }
              const interrupted = b.events.find((e) => e.extrinsicIndex === i && e.name === 'Utility.BatchInterrupted' && key(e.callAddress ?? []) === parentKey)
              assert.ok(!parent.success || (parent.name === 'Utility.batch' && interrupted && (interrupted.args as any).index < path[path.length - 1]), `${where}: [${a}] ${expected.get(a)} is absent`)
            }
            for (const c of mine) assert.equal(c.success, c.error === undefined, `${where} [${c.address}]`)
            if (expected.size > 1) nested++
          } else {
            assert.deepEqual(mine.map((c) => [key(c.address), polkadotJsName(c.name)]), [['', ox.callTree.call]])
          }
        })
        assert.equal(b.events.length, o.events.length)
        o.events.forEach((oe: any, i: number) => {
          const e = b.events[i]
          assert.equal(polkadotJsName(e.name), oe.name)
          const phase = Object.keys(oe.phase)[0]
          assert.equal(e.phase.toLowerCase(), phase.toLowerCase())
          if (phase === 'applyExtrinsic') assert.equal(e.extrinsicIndex, oe.phase.applyExtrinsic)
          assert.deepEqual(e.topics, oe.topics)
          if (e.name === 'Utility.ItemFailed') assert.deepEqual(e.args, { error: squidDispatchError(oe.data[0]) })
          if (e.name === 'Utility.BatchInterrupted') assert.deepEqual(e.args, { index: oe.data[0], error: squidDispatchError(oe.data[1]) })
          if (e.name === 'Proxy.ProxyExecuted') {
            const r = oe.data[0]
            assert.deepEqual(e.args, { result: 'ok' in r ? { __kind: 'Ok' } : { __kind: 'Err', value: squidDispatchError(r.err) } })
          }
          if (e.name === 'Multisig.MultisigExecuted') {
            assert.equal((e.args as any).approving, ss58Hex(oe.data[0]))
            assert.equal((e.args as any).multisig, ss58Hex(oe.data[2]))
            assert.equal((e.args as any).callHash, oe.data[3])
          }
          if (e.name === 'Contracts.ContractEmitted') {
            emitted++
            assert.equal(e._contractAddress, ss58Hex(oe.data[0]))
            assert.deepEqual(e.args, { contract: ss58Hex(oe.data[0]), data: oe.data[1] })
            assert.deepEqual(e.callAddress, [])
          }
        })
      })
      if (set.name.startsWith('contracts')) assert.equal(emitted, 3)
      else assert.ok(nested > 0)
    })
  }

  /** The nested extrinsic of a one-block set: its calls, events (`Name@address`) and oracle tree. */
  async function nestedExtrinsic(name: string, index: number) {
    const { blocks, oracle } = await decodeRecorded(RECORDED.find((s) => s.name === name)!)
    assert.equal(blocks.length, 1)
    const b = blocks[0]
    const ox = oracle.blocks[0].extrinsics[index]
    const calls = b.calls.filter((c) => c.extrinsicIndex === index)
    const events = b.events.filter((e) => e.extrinsicIndex === index)
    const call = (a: string) => calls.find((c) => key(c.address) === a)!
    return {
      x: b.extrinsics[index],
      ox,
      oracleEvents: oracle.blocks[0].events.filter((e: any) => e.phase.applyExtrinsic === index),
      tree: oracleTree(ox.callTree),
      /** [address, name, success] in squid's order (depth first) */
      calls: calls.map((c) => [key(c.address), c.name, c.success]),
      call,
      events,
      attributed: events.map((e) => `${e.name}@${e.callAddress ? key(e.callAddress) : '-'}`),
    }
  }

  it('westend10091936: batch > batch_all > batch > batch_all > transfer, BatchInterrupted 3 deep', async () => {
    const t = await nestedExtrinsic('westend10091936', 2)
    assert.equal(t.x.success, true)
    // the oracle: the submitted tree, with the transfer 4 deep at [1,0,0,0]
    assert.deepEqual([...t.tree], [
      ['', 'utility.batch'], ['0', 'balances.transfer'], ['1', 'utility.batchAll'], ['1.0', 'utility.batch'],
      ['1.0.0', 'utility.batchAll'], ['1.0.0.0', 'balances.transfer'], ['2', 'balances.transfer'],
    ])
    // squid: the batch at [1,0] was interrupted at its item 0 (System.CallFiltered); that
    // batch_all is a failed call and its transfer, which did not take effect, is not listed
    assert.deepEqual(t.calls, [
      ['', 'Utility.batch', true], ['0', 'Balances.transfer', true], ['1', 'Utility.batch_all', true], ['1.0', 'Utility.batch', true],
      ['1.0.0', 'Utility.batch_all', false], ['2', 'Balances.transfer', true],
    ])
    assert.deepEqual(t.call('1.0.0').error, { __kind: 'Module', value: { index: 0, error: 5 } })
    assert.deepEqual(t.oracleEvents.find((e: any) => e.name === 'utility.BatchInterrupted').data, [0, { module: { index: 0, error: 5 } }])
    assert.deepEqual(t.attributed, [
      'Balances.Withdraw@0', // pre-dispatch fee, given to the first innermost call by squid's rule
      'Utility.ItemCompleted@', // [0] done (a 0-value transfer emits nothing)
      'Utility.BatchInterrupted@1.0', // the inner batch, not the failed batch_all
      'Utility.ItemCompleted@1', // [1,0] done (an interrupted batch still returns Ok)
      'Utility.BatchCompleted@1',
      'Utility.ItemCompleted@', // [1]
      'Utility.ItemCompleted@', // [2]
      'Utility.BatchCompleted@',
      'Balances.Deposit@',
      'System.ExtrinsicSuccess@-',
    ])
    assert.deepEqual(t.events.find((e) => e.name === 'Utility.BatchInterrupted')!.args, { index: 0, error: { __kind: 'Module', value: { index: 0, error: 5 } } })
    // the transfers that ran: both to the signer, 0 value
    for (const a of ['0', '2']) assert.deepEqual(t.call(a).args, { dest: { __kind: 'Id', value: ss58Hex(t.ox.signer) }, value: '0' })
    for (const c of t.calls) assert.deepEqual(t.call(c[0] as string).origin, { __kind: 'system', value: { __kind: 'Signed', value: ss58Hex(t.ox.signer) } })
  })

  /*
   * The two recorded rococo nested batches: [0] System.remark, [1] a batch whose transfer_keep_alive
   * [1,0] runs and [1,1] underflows, [2] System.remark. Their attributed events up to [1,1] (the fee
   * goes to the first innermost call, [0] done, [1,0]'s transfer, [1,0] done), and after the outer
   * batch completed (fee deposits and payment, success):
   */
  const UNDERFLOW = { __kind: 'Arithmetic', value: { __kind: 'Underflow' } }
  const ROCOCO_NESTED_START = ['Balances.Withdraw@0', 'Utility.ItemCompleted@', 'Balances.Transfer@1.0', 'Utility.ItemCompleted@1']
  const ROCOCO_NESTED_END = ['Balances.Deposit@', 'Balances.Deposit@', 'TransactionPayment.TransactionFeePaid@', 'System.ExtrinsicSuccess@-']

  it('rococo8695536: force_batch with a nested force_batch whose middle item fails (ItemFailed)', async () => {
    const t = await nestedExtrinsic('rococo8695536', 2)
    assert.equal(t.x.success, true)
    // force_batch runs every item: squid lists the whole submitted tree, the failed item with its error
    assert.deepEqual(t.calls.map(([a, n]) => [a, polkadotJsName(n as string)]), [...t.tree])
    assert.deepEqual(t.calls, [
      ['', 'Utility.force_batch', true], ['0', 'System.remark', true], ['1', 'Utility.force_batch', true],
      ['1.0', 'Balances.transfer_keep_alive', true], ['1.1', 'Balances.transfer_keep_alive', false], ['1.2', 'Balances.transfer_keep_alive', true],
      ['2', 'System.remark', true],
    ])
    assert.deepEqual(t.call('1.1').error, UNDERFLOW)
    assert.deepEqual(t.attributed, [
      ...ROCOCO_NESTED_START,
      'Utility.ItemFailed@1', // emitted by the inner force_batch for its item [1,1]
      'Balances.Transfer@1.2',
      'Utility.ItemCompleted@1',
      'Utility.BatchCompletedWithErrors@1',
      'Utility.ItemCompleted@',
      'Utility.ItemCompleted@',
      'Utility.BatchCompleted@', // the outer force_batch had no failing item
      ...ROCOCO_NESTED_END,
    ])
    assert.deepEqual(t.events.find((e) => e.name === 'Utility.ItemFailed')!.args, { error: UNDERFLOW })
    // each Transfer is the transfer_keep_alive at its address
    for (const e of t.events.filter((e) => e.name === 'Balances.Transfer')) {
      const c = t.call(key(e.callAddress!)) as any
      assert.equal((e.args as any).to, c.args.dest.value)
      assert.equal((e.args as any).amount, c.args.value)
      assert.equal((e.args as any).from, ss58Hex(t.ox.signer))
    }
    // the failed item asked for more than was left
    assert.ok(BigInt((t.call('1.1').args as any).value) > 0n)
  })

  it('rococo8695659: nested batch interrupted at its item 1; item 2 did not run', async () => {
    const t = await nestedExtrinsic('rococo8695659', 2)
    assert.equal(t.x.success, true)
    assert.equal(t.tree.get('1.2'), 'balances.transferKeepAlive')
    assert.deepEqual(t.calls, [
      ['', 'Utility.batch', true], ['0', 'System.remark', true], ['1', 'Utility.batch', true],
      ['1.0', 'Balances.transfer_keep_alive', true], ['1.1', 'Balances.transfer_keep_alive', false],
      ['2', 'System.remark', true],
    ])
    assert.deepEqual(t.call('1.1').error, UNDERFLOW)
    assert.deepEqual(t.attributed, [
      ...ROCOCO_NESTED_START,
      'Utility.BatchInterrupted@1',
      'Utility.ItemCompleted@', // the interrupted batch [1] itself completed
      'Utility.ItemCompleted@',
      'Utility.BatchCompleted@',
      ...ROCOCO_NESTED_END,
    ])
    assert.deepEqual(t.events.find((e) => e.name === 'Utility.BatchInterrupted')!.args, { index: 1, error: UNDERFLOW })
    assert.deepEqual(t.oracleEvents.find((e: any) => e.name === 'utility.BatchInterrupted').data, [1, { arithmetic: 'Underflow' }])
    const transfer = t.events.find((e) => e.name === 'Balances.Transfer')!
    assert.equal((transfer.args as any).to, (t.call('1.0').args as any).dest.value)
    assert.equal((transfer.args as any).amount, (t.call('1.0').args as any).value)
  })

  it('polkadot16037760: multisig.as_multi > proxy.proxy > proxy.proxy > convictionVoting.vote', async () => {
    const t = await nestedExtrinsic('polkadot16037760', 2)
    assert.equal(t.x.success, true)
    assert.deepEqual(t.calls, [
      ['', 'Multisig.as_multi', true], ['0', 'Proxy.proxy', true], ['0.0', 'Proxy.proxy', true], ['0.0.0', 'ConvictionVoting.vote', true],
    ])
    assert.deepEqual(t.calls.map(([a, n]) => [a, polkadotJsName(n as string)]), [...t.tree])
    // origins: the signer; the multisig account (from MultisigExecuted); then each proxy's `real`
    const executed = t.oracleEvents.find((e: any) => e.name === 'multisig.MultisigExecuted')
    const signed = (who: string) => ({ __kind: 'system', value: { __kind: 'Signed', value: ss58Hex(who) } })
    const proxy1 = t.ox.callTree.calls[0]
    const proxy2 = proxy1.calls[0]
    assert.deepEqual(t.call('').origin, signed(t.ox.signer))
    assert.deepEqual(t.call('0').origin, signed(executed.data[2]))
    assert.deepEqual(t.call('0.0').origin, signed(proxy1.args.real.id))
    assert.deepEqual(t.call('0.0.0').origin, signed(proxy2.args.real.id))
    assert.deepEqual((t.call('0').args as any).real, { __kind: 'Id', value: ss58Hex(proxy1.args.real.id) })
    assert.deepEqual((t.call('0.0').args as any).real, { __kind: 'Id', value: ss58Hex(proxy2.args.real.id) })
    const vote = proxy2.calls[0].args
    assert.deepEqual(t.call('0.0.0').args, {
      pollIndex: vote.poll_index,
      vote: { __kind: 'Standard', vote: parseInt(vote.vote.standard.vote, 16), balance: BigInt(vote.vote.standard.balance).toString() },
    })
    assert.deepEqual(t.attributed, [
      'Balances.Withdraw@0.0.0', // pre-dispatch fee
      'Balances.Unreserved@0.0.0', // the multisig deposit, returned by as_multi before dispatching: squid gives it to the innermost call
      'Balances.Locked@0.0.0',
      'Scheduler.Canceled@0.0.0',
      'Scheduler.Scheduled@0.0.0',
      'Proxy.ProxyExecuted@0.0', // the inner proxy's result
      'Proxy.ProxyExecuted@0',
      'Multisig.MultisigExecuted@',
      'Balances.Deposit@',
      'Treasury.Deposit@',
      'Balances.Deposit@',
      'TransactionPayment.TransactionFeePaid@',
      'System.ExtrinsicSuccess@-',
    ])
    assert.equal((t.events.find((e) => e.name === 'Balances.Locked')!.args as any).who, ss58Hex(proxy2.args.real.id))
    assert.deepEqual((t.events.find((e) => e.name === 'Multisig.MultisigExecuted')!.args as any).result, { __kind: 'Ok' })
  })
})

/*
 * Moonbeam 16083402 recorded twice (fixtures/substrate/ocelloids-services/derived): as Substrate,
 * already decoded by polkadot-api (no raw bytes, so it cannot go through the RPC source), and as
 * the same block from the Ethereum RPC. A fixture-level check that the EVM-on-Substrate helper
 * columns (`ethereum_transact_to` / `_sighash` of Ethereum.transact calls, `evm_log_address` /
 * `evm_log_topic0..3` of EVM.Log events), derived by squid's rule from the Substrate form, are
 * what the Ethereum side says: transaction k is the k-th Ethereum.transact, log j the j-th EVM.Log.
 */
describe('moonbeam 16083402: Substrate (polkadot-api) and Ethereum RPC recordings agree', () => {
  const readServices = async (name: string) =>
    JSON.parse(gunzipSync(await readFile(path.join(REPO_ROOT, 'fixtures/substrate/ocelloids-services/derived', `${name}.json.gz`))).toString('utf8'))
  const lower = (v: unknown) => (typeof v === 'string' ? v.toLowerCase() : null)

  /** squid's `_ethereumTransactTo` / `_ethereumTransactSighash`; EIP-7702 names its fields destination / data. */
  function transactHelpers(args: any): { to: string | null; sighash: string | null; input: string } {
    const tx = args.transaction.value
    const action = tx.destination ?? tx.action
    const input: string = tx.data ?? tx.input
    return { to: action.type === 'Call' ? lower(action.value) : null, sighash: lower(input.slice(0, 10)), input }
  }

  it('48 Ethereum.transact ↔ 48 eth transactions, 51 EVM.Log ↔ 51 eth logs', async () => {
    const sub = await readServices('moonbeam-16083402')
    const eth = await readServices('moonbeam_evm-16083402')
    assert.equal(Number(sub.number), 16083402)
    assert.equal(Number(eth.number), 16083402)

    const transacts = sub.extrinsics.map((x: any, i: number) => ({ ...x, index: i })).filter((x: any) => x.module === 'Ethereum' && x.method === 'transact')
    assert.equal(transacts.length, 48)
    assert.equal(eth.transactions.length, 48)
    const kinds = new Set(transacts.map((x: any) => x.args.transaction.type))
    assert.deepEqual([...kinds].sort(), ['EIP1559', 'EIP7702', 'Legacy'])
    const executed = new Map<number, any>(sub.events.filter((e: any) => e.event.module === 'Ethereum' && e.event.name === 'Executed').map((e: any) => [e.phase.value, e.event.value]))
    const txOfExtrinsic = new Map<number, number>()
    transacts.forEach((x: any, k: number) => {
      const t = eth.transactions[k]
      assert.equal(t.transactionIndex, k)
      const h = transactHelpers(x.args)
      assert.equal(h.to, lower(t.to), `tx ${k}: to`)
      assert.equal(h.sighash, lower(t.input.slice(0, 10)), `tx ${k}: sighash`)
      assert.equal(h.input, t.input, `tx ${k}: input`)
      // the same signed transaction, and the Substrate event naming its Ethereum hash
      // (r and s: the eth RPC gives them as quantities, without leading zeros)
      assert.equal(BigInt(x.args.transaction.value.signature.r), BigInt(t.r))
      assert.equal(BigInt(x.args.transaction.value.signature.s), BigInt(t.s))
      const ex = executed.get(x.index)
      assert.equal(ex.transaction_hash, t.hash, `tx ${k}: Ethereum.Executed hash`)
      assert.equal(lower(ex.from), lower(t.from))
      assert.equal(lower(ex.to), lower(t.to))
      txOfExtrinsic.set(x.index, k)
    })
    // one transfer with empty input: its sighash is '0x', as squid's slice gives it
    assert.deepEqual(transacts.map((x: any) => transactHelpers(x.args).sighash).filter((s: string | null) => s === '0x'), ['0x'])

    const logs = sub.events.filter((e: any) => e.event.module === 'EVM' && e.event.name === 'Log')
    assert.equal(logs.length, 51)
    assert.equal(eth.logs.length, 51)
    logs.forEach((e: any, j: number) => {
      const l = eth.logs[j]
      const { address, topics, data } = e.event.value.log
      assert.equal(l.logIndex, j)
      const helper = { address: lower(address), topic0: lower(topics[0]), topic1: lower(topics[1]), topic2: lower(topics[2]), topic3: lower(topics[3]) }
      assert.deepEqual(helper, { address: lower(l.address), topic0: lower(l.topics[0]), topic1: lower(l.topics[1]), topic2: lower(l.topics[2]), topic3: lower(l.topics[3]) }, `log ${j}`)
      assert.equal(topics.length, l.topics.length)
      assert.equal(data, l.data)
      // emitted by the extrinsic that carries the log's transaction
      assert.equal(e.phase.type, 'ApplyExtrinsic')
      assert.equal(txOfExtrinsic.get(e.phase.value), l.transactionIndex, `log ${j}: transaction`)
      assert.equal(executed.get(e.phase.value).transaction_hash, l.transactionHash)
    })
  })
})
