import type { Row } from '../../../chunks/rows.js'
import { evmLog } from '../helper-values.js'
import { hexOrNull } from '../squid-json.js'

/*
 * The helper columns of an event row (hex lower case; null when the event has none), from its
 * converted args, positional as sidecar gives them or named: `EVM.Log` → `evm_log_address`,
 * `evm_log_topic0..3`; `Contracts.ContractEmitted` → `contract_address`; `Gear.MessageQueued`
 * (destination) / `Gear.UserMessageSent` (message.source) → `gear_program_id`;
 * `Revive.ContractEmitted` → `revive_contract`, `revive_topic0..3`.
 */

export const EVENT_HELPER_COLUMNS = ['evm_log_address', 'evm_log_topic0', 'evm_log_topic1', 'evm_log_topic2', 'evm_log_topic3', 'contract_address',
  'gear_program_id', 'revive_contract', 'revive_topic0', 'revive_topic1', 'revive_topic2', 'revive_topic3']

/** Every helper column of an event named `name` with (converted) `args`. */
export function eventHelperColumns(name: string, args: any): Row {
  const out: Row = {}
  for (const k of EVENT_HELPER_COLUMNS) out[k] = null
  const arg = (i: number, key: string) => (Array.isArray(args) ? args[i] : args?.[key])
  switch (name) {
    case 'EVM.Log': {
      const log = evmLog(args)
      if (!log) break
      out.evm_log_address = hexOrNull(log.address)
      const topics = Array.isArray(log.topics) ? log.topics : []
      for (let i = 0; i < 4; i++) out[`evm_log_topic${i}`] = hexOrNull(topics[i])
      break
    }
    case 'Contracts.ContractEmitted':
      out.contract_address = hexOrNull(arg(0, 'contract'))
      break
    case 'Gear.MessageQueued':
      out.gear_program_id = hexOrNull(arg(2, 'destination'))
      break
    case 'Gear.UserMessageSent':
      out.gear_program_id = hexOrNull((arg(0, 'message') as any)?.source)
      break
    case 'Revive.ContractEmitted': {
      out.revive_contract = hexOrNull(arg(0, 'contract'))
      const topics = arg(2, 'topics')
      for (let i = 0; i < 4; i++) out[`revive_topic${i}`] = hexOrNull(Array.isArray(topics) ? topics[i] : null)
      break
    }
  }
  return out
}
