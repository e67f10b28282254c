import path from 'node:path'
import type { Command } from 'commander'
import { readDatasetMeta } from '../chunks/layout.js'
import { log } from '../log.js'
import { int, opt } from './options.js'
import { httpRequest } from '../http-request.js'
import { hostOption } from './serve.js'

/*
 * `demo` (what `npm start` runs): builds the bundled datasets from recorded real blocks on first
 * start (through the normal ingest path, against a local replay of the recorded RPC answers), then
 * serves them with a router and two workers and prints how to query them.
 */

const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'
/** Starknet: the ETH token contract and its Transfer event key. */
const STARKNET_ETH = '0x49d36570d4e46f48e99674bd3fcc84644ddd6b96f7c741b1562b82f9e004dc7'
const STARKNET_TRANSFER = '0x99cd8bde557814842a3121e8ddfd433a539b8c9f14bf31ebf108d12e6196e9'

const sidecar = () => import('../ingest/substrate/sidecar/recorded.js')

/**
 * The recorded datasets are a few blocks each: the ingest fetches them in its own thread (`ingest
 * --workers 0`) rather than starting a fetch worker thread per dataset, at every start.
 */
const BUILD = { workers: 0 }

/** Datasets of the demo: name → how to build it from the fixtures (their code loaded when the command runs). */
const DATASETS: Record<string, { build: (dir: string, name: string) => Promise<unknown>; example: object; from: number }> = {
  'ethereum-mainnet': {
    // Ethereum mainnet blocks 1000000, 4369999, 18000000, 18500000 with receipts (a sparse dataset).
    build: async (dir, name) => (await import('../ingest/recorded.js')).ingestRecorded(dir, name, BUILD),
    from: 18000000,
    example: {
      fromBlock: 18000000,
      toBlock: 18000000,
      logs: [{ topic0: [TRANSFER], transaction: true }],
      fields: { block: { timestamp: true }, log: { address: true, topics: true, data: true }, transaction: { hash: true, from: true, to: true } },
    },
  },
  'starknet-mainnet': {
    // Starknet mainnet blocks 25 (with traces), 6500, 65000, 550000 (with state updates), 588763, 623436.
    build: async (dir, name) => (await import('../ingest/recorded.js')).ingestRecordedStarknet(dir, name, undefined, BUILD),
    from: 623436,
    example: {
      type: 'starknet',
      fromBlock: 623436,
      toBlock: 623436,
      events: [{ fromAddress: [STARKNET_ETH], key0: [STARKNET_TRANSFER], transaction: true }],
      fields: { block: { timestamp: true }, event: { fromAddress: true, keys: true, data: true }, transaction: { transactionHash: true, senderAddress: true } },
    },
  },
  // Substrate: decoded blocks recorded from Substrate API Sidecar and, for moonbeam, polkadot-api (sparse datasets;
  // docs/ingest.md says what such sources lack).
  moonbeam: {
    // 11728459 from the Sidecar recording, then 16083402 (48 Ethereum.transact, 51 EVM.Log) from the
    // polkadot-api recording: a second ingest run into the same folder, resuming after the first chunk.
    build: async (dir, name) => {
      await (await sidecar()).ingestRecordedSidecar(dir, name, 'moonbeam', BUILD)
      return (await import('../ingest/substrate/papi/recorded.js')).ingestRecordedPapi(dir, name, BUILD)
    },
    from: 11728459,
    example: {
      type: 'substrate',
      fromBlock: 11728459,
      toBlock: 11728459,
      evmLogs: [{ address: ['0x709944a48caf83535e43471680fda4905fb3920a'], call: true, extrinsic: true }],
      fields: { block: { timestamp: true }, event: { name: true, args: true }, call: { name: true }, extrinsic: { hash: true, fee: true } },
    },
  },
  kusama: {
    build: async (dir, name) => (await sidecar()).ingestRecordedSidecar(dir, name, 'kusama', BUILD),
    from: 13556605,
    example: {
      type: 'substrate',
      fromBlock: 13556605,
      toBlock: 13556605,
      calls: [{ name: ['Utility.batch'], subcalls: true, events: true }],
      fields: { call: { name: true, args: true, success: true }, event: { name: true } },
    },
  },
  polkadot: {
    build: async (dir, name) => (await sidecar()).ingestRecordedSidecar(dir, name, 'polkadot', BUILD),
    from: 8891183,
    example: {
      type: 'substrate',
      fromBlock: 8891183,
      toBlock: 8891183,
      events: [{ name: ['Balances.Transfer'], stack: true, extrinsic: true }],
      fields: { block: { timestamp: true }, event: { name: true, args: true }, call: { name: true }, extrinsic: { hash: true, signature: true } },
    },
  },
}

