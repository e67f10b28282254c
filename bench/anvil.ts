import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ArchiveClient } from '../src/client/archive-client.js'
import { callData, compile, startAnvil, TOKEN_SOURCE, type Anvil } from '../test/helpers/anvil.js'
import { fmtRate, ms, timeInterleaved } from './lib/measure.js'
import { deploy } from './lib/procs.js'
import { machine, printTable } from './lib/report.js'

export interface AnvilBenchOptions {
  rounds: number
  transfers: number
  empty: number
  page: number
  runs: number
  inFlight: number
  /** Leave the archive folder in place (its path is printed). */
  keep?: boolean
  compression: string
  chunkBlocks?: number
}

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli.js')
const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'


const hexq = (n: number | bigint) => '0x' + BigInt(n).toString(16)

/** Run async jobs with at most `n` in flight. */
async function pool<T, R>(items: T[], n: number, fn: (x: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, async () => {
    while (next < items.length) {
      const i = next++
      out[i] = await fn(items[i])
    }
  }))
  return out
}

/**
 * `bench anvil`: what a user without an archive does — paged `eth_getLogs` (address + topic0)
 * and a transaction look-up per matching log — against the same logs and transactions from an
 * archive built from that anvil chain (router + 1 worker process, our client), side by side.
 */
export async function runAnvil(o: AnvilBenchOptions): Promise<void> {
  const dir = await mkdtemp(path.join(tmpdir(), 'ba-bench-anvil-'))
  let anvil: Anvil | undefined
  let d: Awaited<ReturnType<typeof deploy>> | undefined
  try {
    anvil = await startAnvil(['--hardfork', 'cancun'])
    const a = anvil
    const c = compile(TOKEN_SOURCE).Token
    const [alice] = await a.rpc('eth_accounts')
    const hash = await a.rpc('eth_sendTransaction', [{ from: alice, data: c.bytecode }])
    let receipt: any
    while (!(receipt = await a.rpc('eth_getTransactionReceipt', [hash]))) await new Promise((r) => setTimeout(r, 10))
    const token: string = receipt.contractAddress
    const t0 = performance.now()
    let nonce = Number(await a.rpc('eth_getTransactionCount', [alice, 'latest']))
    await a.rpc('evm_setAutomine', [false])
    for (let i = 0; i < o.rounds; i++) {
      const base = nonce
      nonce += o.transfers
      await Promise.all(Array.from({ length: o.transfers }, (_, j) =>
        a.rpc('eth_sendTransaction', [{ from: alice, to: token, nonce: hexq(base + j), gas: hexq(100_000),
          data: callData(c, 'transfer(address,uint256)', '0x' + (i * o.transfers + j + 1).toString(16).padStart(40, '0'), 1 + j) }])))
      await a.rpc('evm_mine', [])
      if (o.empty) await a.rpc('anvil_mine', [hexq(o.empty)])
    }
    await a.rpc('evm_setAutomine', [true])
    const last = Number(await a.rpc('eth_blockNumber'))
    const chainMs = performance.now() - t0

    // The archive of that chain, with the real ingest command.
    const out = path.join(dir, 'ds')
    const i0 = performance.now()
    await new Promise<void>((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, 'ingest', '--rpc', a.url, '--dataset', 'anvil', '--out', out, '--from', '0', '--to', String(last), '--finality', 'latest',
        ...(o.chunkBlocks ? ['--chunk-blocks', String(o.chunkBlocks)] : []), '--progress', 'none'], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } })
      let err = ''
      child.stderr!.on('data', (x) => (err = (err + x).slice(-3000)))
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`ingest exited with ${code}: ${err}`))))
    })
    const ingestMs = performance.now() - i0
    d = await deploy(out, 1, { compression: o.compression })
    const client = new ArchiveClient(d.base)

    const viaRpc = async () => {
      const logs: any[] = []
      for (let from = 0; from <= last; from += o.page) {
        logs.push(...(await a.rpc('eth_getLogs', [{ fromBlock: hexq(from), toBlock: hexq(Math.min(last, from + o.page - 1)), address: token, topics: [TRANSFER] }])))
      }
      const hashes = [...new Set(logs.map((l) => l.transactionHash as string))]
      const txs = await pool(hashes, o.inFlight, (h) => a.rpc('eth_getTransactionByHash', [h]))
      return { logs: logs.length, txs: txs.length }
    }
    const viaArchive = async (parallel: number) => {
      let logs = 0
      let txs = 0
      const query = {
        logs: [{ address: [token], topic0: [TRANSFER], transaction: true }],
        fields: { block: { number: true, hash: true, timestamp: true }, log: { address: true, topics: true, data: true, transactionHash: true },
          transaction: { from: true, to: true, hash: true, input: true, value: true, gas: true, nonce: true } },
      }
      for await (const batch of client.batches(query, { fromBlock: 0, toBlock: last, parallel })) {
        for (const b of batch.blocks as any[]) {
          logs += b.logs?.length ?? 0
          txs += b.transactions?.length ?? 0
        }
      }
      return { logs, txs }
    }
    const r = await viaRpc()
    const x = await viaArchive(1)
    if (r.logs !== x.logs || r.txs !== x.txs) throw new Error(`different answers: rpc ${JSON.stringify(r)}, archive ${JSON.stringify(x)}`)
    const [tr, ta, tb] = await timeInterleaved([viaRpc, () => viaArchive(1), () => viaArchive(2)], o.runs, 0)
    console.log(`machine: ${machine()}`)
    console.log(`anvil chain: ${last + 1} blocks, ${o.rounds} blocks with ${o.transfers} token transfers each, ${o.empty} empty blocks after each; ` +
      `built in ${(chainMs / 1000).toFixed(1)} s; archive ingested with \`block-archive ingest\` in ${(ingestMs / 1000).toFixed(1)} s ` +
      `(${fmtRate(last + 1, ingestMs)} blocks/s from anvil)`)
    printTable(`${r.logs} Transfer logs + ${r.txs} transactions over ${last + 1} blocks, ${o.runs} interleaved runs (median ms)`,
      ['source', 'how', 'time', 'logs/s', 'ratio'], [
        ['anvil JSON-RPC', `eth_getLogs pages of ${o.page} blocks, eth_getTransactionByHash × ${r.txs} (${o.inFlight} in flight)`, ms(tr.median), fmtRate(r.logs, tr.median), '1×'],
        ...([[ta, 1], [tb, 2]] as const).map(([t, p]) => ['archive', `router + 1 worker, our client, ${p} request${p > 1 ? 's' : ''} in flight, --compression ${o.compression}`,
          ms(t.median), fmtRate(x.logs, t.median), `${(tr.median / t.median).toFixed(1)}×${tr.median / t.median >= 20 ? '' : ' ✗'} (target ≥ 20×)`]),
      ])
  } finally {
    await d?.stop()
    await anvil?.stop()
    if (o.keep) console.log(`archive kept in ${dir}/ds`)
    else await rm(dir, { recursive: true, force: true })
  }
}
