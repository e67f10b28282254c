import { encodeAddress } from '@polkadot/util-crypto'
import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { BadRpcAnswer, BlockNotAvailable } from '../src/ingest/source.js'
import { callName, palletName } from '../src/ingest/substrate/sidecar/names.js'
import { normalizeSidecarBlock } from '../src/ingest/substrate/sidecar/normalize.js'
import { ingestRecordedSidecar } from '../src/ingest/substrate/sidecar/recorded.js'
import { loadRecordedSidecar, SIDECAR_CHAINS, SidecarReplayServer, type SidecarChain } from '../src/ingest/substrate/sidecar/replay.js'
import { SidecarSource } from '../src/ingest/substrate/sidecar/source.js'
import { eraValue, toSquid } from '../src/ingest/substrate/sidecar/values.js'
import { ss58ToHex } from '../src/ingest/substrate/ss58.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { LocalStorage } from '../src/server/storage.js'
import { stallTolerant, tempDir } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'

/*
 * Substrate from recorded Substrate API Sidecar answers (fixtures/substrate/substrate-api-sidecar):
 * the normaliser on every recorded block, checked against the raw JSON read here directly; the
 * Sidecar source against a replay Sidecar (retries, missing and malformed blocks); and the three
 * recorded chains through the real ingest loop, served by a router and a worker, queried with the
 * Substrate request lists and relations.
 */

const recorded = Object.fromEntries(SIDECAR_CHAINS.map((c) => [c, loadRecordedSidecar(c)])) as Record<SidecarChain, { number: number; block: any }[]>
const rawBlock = (chain: SidecarChain, n: number) => recorded[chain].find((b) => b.number === n)!.block

/** Runtime pallet name, independently of the normaliser: first letter upper-cased, `evm` → `EVM`. */
const pallet = (p: string) => (p === 'evm' ? 'EVM' : p[0].toUpperCase() + p.slice(1))
const evName = (e: any) => `${pallet(e.method.pallet)}.${e.method.method}`

/** The block's events in System.Events order: onInitialize, each extrinsic's, onFinalize. */
function rawEvents(b: any): { e: any; phase: string; ex: number | null }[] {
  return [
    ...b.onInitialize.events.map((e: any) => ({ e, phase: 'Initialization', ex: null })),
    ...b.extrinsics.flatMap((x: any, i: number) => x.events.map((e: any) => ({ e, phase: 'ApplyExtrinsic', ex: i }))),
    ...b.onFinalize.events.map((e: any) => ({ e, phase: 'Finalization', ex: null })),
  ]
}

function expectedFee(x: any): string | null {
  const paid = x.events.find((e: any) => evName(e) === 'TransactionPayment.TransactionFeePaid')
  if (paid) return (BigInt(paid.data[1]) - BigInt(paid.data[2])).toString()
  return x.info?.partialFee ?? null
}

const addr = (rows: any[]) => rows.map((r) => JSON.stringify(r.address))
const of = (rows: any[], ex: number) => rows.filter((r) => r.extrinsic_index === ex)
const parse = (t: unknown) => (t == null ? null : JSON.parse(t as string))
const signed = (account: string) => ({ __kind: 'system', value: { __kind: 'Signed', value: account } })
const CLOSING = /^System\.Extrinsic(Success|Failed)$/
/**
 * squid's rule (and the node source's): the closing System.ExtrinsicSuccess / ExtrinsicFailed and
 * every event of a failed extrinsic have no call address (null); the other events of an extrinsic
 * have one. (Only an extrinsic whose events do not fit the parser puts every event at [].)
 */
const unattributed = (name: string, x: any) => !x.success || CLOSING.test(name)

