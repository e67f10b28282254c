import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { gunzipSync } from 'node:zlib'
import type { Row } from '../src/chunks/rows.js'
import { starknetFamily } from '../src/families/starknet.js'
import { MalformedRpcData } from '../src/ingest/evm/normalize.js'
import { feederToRpc } from '../src/ingest/starknet/feeder.js'
import { feltOf, normalizeStarknetBlock, type StarknetBlockBundle } from '../src/ingest/starknet/normalize.js'
import { derived480000, invocations, ROOT_KEYS } from './helpers/starknet-480000.js'

/*
 * The Starknet normaliser on real node answers (fixtures/starknet, see fixtures/SOURCES.md).
 * Expected values are read from the raw JSON in the test, never copied from normaliser output.
 */

// tests run from dist/test/
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const FIX = path.join(REPO, 'fixtures/starknet')

function load(rel: string): any {
  return JSON.parse(gunzipSync(readFileSync(path.join(FIX, rel))).toString('utf8'))
}
/** JSON-RPC answers are wrapped as `{jsonrpc, result, id}`; trace and state-update files are bare results. */
const result = (j: any) => (j && typeof j === 'object' && 'jsonrpc' in j ? j.result : j)

const IDEALIS = 'nethermind-idealis/starknet'
const SNGO = 'starknet-go/rpc/testData'
const KATANA = 'katana/crates/gateway/gateway-client/tests/fixtures'

/** The form feltOf must give, computed here independently with BigInt. */
const norm = (v: string) => '0x' + BigInt(v).toString(16)
const normList = (l: string[]) => l.map(norm)
const NORMAL = /^0x(0|[1-9a-f][0-9a-f]*)$/

const columnsOf = (table: string) => starknetFamily.tables.find((t) => t.name === table)!.columns
function assertColumns(table: string, rows: Row[]): void {
  const want = columnsOf(table).map((c) => c.name).sort()
  for (const r of rows) assert.deepEqual(Object.keys(r).sort(), want, `${table} columns`)
}
/** Every list column of every row holds normalised felts; every size column matches its value. */
function assertListsNormal(table: string, rows: Row[]): void {
  for (const c of columnsOf(table)) {
    for (const r of rows) {
      const v = r[c.name]
      if (c.type === 'VARCHAR[]' && v != null) for (const x of v as string[]) assert.match(x, NORMAL, `${table}.${c.name}`)
      if (c.type === 'INTEGER[]') assert.ok(Array.isArray(v) && v.every((x) => Number.isInteger(x)), `${table}.${c.name}`)
      if (c.name.endsWith('_size')) {
        const base = r[c.name.slice(0, -5)]
        assert.equal(v, base == null ? null : typeof base === 'string' ? base.length : JSON.stringify(base).length, `${table}.${c.name}`)
      }
    }
  }
}
function assertAll(rows: Record<string, Row[]>): void {
  for (const [t, rs] of Object.entries(rows)) {
    assertColumns(t, rs)
    assertListsNormal(t, rs)
  }
}

describe('feltOf', () => {
  it('lower-cases, strips leading zeros, keeps 0x0; rejects non-hex', () => {
    assert.equal(feltOf('0x00AB'), '0xab')
    assert.equal(feltOf('0X0'), '0x0')
    assert.equal(feltOf('0x0000'), '0x0')
    assert.equal(feltOf('0XDeadBeef'), '0xdeadbeef')
    assert.equal(feltOf('0x1'), '0x1')
    assert.equal(feltOf(null), null)
    assert.equal(feltOf(undefined), null)
    for (const bad of ['12', '0x', '0xg1', 'abc', ' 0x1', 12, {}, '0x' + '1'.repeat(65)]) {
      assert.throws(() => feltOf(bad, 'thing'), (e: unknown) => e instanceof MalformedRpcData && /thing/.test(e.message), String(bad))
    }
  })
})

