import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { after, before, describe, it } from 'node:test'
import { HttpClient } from '@subsquid/http-client'
import { ArchiveClient } from '@subsquid/util-internal-archive-client'
import { ingestRecordedStarknet } from '../src/ingest/recorded.js'
import type { Cluster } from '../src/server/cluster.js'
import { anvilRecords, REPO_ROOT, tempDir, writeDataset } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'
import { startServed, walkRange } from './helpers/walk.js'

/*
 * Starknet end to end: the recorded mainnet blocks go through the real ingest path (a replay node
 * serving the recorded JSON-RPC answers), a router and two workers serve them next to an EVM
 * dataset, and the real `@subsquid/util-internal-archive-client` (the registry's only Starknet
 * archive client) walks them. What it receives is compared field by field with the recorded RPC
 * answers, read here directly (felts compared as numbers).
 */

const ETH = '0x49d36570d4e46f48e99674bd3fcc84644ddd6b96f7c741b1562b82f9e004dc7'
const TRANSFER = '0x99cd8bde557814842a3121e8ddfd433a539b8c9f14bf31ebf108d12e6196e9'
/** Blocks recorded as JSON-RPC answers (the feeder-gateway blocks are checked by count only). */
const RPC_BLOCKS = [25, 588763, 623436]

const fixture = (...p: string[]) => {
  const v = JSON.parse(gunzipSync(readFileSync(path.join(REPO_ROOT, 'fixtures', 'starknet', ...p))).toString('utf8'))
  return v && typeof v === 'object' && 'jsonrpc' in v ? v.result : v
}

function recordedRpcBlocks(): Map<number, any> {
  const nm = (f: string) => fixture('nethermind-idealis', 'starknet', f)
  const blocks = [nm('get_block_with_txs_25.json.gz'), fixture('starknet-go', 'rpc', 'testData', 'blockWithReceipts', 'mainnetBlockReceipts588763.json.gz'), nm('get_block_with_txs_623_436.json.gz')]
  return new Map(blocks.map((b) => [b.block_number, b]))
}

/** A felt as the archive stores it: lower case, no leading zeros. */
const felt = (v: unknown) => (v == null ? null : '0x' + BigInt(v as string).toString(16))
const felts = (v: unknown) => (v == null ? null : (v as string[]).map(felt))

function expectedTransaction(i: number, tx: any, receipt: any) {
  const rb = tx.resource_bounds
  const bounds = rb && Object.fromEntries(
    (['l1_gas', 'l2_gas', 'l1_data_gas'] as const).filter((k) => rb[k]).flatMap((k) => {
      const name = k.replace(/_(\w)/g, (_, c) => c.toUpperCase())
      return [[`${name}MaxAmount`, felt(rb[k].max_amount)], [`${name}MaxPricePerUnit`, felt(rb[k].max_price_per_unit)]]
    }),
  )
  return {
    transactionIndex: i,
    transactionHash: felt(tx.transaction_hash ?? receipt.transaction_hash),
    type: tx.type,
    version: felt(tx.version),
    senderAddress: felt(tx.sender_address),
    nonce: tx.nonce == null ? null : Number(BigInt(tx.nonce)),
    maxFee: felt(tx.max_fee),
    calldata: felts(tx.calldata),
    signature: felts(tx.signature),
    contractAddress: felt(tx.contract_address ?? receipt.contract_address),
    classHash: felt(tx.class_hash),
    constructorCalldata: felts(tx.constructor_calldata),
    resourceBounds: bounds ?? null,
    tip: felt(tx.tip),
    paymasterData: felts(tx.paymaster_data),
    accountDeploymentData: felts(tx.account_deployment_data),
    actualFee: typeof receipt.actual_fee === 'object' ? { amount: felt(receipt.actual_fee.amount), unit: receipt.actual_fee.unit } : { amount: felt(receipt.actual_fee), unit: 'WEI' },
    finalityStatus: receipt.finality_status,
    executionStatus: receipt.execution_status,
    revertReason: receipt.revert_reason ?? null,
  }
}

const ALL_TX_FIELDS = Object.fromEntries(Object.keys(expectedTransaction(0, { transaction_hash: '0x1' }, { actual_fee: '0x0' })).map((k) => [k, true]))

