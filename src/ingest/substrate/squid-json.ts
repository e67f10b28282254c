/*
 * Pieces of the JSON form of squid's Substrate data (what @subsquid/substrate-data gives after
 * `toJSON`) that every Substrate source builds the same way: field names, origins, call addresses,
 * and the checks of hex input.
 */

export const HEX = /^0x[0-9a-fA-F]*$/

/** A `0x` hex string lower-cased; null for anything else. */
export function hexOrNull(v: unknown): string | null {
  return typeof v === 'string' && HEX.test(v) ? v.toLowerCase() : null
}

/** snake_case / camelCase field name → camelCase (squid's `toCamelCase` for the names that occur). */
export function camel(key: string): string {
  return key.replace(/^_+/, '').replace(/_+([A-Za-z0-9])/g, (_, c: string) => c.toUpperCase())
}

/** The origin of a call signed by `account` (hex). */
export const signedOrigin = (account: string) => ({ __kind: 'system', value: { __kind: 'Signed', value: account } })
export const ROOT_ORIGIN = { __kind: 'system', value: { __kind: 'Root' } }

/** Account id (hex) of an address already in squid's form: a plain hex account or MultiAddress `Id`. */
export function accountIdOf(address: unknown): string | undefined {
  const a = address as any
  if (typeof a === 'string' && HEX.test(a)) return a
  if (a && typeof a === 'object' && (a.__kind === 'Id' || a.__kind === 'AccountId') && typeof a.value === 'string' && HEX.test(a.value)) return a.value
  return undefined
}

/** A JSON value as the text of a row column; null (and absent) stay null. */
export const jsonText = (v: unknown): string | null => (v === undefined || v === null ? null : JSON.stringify(v))

/** Order of call addresses within an extrinsic: a parent before its children, siblings by index. */
export function compareCallAddress(a: number[], b: number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i]
  return a.length - b.length
}
