import assert from 'node:assert/strict'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync, gzipSync } from 'node:zlib'
import { after, before, describe, it } from 'node:test'
import { HttpClient } from '@subsquid/http-client'
import { ArchiveClient } from '@subsquid/util-internal-archive-client'
import { runIngest } from '../src/ingest/loop.js'
import { BadRpcAnswer, BlockNotAvailable } from '../src/ingest/source.js'
import { decodePapiBlock, papiRows, papiValue } from '../src/ingest/substrate/papi/decoded.js'
import { ingestRecordedPapi, papiFixturesDir } from '../src/ingest/substrate/papi/recorded.js'
import { PapiDirSource } from '../src/ingest/substrate/papi/source.js'
import { ingestRecordedSidecar } from '../src/ingest/substrate/sidecar/recorded.js'
import type { Cluster } from '../src/server/cluster.js'
import { REPO_ROOT, tempDir } from './helpers/dataset.js'
import { startServed } from './helpers/walk.js'

/*
 * Substrate blocks already decoded by polkadot-api (`--decoded-dir`, src/ingest/substrate/papi/):
 * Moonbeam 16083402 as Ocelloids recorded it (fixtures/substrate/ocelloids-services/derived). The
 * mapping is checked on the recording, then the block is ingested after the Sidecar block 11728459
 * (the demo's `moonbeam` dataset: two ingest runs into one folder), served by a router + 2 workers
 * and read with the real `@subsquid/util-internal-archive-client`. Expectations for the EVM side come
 * from the **Ethereum RPC recording of the same block** (moonbeam_evm-16083402: 48 transactions, 51
 * logs): transaction k is the k-th Ethereum.transact, log j the j-th EVM.Log.
 */

const BLOCK = 16083402
const SIDECAR_BLOCK = 11728459
const FIXTURES = path.join(REPO_ROOT, 'fixtures', 'substrate', 'ocelloids-services', 'derived')

async function recording(name: string): Promise<any> {
  return JSON.parse(gunzipSync(await readFile(path.join(FIXTURES, `${name}.json.gz`))).toString('utf8'))
}

const lower = (s: string | null | undefined) => (s == null ? null : s.toLowerCase())
const upperHex = (s: string) => '0x' + s.slice(2).toUpperCase()

/** Every object key and every string of a JSON value. */
function walk(v: unknown, keys: Set<string>, strings: string[]): void {
  if (typeof v === 'string') strings.push(v)
  else if (Array.isArray(v)) for (const x of v) walk(x, keys, strings)
  else if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      keys.add(k)
      walk(x, keys, strings)
    }
  }
}

