import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks } from '../src/chunks/layout.js'
import { evmFamily } from '../src/families/evm.js'
import { columnsOf, EVM_COLUMNS, type EvmSpooledTable } from '../src/ingest/evm/columns.js'
import { normalizeEvmBlock } from '../src/ingest/evm/normalize.js'
import { runIngest } from '../src/ingest/loop.js'
import { loadRecordedChain } from '../src/ingest/recorded.js'
import { ReplayServer, type ReplayOptions } from '../src/ingest/replay.js'
import { BadRpcAnswer } from '../src/ingest/source.js'
import { log } from '../src/log.js'
import { tempDir } from './helpers/dataset.js'

/*
 * The column map both EVM normalisers are generated from (src/ingest/evm/columns.ts): it covers
 * every declared column, the JS rows follow the declaration, and a value its conversion rejects
 * stops the ingest with the same message naming the block, the method and the field, whether the
 * block goes through the JS normaliser or through the spool and the SQL one. (That both give the
 * same rows is test/ingest-sql-normalizer.test.ts.)
 */

const eth = loadRecordedChain('ethereum')
const light = eth.filter((b) => b.number === 1000000 || b.number === 4369999) // blocks 2k+1 of the replayed chain have 22 transactions
const TABLES = Object.keys(EVM_COLUMNS) as EvmSpooledTable[]
const declared = (table: string) => evmFamily.tables.find((t) => t.name === table)!.columns.map((c) => c.name)
const hex = (n: number) => '0x' + n.toString(16)

describe('EVM column map: one source for the JS and the SQL normaliser', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let level: string
  let n = 0
  before(async () => {
    level = log.level
    log.level = 'error'
    tmp = await tempDir('ba-evm-columns-')
  })
  after(async () => {
    log.level = level
    await tmp?.cleanup()
  })

  it('maps every declared column of blocks, transactions and logs; the JS rows have exactly those columns, in declared order', () => {
    for (const table of TABLES) assert.deepEqual(columnsOf(table).map(([name]) => name), declared(table))
    const b = eth.find((x) => x.number === 18500000)!
    const rows = normalizeEvmBlock({ block: b.block, receipts: b.receipts })
    for (const table of TABLES) {
      assert.ok(rows[table].length > 0, table)
      for (const row of rows[table]) assert.deepEqual(Object.keys(row), declared(table), table)
    }
    assert.equal(rows.transactions[0].sighash, (rows.transactions[0].input as string).slice(0, 10))
    assert.equal(rows.logs[0].data_size, (rows.logs[0].data as string).length)
  })

  /** Ingest blocks 0..19 from a node whose answers `mutate` changes; the error, and the last block written. */
  const attempt = async (normalizer: 'sql' | 'js', mutate: ReplayOptions['mutate']) => {
    const s = new ReplayServer(light, { repeat: { times: 20, seed: 'evm-columns' }, mutate })
    await s.start()
    const out = path.join(tmp.dir, `ds${++n}`)
    try {
      const error = await runIngest({
        rpc: s.url, dataset: 'eth', out, to: 19, finality: 'latest', chunkBlocks: 5, batchSize: 5, workers: 0, backoffMs: 5,
        progress: 'none', normalizer,
      }).then(() => undefined, (e: Error) => e)
      const chunks = await listLocalChunks(out).catch(() => [])
      return { error, last: chunks.at(-1)?.last ?? -1 }
    } finally {
      await s.close()
    }
  }

  const atBlock13 = (method: string, change: (result: any) => void): ReplayOptions['mutate'] => (m, params, result: any) => {
    if (m !== method || params[0] !== hex(13)) return result
    const copy = structuredClone(result)
    change(copy)
    return copy
  }

  const cases: { what: string; mutate: ReplayOptions['mutate']; error: RegExp }[] = [
    {
      what: 'a transaction nonce that is not a quantity (u64)',
      mutate: atBlock13('eth_getBlockByNumber', (b) => (b.transactions[3].nonce = 'zz')),
      error: /^block 13: eth_getBlockByNumber returned malformed data: transaction\.nonce: expected a quantity, got "zz"$/,
    },
    {
      what: 'a block timestamp beyond 2^53 (int)',
      mutate: atBlock13('eth_getBlockByNumber', (b) => (b.timestamp = '0xfffffffffffffffff')),
      error: /^block 13: eth_getBlockByNumber returned malformed data: block\.timestamp: "0xfffffffffffffffff" is not a safe integer$/,
    },
    {
      what: 'a receipt gasUsed without its 0x prefix (hex)',
      mutate: atBlock13('eth_getBlockReceipts', (r) => (r[2].gasUsed = '5208')),
      error: /^block 13: eth_getBlockReceipts returned malformed data: receipt\.gasUsed: expected a 0x-prefixed hex string, got "5208"$/,
    },
    {
      what: 'a log address that is a JSON number (hex)',
      mutate: atBlock13('eth_getBlockReceipts', (r) => (r.find((x: any) => x.logs.length > 0).logs[0].address = 12)),
      error: /^block 13: eth_getBlockReceipts returned malformed data: log\.address: expected a 0x-prefixed hex string, got 12$/,
    },
  ]
  for (const c of cases) {
    for (const normalizer of ['sql', 'js'] as const) {
      it(`${c.what} stops the ingest naming the field (--normalizer ${normalizer}); nothing of block 13 is written`, async () => {
        const { error, last } = await attempt(normalizer, c.mutate)
        assert.ok(error instanceof BadRpcAnswer, String(error))
        assert.match(error.message, c.error)
        assert.ok(last < 13, `last block written: ${last}`)
      })
    }
  }
})
