import { fail } from '../shape.js'
import { ss58ToHex } from '../ss58.js'
import { accountIdOf, camel, HEX } from '../squid-json.js'
import { callName, palletName, variantName } from './names.js'

/*
 * Sidecar's JSON values (`args` of calls and events, signature, error, origin) → squid's form,
 * as far as it can be told without the metadata (`toSquid`):
 *   - `0x` hex strings: lower case; SS58 account strings (valid checksum, 32-byte payload): the
 *     account id as `0x` hex, as squid decodes AccountId32; other strings stay (decimal numbers stay
 *     decimal strings: sidecar gives u8…u128 all as strings and the type is unknown here, squid gives
 *     u8–u32 as JSON numbers); JSON numbers and booleans stay.
 *   - Object keys: camelCase (`other_signatories` → `otherSignatories`, `_remark` → `remark`).
 *   - Enums: a one-key object below the top level of the args is taken as an enum value
 *     `{__kind: Key, value}` (`{"id": "…"}` → `{__kind: "Id", value: "0x…"}`, `{"ok": null}` →
 *     `{__kind: "Ok"}`, `{"module": {…}}` → `{__kind: "Module", value: {…}}`, `{"legacy": {…}}` →
 *     `{__kind: "Legacy", …}`; `eip1559` → `EIP1559` etc.), except the known one-field structs of
 *     ONE_FIELD_STRUCTS (`{logs}` of a digest); a string that looks like a variant name
 *     (`/^[A-Z][A-Za-z0-9]*$/`, e.g. `"Normal"`, `"Returned"`) becomes `{__kind: "Normal"}`.
 *     Variants whose runtime names differ from sidecar's key by more than the first letter stay
 *     approximate (identity `Data::Raw11` arrives as `{raw}` → `{__kind: "Raw"}`).
 *   - A call inside args (`{method: {pallet, method}, args}`) becomes the RuntimeCall enum value
 *     `{__kind: "Balances", value: {__kind: "transfer", dest: …, value: …}}`.
 *   - Event args stay positional: sidecar gives `data` as an array without field names, so an event
 *     squid would give as `{from, to, amount}` is `["0x…", "0x…", "123"]` here.
 */

const VARIANT = /^[A-Z][A-Za-z0-9]*$/

/** Structs with one field, which would otherwise be taken for an enum value. */
const ONE_FIELD_STRUCTS = new Set(['logs'])

/** A sidecar call object (`{method: {pallet, method}, args}`, maybe with `callIndex`). */
export function isSidecarCall(v: any): boolean {
  return v != null && typeof v === 'object' && !Array.isArray(v) && v.method != null && typeof v.method === 'object' &&
    typeof v.method.pallet === 'string' && typeof v.method.method === 'string' && 'args' in v
}

/** A sidecar value in squid's form, as far as it can be told without metadata (header comment). */
export function toSquid(v: unknown, top = false): unknown {
  if (v == null) return null
  if (typeof v === 'string') {
    if (HEX.test(v)) return v.toLowerCase()
    const account = ss58ToHex(v)
    if (account) return account
    if (VARIANT.test(v)) return { __kind: v }
    return v
  }
  if (typeof v !== 'object') return v
  if (Array.isArray(v)) return v.map((x) => toSquid(x))
  const o = v as Record<string, unknown>
  if (isSidecarCall(o)) return callValue(o as any)
  const keys = Object.keys(o)
  if (!top && keys.length === 1 && !ONE_FIELD_STRUCTS.has(keys[0])) {
    const value = o[keys[0]]
    return value === null ? { __kind: variantName(keys[0]) } : { __kind: variantName(keys[0]), value: toSquid(value) }
  }
  const out: Record<string, unknown> = {}
  for (const k of keys) out[camel(k)] = toSquid(o[k])
  return out
}

/** Args of a call (a struct of the call's fields). */
export function argsOf(args: unknown): Record<string, unknown> {
  if (args == null) return {}
  if (typeof args !== 'object' || Array.isArray(args)) fail(`call args: expected an object, got ${JSON.stringify(args).slice(0, 100)}`)
  return toSquid(args, true) as Record<string, unknown>
}

function callValue(c: { method: { pallet: string; method: string }; args: unknown }) {
  return { __kind: palletName(c.method.pallet), value: { __kind: callName(c.method.method), ...argsOf(c.args) } }
}

/** Account id (hex) of an address as sidecar gives it: `{id}`, a plain SS58 / hex account. */
export const accountOf = (address: unknown): string | undefined => accountIdOf(toSquid(address))

/** An arg of a sidecar call by its camelCase name (sidecar gives snake_case in old runtimes). */
export function rawArg(raw: any, name: string): unknown {
  const args = raw?.args
  if (!args || typeof args !== 'object') return undefined
  for (const k of Object.keys(args)) if (camel(k) === name) return args[k]
  return undefined
}

/** Sidecar's integers (decimal strings, hex, JSON numbers) as a decimal string; null stays null. */
export function decimal(v: unknown, what: string): string | null {
  if (v == null) return null
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return String(v)
  if (typeof v === 'string' && /^\d+$/.test(v)) return BigInt(v).toString()
  if (typeof v === 'string' && /^0x[0-9a-fA-F]+$/.test(v)) return BigInt(v).toString()
  fail(`${what}: expected a non-negative integer, got ${JSON.stringify(v).slice(0, 100)}`)
}

export function intOf(v: unknown, what: string): number {
  const d = decimal(v, what)
  const n = d == null ? NaN : Number(d)
  if (!Number.isSafeInteger(n)) fail(`${what}: expected a block number, got ${JSON.stringify(v)}`)
  return n
}

/** The runtime's `Era` value for sidecar's era: `{immortalEra}` or `{mortalEra: [period, phase]}`. */
export function eraValue(era: any): unknown {
  if (era == null || typeof era !== 'object') return null
  if ('immortalEra' in era) return { __kind: 'Immortal' }
  const m = era.mortalEra
  if (!Array.isArray(m) || m.length !== 2) return null
  const period = Number(m[0])
  const phase = Number(m[1])
  if (!Number.isSafeInteger(period) || !Number.isSafeInteger(phase) || period < 4) return null
  // the SCALE encoding of a mortal era (sp_runtime::generic::Era::encode), split as the runtime's enum names it
  let tz = 0
  while (((period >> tz) & 1) === 0 && tz < 31) tz++
  const quantize = Math.max(period >> 12, 1)
  const encoded = Math.min(15, Math.max(1, tz - 1)) | (Math.floor(phase / quantize) << 4)
  return { __kind: `Mortal${encoded & 0xff}`, value: encoded >> 8 }
}