describe('polkadot-api decoded block → squid form (Moonbeam 16083402)', () => {
  let raw: any
  let eth: any
  let d: ReturnType<typeof decodePapiBlock>
  before(async () => {
    raw = await recording('moonbeam-16083402')
    eth = await recording('moonbeam_evm-16083402')
    d = decodePapiBlock(raw)
  })

  it('header, extrinsics, names, phases', () => {
    assert.equal(d.header.number, BLOCK)
    assert.equal(d.header.hash, raw.hash)
    assert.equal(d.header.parentHash, raw.parent)
    assert.equal(d.header.specVersion, 4303)
    assert.equal(d.header.specName, null, 'not derivable from the recording')
    assert.equal(d.header.timestamp, 1781808888000)
    assert.deepEqual(d.header.digest, raw.digest)
    assert.equal(d.extrinsics.length, 52)
    assert.deepEqual(d.extrinsics.map((x) => x.index), [...Array(52).keys()])
    assert.deepEqual(d.extrinsics.map((x) => x.hash), raw.extrinsics.map((x: any) => x.hash))
    assert.ok(d.extrinsics.every((x) => x.success && x.version === 4 && x.signature === undefined && x.fee === undefined))
    // every extrinsic is a plain call: one call each, at the root
    assert.deepEqual(d.calls.map((c) => [c.extrinsicIndex, c.address]), d.extrinsics.map((x) => [x.index, []]))
    assert.deepEqual(d.calls.slice(0, 4).map((c) => c.name), [
      'ParachainSystem.set_validation_data', 'Timestamp.set', 'AuthorInherent.kick_off_authorship_validation', 'Randomness.set_babe_randomness_results',
    ])
    const transacts = d.calls.filter((c) => c.name === 'Ethereum.transact')
    assert.equal(transacts.length, 48)
    assert.deepEqual(transacts.map((c) => c.extrinsicIndex), [...Array(48).keys()].map((k) => k + 4))

    assert.equal(d.events.length, 306)
    assert.deepEqual(d.events.map((e) => e.index), [...Array(306).keys()])
    const names = new Set(d.events.map((e) => e.name))
    assert.deepEqual([...names].sort(), ['Balances.BurnedDebt', 'Balances.Deposit', 'Balances.Transfer', 'Balances.Withdraw', 'EVM.Log', 'Ethereum.Executed', 'System.ExtrinsicSuccess'])
    assert.equal(d.events.filter((e) => e.name === 'EVM.Log').length, 51)
    assert.equal(d.events.filter((e) => e.name === 'Ethereum.Executed').length, 48)
    assert.ok(d.events.every((e) => e.phase === 'ApplyExtrinsic'))
    d.events.forEach((e, i) => {
      assert.equal(e.extrinsicIndex, raw.events[i].phase.value)
      // squid's rule: the closing ExtrinsicSuccess has no call; the others belong to the root call
      assert.deepEqual(e.callAddress, e.name === 'System.ExtrinsicSuccess' ? undefined : [])
    })
  })

  it('values: {__kind}, camelCase keys, lower-case hex, decimal strings', () => {
    const keys = new Set<string>()
    const strings: string[] = []
    for (const c of d.calls) walk(c.args, keys, strings)
    for (const e of d.events) walk(e.args, keys, strings)
    assert.ok(keys.has('__kind'))
    assert.ok(!keys.has('type'), 'no polkadot-api enum left')
    assert.deepEqual([...keys].filter((k) => k !== '__kind' && k.includes('_')), [], 'keys are camelCase')
    for (const k of ['chainId', 'maxFeePerGas', 'oddYParity', 'accessList', 'authorizationList', 'dispatchInfo', 'refTime', 'transactionHash', 'exitReason']) assert.ok(keys.has(k), k)
    assert.deepEqual(strings.filter((s) => s.startsWith('0x') && s !== s.toLowerCase()), [], 'hex is lower case')

    const tx = d.calls[4].args as any
    assert.equal(tx.transaction.__kind, 'EIP1559')
    assert.deepEqual(tx.transaction.value.action, { __kind: 'Call', value: '0x34a566db8900c8ac77e59cf97835439a942a3cbd' })
    assert.deepEqual(tx.transaction.value.nonce, ['366269', '0', '0', '0'])
    assert.equal(tx.transaction.value.chainId, '1284')
    const kinds = new Set(d.calls.filter((c) => c.name === 'Ethereum.transact').map((c) => (c.args as any).transaction.__kind))
    assert.deepEqual([...kinds].sort(), ['EIP1559', 'EIP7702', 'Legacy'])
    assert.deepEqual((d.events[0].args as any).dispatchInfo.class, { __kind: 'Mandatory' })
    const executed = d.events.find((e) => e.name === 'Ethereum.Executed')!.args as any
    assert.deepEqual(executed.exitReason, { __kind: 'Succeed', value: { __kind: 'Stopped' } })
    // Balances events carry check-summed AccountId20 in the recording
    const withdraw = d.events.find((e) => e.name === 'Balances.Withdraw')!
    assert.equal((withdraw.args as any).who, '0x12c6454e21066eeee4d0ddcb450f72897e035f6b')
    assert.equal(raw.events[withdraw.index].event.value.who, '0x12C6454e21066eeeE4D0DdcB450f72897e035F6B')
    assert.equal((withdraw.args as any).amount, '11384343750000000')
  })

  it('helper values equal the Ethereum RPC recording of the same block, in order', () => {
    const transacts = d.calls.filter((c) => c.name === 'Ethereum.transact')
    assert.equal(eth.transactions.length, transacts.length)
    transacts.forEach((c, k) => {
      const t = eth.transactions[k]
      assert.equal(c._ethereumTransactTo, lower(t.to), `tx ${k}: to`)
      assert.equal(c._ethereumTransactSighash, t.input.slice(0, 10).toLowerCase(), `tx ${k}: sighash`)
    })
    const logs = d.events.filter((e) => e.name === 'EVM.Log')
    assert.equal(eth.logs.length, logs.length)
    logs.forEach((e, j) => {
      const l = eth.logs[j]
      assert.equal(e._evmLogAddress, lower(l.address), `log ${j}: address`)
      assert.deepEqual(e._evmLogTopics, l.topics.map(lower), `log ${j}: topics`)
      assert.equal(e.extrinsicIndex, transacts[l.transactionIndex].extrinsicIndex, `log ${j}: transaction`)
    })
    // rows: the helper columns and what such a source cannot fill
    const rows = papiRows(d)
    const blockRow = rows.blocks[0]
    assert.equal(blockRow.spec_name, null)
    assert.equal(blockRow.impl_name, null)
    assert.equal(blockRow.validator, null)
    assert.equal(blockRow.spec_version, 4303)
    assert.equal(rows.calls.filter((r) => r.ethereum_transact_to != null).length, 48)
    assert.deepEqual(rows.events.filter((r) => r.evm_log_address != null).map((r) => r.evm_log_topic0), eth.logs.map((l: any) => l.topics[0] ?? null))
  })

  it('nested calls, signatures and fees (a small block in polkadot-api form)', () => {
    // Shaped like the recorded Kusama Asset Hub / Mythos blocks of the same origin (not recorded data).
    // the signer of Kusama Asset Hub 11218382's extrinsic 2 (Kusama SS58) and its account id
    const alice = 'GqBppvJ1iS4n1rK4eyfdFUeN2wTJoKjpBR5qARovgAJkhQi'
    const aliceHex = '0xbc47b8533fad2cfb34d99913a4092a4270bd01b428951fa05ade01a21bf0c40f'
    const transfer = { type: 'Balances', value: { type: 'transfer_keep_alive', value: { dest: { type: 'Id', value: alice }, value: '1000' } } }
    const remark = { type: 'System', value: { type: 'remark', value: { remark: '0xAB' } } }
    const block = {
      hash: '0x' + '11'.repeat(32), number: '7', parent: '0x' + '22'.repeat(32),
      extrinsics: [
        { module: 'Timestamp', method: 'set', args: { now: '1700000000000' }, signed: false, hash: '0x' + '33'.repeat(32) },
        {
          module: 'Utility', method: 'batch_all', signed: true, hash: '0x' + '44'.repeat(32),
          address: { type: 'Id', value: alice }, signature: { type: 'Sr25519', value: '0x' + 'AA'.repeat(64) },
          args: { calls: [transfer, { type: 'Proxy', value: { type: 'proxy', value: { real: { type: 'Id', value: alice }, force_proxy_type: undefined, call: remark } } }] },
        },
      ],
      events: [
        { phase: { type: 'Initialization' }, topics: [], event: { module: 'Balances', name: 'Issued', value: { amount: '1' } } },
        { phase: { type: 'ApplyExtrinsic', value: 0 }, topics: [], event: { module: 'System', name: 'ExtrinsicSuccess', value: {} } },
        { phase: { type: 'ApplyExtrinsic', value: 1 }, topics: ['0x' + 'CC'.repeat(32)], event: { module: 'Utility', name: 'BatchCompleted' } },
        { phase: { type: 'ApplyExtrinsic', value: 1 }, topics: [], event: { module: 'TransactionPayment', name: 'TransactionFeePaid', value: { who: alice, actual_fee: '150', tip: '50' } } },
        { phase: { type: 'ApplyExtrinsic', value: 1 }, topics: [], event: { module: 'System', name: 'ExtrinsicSuccess', value: {} } },
        { phase: { type: 'Finalization' }, topics: [], event: { module: 'Balances', name: 'Burned', value: { amount: '2' } } },
      ],
    }
    const b = decodePapiBlock(block)
    assert.equal(b.header.specVersion, null)
    assert.equal(b.header.stateRoot, null)
    assert.deepEqual(b.calls.map((c) => [c.extrinsicIndex, c.address, c.name]), [
      [0, [], 'Timestamp.set'], [1, [], 'Utility.batch_all'], [1, [0], 'Balances.transfer_keep_alive'], [1, [1], 'Proxy.proxy'], [1, [1, 0], 'System.remark'],
    ])
    const signed = { __kind: 'system', value: { __kind: 'Signed', value: aliceHex } }
    assert.deepEqual(b.calls.map((c) => c.origin ?? null), [null, signed, signed, signed, signed])
    assert.deepEqual(b.calls[1].args, {
      calls: [
        { __kind: 'Balances', value: { __kind: 'transfer_keep_alive', dest: { __kind: 'Id', value: aliceHex }, value: '1000' } },
        { __kind: 'Proxy', value: { __kind: 'proxy', real: { __kind: 'Id', value: aliceHex }, call: { __kind: 'System', value: { __kind: 'remark', remark: '0xab' } } } },
      ],
    })
    assert.deepEqual(b.calls[2].args, { dest: { __kind: 'Id', value: aliceHex }, value: '1000' })
    assert.deepEqual(b.extrinsics[1], {
      index: 1, version: 4, success: true, hash: '0x' + '44'.repeat(32), fee: '100', tip: '50',
      signature: { address: { __kind: 'Id', value: aliceHex }, signature: { __kind: 'Sr25519', value: '0x' + 'aa'.repeat(64) } },
    })
    assert.deepEqual(b.events.map((e) => [e.phase, e.extrinsicIndex ?? null, e.callAddress ?? null]), [
      ['Initialization', null, null], ['ApplyExtrinsic', 0, null], ['ApplyExtrinsic', 1, []], ['ApplyExtrinsic', 1, []], ['ApplyExtrinsic', 1, null], ['Finalization', null, null],
    ])
    assert.deepEqual(b.events[2].topics, ['0x' + 'cc'.repeat(32)])
    assert.equal(b.events[2].args, null)
    assert.deepEqual(papiValue({ type: 'None' }), { __kind: 'None' })
    // a failed extrinsic: its error, and none of its events belongs to a call
    const failed = structuredClone(block) as any
    failed.events[4].event = { module: 'System', name: 'ExtrinsicFailed', value: { dispatch_error: { type: 'Module', value: { index: 40, error: '0x03000000' } } } }
    const f = decodePapiBlock(failed)
    assert.equal(f.extrinsics[1].success, false)
    assert.deepEqual(f.extrinsics[1].error, { __kind: 'Module', value: { index: 40, error: '0x03000000' } })
    assert.ok(f.calls.filter((c) => c.extrinsicIndex === 1).every((c) => c.success === false))
    assert.ok(f.events.filter((e) => e.extrinsicIndex === 1).every((e) => e.callAddress === undefined))
    // malformed: an extrinsic without its closing event
    const open = structuredClone(block) as any
    open.events.splice(4, 1)
    assert.throws(() => decodePapiBlock(open), /no System.ExtrinsicSuccess or System.ExtrinsicFailed/)
  })
})