describe('Starknet mainnet 623436 (getBlockWithReceipts, RPC 0.7)', () => {
  const raw = result(load(`${IDEALIS}/get_block_with_txs_623_436.json.gz`))
  const rows = normalizeStarknetBlock({ block: raw })

  it('has the tables and columns of the family, everything normalised', () => {
    assert.deepEqual(Object.keys(rows).sort(), ['blocks', 'events', 'messages', 'transactions'])
    assertAll(rows)
  })

  it('block header', () => {
    assert.equal(rows.blocks.length, 1)
    const b = rows.blocks[0]
    assert.equal(b.number, 623436)
    assert.equal(b.hash, norm(raw.block_hash))
    assert.equal(b.parent_hash, norm(raw.parent_hash))
    assert.equal(b.timestamp, raw.timestamp)
    assert.equal(b.l1_gas_price_in_wei, norm(raw.l1_gas_price.price_in_wei))
    assert.equal(b.l1_data_gas_price_in_fri, norm(raw.l1_data_gas_price.price_in_fri))
    assert.equal(b.l2_gas_price_in_fri, null) // RPC 0.7 has no l2_gas_price
    assert.equal(b.l1_da_mode, 'BLOB')
    assert.equal(b.starknet_version, '0.13.1')
  })

  it('191 transactions, 1925 events; the reverted one is kept', () => {
    assert.equal(rows.transactions.length, 191)
    assert.equal(rows.events.length, 1925)
    assert.deepEqual(rows.transactions.map((t) => t.transaction_index), [...Array(191).keys()])
    const reverted = raw.transactions.filter((x: any) => x.receipt.execution_status === 'REVERTED')
    assert.equal(reverted.length, 1)
    const row = rows.transactions.find((t) => t.transaction_hash === norm(reverted[0].receipt.transaction_hash))!
    assert.equal(row.execution_status, 'REVERTED')
    assert.equal(row.revert_reason, reverted[0].receipt.revert_reason)
    assert.match(row.revert_reason as string, /Insufficient fee token balance/)
  })

  it('transactions match the raw JSON field by field', () => {
    for (const [i, { transaction: t, receipt: r }] of raw.transactions.entries()) {
      const row = rows.transactions[i]
      assert.equal(row.transaction_hash, norm(t.transaction_hash))
      assert.equal(row.type, t.type)
      assert.equal(row.version, norm(t.version))
      assert.equal(row.sender_address, t.sender_address == null ? null : norm(t.sender_address))
      assert.equal(row.nonce, t.nonce == null ? null : BigInt(t.nonce).toString())
      assert.deepEqual(row.calldata, t.calldata == null ? null : normList(t.calldata))
      assert.deepEqual(row.signature, normList(t.signature))
      assert.equal(row.max_fee, t.max_fee == null ? null : norm(t.max_fee))
      assert.deepEqual(JSON.parse(row.actual_fee as string), { amount: norm(r.actual_fee.amount), unit: r.actual_fee.unit })
      assert.equal(row.finality_status, r.finality_status)
      if (t.resource_bounds) {
        assert.deepEqual(JSON.parse(row.resource_bounds as string), {
          l1GasMaxAmount: norm(t.resource_bounds.l1_gas.max_amount),
          l1GasMaxPricePerUnit: norm(t.resource_bounds.l1_gas.max_price_per_unit),
          l2GasMaxAmount: norm(t.resource_bounds.l2_gas.max_amount),
          l2GasMaxPricePerUnit: norm(t.resource_bounds.l2_gas.max_price_per_unit),
        })
        assert.equal(row.tip, norm(t.tip))
        assert.equal(row.nonce_data_availability_mode, t.nonce_data_availability_mode)
      } else assert.equal(row.resource_bounds, null)
    }
    const declare = raw.transactions.find((x: any) => x.transaction.type === 'DECLARE').transaction
    const d = rows.transactions.find((t) => t.type === 'DECLARE')!
    assert.equal(d.class_hash, norm(declare.class_hash))
    assert.equal(d.compiled_class_hash, norm(declare.compiled_class_hash))
  })

  it('events: per-transaction index, keys split, data', () => {
    let k = 0
    for (const [i, { receipt }] of raw.transactions.entries()) {
      for (const [j, e] of receipt.events.entries()) {
        const row = rows.events[k++]
        assert.equal(row.transaction_index, i)
        assert.equal(row.event_index, j)
        assert.equal(row.from_address, norm(e.from_address))
        assert.deepEqual(row.keys, normList(e.keys))
        assert.equal(row.key0, e.keys[0] == null ? null : norm(e.keys[0]))
        assert.equal(row.key3, e.keys[3] == null ? null : norm(e.keys[3]))
        assert.deepEqual(row.data, normList(e.data))
        assert.deepEqual(row.trace_address, [])
        assert.equal(row.block_number, 623436)
      }
    }
    assert.equal(k, rows.events.length)
  })
})

