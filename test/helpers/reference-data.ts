import assert from 'node:assert/strict'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { nextTop, type ChunkRef, type DatasetMeta } from '../../src/chunks/layout.js'
import { ChunkBuilder } from '../../src/chunks/writer.js'
import { evmFamily } from '../../src/families/evm.js'
import { bundleTables, normalizeEvmBlock, type EvmBlockBundle } from '../../src/ingest/evm/normalize.js'
import { postJson } from './http.js'
import { KINDS, REQUEST_KEY, compareAddress, fullQuery, type FullBlock, type Kind, type Obj } from './reference-evm.js'
import { REPO_ROOT } from './dataset.js'

/*
 * Datasets for the reference tests: recorded Ethereum mainnet blocks (fixtures/evm/squid-sdk) as a
 * sparse dataset, and a check that a "full" answer of the worker agrees with the rows the
 * normaliser made from the source, so the reference evaluator starts from trustworthy data.
 */

async function gzJson(rel: string): Promise<any> {
  return JSON.parse(gunzipSync(await readFile(path.join(REPO_ROOT, rel))).toString('utf8'))
}

/**
 * Ethereum 18000000 (block + receipts, no traces) and 18500000 (block + receipts + its own parity
 * `trace_block`, recorded from a Nethermind node).
 */
export async function mainnetBundles(): Promise<EvmBlockBundle[]> {
  const b18 = await gzJson('fixtures/evm/squid-sdk/ethereum/18000000/block.json.gz')
  const r18 = await gzJson('fixtures/evm/squid-sdk/ethereum/18000000/receipts.json.gz')
  const b185 = await gzJson('fixtures/evm/squid-sdk/ethereum/18500000/block.json.gz')
  const r185 = await gzJson('fixtures/evm/squid-sdk/ethereum/18500000/receipts.json.gz')
  const t185 = (await gzJson('fixtures/evm/nethermind-idealis/trace_block_18_500_000.json.gz')).result
  return [
    { block: b18, receipts: r18 },
    { block: b185, receipts: r185, traces: t185 },
  ]
}

/** Write an EVM dataset whose chunks hold the given bundles (each chunk's tables from its first bundle). */
export async function writeBundleDataset(dir: string, name: string, chunks: EvmBlockBundle[][]): Promise<ChunkRef[]> {
  await mkdir(dir, { recursive: true })
  const meta: DatasetMeta = { name, family: 'evm' }
  await writeFile(path.join(dir, 'dataset.json'), JSON.stringify(meta))
  const refs: ChunkRef[] = []
  for (const bundles of chunks) {
    const builder = new ChunkBuilder(evmFamily, dir, bundleTables(bundles[0]))
    for (const b of bundles) {
      const rows = normalizeEvmBlock(b)
      const header = rows.blocks[0]
      await builder.addBlock(header.number as number, header.hash as string, header.parent_hash as string, rows)
    }
    refs.push(await builder.finish(nextTop(refs, builder.first, 500)))
  }
  return refs
}

/** POST the full query and return its blocks (status 200 asserted). */
/**
 * POST the full query and return its blocks (status 200 asserted). `kinds`: the item kinds the data
 * has in this range; the others are set to `[]`.
 */
export async function fetchFull(queryUrl: string, fromBlock: number, toBlock?: number, kinds: readonly Kind[] = KINDS): Promise<FullBlock[]> {
  const res = await postJson(queryUrl, fullQuery(fromBlock, toBlock, kinds))
  assert.equal(res.status, 200, res.text.slice(0, 500))
  const blocks = JSON.parse(res.text) as FullBlock[]
  for (const b of blocks) {
    for (const k of KINDS) {
      const key = REQUEST_KEY[k]
      if (kinds.includes(k)) assert.ok(Array.isArray(b[key]), `block ${b.header.number}: no ${key} array`)
      else {
        assert.equal(b[key], undefined, `block ${b.header.number}: ${key} present but not asked for`)
        b[key] = []
      }
    }
  }
  return blocks
}

const qty = (v: unknown) => (v === null || v === undefined ? null : BigInt(v as any))