describe('Substrate Sidecar normaliser', () => {
  it('SS58: the account id of every prefix; anything else is no address (null, never an exception)', () => {
    const alice = '0xd43593c715fdd31c61141abd04a99fd6822c8558854ccde39a5684e7a56da27d'
    // Alice as Polkadot (prefix 0), Kusama (2) and generic (42) show her
    for (const a of ['15oF4uVJwmo4TdGW7VfQxNLavjCXviqxT9S1MgbjMNHr6Sp5', 'HNZata7iMYWmk5RvZRTiAsSDhV8366zq2YGb3tLH5Upf74F', '5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY']) {
      assert.equal(ss58ToHex(a), alice, a)
    }
    // two-byte prefixes (Vara 137, 1284)
    for (const prefix of [137, 1284, 16383]) assert.equal(ss58ToHex(encodeAddress(alice, prefix)), alice, `prefix ${prefix}`)
    const bad = [
      '15oF4uVJwmo4TdGW7VfQxNLavjCXviqxT9S1MgbjMNHr6Sp6', // checksum
      '15oF4uVJwmo4TdGW7VfQxNLavjCXviqxT9S1MgbjMNHr6Sp', // one character short
      '15oF4uVJwmo4TdGW7VfQxNLavjCXviqxT9S1MgbjMNHr6Sp0', // not base58
      encodeAddress('0x02' + '11'.repeat(32), 0), // a 33-byte ECDSA key, not an account id
      encodeAddress('0x01', 0), // an account index
      alice, // hex is taken as hex elsewhere, not as an address
      '',
      'Normal',
      '123456789'.repeat(5) + '12', // a decimal number of an address' length
    ]
    for (const s of bad) assert.equal(ss58ToHex(s), null, JSON.stringify(s))

    // a signer that is no address: kept as given in the signature, no origin (not a Signed origin of a non-account)
    const block = structuredClone(recorded.kusama.find((r) => r.number === 6566865)!.block)
    block.extrinsics[8].signature.signer = { id: bad[0] }
    const rows = normalizeSidecarBlock(block)
    assert.deepEqual(JSON.parse(rows.extrinsics[8].signature as string).address, { __kind: 'Id', value: bad[0] })
    assert.equal(rows.calls.find((c) => c.extrinsic_index === 8)!.origin, null)
    const good = normalizeSidecarBlock(recorded.kusama.find((r) => r.number === 6566865)!.block)
    assert.deepEqual(JSON.parse(good.calls.find((c) => c.extrinsic_index === 8)!.origin as string), {
      __kind: 'system', value: { __kind: 'Signed', value: ss58ToHex('G84L7BC5UTC9W8Vkc7BZ5ciHjbsjvufcy99fzDEApkFDymE') },
    })
  })

  it('names, SS58, eras: the conversions the mapping relies on', () => {
    // Alice, the well-known dev account
    assert.equal(ss58ToHex('5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY'), '0xd43593c715fdd31c61141abd04a99fd6822c8558854ccde39a5684e7a56da27d')
    assert.equal(ss58ToHex('5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQZ'), null, 'bad checksum')
    assert.equal(ss58ToHex('30000000000'), null)
    for (const [s, r] of [['transferKeepAlive', 'transfer_keep_alive'], ['batchAll', 'batch_all'], ['asMultiThreshold1', 'as_multi_threshold_1'], ['ethCallV2', 'eth_call_v2'], ['set', 'set'], ['callH160', 'call_h160']]) {
      assert.equal(callName(s), r)
    }
    for (const [s, r] of [['evm', 'EVM'], ['ethereum', 'Ethereum'], ['balances', 'Balances'], ['utility', 'Utility'], ['xcmPallet', 'XcmPallet'], ['parachainSystem', 'ParachainSystem']]) {
      assert.equal(palletName(s), r)
    }
    assert.deepEqual(eraValue({ immortalEra: '0x00' }), { __kind: 'Immortal' })
    assert.deepEqual(eraValue({ mortalEra: ['64', '13'] }), { __kind: 'Mortal213', value: 0 }) // 64 → 5 | 13 << 4 = 0x00d5
    assert.deepEqual(toSquid({ dest: { id: '5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY' }, value: '1', other_field: 'Yes', h: '0xABCD' }, true), {
      dest: { __kind: 'Id', value: '0xd43593c715fdd31c61141abd04a99fd6822c8558854ccde39a5684e7a56da27d' }, value: '1', otherField: { __kind: 'Yes' }, h: '0xabcd',
    })
  })

  it('every recorded block: header, extrinsics, fees, event order and phases, root calls', () => {
    let blocks = 0
    for (const chain of SIDECAR_CHAINS) {
      for (const { number, block: b } of recorded[chain]) {
        const rows = normalizeSidecarBlock(b)
        const w = `${chain} ${number}`
        const h = rows.blocks[0]
        assert.equal(h.number, number, w)
        assert.equal(h.hash, b.hash.toLowerCase(), w)
        assert.equal(h.parent_hash, b.parentHash.toLowerCase(), w)
        const ts = b.extrinsics.find((x: any) => x.method.pallet === 'timestamp' && x.method.method === 'set')
        assert.equal(h.timestamp, Number(ts.args.now), w)
        assert.deepEqual(JSON.parse(h.digest as string), { logs: b.logs }, w)
        assert.equal(h.spec_name, null)
        if (b.authorId?.startsWith('0x')) assert.equal(h.validator, b.authorId.toLowerCase())
        else if (b.authorId) assert.match(h.validator as string, /^0x[0-9a-f]{64}$/)

        assert.equal(rows.extrinsics.length, b.extrinsics.length, w)
        b.extrinsics.forEach((x: any, i: number) => {
          const r = rows.extrinsics[i]
          const failed = x.events.find((e: any) => evName(e) === 'System.ExtrinsicFailed')
          assert.equal(r.index, i)
          assert.equal(r.success, x.success, `${w} extrinsic ${i}`)
          assert.equal(r.hash, x.hash.toLowerCase())
          assert.equal(r.fee, expectedFee(x), `${w} extrinsic ${i} fee`)
          assert.equal(r.tip, x.signature ? x.tip : null)
          assert.equal(r.signature == null, x.signature == null)
          if (x.signature) assert.equal(parse(r.signature).signature, x.signature.signature.toLowerCase())
          assert.equal(r.error == null, failed == null, `${w} extrinsic ${i} error`)
          if (failed) assert.equal(Object.keys(failed.data[0])[0], parse(r.error).__kind.toLowerCase())
          // the root call: name in the runtime's form, success as the extrinsic's
          const root = rows.calls.find((c) => c.extrinsic_index === i && (c.address as number[]).length === 0)!
          assert.equal(root.name, `${pallet(x.method.pallet)}.${(root.name as string).split('.')[1]}`)
          assert.match(root.name as string, /^[A-Z][A-Za-z0-9]*\.[a-z0-9_]+$/)
          assert.equal((root.name as string).split('.')[1].replace(/_/g, ''), x.method.method.toLowerCase())
          assert.equal(root.success, x.success)
          assert.equal(root.args_size, (root.args as string).length)
          // a failed extrinsic has its root call only (inner calls did not run)
          if (!x.success) assert.equal(of(rows.calls, i).length, 1, `${w} failed extrinsic ${i}`)
        })

        const raw = rawEvents(b)
        assert.equal(rows.events.length, raw.length, w)
        raw.forEach(({ e, phase, ex }, i) => {
          const r = rows.events[i]
          assert.equal(r.index, i)
          assert.equal(r.name, evName(e), `${w} event ${i}`)
          assert.equal(r.phase, phase)
          assert.equal(r.extrinsic_index, ex)
          if (ex == null) assert.equal(r.call_address, null)
          else if (unattributed(r.name as string, b.extrinsics[ex])) assert.equal(r.call_address, null, `${w} event ${i} (${r.name}) has no call address`)
          else assert.ok(Array.isArray(r.call_address), `${w} event ${i} has a call address`)
          assert.equal(JSON.parse(r.args as string).length, e.data.length)
        })
        // the closing System.ExtrinsicSuccess / ExtrinsicFailed: one per extrinsic, without a call address
        const closing = rows.events.filter((r) => CLOSING.test(r.name as string))
        assert.deepEqual(closing.map((r) => r.extrinsic_index), b.extrinsics.map((_: any, i: number) => i), w)
        assert.ok(closing.every((r) => r.call_address === null), w)
        blocks++
      }
    }
    assert.equal(blocks, 11)
  })

  it('Kusama 13556605: utility.batch with ItemCompleted — items at [0], [1], their events between the ItemCompleted events', () => {
    const b = rawBlock('kusama', 13556605)
    const rows = normalizeSidecarBlock(b)
    const x = b.extrinsics[2]
    assert.equal(x.method.method, 'batch')
    const calls = of(rows.calls, 2)
    assert.deepEqual(addr(calls), ['[]', '[0]', '[1]'])
    assert.deepEqual(calls.map((c) => c.name), ['Utility.batch', 'Staking.payout_stakers', 'Staking.payout_stakers'])
    assert.ok(calls.every((c) => c.success === true))
    x.args.calls.forEach((sub: any, i: number) => assert.equal(parse(calls[i + 1].args).era, sub.args.era))
    // squid's rule: item k owns the events after the previous ItemCompleted (item 0 also the fee withdrawal before it)
    const expected: string[] = []
    let item = 0
    for (const e of x.events) {
      const name = evName(e)
      if (name === 'System.ExtrinsicSuccess') expected.push('null')
      else if (name === 'Utility.ItemCompleted') {
        expected.push('[]')
        item++
      } else expected.push(item < x.args.calls.length ? `[${item}]` : '[]')
    }
    assert.deepEqual(of(rows.events, 2).map((e) => JSON.stringify(e.call_address)), expected)
    assert.ok(expected.includes('[1]'))
    const root = calls[0]
    assert.deepEqual(parse(root.origin), signed(ss58ToHex(x.signature.signer.id)!))
    assert.deepEqual(parse(calls[1].origin), parse(root.origin))
  })

  it('Polkadot 8891183: multisig.asMulti → Balances.transfer at [0], origin the multisig account', () => {
    const b = rawBlock('polkadot', 8891183)
    const rows = normalizeSidecarBlock(b)
    const x = b.extrinsics[4]
    const calls = of(rows.calls, 4)
    assert.deepEqual(addr(calls), ['[]', '[0]'])
    assert.deepEqual(calls.map((c) => c.name), ['Multisig.as_multi', 'Balances.transfer'])
    const executed = x.events.find((e: any) => evName(e) === 'Multisig.MultisigExecuted')
    assert.deepEqual(parse(calls[1].origin), signed(ss58ToHex(executed.data[2])!))
    assert.deepEqual(parse(calls[1].args), { dest: { __kind: 'Id', value: ss58ToHex(x.args.call.args.dest.id) }, value: x.args.call.args.value })
    assert.deepEqual(parse(calls[0].args).call, { __kind: 'Balances', value: { __kind: 'transfer', ...parse(calls[1].args) } })
    const at = x.events.findIndex((e: any) => e === executed)
    assert.ok(x.success && evName(x.events.at(-1)) === 'System.ExtrinsicSuccess')
    assert.deepEqual(of(rows.events, 4).map((e) => JSON.stringify(e.call_address)), x.events.map((_: any, i: number) => (i < at ? '[0]' : i < x.events.length - 1 ? '[]' : 'null')))
  })

  it('Kusama 6566865: batchAll without ItemCompleted lists its items, events stay with the batch; a failed batchAll has its root call only', () => {
    const b = rawBlock('kusama', 6566865)
    const rows = normalizeSidecarBlock(b)
    for (const [i, x] of b.extrinsics.entries() as IterableIterator<[number, any]>) {
      if (x.method.method !== 'batchAll') continue
      const calls = of(rows.calls, i)
      if (x.success) {
        assert.deepEqual(addr(calls), ['[]', ...x.args.calls.map((_: any, k: number) => `[${k}]`)])
        assert.ok(calls.every((c) => c.success === true && c.error == null))
        assert.ok(calls.slice(1).every((c) => c.name === 'Balances.transfer'))
      } else {
        assert.deepEqual(addr(calls), ['[]'])
        assert.equal(calls[0].success, false)
        const failed = x.events.find((e: any) => evName(e) === 'System.ExtrinsicFailed')
        assert.deepEqual(parse(calls[0].error), { __kind: 'Module', value: failed.data[0].module })
        assert.equal(calls[0].error, rows.extrinsics[i].error)
      }
      // succeeded: every event with the batch at [], the closing ExtrinsicSuccess without a call address;
      // failed: no event has a call address
      const evs = of(rows.events, i)
      assert.equal(evs.length, x.events.length)
      assert.deepEqual(evs.map((e) => JSON.stringify(e.call_address)), evs.map((e) => (x.success && e.name !== 'System.ExtrinsicSuccess' ? '[]' : 'null')))
    }
  })

  it('Kusama 9253: sudo.sudoAs (old `proposal` arg) whose SudoAsDone is false → a failed inner call with the `who` origin', () => {
    const b = rawBlock('kusama', 9253)
    const rows = normalizeSidecarBlock(b)
    let n = 0
    for (const [i, x] of b.extrinsics.entries() as IterableIterator<[number, any]>) {
      if (x.method.method !== 'sudoAs') continue
      const calls = of(rows.calls, i)
      assert.deepEqual(addr(calls), ['[]', '[0]'])
      assert.equal(calls[1].name, `${pallet(x.args.proposal.method.pallet)}.${callName(x.args.proposal.method.method)}`)
      const done = x.events.find((e: any) => evName(e) === 'Sudo.SudoAsDone')
      assert.equal(calls[1].success, done.data[0])
      assert.deepEqual(parse(calls[1].origin), signed(ss58ToHex(x.args.who)!))
      assert.deepEqual(parse(calls[0].origin), signed(ss58ToHex(x.signature.signer)!))
      n++
    }
    assert.equal(n, 5)
  })

  it('proxy.proxy (synthetic: a recorded batchAll wrapped in a proxy call) → [0] batch_all, [0, i] transfers, origin the real account', () => {
    const b = structuredClone(rawBlock('kusama', 6566865))
    const inner = b.extrinsics[3]
    const real = inner.signature.signer.id
    const evs = inner.events
    const success = evs.pop()
    const fee = evs.pop()
    for (const result of [{ ok: null }, { err: { module: { index: '29', error: '1' } } }, 'no ProxyExecuted' as const]) {
      const x = {
        ...inner,
        method: { pallet: 'proxy', method: 'proxy' },
        args: { real: { id: real }, force_proxy_type: null, call: { method: inner.method, args: inner.args } },
        events: result === 'no ProxyExecuted'
          ? [...evs, fee, success]
          : result.ok === null
            ? [...evs, { method: { pallet: 'proxy', method: 'ProxyExecuted' }, data: [result] }, fee, success]
            : [{ method: { pallet: 'proxy', method: 'ProxyExecuted' }, data: [result] }, fee, success],
      }
      const rows = normalizeSidecarBlock({ ...b, extrinsics: [b.extrinsics[0], x] })
      const calls = of(rows.calls, 1)
      const events = of(rows.events, 1)
      if (result === 'no ProxyExecuted') {
        // the events do not fit the parser (the closing event of the proxy is missing): the fallback,
        // every derivable call with the extrinsic's success, every event at [] (the closing one too)
        assert.deepEqual(addr(calls), ['[]', '[0]', '[0,0]', '[0,1]', '[0,2]'])
        assert.ok(calls.every((c) => c.success))
        assert.deepEqual(events.map((e) => `${e.name} ${JSON.stringify(e.call_address)}`), [
          'Balances.Transfer []', 'Balances.Transfer []', 'Balances.Transfer []', 'Utility.BatchCompleted []', 'Balances.Deposit []', 'System.ExtrinsicSuccess []',
        ])
      } else if (result.ok === null) {
        assert.deepEqual(addr(calls), ['[]', '[0]', '[0,0]', '[0,1]', '[0,2]'])
        assert.deepEqual(calls.map((c) => c.name), ['Proxy.proxy', 'Utility.batch_all', 'Balances.transfer', 'Balances.transfer', 'Balances.transfer'])
        assert.ok(calls.every((c) => c.success))
        for (const c of calls.slice(1)) assert.deepEqual(parse(c.origin), signed(ss58ToHex(real)!))
        assert.deepEqual(parse(calls[0].args).forceProxyType, null)
        assert.deepEqual(events.map((e) => `${e.name} ${JSON.stringify(e.call_address)}`), [
          'Balances.Transfer [0]', 'Balances.Transfer [0]', 'Balances.Transfer [0]', 'Utility.BatchCompleted [0]',
          'Proxy.ProxyExecuted []', 'Balances.Deposit []', 'System.ExtrinsicSuccess null',
        ])
      } else {
        assert.deepEqual(addr(calls), ['[]', '[0]'])
        assert.equal(calls[1].success, false)
        assert.deepEqual(parse(calls[1].error), { __kind: 'Module', value: { index: '29', error: '1' } })
        // the failed inner call emitted nothing; the extrinsic succeeded, its closing event has no call address
        assert.deepEqual(events.map((e) => `${e.name} ${JSON.stringify(e.call_address)}`), ['Proxy.ProxyExecuted []', 'Balances.Deposit []', 'System.ExtrinsicSuccess null'])
      }
    }
  })

  it('Moonbeam 11728459: helper columns of the 9 EVM.Log events and the 9 Ethereum.transact calls', () => {
    const b = rawBlock('moonbeam', 11728459)
    const rows = normalizeSidecarBlock(b)
    const raw = rawEvents(b)
    const logs = rows.events.filter((e) => e.name === 'EVM.Log')
    assert.equal(logs.length, 9)
    for (const e of logs) {
      const log = raw[e.index as number].e.data[0]
      assert.equal(e.evm_log_address, log.address.toLowerCase())
      for (let i = 0; i < 4; i++) assert.equal(e[`evm_log_topic${i}`], log.topics[i]?.toLowerCase() ?? null)
      assert.equal(e.contract_address, null)
      assert.equal(e.args_size, (e.args as string).length)
    }
    const txs = rows.calls.filter((c) => c.name === 'Ethereum.transact')
    assert.equal(txs.length, 9)
    for (const c of txs) {
      const x = b.extrinsics[c.extrinsic_index as number]
      const [kind, tx] = Object.entries(x.args.transaction)[0] as [string, any]
      assert.equal(c.ethereum_transact_to, tx.action.call?.toLowerCase() ?? null)
      assert.equal(c.ethereum_transact_sighash, tx.input.slice(0, 10).toLowerCase())
      assert.equal(parse(c.args).transaction.__kind, { legacy: 'Legacy', eip1559: 'EIP1559' }[kind])
      assert.deepEqual(c.address, [])
    }
    assert.ok(rows.calls.filter((c) => c.name !== 'Ethereum.transact').every((c) => c.ethereum_transact_to == null && c.ethereum_transact_sighash == null))
    assert.equal(rows.blocks[0].validator, b.authorId.toLowerCase())
  })
})