describe('Starknet mainnet 588763 (RPC 0.8 shape, hashes on receipts only)', () => {
  const raw = result(load(`${SNGO}/blockWithReceipts/mainnetBlockReceipts588763.json.gz`))
  const rows = normalizeStarknetBlock({ block: raw })

  it('72 transactions, 446 events', () => {
    assertAll(rows)
    assert.equal(rows.transactions.length, 72)
    assert.equal(rows.events.length, 446)
    for (const [i, x] of raw.transactions.entries()) assert.equal(rows.transactions[i].transaction_hash, norm(x.receipt.transaction_hash))
    assert.equal(rows.transactions.filter((t) => t.execution_status === 'REVERTED').length, 3)
    assert.equal(rows.blocks[0].l2_gas_price_in_fri, norm(raw.l2_gas_price.price_in_fri))
  })

  it('DEPLOY_ACCOUNT v3: resource bounds with l1_data_gas, address from the receipt', () => {
    const i = raw.transactions.findIndex((x: any) => x.transaction.type === 'DEPLOY_ACCOUNT')
    const { transaction: t, receipt: r } = raw.transactions[i]
    const row = rows.transactions[i]
    assert.equal(row.type, 'DEPLOY_ACCOUNT')
    assert.equal(row.version, '0x3')
    assert.equal(row.contract_address, norm(r.contract_address))
    assert.equal(row.nonce, '0')
    assert.equal(row.class_hash, norm(t.class_hash))
    assert.equal(row.contract_address_salt, norm(t.contract_address_salt))
    assert.deepEqual(row.constructor_calldata, normList(t.constructor_calldata))
    const rb = t.resource_bounds
    assert.deepEqual(JSON.parse(row.resource_bounds as string), {
      l1GasMaxAmount: norm(rb.l1_gas.max_amount),
      l1GasMaxPricePerUnit: norm(rb.l1_gas.max_price_per_unit),
      l2GasMaxAmount: '0x0',
      l2GasMaxPricePerUnit: '0x0',
      l1DataGasMaxAmount: '0x0',
      l1DataGasMaxPricePerUnit: '0x0',
    })
    assert.deepEqual(JSON.parse(row.actual_fee as string), { amount: norm(r.actual_fee.amount), unit: 'FRI' })
    assert.deepEqual(row.paymaster_data, [])
    assert.equal(row.paymaster_data_size, 2)
    assert.equal(row.account_deployment_data, null)
    assert.equal(row.account_deployment_data_size, null)
  })
})

describe('Starknet mainnet 25 with traceBlockTransactions', () => {
  const raw = result(load(`${IDEALIS}/get_block_with_txs_25.json.gz`))
  const traces = result(load(`${IDEALIS}/trace_block_25.json.gz`))
  const rows = normalizeStarknetBlock({ block: raw, traces })

  it('every trace root numbered, calls below it', () => {
    assert.ok(Array.isArray(traces))
    assertAll(rows)
    assert.equal(rows.transactions.length, 12)
    let expected = 0
    for (const [i, t] of traces.entries()) {
      assert.equal(norm(t.transaction_hash), rows.transactions[i].transaction_hash)
      let k = 0
      for (const key of ROOT_KEYS) {
        if (!t.trace_root[key]) continue
        for (const [at, inv] of invocations(t.trace_root[key])) {
          expected++
          const row = rows.traces!.find((r) => r.transaction_index === i && JSON.stringify(r.trace_address) === JSON.stringify([k, ...at]))
          assert.ok(row, `tx ${i} [${[k, ...at]}]`)
          assert.equal(row.contract_address, norm(inv.contract_address))
          assert.equal(row.caller_address, norm(inv.caller_address))
          assert.deepEqual(row.calldata, normList(inv.calldata))
          assert.deepEqual(row.result, normList(inv.result))
          assert.equal(row.trace_type, t.trace_root.type)
          assert.equal(row.invocation_type, key.replace('_invocation', ''))
        }
        k++
      }
    }
    assert.equal(rows.traces!.length, expected)
    // tx 3 calls two contracts: [0], [0, 0], [0, 1]
    assert.deepEqual(rows.traces!.filter((r) => r.transaction_index === 3).map((r) => r.trace_address), [[0], [0, 0], [0, 1]])
    // the DEPLOY transaction's root is its constructor
    const deploy = rows.traces!.find((r) => r.transaction_index === 8)!
    assert.equal(deploy.trace_type, 'DEPLOY')
    assert.equal(deploy.invocation_type, 'constructor')
  })

  it('the L2→L1 message gets the trace address of the call that sent it', () => {
    assert.equal(rows.events.length, 0) // block 25 emitted no events
    assert.equal(rows.messages.length, 1)
    const m = rows.messages[0]
    const sent = raw.transactions[7].receipt.messages_sent[0]
    assert.equal(m.transaction_index, 7)
    assert.equal(m.order, 0)
    assert.deepEqual(m.trace_address, [0])
    assert.equal(m.from_address, norm(sent.from_address))
    assert.equal(m.to_address, norm(sent.to_address))
    assert.deepEqual(m.payload, normList(sent.payload))
    // without traces: no trace address
    assert.deepEqual(normalizeStarknetBlock({ block: raw }).messages[0].trace_address, [])
  })
})

