import { cp, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { readDatasetMeta, scanLocalChunks } from '../src/chunks/layout.js'
import { Compactor } from '../src/compact/compactor.js'
import { generateDataset } from '../src/bench-data/generate.js'
import { evmFamily } from '../src/families/evm.js'
import { FolderTarget } from '../src/ingest/target.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { ms, timeInterleaved } from './lib/measure.js'
import { machine, note, printTable } from './lib/report.js'

/*
 * `bench compact`: a fresh tail of N one-block chunks (mainnet-like blocks, src/bench-data/) as an
 * ingest flushing at every poll writes it, queried over its whole range before and after compaction
 * (two standalone workers over the two folders, queries interleaved), and the time compaction took.
 */

export interface CompactBenchOptions {
  blocks: number
  fanout: number
  runs: number
}

const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'

const QUERIES: [string, object][] = [
  ['headers', { includeAllBlocks: true, fields: { block: { number: true, hash: true, timestamp: true } } }],
  ['Transfer logs + tx', { logs: [{ topic0: [TRANSFER], transaction: true }], fields: { log: { address: true, topics: true, data: true }, transaction: { hash: true, from: true } } }],
  ['all tx', { transactions: [{}], fields: { transaction: { hash: true, from: true, to: true, value: true } } }],
]

async function startWorker(root: string): Promise<WorkerServer> {
  const w = new WorkerServer({
    storage: new LocalStorage(root), heartbeatMs: 60_000, dropGraceMs: 60_000, concurrency: 1, queue: 4, queueTimeoutMs: 60_000,
    budgets: { sizeBytes: 1 << 30, timeMs: 600_000 },
  })
  await w.start('127.0.0.1', 0)
  return w
}

export async function runCompact(o: CompactBenchOptions): Promise<void> {
  const tmp = await mkdtemp(path.join(tmpdir(), 'ba-bench-compact-'))
  try {
    const small = path.join(tmp, 'small')
    await generateDataset({ out: small, blocks: o.blocks, chunkBlocks: 1, force: true })
    const merged = path.join(tmp, 'merged')
    await cp(small, merged, { recursive: true })
    const meta = (await readDatasetMeta(small))!
    const target = new FolderTarget(merged)
    await target.open(meta)
    const t0 = performance.now()
    const r = await new Compactor(target, evmFamily, { dataset: 'bench', fanout: o.fanout, chunkBlocks: 10_000, chunkBytes: 256 * 1024 * 1024, graceMs: 0 }).catchUp()
    const compactMs = performance.now() - t0
    await target.close()
    const before = (await scanLocalChunks(small)).length
    const after = (await scanLocalChunks(merged)).length

    const a = await startWorker(small)
    const b = await startWorker(merged)
    const rows: (string | number)[][] = []
    try {
      const ds = meta.name
      for (const [label, q] of QUERIES) {
        const body = JSON.stringify({ ...q, fromBlock: 0, toBlock: o.blocks - 1 })
        const ask = (w: WorkerServer) => async () => {
          const res = await fetch(`${w.url}/datasets/${ds}/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
          const text = await res.text()
          if (res.status !== 200) throw new Error(`${label}: ${res.status} ${text.slice(0, 200)}`)
          return text
        }
        if ((await ask(a)()) !== (await ask(b)())) throw new Error(`${label}: the answers differ`)
        const [ta, tb] = await timeInterleaved([ask(a), ask(b)], o.runs)
        rows.push([label, ms(ta.median), ms(tb.median), (ta.median / tb.median).toFixed(1) + '×'])
      }
    } finally {
      await a.stop()
      await b.stop()
    }
    note(`machine: ${machine()}`)
    note(`${o.blocks} one-block chunks → ${after} chunks (fanout ${o.fanout}): ${r.merged} merges in ${ms(compactMs)} ms`)
    printTable(`query over the fresh tail of ${o.blocks} blocks, median of ${o.runs} (ms)`, ['query', `${before} chunks`, `${after} chunks`, 'ratio'], rows)
  } finally {
    await rm(tmp, { recursive: true, force: true })
  }
}
