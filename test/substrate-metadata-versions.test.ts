import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, it } from 'node:test'
import { gunzipSync } from 'node:zlib'
import { Metadata, TypeRegistry } from '@polkadot/types'
import { hexToU8a, u8aConcat, u8aToHex } from '@polkadot/util'
import { JsonCodec } from '@subsquid/scale-codec'
import { setGearProgramId } from '@subsquid/substrate-data/lib/extension/gear.js'
import { decodeEvents } from '@subsquid/substrate-data/lib/parsing/event.js'
import { metadataVersion, substrateRuntime, UnsupportedMetadata } from '../src/ingest/substrate/rpc/metadata.js'
import { loadRecordedSubstrate, SubstrateReplayServer } from '../src/ingest/substrate/rpc/replay.js'
import { REPO_ROOT } from './helpers/dataset.js'

/*
 * Runtime metadata across versions, decoded the way the Substrate node source decodes blocks
 * (src/ingest/substrate/rpc/metadata.ts → @subsquid/substrate-runtime, events by
 * @subsquid/substrate-data). Real Vara metadata of spec 160 (V14: `UserMessageSent.message` is a
 * `StoredMessage` whose details are `MessageDetails::Reply { reply_to, status_code }`), spec 1310
 * (V14: `UserMessage` with `ReplyDetails { to, code: ReplyCode }`) and spec 11000 (V15, what Vara's
 * nodes serve today: `ActorId` instead of `ProgramId`). The reference values are the
 * Gear.MessageQueued / Gear.UserMessageSent rows of a real Gear indexer's database (the gear-js
 * IDEA explorer dump): each version's System.Events bytes are encoded from them by @polkadot/types
 * (an independent encoder reading the same metadata) and must decode back to them. Polkadot's
 * metadata V15 decodes; its V16 is refused with an error naming the version, also by the ingest of a
 * node that serves it (a recorded chain served with that metadata).
 */

const FIX = path.join(REPO_ROOT, 'fixtures/substrate')
const metadataBytes = (file: string) => gunzipSync(readFileSync(path.join(FIX, file)))