describe('the --decoded-dir source', () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  before(async () => {
    tmp = await tempDir('ba-papi-src-')
  })
  after(async () => {
    await tmp?.cleanup()
  })

  it('reads the fixture folder: the Ethereum RPC recording is skipped, numbers from the content', async () => {
    const src = new PapiDirSource({ dir: papiFixturesDir() })
    assert.equal(papiFixturesDir(), FIXTURES)
    assert.deepEqual(await src.numbers(), [BLOCK])
    assert.equal(await src.head(), BLOCK)
    const r = await src.fetchRows([BLOCK])
    assert.equal(r.error, undefined)
    assert.equal(r.blocks.length, 1)
    assert.equal(r.blocks[0].hash, (await recording('moonbeam-16083402')).hash)
    const missing = await src.fetchRows([BLOCK - 1])
    assert.ok(missing.error?.error instanceof BlockNotAvailable, String(missing.error?.error))
    assert.equal(src.stats.requests > 0, true)
  })

  it('plain and gzipped files under any name; a file added later counts; conflicts and bad JSON are errors', async () => {
    const dir = path.join(tmp.dir, 'blocks')
    await mkdir(dir)
    const raw = await recording('moonbeam-16083402')
    await writeFile(path.join(dir, 'a.json'), JSON.stringify({ ...raw, number: '10', parent: '0x' + '00'.repeat(32), hash: '0x' + '0a'.repeat(32) }))
    await writeFile(path.join(dir, 'whatever.json.gz'), gzipSync(JSON.stringify({ ...raw, number: 11, parent: '0x' + '0a'.repeat(32), hash: '0x' + '0b'.repeat(32) })))
    await writeFile(path.join(dir, 'notes.txt'), 'not a block')
    const src = new PapiDirSource({ dir })
    assert.equal(await src.head(), 11)
    const r = await src.fetchRows([10, 11, 12])
    assert.deepEqual(r.blocks.map((b) => [b.number, b.parentHash]), [[10, '0x' + '00'.repeat(32)], [11, '0x' + '0a'.repeat(32)]])
    assert.ok(r.error?.error instanceof BlockNotAvailable)
    await writeFile(path.join(dir, 'later.json'), JSON.stringify({ ...raw, number: '12', parent: '0x' + '0b'.repeat(32) }))
    assert.equal(await src.head(), 12)
    assert.deepEqual((await src.fetchRows([12])).blocks.map((b) => b.number), [12])

    // an ingest over the folder: a contiguous range, continuity checked
    const out = path.join(tmp.dir, 'out')
    await assert.rejects(runIngest({ family: 'substrate', decodedDir: dir, dataset: 'papi', out, progress: 'none', workers: 0 }), /block 0 .*holds blocks 10–12.*--from/)
    const res = await runIngest({ family: 'substrate', decodedDir: dir, dataset: 'papi', out, from: 10, progress: 'none', workers: 0 })
    assert.equal(res.blocks, 3)
    assert.equal(res.last, 12)
    await assert.rejects(runIngest({ family: 'substrate', decodedDir: dir, rpc: 'ws://127.0.0.1:1', dataset: 'papi', out, progress: 'none' }), /not several/)
    await assert.rejects(runIngest({ family: 'evm', decodedDir: dir, dataset: 'x', out: path.join(tmp.dir, 'evm'), progress: 'none' }), /--decoded-dir is for --family substrate/)

    await writeFile(path.join(dir, 'dup.json'), JSON.stringify({ ...raw, number: '12', hash: '0x' + 'ee'.repeat(32) }))
    await assert.rejects(new PapiDirSource({ dir }).head(), BadRpcAnswer)
    await writeFile(path.join(dir, 'dup.json'), '{"number": ')
    await assert.rejects(new PapiDirSource({ dir }).head(), /not \(gzipped\) JSON/)
  })
})