describe('Starknet mainnet 480000 trace tree (events ↔ trace addresses)', () => {
  // No getBlockWithReceipts of 480000 is public: the receipt events are rebuilt from the trace,
  // root by root (validate, execute/constructor, fee_transfer), each root's events by `order`
  // (helpers/starknet-480000.ts; the header there is synthetic).
  const { traces, block, expectedAddress } = derived480000()
  const rows = normalizeStarknetBlock({ block, traces })

  it('each event gets the trace address of the call that emitted it', () => {
    assertAll(rows)
    assert.equal(rows.events.length, expectedAddress.size)
    assert.ok(rows.events.length > 500)
    for (const e of rows.events) assert.deepEqual(e.trace_address, expectedAddress.get(`${e.transaction_index}/${e.event_index}`))
    // the fee transfer (root 2 of an INVOKE) restarts `order` at 0 but comes last in the receipt
    const tx1 = rows.events.filter((e) => e.transaction_index === 1)
    assert.deepEqual(tx1.at(-1)!.trace_address, [2, 0])
    assert.deepEqual((tx1[0].trace_address as number[]).slice(0, 1), [1])
  })

  it('an event whose keys/data differ from the trace entry keeps trace_address []', () => {
    const copy = structuredClone(block)
    const ev = copy.transactions[1].receipt.events
    ;[ev[0], ev[1]] = [ev[1], ev[0]]
    const r = normalizeStarknetBlock({ block: copy, traces })
    const tx1 = r.events.filter((e) => e.transaction_index === 1)
    assert.deepEqual(tx1[0].trace_address, [])
    assert.deepEqual(tx1[1].trace_address, [])
    assert.deepEqual(tx1[2].trace_address, expectedAddress.get('1/2'))
  })

  it('validate [0], execute [1], fee_transfer [2]; reverted execute is one row', () => {
    const roots = rows.traces!.filter((t) => (t.trace_address as number[]).length === 1)
    assert.equal(roots.length, 119 * 3)
    for (const r of roots) {
      const [k] = r.trace_address as number[]
      const want = ['validate', r.trace_type === 'DEPLOY_ACCOUNT' ? 'constructor' : 'execute', 'fee_transfer'][k]
      assert.equal(r.invocation_type, want)
    }
    const revertedIdx = traces.findIndex((t: any) => t.trace_root.execute_invocation?.revert_reason != null)
    assert.ok(revertedIdx >= 0)
    const rev = rows.traces!.filter((t) => t.transaction_index === revertedIdx && (t.trace_address as number[])[0] === 1)
    assert.equal(rev.length, 1)
    assert.equal(rev[0].revert_reason, traces[revertedIdx].trace_root.execute_invocation.revert_reason)
    assert.equal(rev[0].contract_address, null)
    assert.equal(rev[0].invocation_type, 'execute')
    // nested calls inherit the root's invocation type; class hash and selector are normalised
    const inv = traces[1].trace_root.execute_invocation.calls[0]
    const nested = rows.traces!.find((t) => t.transaction_index === 1 && JSON.stringify(t.trace_address) === '[1,0]')!
    assert.equal(nested.invocation_type, 'execute')
    assert.equal(nested.class_hash, norm(inv.class_hash))
    assert.equal(nested.entry_point_selector, norm(inv.entry_point_selector))
    assert.equal(nested.call_type, inv.call_type)
    assert.equal(nested.entry_point_type, inv.entry_point_type)
  })
})

