import { decodeAddress } from '@polkadot/util-crypto/address/decode'

/*
 * SS58 addresses (Substrate's base58 account encoding) → the account id as `0x` hex, as squid
 * decodes AccountId32. Decoding and the checksum are @polkadot/util-crypto's `decodeAddress`; only
 * 32-byte account ids count (not account indices, not 33-byte ECDSA keys). Values are told apart by
 * this (an SS58 string becomes hex, any other string stays), so a string that is not such an address
 * is null here, not an error.
 */

/** Base58 text of an SS58 address with a 32-byte payload: 1–2 prefix bytes + 32 + 2 checksum bytes. */
const SS58_ACCOUNT_TEXT = /^[1-9A-HJ-NP-Za-km-z]{46,50}$/

/**
 * Answers for address-like strings. decodeAddress (base58 and blake2b in JS) costs about twice the
 * rest of a Sidecar block's normalisation, and a block names the same accounts again and again
 * (signer, origin, event args); emptied when full.
 */
const known = new Map<string, string | null>()
const KNOWN_MAX = 10_000

/** The 32-byte account id of an SS58 address as `0x` hex, or null when `s` is not one. */
export function ss58ToHex(s: string): string | null {
  // the pattern first: decodeAddress would take hex as bytes, and most strings are no address
  if (!SS58_ACCOUNT_TEXT.test(s)) return null
  let hex = known.get(s)
  if (hex === undefined) {
    hex = decode(s)
    if (known.size >= KNOWN_MAX) known.clear()
    known.set(s, hex)
  }
  return hex
}

function decode(s: string): string | null {
  let id: Uint8Array
  try {
    id = decodeAddress(s)
  } catch {
    return null // bad checksum, reserved prefix, wrong length
  }
  return id.length === 32 ? '0x' + Buffer.from(id).toString('hex') : null
}