describe('Moonbeam 11728459 (Sidecar) + 16083402 (polkadot-api) through ingest, router + 2 workers, real archive client', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let client: ArchiveClient
  let raw: any
  let eth: any
  /** extrinsic index of eth transaction k */
  let txExtrinsic: number[]
  /** event index of eth log j */
  let logEvent: number[]

  before(async () => {
    raw = await recording('moonbeam-16083402')
    eth = await recording('moonbeam_evm-16083402')
    txExtrinsic = raw.extrinsics.flatMap((x: any, i: number) => (x.module === 'Ethereum' && x.method === 'transact' ? [i] : []))
    logEvent = raw.events.flatMap((e: any, i: number) => (e.event.module === 'EVM' && e.event.name === 'Log' ? [i] : []))
    tmp = await tempDir('ba-papi-')
    const dir = path.join(tmp.dir, 'moonbeam')
    // as the demo builds its `moonbeam` dataset
    const first = await ingestRecordedSidecar(dir, 'moonbeam', 'moonbeam')
    assert.equal(first.last, SIDECAR_BLOCK)
    const t0 = performance.now()
    const second = await ingestRecordedPapi(dir, 'moonbeam')
    const rows = Object.values(second.rows).reduce((a, b) => a + b, 0)
    console.log(`# moonbeam 16083402 ingest from the polkadot-api recording: ${second.blocks} block, ${rows} rows in ${((performance.now() - t0) / 1000).toFixed(2)} s`)
    assert.equal(second.blocks, 1)
    assert.equal(second.chunks.length, 1)
    assert.deepEqual(second.rows, { blocks: 1, extrinsics: 52, calls: 52, events: 306 })
    const again = await ingestRecordedPapi(dir, 'moonbeam')
    assert.equal(again.blocks, 0, 'a rerun has nothing to do')
    ;({ cluster } = await startServed(tmp.dir, { moonbeam: BLOCK }))
    client = new ArchiveClient({ http: new HttpClient({ httpTimeout: 20_000 }), url: cluster.datasets.get('moonbeam')! })
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('both blocks are served; the demo example query still answers', async () => {
    assert.equal(await client.getHeight(), BLOCK)
    const blocks = await client.query<any, any>({ type: 'substrate', fromBlock: SIDECAR_BLOCK, toBlock: BLOCK, fields: { block: { timestamp: true, specVersion: true, specName: true } }, includeAllBlocks: true })
    assert.deepEqual(blocks.map((b: any) => b.header.number), [SIDECAR_BLOCK, BLOCK])
    assert.deepEqual(blocks[1].header, { number: BLOCK, hash: raw.hash, parentHash: raw.parent, timestamp: 1781808888000, specVersion: 4303, specName: null })
    const [demo] = await client.query<any, any>({
      type: 'substrate', fromBlock: SIDECAR_BLOCK, toBlock: SIDECAR_BLOCK,
      evmLogs: [{ address: ['0x709944a48caf83535e43471680fda4905fb3920a'], call: true, extrinsic: true }],
      fields: { block: { timestamp: true }, event: { name: true, args: true }, call: { name: true }, extrinsic: { hash: true, fee: true } },
    })
    assert.ok(demo.events.length > 0)
    assert.ok(demo.events.every((e: any) => e.name === 'EVM.Log'))
  })

  it('evmLogs, all: address, topics and data equal the eth logs, in order', async () => {
    const [all] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, evmLogs: [{ call: true }], fields: { event: { name: true, args: true }, call: { name: true } } })
    assert.equal(all.events.length, 51)
    assert.deepEqual(all.events.map((e: any) => e.index), logEvent)
    all.events.forEach((e: any, j: number) => {
      const l = eth.logs[j]
      assert.equal(e.name, 'EVM.Log')
      assert.equal(e.extrinsicIndex, txExtrinsic[l.transactionIndex], `log ${j}: its transaction`)
      assert.deepEqual(e.callAddress, [])
      assert.equal(e.args.log.address, l.address.toLowerCase())
      assert.deepEqual(e.args.log.topics, l.topics.map((t: string) => t.toLowerCase()))
      assert.equal(e.args.log.data, l.data.toLowerCase())
    })
    // the emitting call: the Ethereum.transact of the log's transaction
    assert.deepEqual(
      all.calls.map((c: any) => [c.extrinsicIndex, c.name]),
      [...new Set(eth.logs.map((l: any) => txExtrinsic[l.transactionIndex]))].sort((a: any, b: any) => a - b).map((x) => [x, 'Ethereum.transact']),
    )
  })

  it('evmLogs by address (any case) and topic0 equal the eth logs', async () => {
    const addresses = [...new Set<string>(eth.logs.map((l: any) => l.address.toLowerCase()))]
    assert.equal(addresses.length, 4)
    for (const address of addresses) {
      const expected = eth.logs.map((l: any, j: number) => ({ ...l, j })).filter((l: any) => l.address.toLowerCase() === address)
      for (const written of [address, upperHex(address), '0X' + address.slice(2)]) {
        const [byAddress] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, evmLogs: [{ address: [written] }], fields: { event: { args: true } } })
        assert.deepEqual(byAddress.events.map((e: any) => e.index), expected.map((l: any) => logEvent[l.j]), written)
      }
      const topic0 = expected[0].topics[0]
      const [both] = await client.query<any, any>({
        type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK,
        evmLogs: [{ address: [upperHex(address)], topic0: [upperHex(topic0)] }],
        fields: { event: { args: true } },
      })
      const want = expected.filter((l: any) => l.topics[0] === topic0)
      assert.deepEqual(both.events.map((e: any) => [e.index, e.args.log.topics]), want.map((l: any) => [logEvent[l.j], l.topics.map(lower)]))
    }
    // topic0 alone, across addresses
    const topics0 = [...new Set<string>(eth.logs.map((l: any) => l.topics[0].toLowerCase()))]
    for (const t of topics0) {
      const [byTopic] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, evmLogs: [{ topic0: [t] }] })
      assert.deepEqual(byTopic.events.map((e: any) => e.index), eth.logs.flatMap((l: any, j: number) => (l.topics[0].toLowerCase() === t ? [logEvent[j]] : [])), t)
    }
    const [none] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, evmLogs: [{ topic0: ['0x' + '00'.repeat(32)] }] })
    assert.deepEqual(none.events, [])
  })

  it('ethereumTransactions: all in order (to, input selector = the eth transactions), by to (any case) and by sighash', async () => {
    const [all] = await client.query<any, any>({
      type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK,
      ethereumTransactions: [{ extrinsic: true }],
      fields: { call: { name: true, args: true, success: true }, extrinsic: { hash: true, success: true } },
    })
    assert.equal(all.calls.length, 48)
    assert.deepEqual(all.calls.map((c: any) => [c.extrinsicIndex, c.address, c.name, c.success]), txExtrinsic.map((x) => [x, [], 'Ethereum.transact', true]))
    all.calls.forEach((c: any, k: number) => {
      const t = eth.transactions[k]
      const tx = c.args.transaction
      const action = tx.__kind === 'EIP7702' ? tx.value.destination : tx.value.action
      const input: string = tx.__kind === 'EIP7702' ? tx.value.data : tx.value.input
      assert.deepEqual(action, { __kind: 'Call', value: t.to.toLowerCase() }, `tx ${k}: to`)
      assert.equal(input.slice(0, 10), t.input.slice(0, 10).toLowerCase(), `tx ${k}: selector`)
    })
    assert.deepEqual(all.extrinsics.map((x: any) => [x.index, x.hash, x.success]), txExtrinsic.map((x) => [x, raw.extrinsics[x].hash, true]))

    const tos = [...new Set<string>(eth.transactions.map((t: any) => t.to.toLowerCase()))]
    for (const to of tos) {
      const [byTo] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, ethereumTransactions: [{ to: [upperHex(to)] }] })
      assert.deepEqual(byTo.calls.map((c: any) => c.extrinsicIndex), eth.transactions.flatMap((t: any, k: number) => (t.to.toLowerCase() === to ? [txExtrinsic[k]] : [])), to)
    }
    const sighashes = [...new Set<string>(eth.transactions.map((t: any) => t.input.slice(0, 10).toLowerCase()))].filter((s) => s.length === 10)
    assert.ok(sighashes.length >= 3)
    for (const sighash of sighashes) {
      const [bySighash] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, ethereumTransactions: [{ sighash: [upperHex(sighash)] }] })
      assert.deepEqual(bySighash.calls.map((c: any) => c.extrinsicIndex), eth.transactions.flatMap((t: any, k: number) => (t.input.slice(0, 10).toLowerCase() === sighash ? [txExtrinsic[k]] : [])), sighash)
    }
    const [both] = await client.query<any, any>({
      type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK,
      ethereumTransactions: [{ to: ['0x475fd5dd3c69f47774b7aa579f10557e7f6e33e5'], sighash: ['0x151fd8f3'] }],
    })
    assert.deepEqual(both.calls.map((c: any) => c.extrinsicIndex), eth.transactions.flatMap((t: any, k: number) =>
      (t.to.toLowerCase() === '0x475fd5dd3c69f47774b7aa579f10557e7f6e33e5' && t.input.startsWith('0x151fd8f3') ? [txExtrinsic[k]] : [])))
  })
})