/** The rows of one `COPY … FROM stdin` block of a pg_dump, by column name (`\N` → null, `\\x..` → 0x..). */
function copyRows(sql: string, table: string): Record<string, string | null>[] {
  const start = sql.indexOf(`COPY ${table} (`)
  assert.ok(start >= 0, `no COPY of ${table}`)
  const header = sql.slice(start, sql.indexOf('\n', start))
  const columns = /\(([^)]*)\)/.exec(header)![1].split(', ').map((c) => c.replace(/"/g, ''))
  const body = sql.slice(start + header.length + 1, sql.indexOf('\n\\.\n', start))
  return body.split('\n').map((line) => {
    const cells = line.split('\t')
    return Object.fromEntries(columns.map((c, i) => [c, cells[i] === '\\N' ? null : cells[i].replace(/^\\\\x/, '0x')]))
  })
}

const dump = gunzipSync(readFileSync(path.join(FIX, 'gear/gear-js/idea/gear/explorer/dump.sql.gz'))).toString('utf8')
const toProgram = copyRows(dump, 'public.message_to_program')
const fromProgram = copyRows(dump, 'public.message_from_program')

/** Names of the variants along an enum value, as substrate-runtime decodes it (`{__kind, value}`). */
function kinds(v: any): string[] {
  const out: string[] = []
  while (v && typeof v === 'object' && '__kind' in v) {
    out.push(String(v.__kind).toLowerCase())
    v = v.value
  }
  return out
}

/** The same for @polkadot/types' JSON of an enum (`{error: {execution: 'RanOutOfGas'}}`). */
function jsonKinds(v: any): string[] {
  const out: string[] = []
  while (v != null) {
    if (typeof v === 'string') return [...out, v.toLowerCase()]
    const [k] = Object.keys(v)
    out.push(k.toLowerCase())
    v = v[k]
  }
  return out
}

/** The indexer's `entry` column: the message's entry point. */
const ENTRY: Record<string, string> = { 0: 'Init', 1: 'Handle' }

const VERSIONS = [
  { file: 'gear/metadata/vara-160.scale.gz', spec: 160, metadata: 14, details: 'MessageDetails' },
  { file: 'gear/metadata/vara-1310.scale.gz', spec: 1310, metadata: 14, details: 'ReplyDetails' },
  { file: 'gear/metadata/vara-11000.scale.gz', spec: 11000, metadata: 15, details: 'ReplyDetails' },
] as const

describe('Substrate metadata across versions: Vara 160 / 1310 / 11000 Gear events, Polkadot V15 / V16', () => {
  it('the reference rows are what the dump holds', () => {
    assert.equal(toProgram.length, 10)
    assert.equal(fromProgram.length, 10)
    assert.ok(fromProgram.some((r) => r.reply_code !== '0x00000000'), 'no failed reply among the rows')
    assert.deepEqual(new Set(toProgram.map((r) => ENTRY[r.entry!])), new Set(['Init', 'Handle']))
  })

  for (const v of VERSIONS) {
    it(`Vara spec ${v.spec} (metadata V${v.metadata}): Gear.MessageQueued and Gear.UserMessageSent decode to the indexer's rows`, () => {
      const bytes = metadataBytes(v.file)
      assert.equal(metadataVersion(bytes), v.metadata)
      // Independent encoding: @polkadot/types with the same metadata.
      const registry = new TypeRegistry()
      registry.setMetadata(new Metadata(registry, bytes))
      const gear = registry.metadata.pallets.find((p) => p.name.toString() === 'Gear')!
      const eventOf = (variant: number, args: unknown[]) => {
        const index = new Uint8Array([gear.index.toNumber(), variant])
        const Data = registry.findMetaEvent(index)
        return u8aConcat(index, new Data(registry, args).toU8a())
      }
      const sentFields = registry.lookup.getSiType(registry.lookup.getSiType(gear.events.unwrap().type).def.asVariant.variants[1].fields[0].type)
      const detailsType = sentFields.def.asComposite.fields.find((f) => f.name.toString() === 'details')!.type
      const detailsDef = registry.lookup.getTypeDef(detailsType)
      assert.ok(detailsDef.type.includes(v.details), `details are ${detailsDef.type}`)
      const codeType = v.details === 'ReplyDetails'
        ? registry.lookup.getSiType(registry.lookup.getSiType(detailsType).params[0].type.unwrap()).def.asComposite.fields.find((f) => f.name.toString() === 'code')!.type
        : undefined
      const records = [
        ...toProgram.map((r) => ({
          phase: { ApplyExtrinsic: 1 },
          event: eventOf(0, [r.id, r.source, r.destination, { [ENTRY[r.entry!]]: null }]),
          topics: [],
        })),
        ...fromProgram.map((r) => {
          const details = v.details === 'ReplyDetails'
            // ReplyCode as the indexer stores it: its bytes padded to 4.
            ? { to: r.reply_to_msg_id, code: registry.createType(registry.createLookupType(codeType!), hexToU8a(r.reply_code!)) }
            : { Reply: { replyTo: r.reply_to_msg_id, statusCode: Number(r.exit_code) } }
          return {
            phase: { ApplyExtrinsic: 1 },
            event: eventOf(1, [{ id: r.id, source: r.source, destination: r.destination, payload: r.payload, value: r.value, details }, null]),
            topics: [],
          }
        }),
      ]
      const encoded = registry.createType('Vec<EventRecord>', records).toU8a()

      const runtime = substrateRuntime({ specName: 'vara', specVersion: v.spec, implName: 'vara', implVersion: 1 }, bytes)
      const events = decodeEvents(runtime, u8aToHex(encoded))
      events.forEach((e) => setGearProgramId(runtime, e))
      assert.deepEqual(events.map((e) => e.name), [...toProgram.map(() => 'Gear.MessageQueued'), ...fromProgram.map(() => 'Gear.UserMessageSent')])
      for (const [i, r] of toProgram.entries()) {
        const e = events[i]
        const args = JsonCodec.encode(e.args) as any
        assert.deepEqual({ id: args.id, source: args.source, destination: args.destination, entry: args.entry.__kind }, { id: r.id, source: r.source, destination: r.destination, entry: ENTRY[r.entry!] })
        assert.equal(e._gearProgramId, r.destination)
        assert.equal(e.extrinsicIndex, 1)
      }
      for (const [i, r] of fromProgram.entries()) {
        const e = events[toProgram.length + i]
        const m = (JsonCodec.encode(e.args) as any).message
        assert.deepEqual({ id: m.id, source: m.source, destination: m.destination, payload: m.payload, value: m.value }, { id: r.id, source: r.source, destination: r.destination, payload: r.payload, value: r.value })
        assert.equal(e._gearProgramId, r.source)
        if (v.details === 'ReplyDetails') {
          assert.equal(m.details.to, r.reply_to_msg_id)
          // The reply code, read by both decoders from the indexer's bytes.
          const reference = registry.createType(registry.createLookupType(codeType!), hexToU8a(r.reply_code!)).toJSON()
          assert.deepEqual(kinds(m.details.code), jsonKinds(reference), `reply code ${r.reply_code}`)
          assert.equal(kinds(m.details.code)[0], r.exit_code === '0' ? 'success' : 'error')
        } else {
          assert.deepEqual(m.details, { __kind: 'Reply', value: { replyTo: r.reply_to_msg_id, statusCode: Number(r.exit_code) } })
        }
      }
    })
  }

  it('Polkadot metadata V15 decodes (the V14 shape for the decoder); the same runtime decodes the events V14 does', () => {
    const bytes = metadataBytes('polkadot-js-api/metadata/polkadot-v15.scale.gz')
    assert.equal(metadataVersion(bytes), 15)
    const runtime = substrateRuntime({ specName: 'polkadot', specVersion: 2000000, implName: 'parity-polkadot', implVersion: 0 }, bytes)
    assert.ok(runtime.hasEvent('Balances.Transfer'))
    assert.ok(runtime.hasStorageItem('System.Events'))
    // A Balances.Transfer record encoded by @polkadot/types from the same metadata.
    const registry = new TypeRegistry()
    registry.setMetadata(new Metadata(registry, bytes))
    const from = '0x' + '11'.repeat(32)
    const to = '0x' + '22'.repeat(32)
    const balances = registry.metadata.pallets.find((p) => p.name.toString() === 'Balances')!.index.toNumber()
    const index = new Uint8Array([balances, 2])
    const Transfer = registry.findMetaEvent(index)
    const event = u8aConcat(index, new Transfer(registry, [from, to, 12345]).toU8a())
    const transfer = registry.createType('Vec<EventRecord>', [{ phase: { ApplyExtrinsic: 2 }, event, topics: [] }])
    const [e] = decodeEvents(runtime, transfer.toHex())
    assert.equal(e.name, 'Balances.Transfer')
    assert.deepEqual(JsonCodec.encode(e.args), { from, to, amount: '12345' })
  })

  it('Polkadot metadata V16 is refused with an error naming the version and the runtime', () => {
    const bytes = metadataBytes('polkadot-js-api/metadata/polkadot-v16.scale.gz')
    assert.equal(metadataVersion(bytes), 16)
    assert.throws(
      () => substrateRuntime({ specName: 'polkadot', specVersion: 2003000, implName: 'parity-polkadot', implVersion: 0 }, bytes),
      (e: unknown) => e instanceof UnsupportedMetadata && e.version === 16 && /metadata V16 of polkadot@2003000 is not supported/.test(e.message),
    )
    assert.throws(() => metadataVersion('0x00'), /magic number/)
  })

  it('a node serving metadata V16 stops `ingest --family substrate` with a one-line error naming the version', async () => {
    // Recorded Rococo Contracts blocks, served with Polkadot's V16 metadata instead of their own.
    const recorded = loadRecordedSubstrate('rococo-contracts')
    recorded.metadata = u8aToHex(metadataBytes('polkadot-js-api/metadata/polkadot-v16.scale.gz'))
    const server = new SubstrateReplayServer(recorded, { port: 0 })
    const url = await server.start()
    const dir = await mkdtemp(path.join(os.tmpdir(), 'ba-v16-'))
    try {
      const args = ['ingest', '--family', 'substrate', '--rpc', url, '--dataset', 'v16', '--out', path.join(dir, 'v16'), '--blocks', '2841323-2841325', '--workers', '0']
      const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist/src/cli.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
      let stderr = ''
      child.stderr!.on('data', (d) => (stderr += d))
      const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
      assert.equal(code, 1, stderr)
      assert.equal(stderr.trim(), 'runtime metadata V16 of contracts-rococo@9420 is not supported: block-archive decodes metadata V9–V15')
    } finally {
      await server.close()
      await rm(dir, { recursive: true, force: true })
    }
  })
})
