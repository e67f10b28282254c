import { appendFileSync, readFileSync } from 'node:fs'
import { EvmBatchProcessor } from '@subsquid/evm-processor'

/*
 * Runs the real `@subsquid/evm-processor` against a gateway URL, in its own process (the processor
 * calls process.exit when its range is done). Usage: `PROCESSOR_RUN_CONFIG=<config.json> node processor-run.js`
 * (an environment variable, not an argument: `node --test dist/test/` also loads this file, and
 * then it must do nothing).
 * Every batch the handler gets is appended to `config.out` as one JSON line:
 * `{nextHead, blocks: [...]}` with the processor's block objects (bigints as decimal strings, plus
 * `_tx`: the transactionIndex of the transaction an item was linked to, if any).
 */

export interface ProcessorRunConfig {
  gateway: string
  from: number
  to?: number
  /** What Database.connect returns: a stored height and hash to resume from. */
  resume?: { height: number; hash: string }
  logs?: object[]
  transactions?: object[]
  traces?: object[]
  stateDiffs?: object[]
  includeAllBlocks?: boolean
  fields: object
  out: string
}

const configPath = process.env.PROCESSOR_RUN_CONFIG
if (configPath) run(JSON.parse(readFileSync(configPath, 'utf8')))

/** Own fields of an entity, plus the transaction it is linked to. */
function plain(item: any): object {
  const out: Record<string, unknown> = { ...item }
  const tx = 'transaction' in item ? item.transaction : undefined
  if (tx !== undefined) out._tx = tx.transactionIndex
  return out
}

function run(config: ProcessorRunConfig): void {
  const processor = new EvmBatchProcessor()
    .setGateway(config.gateway)
    .setBlockRange({ from: config.from, ...(config.to === undefined ? {} : { to: config.to }) })
    .setFields(config.fields as any)
  for (const r of config.logs ?? []) processor.addLog(r as any)
  for (const r of config.transactions ?? []) processor.addTransaction(r as any)
  for (const r of config.traces ?? []) processor.addTrace(r as any)
  for (const r of config.stateDiffs ?? []) processor.addStateDiff(r as any)
  if (config.includeAllBlocks) processor.includeAllBlocks()

  const database = {
    supportsHotBlocks: false as const,
    async connect() {
      return config.resume ?? { height: -1, hash: '0x' }
    },
    async transact(_info: unknown, cb: (store: object) => Promise<void>) {
      await cb({})
    },
  }

  processor.run(database, async (ctx) => {
    const blocks = ctx.blocks.map((b: any) => ({
      header: { ...b.header },
      transactions: b.transactions.map(plain),
      logs: b.logs.map(plain),
      traces: b.traces.map(plain),
      stateDiffs: b.stateDiffs.map(plain),
    }))
    const line = JSON.stringify({ nextHead: ctx.blocks.at(-1)?.header.height, blocks }, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))
    appendFileSync(config.out, line + '\n')
  })
}
