import { writeSync } from 'node:fs'
import { createRequire } from 'node:module'
import { EvmBatchProcessor } from '@subsquid/evm-processor'
import { shapeByName } from './shapes.js'

/*
 * Child process of `bench sync --sdk`: the real @subsquid/evm-processor walking [0, to] of the
 * dataset at <base> with the requests and fields of a benchmark shape. Prints `RESULT {json}`
 * (blocks, items, wall ms and the process's CPU ms from the start to the last batch) when the
 * processor exits after the range end.
 * Usage: node sdk-sync.js <datasetBaseUrl> <toBlock> <shape> [preload]
 * With `preload`, the SDK's HTTP library (node-fetch, which @subsquid/http-client imports on its
 * first request: 31–37 ms here) is loaded before the timer starts, through the SDK's own loader.
 */

const [base, toArg, shapeName, mode] = process.argv.slice(2)
if (mode === 'preload') await createRequire(import.meta.url)('@subsquid/http-client/lib/request.js').nodeFetch.load()
const to = Number(toArg)
const q = shapeByName(shapeName).query(0, to) as any
const range = { from: 0, to }

let p = new EvmBatchProcessor().setGateway(base).setBlockRange(range).setFields(q.fields ?? {}) as EvmBatchProcessor<any>
for (const r of q.logs ?? []) p = p.addLog({ ...r, range })
for (const r of q.transactions ?? []) p = p.addTransaction({ ...r, range })
for (const r of q.traces ?? []) p = p.addTrace({ ...r, range })
for (const r of q.stateDiffs ?? []) p = p.addStateDiff({ ...r, range })
if (q.includeAllBlocks) p = p.includeAllBlocks(range)

let blocks = 0
let items = 0
let t0 = 0
let t1 = 0
// CPU of this process between the start and the last batch: the SDK's share of a pass.
const cpuMs = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
let cpu0 = 0
let cpu1 = 0
// The processor calls process.exit(0) after the range end; report then (fd writes are synchronous).
process.on('exit', (code) => {
  if (code === 0) writeSync(1, 'RESULT ' + JSON.stringify({ blocks, items, ms: t1 - t0, cpuMs: cpu1 - cpu0 }) + '\n')
})
p.run(
  {
    supportsHotBlocks: false,
    connect: async () => {
      t0 = performance.now()
      cpu0 = cpuMs()
      return { height: -1, hash: '0x' }
    },
    transact: async (_info: unknown, cb: (store: unknown) => Promise<void>) => cb({}),
  },
  async (ctx) => {
    for (const b of ctx.blocks) {
      blocks++
      items += b.logs.length + b.transactions.length + b.traces.length + b.stateDiffs.length
    }
    t1 = performance.now()
    cpu1 = cpuMs()
  },
)