export function registerDemo(program: Command): void {
  program
    .command('demo')
    .description('serve the bundled real datasets (built from recorded blocks on first start) with a router and two workers')
    .addOption(opt('--data <folder>', 'where the demo datasets are built and served from', 'BLOCK_ARCHIVE_DEMO_DATA', undefined, 'data/demo'))
    .addOption(hostOption())
    .addOption(opt('--port <n>', 'router port (0 = any free port)', 'BLOCK_ARCHIVE_PORT', int(0), 8080))
    .addOption(opt('--workers <n>', 'number of workers', 'BLOCK_ARCHIVE_WORKERS', int(1), 2))
    .action(async (o) => {
      // Building the datasets and starting the cluster log a line per chunk, dataset and worker; this
      // command prints what matters itself, so without an explicit LOG_LEVEL only warnings and errors
      // show until the instructions are printed (then info again, for what happens while serving).
      const level = log.level
      if (process.env.LOG_LEVEL === undefined && log.isLevelEnabled('info')) log.level = 'warn'
      const root = path.resolve(o.data)
      for (const [name, d] of Object.entries(DATASETS)) {
        // Built once: a later start finds it complete and writes nothing (the ingest resumes after its last chunk).
        if (!(await readDatasetMeta(path.join(root, name)))) console.log(`preparing ${name} in ${path.join(root, name)} …`)
        await d.build(path.join(root, name), name)
      }
      const [{ startCluster }, { LocalStorage }, { onShutdown }] = await Promise.all([import('../server/cluster.js'), import('../server/storage.js'), import('./serve-run.js')])
      const start = (port: number) => startCluster({ storage: new LocalStorage(root), host: o.host, port, workers: o.workers, heartbeatMs: 1000 })
      const cluster = await start(o.port).catch((e) => {
        if (e?.code !== 'EADDRINUSE' || o.port === 0) throw e
        // A second demo (or anything else) has the port: serve on a free one rather than fail.
        console.log(`port ${o.port} on ${o.host} is taken (another demo running?); using a free port instead (choose one with --port or BLOCK_ARCHIVE_PORT)`)
        return start(0)
      })
      onShutdown(() => cluster.stop())
      await waitServed(cluster.datasets)
      console.log(`\nrouter ${cluster.router.url} with ${cluster.workers.length} workers`)
      for (const [name, base] of cluster.datasets) {
        const d = DATASETS[name]
        console.log(`\ndataset ${name}: ${base}`)
        console.log(`  height:  curl -s ${base}/height`)
        if (!d) continue
        console.log(`  query:   curl -s --compressed -H 'content-type: application/json' \\`)
        console.log(`             -d '${JSON.stringify(d.example)}' \\`)
        console.log(`             "$(curl -s ${base}/${d.from}/worker)"`)
      }
      console.log('\nor with the client (from this checkout): npx block-archive query <base URL> --from N --to N \'<query JSON>\'   (Ctrl-C stops)')
      log.level = level
    })
}

/** Wait until every dataset has a height (a worker serves its chunks), so the printed URLs work at once. */
async function waitServed(datasets: Map<string, string>): Promise<void> {
  const deadline = Date.now() + 30_000
  for (const [name, base] of datasets) {
    for (;;) {
      const height = await httpRequest(`${base}/height`, { timeoutMs: 5000 }).then((r) => r.text, () => '-1')
      if (Number(height) >= 0) break
      if (Date.now() > deadline) {
        log.warn({ dataset: name }, 'demo: no worker serves this dataset yet')
        break
      }
      await new Promise((r) => setTimeout(r, 200))
    }
  }
}
