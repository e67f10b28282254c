import { readFileSync } from 'node:fs'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { Keyring } from '@polkadot/keyring'
import type { ChopsticksChain } from './chopsticks.js'
import { REPO_ROOT } from './dataset.js'

/*
 * The Vara network's genesis for chopsticks (fixtures/substrate/gear: the raw mainnet chain spec,
 * runtime "vara" spec 100), the Vara testnet's genesis runtime ("vara" spec 1000) to upgrade it to,
 * and the demo program gear-js's own tests upload.
 */

const GEAR = path.join(REPO_ROOT, 'fixtures/substrate/gear')

/** Vara's SS58 prefix. */
export const VARA_SS58 = 137

/** The compiled ping program: replies "PONG" to "PING". */
export const demoPing = (): Buffer => readFileSync(path.join(GEAR, 'gear-js/apis/gear/test/wasm/demo_ping.opt.wasm'))

/** Substrate's marker in front of a zstd-compressed runtime in `:code` (and in `set_code`'s argument). */
const ZSTD_CODE_MARKER = '52bc537646db8e05'

/**
 * The Vara testnet genesis runtime (`vara` spec 1000) as `:code` bytes (0x hex, zstd-compressed with
 * Substrate's marker). Its sign-extension instructions were lowered to MVP ones (fixtures/SOURCES.md
 * says how): chopsticks' executor does not enable that WASM feature and refuses the original.
 */
export const varaTestnetRuntime = (): string =>
  '0x' + ZSTD_CODE_MARKER + readFileSync(path.join(GEAR, 'vara/node/res/vara_testnet.code.signext-lowered.wasm.zst')).toString('hex')

/**
 * The Vara genesis with the dev accounts endowed (and, given `sudo`, that dev account as the Sudo
 * key instead of the genesis one, whose secret nobody here has). Chopsticks runs it with
 * `allow-unresolved-imports`: the runtime imports Gear's own host functions (`gear_ri`: lazy pages,
 * which the Gear node implements natively), which chopsticks' executor does not have; a call into
 * one fails when it is made (only the processing of the message queue makes them). `Timestamp.Now`
 * is set to a multiple of the 3 s slot, so that chopsticks' BABE slot of the first block and its
 * timestamp agree (BABE checks that they do).
 */
export function varaChain(accounts: string[], endowment: bigint, sudo?: string): ChopsticksChain {
  const keyring = new Keyring({ type: 'sr25519', ss58Format: VARA_SS58 })
  return {
    specFile: 'vara.json',
    spec: gunzipSync(readFileSync(path.join(GEAR, 'vara/node/res/vara.json.gz'))),
    config: {
      'allow-unresolved-imports': true,
      'import-storage': {
        Timestamp: { Now: Math.floor(Date.now() / 3000) * 3000 },
        System: {
          Account: accounts.map((n) => [[keyring.addFromUri(`//${n}`).address], { providers: 1, data: { free: endowment.toString() } }]),
        },
        ...(sudo ? { Sudo: { Key: keyring.addFromUri(`//${sudo}`).address } } : {}),
      },
    },
  }
}