describe('Starknet Sepolia 3100000 (RPC 0.10) with its state update', () => {
  const raw = result(load(`${SNGO}/blockWithReceipts/sepolia3100000.json.gz`))
  const su = result(load(`${SNGO}/stateUpdate/sepolia3100000.json.gz`))
  const rows = normalizeStarknetBlock({ block: raw, stateUpdate: su })

  it('block, l1_data_gas bounds, state update and storage diffs', () => {
    assertAll(rows)
    assert.deepEqual(Object.keys(rows).sort(), ['blocks', 'events', 'messages', 'state_updates', 'storage_diffs', 'transactions'])
    assert.equal(rows.blocks[0].l2_gas_price_in_wei, norm(raw.l2_gas_price.price_in_wei))
    assert.equal(rows.transactions.length, 3)
    assert.equal(rows.events.length, 3)
    const rb = JSON.parse(rows.transactions[0].resource_bounds as string)
    assert.equal(rb.l1DataGasMaxAmount, norm(raw.transactions[0].transaction.resource_bounds.l1_data_gas.max_amount))
    const s = rows.state_updates[0]
    assert.equal(s.block_number, 3100000)
    assert.equal(s.new_root, norm(su.new_root))
    assert.equal(s.old_root, norm(su.old_root))
    assert.equal(s.migrated_compiled_classes, '[]')
    assert.equal(s.migrated_compiled_classes_size, 2)
    assert.deepEqual(JSON.parse(s.nonces as string), su.state_diff.nonces.map((n: any) => ({ contract_address: norm(n.contract_address), nonce: norm(n.nonce) })))
    const entries = su.state_diff.storage_diffs.flatMap((d: any) => d.storage_entries.map((e: any) => ({ address: norm(d.address), key: norm(e.key), value: norm(e.value) })))
    assert.equal(entries.length, 4)
    assert.deepEqual(rows.storage_diffs.map(({ address, key, value }) => ({ address, key, value })), entries)
  })

  it('a state update of another block is refused', () => {
    assert.throws(() => normalizeStarknetBlock({ block: raw, stateUpdate: { ...su, block_hash: '0x1' } }), MalformedRpcData)
  })
})

describe('getStateUpdate results of madara 671070 and starkware 700000', () => {
  for (const [name, file, storage, nonces] of [
    ['671070', 'madara/orchestrator/src/tests/jobs/da_job/test_data/state_update/671070.json.gz', undefined, 87],
    ['700000', 'starkware-sequencer/crates/blockifier_reexecution/resources/block_700000/state_diff_block_700000.json.gz', 98, 8],
  ] as const) {
    it(`block ${name}`, () => {
      const su = result(load(file))
      const rows = normalizeStarknetBlock({ block: { block_number: Number(name), block_hash: su.block_hash, transactions: [] }, stateUpdate: su })
      assertAll(rows)
      const d = su.state_diff
      const total = d.storage_diffs.reduce((n: number, x: any) => n + x.storage_entries.length, 0)
      if (storage != null) assert.equal(total, storage)
      assert.equal(rows.storage_diffs.length, total)
      assert.equal(JSON.parse(rows.state_updates[0].nonces as string).length, nonces)
      assert.deepEqual(JSON.parse(rows.state_updates[0].replaced_classes as string),
        d.replaced_classes.map((c: any) => ({ contract_address: norm(c.contract_address), class_hash: norm(c.class_hash) })))
      assert.deepEqual(JSON.parse(rows.state_updates[0].deployed_contracts as string),
        d.deployed_contracts.map((c: any) => ({ address: norm(c.address), class_hash: norm(c.class_hash) })))
      assert.equal(rows.state_updates[0].migrated_compiled_classes, null)
      assert.equal(rows.state_updates[0].migrated_compiled_classes_size, null)
      const first = d.storage_diffs.find((x: any) => x.storage_entries.length > 0)
      const row = rows.storage_diffs.find((r) => r.address === norm(first.address) && r.key === norm(first.storage_entries[0].key))!
      assert.equal(row.value, norm(first.storage_entries[0].value))
    })
  }
})

