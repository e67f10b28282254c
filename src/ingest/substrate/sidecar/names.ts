/*
 * Sidecar's (polkadot.js') names → the runtime's, as squid names pallets, calls and enum variants:
 *   - Pallets: sidecar's lower-camel name with the first letter upper-cased (`balances` → `Balances`,
 *     `xcmPallet` → `XcmPallet`, `parachainSystem` → `ParachainSystem`), except the acronyms of
 *     PALLET_NAMES (`evm` → `EVM`, `evmChainId` → `EVMChainId`, …), which polkadot.js lower-cased whole.
 *   - Calls: the runtime's snake_case (`Balances.transfer_keep_alive`, `Utility.batch_all`);
 *     sidecar's camelCase is split before each upper-case letter and before a digit run that follows
 *     a lower-case letter (`asMultiThreshold1` → `as_multi_threshold_1`, but `ethCallV2` → `eth_call_v2`).
 *   - Events: `Pallet.EventName`, the event name as sidecar gives it (`Balances.Transfer`, `EVM.Log`).
 *   - Enum variants: the key with the first letter upper-cased, except the acronyms of VARIANT_NAMES.
 */

/** Pallets whose runtime name is not sidecar's name with the first letter upper-cased. */
export const PALLET_NAMES: Record<string, string> = {
  evm: 'EVM',
  evmChainId: 'EVMChainId',
  evmBridge: 'EVMBridge',
  xcmPallet: 'XcmPallet',
}

const upperFirst = (s: string) => s.charAt(0).toUpperCase() + s.slice(1)

export function palletName(sidecar: string): string {
  return PALLET_NAMES[sidecar] ?? upperFirst(sidecar)
}

/** polkadot.js camelCase call name → the runtime's snake_case. */
export function callName(sidecar: string): string {
  if (!/[A-Z0-9]/.test(sidecar)) return sidecar
  return sidecar.replace(/([A-Z])|(?<=[a-z])(\d+)/g, (_, up: string | undefined, digits: string | undefined) => (up ? '_' + up.toLowerCase() : '_' + digits))
}

/** `Pallet.call_name` of sidecar's `{pallet, method}`. */
export const qualifiedCallName = (m: { pallet: string; method: string }) => `${palletName(m.pallet)}.${callName(m.method)}`

/** Enum variants whose runtime name is not the key with the first letter upper-cased. */
const VARIANT_NAMES: Record<string, string> = { eip2930: 'EIP2930', eip1559: 'EIP1559', eip7702: 'EIP7702', eip4844: 'EIP4844' }

export const variantName = (key: string) => VARIANT_NAMES[key] ?? upperFirst(key)
