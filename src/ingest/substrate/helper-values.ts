import { hexOrNull } from './squid-json.js'

/*
 * The values of the helper columns that squid derives from args (`ethereum_transact_to`/`_sighash`
 * of calls, `evm_log_*` of events), taken from args already in squid's JSON form.
 */

/** `Ethereum.transact`: the target of a `Call` action (null for `Create`) and `input.slice(0, 10)` (squid's rule), hex lower case. */
export function ethereumTransact(args: any): { to: string | null; sighash: string | null } {
  const tx = args?.transaction
  if (!tx || typeof tx !== 'object') return { to: null, sighash: null }
  let action: any
  let input: unknown
  if (typeof tx.__kind === 'string') {
    const v = tx.value ?? {}
    if (tx.__kind === 'EIP7702') {
      action = v.destination
      input = v.data
    } else {
      action = v.action
      input = v.input
    }
  } else {
    // the struct `LegacyTransaction` of the first Frontier runtimes
    action = tx.action
    input = tx.input
  }
  const data = hexOrNull(input)
  return {
    to: action?.__kind === 'Call' ? hexOrNull(action.value) : null,
    sighash: data == null ? null : data.slice(0, 10),
  }
}

/** `{address, topics}` of an `EVM.Log` event's args: `[log]` (positional), `{log}` or the log itself. */
export function evmLog(args: any): { address: unknown; topics: unknown } | null {
  let log = Array.isArray(args) ? args[0] : args
  if (log && typeof log === 'object' && 'log' in log) log = log.log
  if (!log || typeof log !== 'object') return null
  return { address: log.address, topics: log.topics }
}