/** The real client's range loop: ask the router for a worker, continue after the last block returned. */
const walk = (client: ArchiveClient, query: object, from: number, to: number): Promise<any[]> =>
  walkRange(from, to, (next) => client.query<any, any>({ ...query, fromBlock: next, toBlock: to }))

describe('Starknet: recorded mainnet blocks through ingest, router + 2 workers, real archive client', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let cluster: Cluster
  let base: string
  let evmBase: string
  let client: ArchiveClient
  let height: number
  const rpc = recordedRpcBlocks()

  before(async () => {
    tmp = await tempDir('ba-starknet-')
    const t0 = performance.now()
    const results = await ingestRecordedStarknet(path.join(tmp.dir, 'starknet-mainnet'), 'starknet-mainnet', undefined, { workers: 1 }) // through a fetch worker (a short range alone takes none)
    const secs = (performance.now() - t0) / 1000
    const blocks = results.reduce((n, r) => n + r.blocks, 0)
    const rows = results.reduce((n, r) => n + Object.values(r.rows).reduce((a, b) => a + b, 0), 0)
    console.log(`# starknet ingest from the replay node: ${blocks} blocks, ${rows} rows in ${secs.toFixed(2)} s (${(blocks / secs).toFixed(1)} blocks/s, ${(rows / secs).toFixed(0)} rows/s, 3 ingest runs)`)
    await writeDataset(path.join(tmp.dir, 'anvil'), 'anvil', (await anvilRecords()).slice(0, 8), 8)
    // A small size budget makes answers stop early, so the client's range loop has to continue.
    let heights: Record<string, number>
    ;({ cluster, heights } = await startServed(tmp.dir, { 'starknet-mainnet': 623436 }, { budgets: { sizeBytes: 200_000 } }))
    height = heights['starknet-mainnet']
    base = cluster.datasets.get('starknet-mainnet')!
    evmBase = cluster.datasets.get('anvil')!
    client = new ArchiveClient({ http: new HttpClient({ httpTimeout: 20_000 }), url: base })
  })

  after(async () => {
    await cluster?.stop()
    await tmp?.cleanup()
  })

  it('serves every recorded block: height, transaction and event counts', async () => {
    assert.equal(height, 623436)
    const blocks = await walk(client, { type: 'starknet', includeAllBlocks: true, transactions: [{}], events: [{}] }, 0, height)
    assert.deepEqual(blocks.map((b) => b.header.number), [25, 6500, 65000, 550000, 588763, 623436])
    const count = (n: number) => blocks.find((b) => b.header.number === n)
    for (const n of RPC_BLOCKS) {
      const r = rpc.get(n)
      assert.equal(count(n).header.hash, felt(r.block_hash))
      assert.equal(count(n).transactions.length, r.transactions.length, `block ${n} transactions`)
      assert.equal(count(n).events.length, r.transactions.reduce((a: number, t: any) => a + t.receipt.events.length, 0), `block ${n} events`)
    }
    assert.equal(count(623436).transactions.length, 191)
    assert.equal(count(623436).events.length, 1925)
    assert.equal(count(588763).events.length, 446)
    const feeder = (v: string, n: number) => fixture('katana', 'crates', 'gateway', 'gateway-client', 'tests', 'fixtures', v, 'state_update_with_block', `mainnet_${n}.json.gz`)
    for (const [v, n] of [['0.10.0', 6500], ['0.11.1', 65000], ['0.13.0', 550000]] as const) {
      const f = feeder(v, n)
      assert.equal(count(n).transactions.length, f.block.transactions.length, `feeder block ${n}`)
      assert.equal(count(n).events.length, f.block.transaction_receipts.reduce((a: number, r: any) => a + r.events.length, 0), `feeder block ${n} events`)
    }
  })

  it('events by fromAddress and key0 with their transactions equal the recorded receipts', async () => {
    const blocks = await walk(client, {
      type: 'starknet',
      events: [{ fromAddress: [ETH], key0: [TRANSFER], transaction: true }],
      fields: { event: { fromAddress: true, keys: true, data: true }, transaction: ALL_TX_FIELDS },
    }, 588763, height)
    let events = 0
    for (const n of [588763, 623436]) {
      const r = rpc.get(n)
      const got = blocks.find((b) => b.header.number === n)
      const expEvents: any[] = []
      const expTx = new Set<number>()
      r.transactions.forEach((t: any, i: number) => t.receipt.events.forEach((e: any, j: number) => {
        if (felt(e.from_address) === ETH && felt(e.keys[0]) === TRANSFER) {
          expEvents.push({ transactionIndex: i, eventIndex: j, fromAddress: ETH, keys: felts(e.keys), data: felts(e.data) })
          expTx.add(i)
        }
      }))
      assert.ok(expEvents.length > 50, `block ${n} has ${expEvents.length} ETH transfers`)
      assert.deepEqual(got.events, expEvents)
      assert.deepEqual(got.transactions, [...expTx].sort((a, b) => a - b).map((i) => expectedTransaction(i, r.transactions[i].transaction, r.transactions[i].receipt)))
      events += expEvents.length
    }
    assert.ok(events > 400)
  })

  it('transactions by senderAddress with their events; a reverted transaction keeps status and reason', async () => {
    const r = rpc.get(623436)
    const reverted = r.transactions.findIndex((t: any) => t.receipt.execution_status === 'REVERTED')
    assert.ok(reverted >= 0)
    const sender = r.transactions[reverted].transaction.sender_address
    // The sender as a client might write it: upper case, 0X, leading zeros.
    const written = '0X' + '000' + sender.slice(2).toUpperCase()
    const blocks = await walk(client, {
      type: 'starknet',
      transactions: [{ senderAddress: [written], events: true }],
      fields: { transaction: ALL_TX_FIELDS, event: { fromAddress: true, keys: true, data: true } },
    }, 623436, 623436)
    assert.equal(blocks.length, 1)
    const mine = r.transactions.map((t: any, i: number) => ({ ...t, i })).filter((t: any) => felt(t.transaction.sender_address) === felt(sender))
    assert.deepEqual(blocks[0].transactions, mine.map((t: any) => expectedTransaction(t.i, t.transaction, t.receipt)))
    assert.deepEqual(blocks[0].events, mine.flatMap((t: any) => t.receipt.events.map((e: any, j: number) => ({ transactionIndex: t.i, eventIndex: j, fromAddress: felt(e.from_address), keys: felts(e.keys), data: felts(e.data) }))))
    const rev = blocks[0].transactions.find((t: any) => t.transactionIndex === reverted)
    assert.equal(rev.executionStatus, 'REVERTED')
    assert.ok(typeof rev.revertReason === 'string' && rev.revertReason.length > 0)
  })

  it('every transaction field of every recorded JSON-RPC block', async () => {
    let n = 0
    for (const number of RPC_BLOCKS) {
      const blocks = await walk(client, { type: 'starknet', transactions: [{}], fields: { transaction: ALL_TX_FIELDS } }, number, number)
      const r = rpc.get(number)
      assert.deepEqual(blocks[0].transactions, r.transactions.map((t: any, i: number) => expectedTransaction(i, t.transaction, t.receipt)), `block ${number}`)
      n += r.transactions.length
    }
    assert.equal(n, 12 + 72 + 191)
  })

  it('DEPLOY / DEPLOY_ACCOUNT: contractAddress is the deployed address (from the receipt), found by the contractAddress filter', async () => {
    // The deployed address read here from the recorded answers: on the feeder transaction, on the
    // RPC receipt (RPC DEPLOY_ACCOUNT transactions have no contract_address of their own).
    const feeder = (v: string, n: number) => fixture('katana', 'crates', 'gateway', 'gateway-client', 'tests', 'fixtures', v, 'state_update_with_block', `mainnet_${n}.json.gz`)
    const expected = new Map<number, { transactionIndex: number; type: string; contractAddress: string }[]>()
    for (const [v, n] of [['0.10.0', 6500], ['0.11.1', 65000], ['0.13.0', 550000]] as const) {
      const f = feeder(v, n)
      const deployed = new Set((f.state_update.state_diff.deployed_contracts as any[]).map((c) => felt(c.address)))
      const txs = (f.block.transactions as any[]).map((t, i) => ({ t, i })).filter(({ t }) => t.type === 'DEPLOY' || t.type === 'DEPLOY_ACCOUNT')
      // A cross-check of the recorded data itself: each such address is in the block's state diff.
      for (const { t } of txs) assert.ok(deployed.has(felt(t.contract_address)), `block ${n}: ${t.contract_address} not deployed`)
      expected.set(n, txs.map(({ t, i }) => ({ transactionIndex: i, type: t.type, contractAddress: felt(t.contract_address)! })))
    }
    for (const n of RPC_BLOCKS) {
      expected.set(n, (rpc.get(n).transactions as any[]).flatMap(({ transaction: t, receipt }, i) => {
        if (t.type !== 'DEPLOY' && t.type !== 'DEPLOY_ACCOUNT') return []
        assert.equal(t.contract_address, undefined, `block ${n}: an RPC ${t.type} transaction names no address itself`)
        return [{ transactionIndex: i, type: t.type, contractAddress: felt(receipt.contract_address)! }]
      }))
    }
    assert.deepEqual([6500, 65000, 550000, ...RPC_BLOCKS].map((n) => expected.get(n)!.length), [38, 9, 3, 1, 1, 1])
    const fields = { transaction: { type: true, contractAddress: true } }
    const blocks = await walk(client, { type: 'starknet', transactions: [{ type: ['DEPLOY', 'DEPLOY_ACCOUNT'] }], fields }, 0, height)
    assert.deepEqual(new Map(blocks.map((b) => [b.header.number, b.transactions])), new Map([...expected].sort(([a], [b]) => a - b)))
    // Each deployed address selects its deploying transaction.
    for (const [n, txs] of expected) {
      for (const tx of [txs[0], txs.at(-1)!]) {
        const [b] = await walk(client, { type: 'starknet', transactions: [{ contractAddress: [tx.contractAddress] }], fields }, n, n)
        assert.ok(b.transactions.some((t: any) => t.transactionIndex === tx.transactionIndex && t.contractAddress === tx.contractAddress), `block ${n}: ${tx.contractAddress}`)
      }
    }
  })

  it('traces of block 25 and state updates of the feeder blocks', async () => {
    const traces = fixture('nethermind-idealis', 'starknet', 'trace_block_25.json.gz')
    const [b25] = await walk(client, { type: 'starknet', traces: [{}], fields: { trace: { contractAddress: true, invocationType: true } } }, 25, 25)
    const roots = (t: any) => ['validate_invocation', 'execute_invocation', 'constructor_invocation', 'function_invocation', 'fee_transfer_invocation'].filter((k) => t.trace_root[k])
    const count = (c: any): number => 1 + (c.calls ?? []).reduce((a: number, x: any) => a + count(x), 0)
    const expected = traces.reduce((a: number, t: any) => a + roots(t).reduce((b: number, k: string) => b + count(t.trace_root[k]), 0), 0)
    assert.equal(b25.traces.length, expected)
    assert.ok(b25.traces.every((t: any) => t.traceAddress.length >= 1))
    // A state update with nothing selected is `{}` (it has no identifier fields).
    const [s] = await walk(client, { type: 'starknet', stateUpdates: [{}] }, 6500, 6500)
    assert.deepEqual(s.state_updates, [{}])
    const [full] = await walk(client, { type: 'starknet', stateUpdates: [{}], fields: { stateUpdate: { deployedContracts: true, newRoot: true } } }, 6500, 6500)
    assert.equal(full.state_updates[0].deployedContracts.length, 38)
  })

  it('felt filter values match in any form; storage diffs by key', async () => {
    const [all] = await walk(client, { type: 'starknet', storageDiffs: [{}], fields: { storageDiff: { value: true } } }, 550000, 550000)
    assert.ok(all.storage_diffs.length > 10)
    const d = all.storage_diffs[3]
    for (const form of [d.key, d.key.toUpperCase().replace('0X', '0x'), '0X' + d.key.slice(2), '0x000' + d.key.slice(2)]) {
      const [b] = await walk(client, { type: 'starknet', storageDiffs: [{ address: [d.address], key: [form] }], fields: { storageDiff: { value: true } } }, 550000, 550000)
      assert.deepEqual(b.storage_diffs, [d], form)
    }
  })

  it('a query of one family sent to a dataset of the other → 400 wrong-family', async () => {
    const sWorker = await (await fetch(`${base}/25/worker`)).text()
    const eWorker = await (await fetch(`${evmBase}/0/worker`)).text()
    for (const [url, body] of [
      [sWorker, { fromBlock: 25, logs: [{}] }],
      [sWorker, { type: 'evm', fromBlock: 25 }],
      [eWorker, { type: 'starknet', fromBlock: 0, events: [{}] }],
    ] as const) {
      const res = await postJson(url, body)
      assert.equal(res.status, 400, JSON.stringify(body))
      assert.equal(JSON.parse(res.text).error, 'wrong-family')
    }
    const bad = await postJson(sWorker, { type: 'starknet', fromBlock: 25, events: [{ fromAddress: ['0xzz'] }] })
    assert.equal(bad.status, 400)
    assert.equal(JSON.parse(bad.text).path, 'events[0].fromAddress[0]')
    const unknown = await postJson(sWorker, { type: 'starknet', fromBlock: 25, fields: { event: { topics: true } } })
    assert.equal(unknown.status, 400)
    assert.match(JSON.parse(unknown.text).message, /topics/)
  })

  it('the other error classes answer as for EVM', async () => {
    const w = await (await fetch(`${base}/25/worker`)).text()
    const cases: [object, number, string][] = [
      [{ type: 'starknet', fromBlock: 700000 }, 400, 'above-height'],
      [{ type: 'starknet', fromBlock: 30, toBlock: 29 }, 400, 'invalid-range'],
      [{ type: 'starknet', fromBlock: 26, toBlock: 100 }, 400, 'no-blocks-in-range'],
      [{ type: 'starknet', fromBlock: 25, stateUpdates: [{}] }, 400, 'table-not-available'],
      [{ type: 'starknet', fromBlock: 25, events: Array(101).fill({}) }, 400, 'too-many-requests'],
      [{ type: 'starknet', fromBlock: 25, events: [{ fromAddress: '0x1' }] }, 400, 'invalid-query'],
      [{ type: 'starknet', fromBlock: 25, messages: [{ transaction: true }] }, 400, 'invalid-query'],
      [{ type: 'starknet', fromBlock: 25, parentBlockHash: 'zz' }, 400, 'invalid-query'],
      [{ type: 'solana', fromBlock: 25 }, 400, 'unknown-type'],
    ]
    for (const [body, status, error] of cases) {
      // Block 26 lies in a gap covered by the next chunk, which the router may have placed on the other
      // worker (or not yet on this one): ask for its own worker, as a client would.
      const from = (body as { fromBlock: number }).fromBlock
      const res = await postJson(from === 26 ? await (await fetch(`${base}/26/worker`)).text() : w, body)
      assert.equal(res.status, status, `${JSON.stringify(body).slice(0, 100)}: ${res.text}`)
      assert.equal(JSON.parse(res.text).error, error, JSON.stringify(body).slice(0, 100))
    }
  })

  it('parentBlockHash is compared as a felt', async () => {
    const r = rpc.get(623436)
    // Any spelling is accepted (the parent of 623436 is not in this sparse dataset, so it is not compared there);
    // the normalised value is what the fork check compares with the stored (normalised) hashes.
    const w = await (await fetch(`${base}/623436/worker`)).text()
    const spelled = '0X000' + r.block_hash.slice(2).toUpperCase()
    const same = await postJson(w, { type: 'starknet', fromBlock: 623436, toBlock: 623436, parentBlockHash: spelled })
    assert.equal(same.status, 200, same.text)
    const { validateQuery } = await import('../src/query/validate.js')
    const { starknetFamily } = await import('../src/families/starknet.js')
    assert.equal(validateQuery(starknetFamily, { type: 'starknet', fromBlock: 1, parentBlockHash: '0X00AbC' }).parentBlockHash, '0xabc')
  })
})