describe('Substrate Sidecar source against a replay Sidecar', () => {
  it('head, blocks, 404 → BlockNotAvailable, 5xx retried, malformed → BadRpcAnswer', async () => {
    const blocks = recorded.polkadot
    let failures = 0
    const server = new SidecarReplayServer(blocks, {
      failRequest: (_k, url) => (url === `/blocks/${blocks[0].number}` && failures++ < 2 ? 503 : undefined),
    })
    const url = await server.start()
    try {
      const src = new SidecarSource({ url, timeoutMs: 5000 })
      assert.equal(await src.head(), Math.max(...blocks.map((b) => b.number)))
      await assert.rejects(src.fetchBlock(12345), BlockNotAvailable)
      const r = await src.fetchRows(blocks.map((b) => b.number))
      assert.equal(r.error, undefined)
      assert.deepEqual(r.blocks.map((b) => b.number), blocks.map((b) => b.number))
      assert.equal(r.blocks[0].hash, blocks[0].block.hash.toLowerCase())
      assert.equal(src.stats.retries, 2)
      assert.deepEqual(src.tables(), ['blocks', 'extrinsics', 'calls', 'events'])
    } finally {
      await server.close()
    }
    for (const mutate of [(b: any) => ({ ...b, extrinsics: 'none' }), (b: any) => ({ ...b, number: '1' })]) {
      const bad = new SidecarReplayServer(blocks.slice(0, 1), { mutate })
      const badUrl = await bad.start()
      try {
        const r = await new SidecarSource({ url: badUrl }).fetchRows([blocks[0].number])
        assert.ok(r.error?.error instanceof BadRpcAnswer, String(r.error?.error))
        assert.equal((r.error!.error as BadRpcAnswer).block, blocks[0].number)
      } finally {
        await bad.close()
      }
    }
  })
})

