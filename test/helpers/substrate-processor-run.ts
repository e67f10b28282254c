import { appendFileSync, readFileSync } from 'node:fs'
import { SubstrateBatchProcessor } from '@subsquid/substrate-processor'

/*
 * Runs the real `@subsquid/substrate-processor` against a gateway URL (our router) and a node's RPC
 * (the processor needs it for runtime versions and metadata; RPC data ingestion is disabled, so every
 * block, event, call and extrinsic comes from the gateway), in its own process: the processor calls
 * process.exit when its range is done. Usage:
 * `SUBSTRATE_PROCESSOR_RUN_CONFIG=<config.json> node substrate-processor-run.js` (an environment
 * variable, not an argument: a test runner may load this file, and then it must do nothing).
 *
 * Every batch the handler gets is appended to `config.out` as one JSON line `{nextHead, blocks}`;
 * each block is recorded as the processor handed it over (own fields), plus what only the
 * processor's object graph and runtime know (members starting with `_`):
 * - links it resolved: an event's `_call` / `_extrinsic` / `_stack` (emitting call and its ancestors,
 *   through `parentCall`), a call's `_parent` / `_subcalls` / `_events` / `_extrinsic`, an
 *   extrinsic's `_call` / `_subcalls` / `_events`;
 * - the runtime it attached to the block (`_runtime`: spec name and version);
 * - the args decoded with that runtime's metadata (`_decoded`: `runtime.decodeJson…RecordArguments`)
 *   and the SCALE bytes of the item re-encoded from them (`_encoded`: `Call.encode()`,
 *   `Extrinsic.encode()`, and for events the runtime's `event` type), or `_decodeError`.
 * bigints become decimal strings, byte arrays 0x hex.
 */

export interface SubstrateProcessorRunConfig {
  gateway: string
  /** Node RPC (http:// or ws://). */
  rpc: string
  from: number
  to: number
  events?: object[]
  calls?: object[]
  /** Gear requests (`addGearMessageQueued`, `addGearUserMessageSent`). */
  gearMessagesQueued?: object[]
  gearUserMessagesSent?: object[]
  includeAllBlocks?: boolean
  fields: object
  out: string
}

const configPath = process.env.SUBSTRATE_PROCESSOR_RUN_CONFIG
if (configPath) run(JSON.parse(readFileSync(configPath, 'utf8')))

const hex = (u8: Uint8Array) => '0x' + Buffer.from(u8).toString('hex')

function jsonSafe(_k: string, v: unknown): unknown {
  if (typeof v === 'bigint') return v.toString()
  if (v instanceof Uint8Array) return hex(v)
  return v
}

/** Run `f`; its result, or the error message under `_decodeError`. */
function attempt(f: () => Record<string, unknown>): Record<string, unknown> {
  try {
    return f()
  } catch (e: any) {
    return { _decodeError: String(e?.stack ?? e) }
  }
}

function recordBlock(b: any) {
  const runtime = b.header._runtime
  const header = { ...b.header, _runtime: { specName: runtime.specName, specVersion: runtime.specVersion, implName: runtime.implName, implVersion: runtime.implVersion } }
  const stack = (call: any) => {
    const out: number[][] = []
    for (let c = call; c; c = c.parentCall) out.push(c.address)
    return out
  }
  const events = b.events.map((e: any) => ({
    ...e,
    _call: e.call?.address ?? null,
    _callName: e.call?.name ?? null,
    _extrinsic: e.extrinsic?.index ?? null,
    _stack: e.call ? stack(e.call) : null,
    ...attempt(() => {
      const decoded = runtime.decodeJsonEventRecordArguments({ name: e.name, args: e.args })
      const bytes = runtime.scaleCodec.encodeToBinary(runtime.description.event, runtime.toDecodedEvent({ name: e.name, args: decoded }))
      return { _decoded: decoded ?? null, _encoded: hex(bytes) }
    }),
  }))
  const calls = b.calls.map((c: any) => ({
    ...c,
    _parent: c.parentCall?.address ?? null,
    _subcalls: c.subcalls.map((s: any) => s.address),
    _events: c.events.map((e: any) => e.index),
    _extrinsic: c.extrinsic?.index ?? null,
    ...attempt(() => ({
      _decoded: runtime.decodeJsonCallRecordArguments({ name: c.name, args: c.args }) ?? null,
      _encoded: hex(c.encode()),
    })),
  }))
  const extrinsics = b.extrinsics.map((x: any) => ({
    ...x,
    _call: x.call?.address ?? null,
    _subcalls: x.subcalls.map((s: any) => s.address),
    _events: x.events.map((e: any) => e.index),
    ...(x.call ? attempt(() => ({ _encoded: hex(x.encode()) })) : {}),
  }))
  return { header, events, calls, extrinsics }
}

function run(config: SubstrateProcessorRunConfig): void {
  const processor = new SubstrateBatchProcessor()
    .setRpcEndpoint({ url: config.rpc, rateLimit: 1000 })
    .setRpcDataIngestionSettings({ disabled: true })
    .setGateway(config.gateway)
    .setBlockRange({ from: config.from, to: config.to })
    .setFields(config.fields as any)
  for (const r of config.events ?? []) processor.addEvent(r as any)
  for (const r of config.calls ?? []) processor.addCall(r as any)
  for (const r of config.gearMessagesQueued ?? []) processor.addGearMessageQueued(r as any)
  for (const r of config.gearUserMessagesSent ?? []) processor.addGearUserMessageSent(r as any)
  if (config.includeAllBlocks) processor.includeAllBlocks()

  const database = {
    supportsHotBlocks: false as const,
    async connect() {
      return { height: -1, hash: '0x' }
    },
    async transact(_info: unknown, cb: (store: object) => Promise<void>) {
      await cb({})
    },
  }

  processor.run(database, async (ctx) => {
    const line = JSON.stringify({ nextHead: ctx.blocks.at(-1)?.header.height, blocks: ctx.blocks.map(recordBlock) }, jsonSafe)
    appendFileSync(config.out, line + '\n')
  })
}