describe('feeder-gateway answers through feederToRpc', () => {
  it('6500 (v0.10.0): L1 handlers, DEPLOY, 7 L2→L1 messages, 38 deployed contracts', () => {
    const feeder = load(`${KATANA}/0.10.0/state_update_with_block/mainnet_6500.json.gz`)
    const { block, stateUpdate } = feederToRpc(feeder)
    const rows = normalizeStarknetBlock({ block, stateUpdate })
    assertAll(rows)
    const fb = feeder.block
    assert.equal(rows.blocks[0].number, 6500)
    assert.equal(rows.blocks[0].hash, norm(fb.block_hash))
    assert.equal(rows.blocks[0].parent_hash, norm(fb.parent_block_hash))
    assert.equal(rows.blocks[0].new_root, norm(fb.state_root))
    assert.equal(rows.transactions.length, 125)
    assert.equal(rows.transactions.filter((t) => t.type === 'L1_HANDLER').length, 10)
    assert.equal(rows.transactions.filter((t) => t.type === 'INVOKE').length, 77)
    assert.equal(rows.events.length, fb.transaction_receipts.reduce((n: number, r: any) => n + r.events.length, 0))
    // L1 handler spot check
    const l1 = fb.transactions.find((t: any) => t.type === 'L1_HANDLER')
    const l1Row = rows.transactions.find((t) => t.transaction_hash === norm(l1.transaction_hash))!
    assert.equal(l1Row.contract_address, norm(l1.contract_address))
    assert.equal(l1Row.entry_point_selector, norm(l1.entry_point_selector))
    assert.equal(l1Row.nonce, BigInt(l1.nonce).toString())
    assert.deepEqual(l1Row.calldata, normList(l1.calldata))
    assert.equal(l1Row.message_hash, null)
    assert.equal(l1Row.finality_status, 'ACCEPTED_ON_L1')
    assert.equal(l1Row.execution_status, 'SUCCEEDED')
    // DEPLOY: the address comes through the receipt
    const dep = fb.transactions.find((t: any) => t.type === 'DEPLOY')
    const depRow = rows.transactions.find((t) => t.transaction_hash === norm(dep.transaction_hash))!
    assert.equal(depRow.contract_address, norm(dep.contract_address))
    assert.equal(depRow.sender_address, null)
    assert.deepEqual(depRow.constructor_calldata, normList(dep.constructor_calldata))
    // fees of pre-v3 transactions are in WEI
    const paid = fb.transaction_receipts.find((r: any) => BigInt(r.actual_fee) > 0n)
    const paidRow = rows.transactions.find((t) => t.transaction_hash === norm(paid.transaction_hash))!
    assert.deepEqual(JSON.parse(paidRow.actual_fee as string), { amount: norm(paid.actual_fee), unit: 'WEI' })
    // 7 messages to L1, with their senders
    const sent = fb.transaction_receipts.flatMap((r: any) => r.l2_to_l1_messages.map((m: any) => ({ r, m })))
    assert.equal(sent.length, 7)
    assert.equal(rows.messages.length, 7)
    for (const { r, m } of sent) {
      const row = rows.messages.find((x) => x.transaction_index === r.transaction_index && x.order === r.l2_to_l1_messages.indexOf(m))!
      assert.equal(row.from_address, norm(m.from_address))
      assert.equal(row.to_address, norm(m.to_address))
      assert.deepEqual(row.payload, normList(m.payload))
    }
    // state diff
    const d = feeder.state_update.state_diff
    const s = rows.state_updates[0]
    assert.equal(JSON.parse(s.deployed_contracts as string).length, 38)
    assert.deepEqual(JSON.parse(s.deployed_contracts as string), d.deployed_contracts.map((c: any) => ({ address: norm(c.address), class_hash: norm(c.class_hash) })))
    assert.equal(s.old_root, norm(feeder.state_update.old_root))
    assert.equal(s.deprecated_declared_classes, '[]')
    const entries = Object.values(d.storage_diffs).reduce((n: number, l: any) => n + l.length, 0)
    assert.equal(rows.storage_diffs.length, entries)
    const [addr, list] = Object.entries(d.storage_diffs)[0] as [string, any[]]
    const row = rows.storage_diffs.find((r) => r.address === norm(addr) && r.key === norm(list[0].key))!
    assert.equal(row.value, norm(list[0].value))
  })

  it('65000 (v0.11.1): DEPLOY_ACCOUNT address, nonces map', () => {
    const feeder = load(`${KATANA}/0.11.1/state_update_with_block/mainnet_65000.json.gz`)
    const rows = normalizeStarknetBlock(feederToRpc(feeder))
    assertAll(rows)
    assert.equal(rows.transactions.length, 236)
    assert.equal(rows.events.length, 814)
    assert.equal(rows.messages.length, 1)
    const da = feeder.block.transactions.filter((t: any) => t.type === 'DEPLOY_ACCOUNT')
    assert.equal(da.length, 9)
    for (const t of da) {
      const row = rows.transactions.find((r) => r.transaction_hash === norm(t.transaction_hash))!
      assert.equal(row.contract_address, norm(t.contract_address))
      assert.equal(row.version, '0x1')
    }
    const nonces = JSON.parse(rows.state_updates[0].nonces as string)
    assert.deepEqual(nonces, Object.entries(feeder.state_update.state_diff.nonces).map(([a, n]) => ({ contract_address: norm(a), nonce: norm(n as string) })))
  })

  it('550000 (v0.13.0): reverted transactions, replaced classes', () => {
    const feeder = load(`${KATANA}/0.13.0/state_update_with_block/mainnet_550000.json.gz`)
    const rows = normalizeStarknetBlock(feederToRpc(feeder))
    assertAll(rows)
    assert.equal(rows.transactions.length, 121)
    assert.equal(rows.events.length, 602)
    const reverted = feeder.block.transaction_receipts.filter((r: any) => r.execution_status === 'REVERTED')
    assert.ok(reverted.length > 0)
    for (const r of reverted) {
      const row = rows.transactions.find((t) => t.transaction_hash === norm(r.transaction_hash))!
      assert.equal(row.execution_status, 'REVERTED')
      assert.equal(row.revert_reason, r.revert_error)
    }
    const replaced = JSON.parse(rows.state_updates[0].replaced_classes as string)
    assert.equal(replaced.length, 19)
    assert.deepEqual(replaced[0], {
      contract_address: norm(feeder.state_update.state_diff.replaced_classes[0].address),
      class_hash: norm(feeder.state_update.state_diff.replaced_classes[0].class_hash),
    })
  })

  it('v3 fields: resource bounds keys, DA modes, FRI fees', () => {
    const tx = { transaction_hash: '0xabc', type: 'DEPLOY_ACCOUNT', version: '0x3', nonce: '0x0', sender_address: '0x0Dd',
      class_hash: '0x1', contract_address_salt: '0x2', constructor_calldata: [], signature: [], tip: '0x0', paymaster_data: [],
      nonce_data_availability_mode: 0, fee_data_availability_mode: 1,
      resource_bounds: { L1_GAS: { max_amount: '0x10', max_price_per_unit: '0x20' }, L2_GAS: { max_amount: '0x0', max_price_per_unit: '0x0' } } }
    const feeder = {
      block: { block_hash: '0x5', parent_block_hash: '0x4', block_number: 5, state_root: '0x6', timestamp: 1, status: 'ACCEPTED_ON_L2',
        transactions: [tx], transaction_receipts: [{ transaction_hash: '0xabc', transaction_index: 0, actual_fee: '0x99', events: [], l2_to_l1_messages: [] }] },
      state_update: { block_hash: '0x5', new_root: '0x6', old_root: '0x3', state_diff: { storage_diffs: {}, nonces: {}, deployed_contracts: [], old_declared_contracts: [], declared_classes: [], replaced_classes: [] } },
    }
    const row = normalizeStarknetBlock(feederToRpc(feeder)).transactions[0]
    assert.equal(row.contract_address, '0xdd')
    assert.equal(row.sender_address, null)
    assert.equal(row.nonce_data_availability_mode, 'L1')
    assert.equal(row.fee_data_availability_mode, 'L2')
    assert.equal(row.finality_status, 'ACCEPTED_ON_L2')
    assert.deepEqual(JSON.parse(row.actual_fee as string), { amount: '0x99', unit: 'FRI' })
    assert.deepEqual(JSON.parse(row.resource_bounds as string), { l1GasMaxAmount: '0x10', l1GasMaxPricePerUnit: '0x20', l2GasMaxAmount: '0x0', l2GasMaxPricePerUnit: '0x0' })
  })
})

