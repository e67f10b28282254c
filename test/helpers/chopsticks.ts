import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { Keyring } from '@polkadot/keyring'
import type { KeyringPair } from '@polkadot/keyring/types'
import { chainSpec } from '@substrate/connect-known-chains/rococo_v2_2_asset_hub'
import { REPO_ROOT } from './dataset.js'
import { connectApi } from './node-view.js'

/*
 * A real Substrate runtime for end-to-end tests: chopsticks (npm @acala-network/chopsticks) started
 * fully offline from the Rococo Asset Hub chain spec that @substrate/connect-known-chains ships (raw
 * genesis storage with the wasm runtime, "statemine" spec 900; no remote endpoint), on 127.0.0.1,
 * building blocks only when asked (`dev_newBlock`). The genesis endows no dev account, so Alice, Bob,
 * Charlie and Dave get a balance through chopsticks' storage override (`import-storage`). Another
 * chain can be given as its raw chain spec and config (helpers/gear.ts: Vara).
 */

export interface Chopsticks {
  /** ws://127.0.0.1:PORT (the same port answers HTTP JSON-RPC: see `httpUrl`). */
  url: string
  httpUrl: string
  rpc(method: string, params?: unknown[]): Promise<any>
  /** Build one block with what is in the pool; returns its number and hash. */
  newBlock(): Promise<{ number: number; hash: string }>
  /** The node's recent output (its last 10,000 characters). */
  log(): string
  stop(): Promise<void>
}

/** Free balance each dev account starts with (10 000 units of 12 decimals). */
export const ENDOWMENT = 10_000n * 10n ** 12n

export const DEV_ACCOUNTS = ['Alice', 'Bob', 'Charlie', 'Dave', 'Eve', 'Ferdie'] as const

function chopsticksCli(): string {
  return path.join(REPO_ROOT, 'node_modules/@acala-network/chopsticks/chopsticks.cjs')
}

/** A chain for chopsticks to start from: its raw chain spec, and the config entries it needs. */
export interface ChopsticksChain {
  /** File name for the spec in the node's folder, and its text. */
  specFile: string
  spec: string | Buffer
  /** Extra chopsticks config (e.g. `import-storage`, `allow-unresolved-imports`). */
  config?: Record<string, unknown>
}

/** The default chain: Rococo Asset Hub, its dev accounts endowed. */
function assetHub(): ChopsticksChain {
  const keyring = new Keyring({ type: 'sr25519', ss58Format: 42 })
  const accounts = DEV_ACCOUNTS.map((n) => keyring.addFromUri(`//${n}`).address)
  return {
    specFile: 'asset-hub-rococo.json',
    spec: chainSpec,
    config: {
      'import-storage': {
        System: {
          Account: accounts.map((a) => [[a], { providers: 1, data: { free: ENDOWMENT.toString() } }]),
        },
      },
    },
  }
}

export async function startChopsticks(opts: { timeoutMs?: number; chain?: ChopsticksChain } = {}): Promise<Chopsticks> {
  const chain = opts.chain ?? assetHub()
  const dir = await mkdtemp(path.join(os.tmpdir(), 'chopsticks-'))
  const specPath = path.join(dir, chain.specFile)
  await writeFile(specPath, chain.spec)
  const config = {
    genesis: specPath,
    host: '127.0.0.1',
    port: 0,
    'build-block-mode': 'Manual',
    'runtime-log-level': 0,
    ...chain.config,
  }
  const configPath = path.join(dir, 'config.json')
  await writeFile(configPath, JSON.stringify(config))
  const child: ChildProcess = spawn(process.execPath, [chopsticksCli(), '--config', configPath], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: 'info', NO_COLOR: '1', FORCE_COLOR: '0' },
  })
  // never leave the node running behind a test process that exits without stopping it
  const killOnExit = () => child.kill('SIGKILL')
  process.once('exit', killOnExit)
  child.once('exit', () => process.off('exit', killOnExit))
  let output = ''
  const stopChild = () => new Promise<void>((resolve) => {
    if (child.exitCode != null || child.signalCode != null) return resolve()
    const kill = setTimeout(() => child.kill('SIGKILL'), 5000)
    child.once('exit', () => {
      clearTimeout(kill)
      resolve()
    })
    child.kill('SIGTERM')
  })
  let addr: string
  try {
    addr = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`chopsticks did not start in time:\n${output}`)), opts.timeoutMs ?? 45_000)
      child.once('exit', (code) => {
        clearTimeout(timer)
        reject(new Error(`chopsticks exited with ${code}:\n${output}`))
      })
      child.stderr!.on('data', (d) => (output = (output + d).slice(-10_000)))
      createInterface({ input: child.stdout! }).on('line', (line) => {
        output = (output + line + '\n').slice(-10_000)
        const m = /RPC listening on http:\/\/(\S+)/.exec(line)
        if (m) {
          clearTimeout(timer)
          resolve(m[1])
        }
      })
    })
  } catch (e) {
    await stopChild()
    await rm(dir, { recursive: true, force: true })
    throw e
  }
  const httpUrl = `http://${addr}`
  let id = 0
  const rpc = async (method: string, params: unknown[] = []) => {
    const res = await fetch(httpUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method, params }) })
    const j: any = await res.json()
    if (j.error) throw new Error(`${method}: ${j.error.message}`)
    return j.result
  }
  return {
    url: `ws://${addr}`,
    httpUrl,
    rpc,
    async newBlock() {
      const hash: string = await rpc('dev_newBlock', [{ count: 1 }])
      const header = await rpc('chain_getHeader', [hash])
      return { number: parseInt(header.number, 16), hash }
    },
    log: () => output,
    async stop() {
      await stopChild()
      await rm(dir, { recursive: true, force: true })
    },
  }
}

