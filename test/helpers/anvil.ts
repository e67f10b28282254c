import { spawn, type ChildProcess } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { createInterface } from 'node:readline'
import { REPO_ROOT } from './dataset.js'

/*
 * A real anvil node (npm @foundry-rs/anvil) on 127.0.0.1 for end-to-end tests, and contracts
 * compiled with solc-js.
 */

export interface Anvil {
  url: string
  rpc(method: string, params?: unknown[]): Promise<any>
  stop(): Promise<void>
}

function anvilBinary(): string {
  const direct = path.join(REPO_ROOT, 'node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil')
  return existsSync(direct) ? direct : path.join(REPO_ROOT, 'node_modules/.bin/anvil')
}

export async function startAnvil(args: string[] = []): Promise<Anvil> {
  const child: ChildProcess = spawn(anvilBinary(), ['--host', '127.0.0.1', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`anvil did not start: ${output}`)), 120_000)
    child.once('exit', (code) => reject(new Error(`anvil exited with ${code}: ${output}`)))
    child.stderr!.on('data', (d) => (output += d))
    createInterface({ input: child.stdout! }).on('line', (line) => {
      output = (output + line + '\n').slice(-5000)
      const m = /Listening on (\S+)/.exec(line)
      if (m) {
        clearTimeout(timer)
        resolve(`http://${m[1]}`)
      }
    })
  })
  let id = 0
  return {
    url,
    async rpc(method, params = []) {
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method, params }) })
      const j: any = await res.json()
      if (j.error) throw new Error(`${method}: ${j.error.message}`)
      return j.result
    },
    stop: () => new Promise<void>((resolve) => {
      if (child.exitCode != null) return resolve()
      child.once('exit', () => resolve())
      child.kill('SIGTERM')
    }),
  }
}

/** A minimal ERC-20: Transfer events and a `transfer(address,uint256)` call, for chains with real logs. */
export const TOKEN_SOURCE = `// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;
contract Token {
    mapping(address => uint256) public balanceOf;
    event Transfer(address indexed from, address indexed to, uint256 value);
    constructor() { balanceOf[msg.sender] = 1e27; emit Transfer(address(0), msg.sender, 1e27); }
    function transfer(address to, uint256 v) external returns (bool) {
        balanceOf[msg.sender] -= v; balanceOf[to] += v;
        emit Transfer(msg.sender, to, v);
        return true;
    }
}
`

export interface Compiled {
  bytecode: string
  /** `name(types)` → 4-byte selector hex (no 0x). */
  methods: Record<string, string>
}

/**
 * Compile with solc-js; the result is kept in a folder under the system's temp folder, keyed by the
 * solc version and the whole input, so that a source compiles once per machine (solc's output for
 * the same version and input is the same).
 */
export function compile(source: string, evmVersion = 'cancun'): Record<string, Compiled> {
  const input = JSON.stringify({
    language: 'Solidity',
    sources: { 'test.sol': { content: source } },
    settings: { evmVersion, optimizer: { enabled: true, runs: 200 }, outputSelection: { '*': { '*': ['evm.bytecode.object', 'evm.methodIdentifiers'] } } },
  })
  const require = createRequire(import.meta.url)
  const version = (require('solc/package.json') as { version: string }).version
  const cached = path.join(os.tmpdir(), 'block-archive-solc', `${createHash('sha256').update(`${version}\n${input}`).digest('hex')}.json`)
  if (existsSync(cached)) return JSON.parse(readFileSync(cached, 'utf8'))
  // solc-js is loaded at the first compile: loading it costs more than a second of CPU, which the
  // tests that import this module only for anvil need not pay.
  const solc = require('solc') as { compile(input: string): string }
  const out = JSON.parse(solc.compile(input))
  const errors = (out.errors ?? []).filter((e: any) => e.severity === 'error')
  if (errors.length) throw new Error(errors.map((e: any) => e.formattedMessage).join('\n'))
  const result: Record<string, Compiled> = {}
  for (const [name, c] of Object.entries<any>(out.contracts['test.sol'])) {
    result[name] = { bytecode: '0x' + c.evm.bytecode.object, methods: c.evm.methodIdentifiers }
  }
  // written whole under another name, then renamed: a reader never sees half of it
  mkdirSync(path.dirname(cached), { recursive: true })
  const temp = `${cached}.${process.pid}.tmp`
  writeFileSync(temp, JSON.stringify(result))
  renameSync(temp, cached)
  return result
}

/** ABI words for static arguments (uint, address, bytes32, bool). */
export function words(...args: (bigint | number | string | boolean)[]): string {
  return args.map((a) => {
    if (typeof a === 'boolean') return (a ? 1n : 0n).toString(16).padStart(64, '0')
    if (typeof a === 'string') return a.replace(/^0x/, '').toLowerCase().padStart(64, '0')
    return BigInt(a).toString(16).padStart(64, '0')
  }).join('')
}

export function callData(c: Compiled, signature: string, ...args: (bigint | number | string | boolean)[]): string {
  const sel = c.methods[signature]
  if (!sel) throw new Error(`no method ${signature}`)
  return '0x' + sel + words(...args)
}
