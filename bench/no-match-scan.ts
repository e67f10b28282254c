import { cp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { listLocalChunks, type ChunkMeta } from '../src/chunks/layout.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { anvilRecords, writeDataset } from '../test/helpers/dataset.js'
import { machine, printTable } from './lib/report.js'

/*
 * `bench scaling --part no-match`: a worker's first pass of a query matching nothing over chunks it
 * has never looked at, with the chunk summaries the ingest writes into meta.json and without them
 * (the worker then builds them by reading each chunk's filtered column). Recorded anvil blocks, one
 * block per chunk (the per-chunk cost is what is measured), in `copies` datasets in fresh folders;
 * the worker runs in this process and is asked over HTTP, as a router would send a client.
 */

export interface NoMatchScanOptions {
  copies: number
  /** Passes after the first, of which the median is reported. */
  warmPasses: number
}

const NO_SUCH_TOPIC = '0x' + 'ab'.repeat(32)

export async function runNoMatchScan(o: NoMatchScanOptions): Promise<void> {
  console.log(`machine: ${machine()} (shared with other jobs while measured: figures are inflated)`)
  const root = path.join(os.tmpdir(), 'block-archive-bench', `no-match-${process.pid}`)
  const master = path.join(root, 'master')
  const records = (await anvilRecords()).slice(0, 64)
  await writeDataset(master, 'anvil', records, 1)
  const chunks = (await listLocalChunks(master)).length
  const rows: string[][] = []
  try {
    for (const variant of ['summaries in meta.json', 'no summaries written'] as const) {
      const dir = path.join(root, variant === 'no summaries written' ? 'without' : 'with')
      for (let k = 0; k < o.copies; k++) {
        const ds = path.join(dir, `anvil-${k}`)
        await cp(master, ds, { recursive: true })
        await writeFile(path.join(ds, 'dataset.json'), JSON.stringify({ name: `anvil-${k}`, family: 'evm' }))
        if (variant === 'no summaries written') {
          for (const c of await listLocalChunks(ds)) {
            const file = path.join(ds, c.path, 'meta.json')
            const { summaries: _s, ...rest } = JSON.parse(await readFile(file, 'utf8')) as ChunkMeta
            await writeFile(file, JSON.stringify(rest))
          }
        }
      }
      const worker = new WorkerServer({
        storage: new LocalStorage(dir), heartbeatMs: 60_000, dropGraceMs: 60_000, concurrency: 2, queue: 8, queueTimeoutMs: 60_000,
      })
      await worker.start('127.0.0.1', 0)
      try {
        const first = Number(records[0].block.number)
        const last = Number(records.at(-1)!.block.number)
        const pass = async () => {
          const t0 = performance.now()
          const cpu0 = process.cpuUsage()
          let requests = 0
          for (let k = 0; k < o.copies; k++) {
            for (let from = first; from <= last; ) {
              const res = await fetch(`${worker.url}/datasets/anvil-${k}/query`, {
                method: 'POST',
                headers: { 'content-type': 'application/json' },
                body: JSON.stringify({ fromBlock: from, toBlock: last, logs: [{ topic0: [NO_SUCH_TOPIC] }], fields: { log: { address: true } } }),
              })
              const blocks = (await res.json()) as { header: { number: number } }[]
              if (res.status !== 200 || !blocks.length) throw new Error(`status ${res.status}: ${JSON.stringify(blocks).slice(0, 200)}`)
              from = blocks.at(-1)!.header.number + 1
              requests++
            }
          }
          const cpu = process.cpuUsage(cpu0)
          return { ms: performance.now() - t0, cpuMs: (cpu.user + cpu.system) / 1000, requests }
        }
        const cold = await pass()
        // Warm passes: the median of several (one pass of a few ms is noise on a shared machine).
        const warms: Awaited<ReturnType<typeof pass>>[] = []
        for (let i = 0; i < o.warmPasses; i++) warms.push(await pass())
        const warm = warms.sort((a, b) => a.ms - b.ms)[Math.floor(warms.length / 2)]
        const n = chunks * o.copies
        const blocks = (last - first + 1) * o.copies
        const cpuPerChunk = (p: typeof cold) => `${((p.cpuMs * 1000) / n).toFixed(0)} µs`
        rows.push([variant, n.toLocaleString('en'), String(cold.requests), `${cold.ms.toFixed(0)} ms`, (n / (cold.ms / 1000)).toFixed(0), (blocks / (cold.ms / 1000)).toFixed(0), cpuPerChunk(cold), (n / (warm.ms / 1000)).toFixed(0), cpuPerChunk(warm)])
      } finally {
        await worker.stop()
      }
    }
  } finally {
    await rm(root, { recursive: true, force: true })
  }
  printTable(`a no-match query (a topic0 no chunk holds), first pass of a worker over ${chunks} one-block chunks × ${o.copies} datasets`,
    ['chunks', 'chunks', 'requests', 'first pass', 'chunks/s, first pass', 'blocks/s, first pass', 'CPU per chunk, first pass', 'chunks/s, later passes (median)', 'CPU per chunk, that pass'], rows)
  console.log('CPU is the whole process\'s (the worker, DuckDB\'s threads and the HTTP client asking it), divided by the chunks passed over.')
}