/** One extrinsic the scenario submitted. */
export interface Submitted {
  label: string
  /** Block it was included in and its index there. */
  block: number
  blockHash: string
  index: number
  /** The extrinsic hash @polkadot/api computed before sending. */
  hash: string
  signer: string
  /** Expected call tree: `Pallet.call_name` by call address ('' for the root, '1.0' for [1,0]). */
  calls: Record<string, string>
  /** Whether the extrinsic as a whole succeeds. */
  success: boolean
}

export interface Scenario {
  /** ss58 address and 0x public key of each dev account. */
  accounts: Record<string, { address: string; publicKey: string }>
  submitted: Submitted[]
  /** Blocks built by the scenario, in order. */
  blocks: { number: number; hash: string }[]
  /** Amounts used in the transfers (plancks). */
  amounts: Record<string, bigint>
}

/**
 * Sign and submit, from dev accounts: a plain transfer and an `add_proxy` (block 1 of the scenario);
 * a `utility.batch` of a transfer and a nested `batch_all` of two transfers, a `proxy.proxy` wrapping a
 * transfer, and a `batch_all` whose second transfer fails (block 2). Returns what was submitted.
 */
export async function runScenario(node: Chopsticks): Promise<Scenario> {
  const api = await connectApi(node.url)
  try {
    const keyring = new Keyring({ type: 'sr25519', ss58Format: 42 })
    const pair = Object.fromEntries(DEV_ACCOUNTS.map((n) => [n, keyring.addFromUri(`//${n}`)])) as Record<(typeof DEV_ACCOUNTS)[number], KeyringPair>
    const accounts = Object.fromEntries(DEV_ACCOUNTS.map((n) => [n, { address: pair[n].address, publicKey: '0x' + Buffer.from(pair[n].publicKey).toString('hex') }]))
    const unit = 10n ** 12n
    const amounts = {
      plain: 12n * unit + 345n,
      batch0: 3n * unit,
      batch10: 2n * unit + 1n,
      batch11: 1n * unit + 7n,
      proxied: 5n * unit + 11n,
      failingOk: 1n * unit,
      failingTooMuch: 1_000_000n * unit,
    }
    const tx: any = api.tx
    const submitted: Submitted[] = []
    const blocks: { number: number; hash: string }[] = []
    const pending: { label: string; signer: string; hash: string; calls: Record<string, string>; success: boolean }[] = []

    const send = async (label: string, who: keyof typeof pair, ext: any, calls: Record<string, string>, success = true) => {
      const nonce = await api.rpc.system.accountNextIndex(pair[who].address)
      const signed = await ext.signAsync(pair[who], { nonce })
      const hash = signed.hash.toHex()
      const sent = (await api.rpc.author.submitExtrinsic(signed)).toHex()
      if (sent !== hash) throw new Error(`${label}: node returned hash ${sent}, expected ${hash}`)
      pending.push({ label, signer: pair[who].address, hash, calls, success })
    }
    const build = async () => {
      const b = await node.newBlock()
      blocks.push(b)
      const signed = await api.rpc.chain.getBlock(b.hash)
      const hashes: string[] = signed.block.extrinsics.map((e) => e.hash.toHex())
      for (const p of pending.splice(0)) {
        const index = hashes.findIndex((h) => h === p.hash)
        if (index < 0) throw new Error(`${p.label} (${p.hash}) is not in block ${b.number}`)
        submitted.push({ ...p, block: b.number, blockHash: b.hash, index })
      }
    }

    await send('transfer', 'Alice', tx.balances.transfer(pair.Bob.address, amounts.plain), { '': 'Balances.transfer' })
    await send('add_proxy', 'Alice', tx.proxy.addProxy(pair.Charlie.address, 'Any', 0), { '': 'Proxy.add_proxy' })
    await build()

    await send('batch', 'Bob', tx.utility.batch([
      tx.balances.transfer(pair.Charlie.address, amounts.batch0),
      tx.utility.batchAll([
        tx.balances.transfer(pair.Dave.address, amounts.batch10),
        tx.balances.transfer(pair.Eve.address, amounts.batch11),
      ]),
    ]), { '': 'Utility.batch', '0': 'Balances.transfer', '1': 'Utility.batch_all', '1.0': 'Balances.transfer', '1.1': 'Balances.transfer' })
    await send('proxy', 'Charlie', tx.proxy.proxy(pair.Alice.address, null, tx.balances.transfer(pair.Ferdie.address, amounts.proxied)), { '': 'Proxy.proxy', '0': 'Balances.transfer' })
    await send('failing batch_all', 'Dave', tx.utility.batchAll([
      tx.balances.transfer(pair.Eve.address, amounts.failingOk),
      tx.balances.transfer(pair.Eve.address, amounts.failingTooMuch),
    ]), { '': 'Utility.batch_all', '0': 'Balances.transfer', '1': 'Balances.transfer' }, false)
    await build()

    return { accounts, submitted, blocks, amounts }
  } finally {
    await api.disconnect()
  }
}
