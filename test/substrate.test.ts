import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { after, before, describe, it } from 'node:test'
import { HttpClient } from '@subsquid/http-client'
import { ArchiveClient } from '@subsquid/util-internal-archive-client'
import { ingestRecordedSidecar } from '../src/ingest/substrate/sidecar/recorded.js'
import type { Cluster } from '../src/server/cluster.js'
import { anvilRecords, REPO_ROOT, tempDir, writeDataset } from './helpers/dataset.js'
import { startServed } from './helpers/walk.js'
import { postJson } from './helpers/http.js'

/*
 * Substrate end to end on Moonbeam 11728459 (decoded by Substrate API Sidecar, recorded): ingest
 * through a replay Sidecar, router + 2 workers, and the real `@subsquid/util-internal-archive-client`
 * reading `evmLogs` and `ethereumTransactions`. Expectations come from the recorded JSON directly.
 */

const BLOCK = 11728459

function recorded(): any {
  return JSON.parse(gunzipSync(readFileSync(path.join(REPO_ROOT, 'fixtures', 'substrate', 'substrate-api-sidecar', 'decoded-blocks', 'moonbeam', 'blocks', `${BLOCK}.json.gz`))).toString('utf8'))
}

interface RawLog { index: number; extrinsicIndex: number; address: string; topics: string[]; data: string }
interface RawTransact { extrinsicIndex: number; to: string | null; sighash: string }

/** EVM.Log events with their index in the block's event list (onInitialize, then each extrinsic's, then onFinalize). */
function rawLogs(b: any): RawLog[] {
  const out: RawLog[] = []
  let index = b.onInitialize.events.length
  b.extrinsics.forEach((x: any, i: number) => {
    for (const e of x.events) {
      if (e.method.pallet === 'evm' && e.method.method === 'Log') {
        const log = e.data[0].log ?? e.data[0]
        out.push({ index, extrinsicIndex: i, address: log.address.toLowerCase(), topics: log.topics.map((t: string) => t.toLowerCase()), data: log.data.toLowerCase() })
      }
      index++
    }
  })
  return out
}

function rawTransacts(b: any): RawTransact[] {
  return b.extrinsics.flatMap((x: any, i: number) => {
    if (x.method.pallet !== 'ethereum' || x.method.method !== 'transact') return []
    const tx = Object.values(x.args.transaction)[0] as any
    return [{ extrinsicIndex: i, to: tx.action.call?.toLowerCase() ?? null, sighash: tx.input.slice(0, 10).toLowerCase() }]
  })
}