describe('Substrate: recorded Sidecar blocks through ingest, served by a router and a worker', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster

  before(async () => {
    tmp = await tempDir('ba-substrate-sidecar-')
    for (const chain of SIDECAR_CHAINS) {
      const r = await ingestRecordedSidecar(path.join(tmp.dir, chain), chain, chain, { workers: 0 })
      assert.equal(r.blocks, recorded[chain].length, chain)
    }
    cluster = await startCluster({ storage: new LocalStorage(tmp.dir), workers: 1, replication: 1, ...stallTolerant(100) })
    for (const chain of SIDECAR_CHAINS) {
      const last = Math.max(...recorded[chain].map((b) => b.number))
      for (let i = 0; i < 100; i++) {
        const res = await fetch(`${cluster.datasets.get(chain)}/height`)
        if (res.ok && Number(await res.text()) >= last) break
        await new Promise((r) => setTimeout(r, 100))
      }
    }
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  async function query(chain: SidecarChain, number: number, q: object): Promise<any> {
    const worker = await (await fetch(`${cluster.datasets.get(chain)}/${number}/worker`)).text()
    const res = await postJson(worker, { type: 'substrate', fromBlock: number, toBlock: number, ...q })
    assert.equal(res.status, 200, res.text.slice(0, 500))
    const blocks = JSON.parse(res.text)
    assert.equal(blocks.length, 1)
    assert.equal(blocks[0].header.number, number)
    return blocks[0]
  }

  it('moonbeam evmLogs by address (any case) and topic0', async () => {
    const b = rawBlock('moonbeam', 11728459)
    const raw = rawEvents(b)
    const logs = raw.map((r, index) => ({ ...r, index })).filter((r) => evName(r.e) === 'EVM.Log')
    const address: string = logs[0].e.data[0].address
    const topic0: string = logs[0].e.data[0].topics[0]
    const want = logs.filter((l) => l.e.data[0].address.toLowerCase() === address.toLowerCase())
    for (const spelled of [address.toLowerCase(), '0x' + address.slice(2).toUpperCase()]) {
      const got = await query('moonbeam', 11728459, { evmLogs: [{ address: [spelled] }], fields: { event: { name: true, args: true, phase: true } } })
      assert.deepEqual(got.events.map((e: any) => e.index), want.map((l) => l.index))
      assert.deepEqual(got.events.map((e: any) => e.extrinsicIndex), want.map((l) => l.ex))
      assert.ok(got.events.every((e: any) => e.name === 'EVM.Log' && e.phase === 'ApplyExtrinsic'))
      assert.equal(got.events[0].args[0].address, address.toLowerCase())
    }
    const byTopic = await query('moonbeam', 11728459, { evmLogs: [{ topic0: [topic0.toUpperCase().replace('0X', '0x')] }] })
    assert.deepEqual(byTopic.events.map((e: any) => e.index), logs.filter((l) => l.e.data[0].topics[0]?.toLowerCase() === topic0.toLowerCase()).map((l) => l.index))
    assert.ok(byTopic.events.length > 0)
  })

  it('moonbeam ethereumTransactions by `to`, with their extrinsics and events', async () => {
    const b = rawBlock('moonbeam', 11728459)
    const target = (x: any) => (Object.values(x.args.transaction)[0] as any).action.call?.toLowerCase()
    const transacts = b.extrinsics.map((x: any, i: number) => ({ x, i })).filter(({ x }: any) => x.method.method === 'transact')
    const to = target(transacts[0].x)
    const want = transacts.filter(({ x }: any) => target(x) === to)
    const got = await query('moonbeam', 11728459, {
      ethereumTransactions: [{ to: [to.toUpperCase().replace('0X', '0x')], extrinsic: true, events: true }],
      fields: { call: { name: true, success: true }, extrinsic: { hash: true, fee: true }, event: { name: true } },
    })
    assert.deepEqual(got.calls.map((c: any) => [c.extrinsicIndex, c.address, c.name, c.success]), want.map(({ i }: any) => [i, [], 'Ethereum.transact', true]))
    assert.deepEqual(got.extrinsics.map((x: any) => [x.index, x.hash]), want.map(({ x, i }: any) => [i, x.hash.toLowerCase()]))
    // `events` of the call: every event of its extrinsic but the closing ExtrinsicSuccess (no call address)
    assert.ok(want.every(({ x }: any) => x.success && evName(x.events.at(-1)) === 'System.ExtrinsicSuccess'))
    assert.deepEqual(got.events.map((e: any) => [e.extrinsicIndex, e.name]), want.flatMap(({ x, i }: any) => x.events.slice(0, -1).map((e: any) => [i, evName(e)])))
  })

  it('kusama calls: a batch with subcalls and events, its items with stack and siblings', async () => {
    const b = rawBlock('kusama', 13556605)
    const x = b.extrinsics[2]
    const base = b.onInitialize.events.length + b.extrinsics.slice(0, 2).reduce((n: number, y: any) => n + y.events.length, 0)
    const batch = await query('kusama', 13556605, { calls: [{ name: ['Utility.batch'], subcalls: true, events: true }], fields: { call: { name: true, success: true }, event: { name: true } } })
    assert.deepEqual(batch.calls.map((c: any) => [c.extrinsicIndex, c.address, c.name]), [[2, [], 'Utility.batch'], ...x.args.calls.map((_: any, k: number) => [2, [k], 'Staking.payout_stakers'])])
    // `events` of the root call: every event of the extrinsic (the root's and its descendants') but the
    // closing ExtrinsicSuccess, which has no call address
    assert.equal(evName(x.events.at(-1)), 'System.ExtrinsicSuccess')
    assert.deepEqual(batch.events.map((e: any) => [e.index, e.name]), x.events.slice(0, -1).map((e: any, k: number) => [base + k, evName(e)]))

    const items = await query('kusama', 13556605, { calls: [{ name: ['Staking.payout_stakers'], stack: true, siblings: true }], fields: { call: { name: true, args: true } } })
    assert.deepEqual(items.calls.map((c: any) => [c.address, c.name]), [[[], 'Utility.batch'], [[0], 'Staking.payout_stakers'], [[1], 'Staking.payout_stakers']])
    assert.deepEqual(items.calls.slice(1).map((c: any) => c.args.era), x.args.calls.map((c: any) => c.args.era))

    // events of item 1: those between the first and the second ItemCompleted
    const first = x.events.findIndex((e: any) => evName(e) === 'Utility.ItemCompleted')
    const second = x.events.findIndex((e: any, k: number) => k > first && evName(e) === 'Utility.ItemCompleted')
    const one = await query('kusama', 13556605, { calls: [{ name: ['Staking.payout_stakers'], events: true }], fields: { event: { name: true, callAddress: true } } })
    const item1 = one.events.filter((e: any) => JSON.stringify(e.callAddress) === '[1]')
    assert.deepEqual(item1.map((e: any) => e.index), x.events.map((_: any, k: number) => base + k).filter((k: number) => k > base + first && k < base + second))
  })

  it('events with call, extrinsic and stack: Staking.Rewarded in the kusama batch, Balances.Transfer under the polkadot multisig', async () => {
    const b = rawBlock('kusama', 13556605)
    const got = await query('kusama', 13556605, {
      events: [{ name: ['Staking.Rewarded'], call: true, stack: true, extrinsic: true }],
      fields: { event: { name: true, args: true, callAddress: true }, call: { name: true }, extrinsic: { hash: true, success: true } },
    })
    const rewarded = rawEvents(b).map((r, index) => ({ ...r, index })).filter((r) => evName(r.e) === 'Staking.Rewarded')
    assert.deepEqual(got.events.map((e: any) => e.index), rewarded.map((r) => r.index))
    assert.deepEqual(got.events.map((e: any) => e.args[1]), rewarded.map((r) => r.e.data[1]))
    assert.deepEqual(got.calls.map((c: any) => [c.extrinsicIndex, c.address, c.name]), [[2, [], 'Utility.batch'], [2, [0], 'Staking.payout_stakers'], [2, [1], 'Staking.payout_stakers']])
    assert.deepEqual(got.extrinsics, [{ index: 2, hash: b.extrinsics[2].hash.toLowerCase(), success: true }])

    const p = rawBlock('polkadot', 8891183)
    const multisig = await query('polkadot', 8891183, {
      events: [{ name: ['Balances.Transfer'], call: true, stack: true }],
      fields: { event: { name: true, callAddress: true }, call: { name: true, origin: true } },
    })
    const inMultisig = multisig.events.filter((e: any) => e.extrinsicIndex === 4)
    assert.deepEqual(inMultisig.map((e: any) => e.callAddress), [[0]])
    const executed = p.extrinsics[4].events.find((e: any) => evName(e) === 'Multisig.MultisigExecuted')
    assert.deepEqual(multisig.calls.filter((c: any) => c.extrinsicIndex === 4).map((c: any) => [c.address, c.name]), [[[], 'Multisig.as_multi'], [[0], 'Balances.transfer']])
    assert.deepEqual(multisig.calls.find((c: any) => c.extrinsicIndex === 4 && c.address.length === 1).origin, signed(ss58ToHex(executed.data[2])!))
  })

  it('headers and failed extrinsics', async () => {
    const b = rawBlock('polkadot', 7300000)
    const fields = { block: { timestamp: true, validator: true, specName: true, digest: true }, event: { name: true, callAddress: true }, extrinsic: { success: true, error: true, fee: true }, call: { name: true, success: true, error: true } }
    const got = await query('polkadot', 7300000, {
      includeAllBlocks: true,
      events: [{ name: ['System.ExtrinsicFailed'], extrinsic: true, call: true }],
      fields,
    })
    const ts = b.extrinsics.find((x: any) => x.method.pallet === 'timestamp')
    assert.equal(got.header.timestamp, Number(ts.args.now))
    assert.equal(got.header.specName, null)
    assert.deepEqual(got.header.digest, { logs: b.logs })
    const failed = b.extrinsics.map((x: any, i: number) => ({ x, i })).filter(({ x }: any) => !x.success)
    assert.ok(failed.length > 0)
    assert.deepEqual(got.events.map((e: any) => [e.extrinsicIndex, e.name, e.callAddress]), failed.map(({ i }: any) => [i, 'System.ExtrinsicFailed', null]))
    // ExtrinsicFailed has no call address: `call` reaches no call
    assert.deepEqual(got.calls, [])
    assert.deepEqual(got.extrinsics.map((x: any) => [x.index, x.success, x.fee]), failed.map(({ x, i }: any) => [i, false, expectedFee(x)]))
    // the failed extrinsics' root calls (by name, with their extrinsics) carry the extrinsic's error
    const roots = await query('polkadot', 7300000, { calls: [{ name: [...new Set(failed.map(({ x }: any) => `${pallet(x.method.pallet)}.${callName(x.method.method)}`))], extrinsic: true, events: true }], fields })
    const rootCalls = roots.calls.filter((c: any) => !b.extrinsics[c.extrinsicIndex].success)
    assert.deepEqual(rootCalls.map((c: any) => [c.extrinsicIndex, c.address]), failed.map(({ i }: any) => [i, []]))
    // and `events` of a failed extrinsic's call reaches none of its events (none has a call address)
    assert.ok(roots.events.every((e: any) => b.extrinsics[e.extrinsicIndex].success && e.callAddress !== null))
    for (const [k, { x, i }] of failed.entries()) {
      const ev = x.events.find((e: any) => evName(e) === 'System.ExtrinsicFailed')
      assert.equal(got.extrinsics[k].error.__kind.toLowerCase(), Object.keys(ev.data[0])[0])
      const ext = roots.extrinsics.find((y: any) => y.index === i)
      assert.deepEqual(ext, got.extrinsics[k])
      assert.deepEqual(rootCalls[k].error, got.extrinsics[k].error)
      assert.equal(rootCalls[k].success, false)
    }
  })
})