describe('felt normalisation and malformed input', () => {
  const base = () => structuredClone(result(load(`${IDEALIS}/get_block_with_txs_25.json.gz`)))

  it('leading zeros, upper case and 0X prefixes are normalised everywhere', () => {
    const b = base()
    const hash = b.block_hash
    b.block_hash = '0X000' + hash.slice(2).toUpperCase()
    const t = b.transactions[0]
    t.transaction.calldata[1] = '0x0002'
    t.transaction.contract_address = '0X00' + t.transaction.contract_address.slice(2).toUpperCase()
    t.transaction.transaction_hash = '0x0' + t.transaction.transaction_hash.slice(2)
    t.receipt.actual_fee = '0x00'
    t.receipt.events = [{ from_address: '0x01', keys: ['0X0A', '0x00'], data: ['0x0000FF'] }]
    const rows = normalizeStarknetBlock({ block: b, stateUpdate: { block_hash: hash, new_root: '0x0001', old_root: '0X0', state_diff: {
      storage_diffs: [{ address: '0x00Ab', storage_entries: [{ key: '0x0', value: '0x00F' }] }], nonces: [{ contract_address: '0x0A', nonce: '0x01' }] } } })
    assert.equal(rows.blocks[0].hash, norm(hash))
    const row = rows.transactions[0]
    assert.equal(row.calldata && (row.calldata as string[])[1], '0x2')
    assert.equal(row.contract_address, norm(b.transactions[0].transaction.contract_address))
    assert.equal(row.transaction_hash, norm(b.transactions[0].receipt.transaction_hash))
    assert.deepEqual(JSON.parse(row.actual_fee as string), { amount: '0x0', unit: 'WEI' }) // bare-felt fee of old RPC
    assert.deepEqual(rows.events[0].keys, ['0xa', '0x0'])
    assert.equal(rows.events[0].key0, '0xa')
    assert.equal(rows.events[0].key2, null)
    assert.deepEqual(rows.events[0].data, ['0xff'])
    assert.equal(rows.events[0].from_address, '0x1')
    assert.equal(rows.state_updates[0].old_root, '0x0')
    assert.equal(rows.state_updates[0].nonces, '[{"contract_address":"0xa","nonce":"0x1"}]')
    assert.equal(rows.state_updates[0].deployed_contracts, null)
    assert.deepEqual(rows.storage_diffs, [{ block_number: 25, address: '0xab', key: '0x0', value: '0xf' }])
  })

  const rejects = (what: string, edit: (b: any) => StarknetBlockBundle | void, field: RegExp) =>
    it(`rejects ${what}`, () => {
      const b = base()
      const bundle = edit(b) ?? { block: b }
      assert.throws(() => normalizeStarknetBlock(bundle), (e: unknown) => e instanceof MalformedRpcData && field.test(e.message))
    })
  rejects('a non-hex felt in calldata', (b) => { b.transactions[0].transaction.calldata[2] = '12345' }, /transactions\[0\]\.transaction\.calldata\[2\]/)
  rejects('a non-hex event key', (b) => { b.transactions[0].receipt.events = [{ from_address: '0x1', keys: ['xyz'], data: [] }] }, /events\[0\]\.keys\[0\]/)
  rejects('a missing block_hash', (b) => { delete b.block_hash }, /block_hash/)
  rejects('a missing block_number', (b) => { delete b.block_number }, /block_number/)
  rejects('transactions that are not an array', (b) => { b.transactions = {} }, /transactions/)
  rejects('a receipt of another transaction', (b) => { b.transactions[1].receipt.transaction_hash = '0x1234' }, /receipt\.transaction_hash/)
  rejects('a trace of an unknown transaction', (b) => ({ block: b, traces: [{ transaction_hash: '0x77', trace_root: { type: 'INVOKE' } }] }), /traces\[0\]\.transaction_hash/)
  rejects('a non-hex felt in a state diff', (b) => ({ block: b, stateUpdate: { block_hash: b.block_hash, new_root: '0x1', old_root: '0x0', state_diff: { nonces: [{ contract_address: 'zz', nonce: '0x1' }] } } }), /state_diff\.nonces\[0\]\.contract_address/)

  it('feederToRpc rejects an answer without block', () => {
    assert.throws(() => feederToRpc({ state_update: {} }), MalformedRpcData)
  })
})