describe('Substrate: Moonbeam through ingest, router + 2 workers, real archive client', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let client: ArchiveClient
  const raw = recorded()
  const logs = rawLogs(raw)
  const transacts = rawTransacts(raw)

  before(async () => {
    tmp = await tempDir('ba-substrate-')
    const t0 = performance.now()
    const r = await ingestRecordedSidecar(path.join(tmp.dir, 'moonbeam'), 'moonbeam', 'moonbeam', { workers: 1 }) // through a fetch worker (a short range alone takes none)
    const rows = Object.values(r.rows).reduce((a, b) => a + b, 0)
    console.log(`# moonbeam ingest from the replay Sidecar: ${r.blocks} block, ${rows} rows in ${((performance.now() - t0) / 1000).toFixed(2)} s`)
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', (await anvilRecords()).slice(0, 4), 4)
    ;({ cluster } = await startServed(tmp.dir, { moonbeam: BLOCK }))
    client = new ArchiveClient({ http: new HttpClient({ httpTimeout: 20_000 }), url: cluster.datasets.get('moonbeam')! })
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('the recording has what the test needs', () => {
    assert.equal(logs.length, 9)
    assert.equal(transacts.length, 9)
  })

  it('evmLogs by address (any case) and topic0 equal the recorded EVM.Log events', async () => {
    const byAddress = new Map<string, RawLog[]>()
    for (const l of logs) byAddress.set(l.address, [...(byAddress.get(l.address) ?? []), l])
    for (const [address, expected] of byAddress) {
      for (const written of [address, address.toUpperCase().replace('0X', '0x'), '0X' + address.slice(2)]) {
        const blocks = await client.query<any, any>({
          type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK,
          evmLogs: [{ address: [written], topic0: [expected[0].topics[0].toUpperCase().replace('0X', '0x')] }],
          fields: { event: { name: true, args: true } },
        })
        assert.equal(blocks.length, 1)
        const want = expected.filter((l) => l.topics[0] === expected[0].topics[0])
        const got = blocks[0].events
        assert.deepEqual(got.map((e: any) => [e.index, e.extrinsicIndex, e.name]), want.map((l) => [l.index, l.extrinsicIndex, 'EVM.Log']), written)
        for (const [i, e] of got.entries()) {
          const log = e.args[0].log ?? e.args[0]
          assert.equal(log.address, want[i].address)
          assert.deepEqual(log.topics, want[i].topics)
          assert.equal(log.data, want[i].data)
        }
      }
    }
    // All logs, and a topic that occurs nowhere.
    const [all] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, evmLogs: [{}] })
    assert.deepEqual(all.events.map((e: any) => e.index), logs.map((l) => l.index))
    const [none] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, evmLogs: [{ topic0: ['0x' + '00'.repeat(32)] }] })
    assert.deepEqual(none.events, [])
  })

  it('ethereumTransactions, all and by to / sighash, with their extrinsics and events', async () => {
    const [all] = await client.query<any, any>({
      type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK,
      ethereumTransactions: [{ extrinsic: true, events: true }],
      fields: { call: { name: true, success: true }, extrinsic: { hash: true, success: true }, event: { name: true } },
    })
    assert.deepEqual(all.calls.map((c: any) => [c.extrinsicIndex, c.address, c.name]), transacts.map((t) => [t.extrinsicIndex, [], 'Ethereum.transact']))
    assert.deepEqual(all.extrinsics.map((x: any) => [x.index, x.hash]), transacts.map((t) => [t.extrinsicIndex, raw.extrinsics[t.extrinsicIndex].hash.toLowerCase()]))
    // The events of each transact call, less its closing System.ExtrinsicSuccess (no call address, docs/protocol.md §7).
    const eventCount = transacts.reduce((n, t) => n + raw.extrinsics[t.extrinsicIndex].events.length - 1, 0)
    assert.equal(all.events.length, eventCount)
    assert.ok(all.events.every((e: any) => e.name !== 'System.ExtrinsicSuccess'))
    const withInput = transacts.find((t) => t.sighash !== '0x')!
    const [bySighash] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, ethereumTransactions: [{ sighash: [withInput.sighash.toUpperCase().replace('0X', '0x')] }] })
    assert.deepEqual(bySighash.calls.map((c: any) => c.extrinsicIndex), transacts.filter((t) => t.sighash === withInput.sighash).map((t) => t.extrinsicIndex))
    const to = transacts[1].to!
    const [byTo] = await client.query<any, any>({ type: 'substrate', fromBlock: BLOCK, toBlock: BLOCK, ethereumTransactions: [{ to: [to] }] })
    assert.deepEqual(byTo.calls.map((c: any) => c.extrinsicIndex), transacts.filter((t) => t.to === to).map((t) => t.extrinsicIndex))
    assert.ok(byTo.calls.length >= 2, 'the recording sends two transactions to one address')
  })

  it('a query of another family → 400 wrong-family, both ways', async () => {
    const sub = await (await fetch(`${cluster.datasets.get('moonbeam')}/${BLOCK}/worker`)).text()
    const evm = await (await fetch(`${cluster.datasets.get('anvil')}/0/worker`)).text()
    for (const [url, body] of [[sub, { fromBlock: BLOCK, logs: [{}] }], [sub, { type: 'starknet', fromBlock: BLOCK }], [evm, { type: 'substrate', fromBlock: 0, events: [{}] }]] as const) {
      const res = await postJson(url, body)
      assert.equal(res.status, 400, JSON.stringify(body))
      assert.equal(JSON.parse(res.text).error, 'wrong-family')
    }
  })
})