/**
 * The full answer holds exactly the source's blocks and items, in primary-key order, with the values
 * every filter and relation of the reference evaluator reads.
 */
export function checkFullAgainstSource(full: FullBlock[], bundles: EvmBlockBundle[]): void {
  assert.deepEqual(
    full.map((b) => b.header.number),
    bundles.map((b) => parseInt(b.block.number, 16)),
    'the full answer does not hold every source block',
  )
  for (const [i, bundle] of bundles.entries()) {
    const rows = normalizeEvmBlock(bundle)
    const b = full[i]
    const n = b.header.number
    const h = rows.blocks[0]
    assert.deepEqual([b.header.hash, b.header.parentHash, b.header.timestamp], [h.hash, h.parent_hash, h.timestamp], `block ${n} header`)

    const txs = [...rows.transactions].sort((a: any, c: any) => a.transaction_index - c.transaction_index)
    assert.deepEqual(
      b.transactions.map((t) => [t.transactionIndex, t.hash, t.from, t.to, t.sighash, qty(t.nonce), t.type, t.status]),
      txs.map((t: any) => [t.transaction_index, t.hash, t.from, t.to, t.sighash, qty(t.nonce), t.type, t.status]),
      `block ${n} transactions`,
    )
    const logs = [...rows.logs].sort((a: any, c: any) => a.log_index - c.log_index)
    assert.deepEqual(
      b.logs.map((l) => [l.logIndex, l.transactionIndex, l.address, l.topics]),
      logs.map((l: any) => [l.log_index, l.transaction_index, l.address, [l.topic0, l.topic1, l.topic2, l.topic3].filter((t) => t != null)]),
      `block ${n} logs`,
    )
    const traces = [...(rows.traces ?? [])].sort(
      (a: any, c: any) => a.transaction_index - c.transaction_index || compareAddress(a.trace_address, c.trace_address),
    )
    const actionOf = (t: Obj, key: string) => t.action?.[key] ?? null
    assert.deepEqual(
      b.traces.map((t) => [
        t.transactionIndex, t.traceAddress, t.type,
        t.type === 'create' ? actionOf(t, 'from') : null,
        t.type === 'create' ? (t.result?.address ?? null) : null,
        t.type === 'call' ? actionOf(t, 'from') : null,
        t.type === 'call' ? actionOf(t, 'to') : null,
        t.type === 'call' ? actionOf(t, 'sighash') : null,
        t.type === 'call' ? actionOf(t, 'callType') : null,
        t.type === 'call' ? actionOf(t, 'type') : null,
        qty(t.type === 'call' || t.type === 'create' || t.type === 'reward' ? actionOf(t, 'value') : null),
        t.type === 'suicide' ? actionOf(t, 'address') : null,
        t.type === 'suicide' ? actionOf(t, 'refundAddress') : null,
        qty(t.type === 'suicide' ? actionOf(t, 'balance') : null),
        t.type === 'reward' ? actionOf(t, 'author') : null,
      ]),
      traces.map((t: any) => [
        t.transaction_index, t.trace_address, t.type,
        t.create_from ?? null, t.create_result_address ?? null,
        t.call_from ?? null, t.call_to ?? null, t.call_sighash ?? null, t.call_type ?? null, t.call_type ?? null,
        qty(t.call_value ?? t.create_value ?? t.reward_value),
        t.suicide_address ?? null, t.suicide_refund_address ?? null, qty(t.suicide_balance),
        t.reward_author ?? null,
      ]),
      `block ${n} traces`,
    )
    const diffs = [...(rows.statediffs ?? [])].sort(
      (a: any, c: any) => a.transaction_index - c.transaction_index || (a.address < c.address ? -1 : a.address > c.address ? 1 : a.key < c.key ? -1 : a.key > c.key ? 1 : 0),
    )
    assert.deepEqual(
      b.stateDiffs.map((d) => [d.transactionIndex, d.address, d.key, d.kind, d.prev, d.next]),
      diffs.map((d: any) => [d.transaction_index, d.address, d.key, d.kind, d.prev, d.next]),
      `block ${n} state diffs`,
    )
  }
}
