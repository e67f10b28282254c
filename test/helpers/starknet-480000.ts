import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { gunzipSync } from 'node:zlib'
import type { StarknetBlockBundle } from '../../src/ingest/starknet/normalize.js'

/*
 * Starknet mainnet block 480000 as a block bundle for the normaliser. ONLY THE TRACES ARE RECORDED
 * DATA (fixtures/starknet/nethermind-idealis/starknet/trace_block_480_000.json.gz, the
 * `starknet_traceBlockTransactions` result: 119 transactions). No getBlockWithReceipts of 480000 is
 * public, so everything else is DERIVED from the traces or made up:
 *  - the header is synthetic: block_hash, parent_hash, new_root, timestamp, status, version are
 *    invented values, not mainnet's;
 *  - each transaction is its hash and trace type; INVOKE senders are the contract of the validate
 *    call (the account); a reverted execute root gives execution_status REVERTED and its reason;
 *  - the receipt events (and L2→L1 messages, none in this block) are rebuilt from the trace, root by
 *    root in the order validate, execute/constructor/function, fee_transfer, each root's entries by
 *    their `order` (it restarts at 0 in every root), `from_address` being the emitting call.
 */

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')

export const TRACE_FILE_480000 = 'fixtures/starknet/nethermind-idealis/starknet/trace_block_480_000.json.gz'

/** Roots of a `trace_root`, in execution order (docs/protocol.md §6.4). */
export const ROOT_KEYS = ['validate_invocation', 'execute_invocation', 'constructor_invocation', 'function_invocation', 'fee_transfer_invocation']

/** Invocations of a trace root in depth-first order with their path below the root. */
export function* invocations(inv: any, at: number[] = []): Generator<[number[], any]> {
  yield [at, inv]
  for (const [i, c] of (inv.calls ?? []).entries()) yield* invocations(c, [...at, i])
}

export interface Derived480000 {
  /** The recorded traces (bare result). */
  traces: any[]
  /** The DERIVED `starknet_getBlockWithReceipts`-shaped block (synthetic header). */
  block: any
  bundle: StarknetBlockBundle
  /** `${transactionIndex}/${eventIndex}` → trace address of the call that emitted the event. */
  expectedAddress: Map<string, number[]>
  /** `${transactionIndex}/${order}` → trace address of the call that sent the message. */
  expectedMessageAddress: Map<string, number[]>
}

export function derived480000(): Derived480000 {
  let traces = JSON.parse(gunzipSync(readFileSync(path.join(REPO, TRACE_FILE_480000))).toString('utf8'))
  if (traces && !Array.isArray(traces) && 'jsonrpc' in traces) traces = traces.result
  const expectedAddress = new Map<string, number[]>()
  const expectedMessageAddress = new Map<string, number[]>()
  const block = {
    // SYNTHETIC header: none of these values is mainnet's (only the number is).
    block_number: 480000,
    block_hash: '0x480000',
    parent_hash: '0x47ffff',
    new_root: '0x480000aa',
    timestamp: 1_700_000_000,
    status: 'ACCEPTED_ON_L1',
    starknet_version: 'derived-from-traces',
    transactions: traces.map((t: any, i: number) => {
      const events: any[] = []
      const messages: any[] = []
      let k = 0
      for (const key of ROOT_KEYS) {
        const root = t.trace_root[key]
        if (!root) continue
        if (root.contract_address) {
          const calls = [...invocations(root)]
          const found = calls.flatMap(([at, inv]) => (inv.events ?? []).map((e: any) => ({ e, at: [k, ...at], from: inv.contract_address })))
          found.sort((a, b) => a.e.order - b.e.order)
          for (const f of found) {
            expectedAddress.set(`${i}/${events.length}`, f.at)
            events.push({ from_address: f.from, keys: f.e.keys, data: f.e.data })
          }
          const sent = calls.flatMap(([at, inv]) => (inv.messages ?? []).map((m: any) => ({ m, at: [k, ...at], from: inv.contract_address })))
          sent.sort((a, b) => a.m.order - b.m.order)
          for (const s of sent) {
            expectedMessageAddress.set(`${i}/${messages.length}`, s.at)
            messages.push({ from_address: s.from, to_address: s.m.to_address, payload: s.m.payload })
          }
        }
        k++
      }
      const root = t.trace_root
      const revert = root.execute_invocation?.revert_reason
      return {
        transaction: {
          transaction_hash: t.transaction_hash,
          type: root.type,
          ...(root.type === 'INVOKE' && root.validate_invocation?.contract_address ? { sender_address: root.validate_invocation.contract_address } : {}),
        },
        receipt: {
          transaction_hash: t.transaction_hash,
          events,
          messages_sent: messages,
          execution_status: revert != null ? 'REVERTED' : 'SUCCEEDED',
          ...(revert != null ? { revert_reason: revert } : {}),
        },
      }
    }),
  }
  return { traces, block, bundle: { block, traces }, expectedAddress, expectedMessageAddress }
}
