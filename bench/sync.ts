import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ArchiveClient } from '../src/client/archive-client.js'
import { ensureDataset } from './lib/dataset.js'
import { fmtRate } from './lib/measure.js'
import { deploy } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'
import { shapeByName } from './lib/shapes.js'

export interface SyncBenchOptions {
  blocks: number
  workers: number
  shape: string[]
  parallel: number[]
  sdk: boolean
  compression: string
  /** Chunk sources to compare side by side: Parquet read in place, and/or the workers' local forms. */
  storage: string[]
}

const itemCount = (block: Record<string, unknown>) =>
  Object.entries(block).reduce((n, [k, v]) => (k !== 'header' && Array.isArray(v) ? n + v.length : n), 0)

/**
 * `bench sync`: a client walking the whole dataset range through router + worker processes (real
 * HTTP; compressed as `--compression` says), the way an indexer syncs: blocks of range per second and items per second.
 */
export async function runSync(o: SyncBenchOptions): Promise<void> {
  const { dir } = await ensureDataset(o.blocks)
  const rows: string[][] = []
  const forms = await mkdtemp(path.join(tmpdir(), 'ba-bench-forms-'))
  try {
    for (const storage of o.storage) {
      const t0 = performance.now()
      const d = await deploy(dir, o.workers, {
        compression: o.compression,
        localForms: storage === 'local' ? (i) => path.join(forms, `w${i}`) : undefined,
      })
      if (storage === 'local') console.log(`local forms built in ${((performance.now() - t0) / 1000).toFixed(1)} s (router and workers started, chunks copied)`)
      try {
        await syncAll(o, d.base, dir, storage, rows)
      } finally {
        await d.stop()
      }
    }
  } finally {
    await rm(forms, { recursive: true, force: true })
  }
  printTable(`full-range sync of ${o.blocks} blocks`, ['query', 'chunks read from', 'client', 'answers', 'blocks returned', 'items', 'time', 'range blocks/s', 'items/s'], rows)
}

async function syncAll(o: SyncBenchOptions, base: string, dir: string, storage: string, rows: string[][]): Promise<void> {
  const from = storage === 'local' ? 'local forms' : 'Parquet'
  {
    const client = new ArchiveClient(base)
    const height = await client.getHeight()
    console.log(`machine: ${machine()}`)
    console.log(`dataset ${dir}: blocks 0–${height}; router + ${o.workers} worker processes (default settings, --compression ${o.compression}), chunks read from ${from}`)
    for (const name of o.shape) {
      const shape = shapeByName(name)
      const { fromBlock: _f, toBlock: _t, ...query } = shape.query(0, height)
      // The first pass builds what workers keep per chunk for the next queries (chunk summaries of
      // the filtered columns, boundary headers): reported apart, the timed passes come after it.
      // The router spreads the passes over the workers, so there is one first pass per worker; the
      // first of them is reported.
      const firsts = Array.from({ length: o.workers }, (_, i) => ({ parallel: 1, label: i === 0 ? 'our client, first pass' : undefined }))
      const passes = [...firsts, ...o.parallel.map((p) => ({ parallel: p, label: `our client, ${p} in flight` }))]
      for (const { parallel, label } of passes) {
        let blocks = 0
        let items = 0
        let answers = 0
        const t0 = performance.now()
        for await (const batch of client.batches(query, { fromBlock: 0, toBlock: height, parallel })) {
          answers++
          blocks += batch.blocks.length
          for (const b of batch.blocks) items += itemCount(b as any)
        }
        const wall = performance.now() - t0
        if (label) rows.push([`${name}`, from, label, String(answers), String(blocks), String(items), `${(wall / 1000).toFixed(3)} s`,
          fmtRate(height + 1, wall), fmtRate(items, wall)])
      }
      if (o.sdk) {
        const r = await sdkSync(base, height, name)
        rows.push([name, from, '@subsquid/evm-processor 1.27.3', '', String(r.blocks), String(r.items), `${(r.ms / 1000).toFixed(2)} s`,
          fmtRate(height + 1, r.ms), fmtRate(r.items, r.ms)])
      }
    }
  }
}

/** Run the real SDK processor over the range in a child process (it calls process.exit itself). */
function sdkSync(base: string, to: number, shape: string): Promise<{ blocks: number; items: number; ms: number }> {
  const script = path.join(path.dirname(fileURLToPath(import.meta.url)), 'lib', 'sdk-sync.js')
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, base, String(to), shape], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout!.on('data', (d) => (out += d))
    child.on('exit', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('RESULT '))
      if (!line) return reject(new Error(`SDK run exited with ${code} without a result:\n${out.slice(-2000)}`))
      resolve(JSON.parse(line.slice(7)))
    })
  })
}
