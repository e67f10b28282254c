import { MalformedRpcData } from '../source.js'
import { HEX } from './squid-json.js'

/** A decoded block (Sidecar's, polkadot-api's) that is not of the expected shape; the message says where. */
export class SubstrateShapeError extends MalformedRpcData {}

export function fail(what: string): never {
  throw new SubstrateShapeError(what)
}

/** A `0x` hex hash, lower-cased; anything else is a shape error. */
export function hashOf(v: unknown, what: string): string {
  if (typeof v !== 'string' || !HEX.test(v)) fail(`${what}: expected a 0x hex string, got ${JSON.stringify(v)?.slice(0, 100)}`)
  return v.toLowerCase()
}

export const optionalHash = (v: unknown, what: string): string | null => (v == null ? null : hashOf(v, what))
