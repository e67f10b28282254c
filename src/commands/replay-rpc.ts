import { Command, InvalidArgumentError } from 'commander'
import { RECORDED_CHAINS, RECORDED_STARKNET_CHAINS, RECORDED_SUBSTRATE_CHAINS, type RecordedChainName, type RecordedStarknetChain, type RecordedSubstrateChain } from '../ingest/recorded-chains.js'
import { choice, int, numberList, opt } from './options.js'

/*
 * `replay-rpc`: a node answering from the recorded fixtures (EVM and Starknet JSON-RPC, Substrate
 * raw SCALE blocks), for trying and measuring the ingest without a node. Every flag also reads an
 * environment variable (shown in --help). docs/ingest.md describes it.
 */

export function registerReplayRpc(program: Command): void {
  program
    .command('replay-rpc')
    .description('serve recorded node answers (fixtures/) as a JSON-RPC node, for trying and measuring the ingest without a node; prints the ingest commands that fit what it serves')
    .addOption(choice('--chain <name>', 'recorded chain (EVM, Starknet, or Substrate: raw SCALE blocks with their events and metadata)', 'BLOCK_ARCHIVE_REPLAY_CHAIN', [...RECORDED_CHAINS, ...RECORDED_STARKNET_CHAINS, ...RECORDED_SUBSTRATE_CHAINS], 'ethereum'))
    .addOption(opt('--repeat <times>', 'serve the recorded blocks this many times over as one chain (renumbered from --first, hashes re-linked)', 'BLOCK_ARCHIVE_REPLAY_REPEAT', int(1)))
    .addOption(opt('--distinct <n>', 'with --repeat: repeat n distinct copies of the recorded blocks (new transaction hashes; calldata, log data, traces and state-diff values scrambled with their length and zero bytes kept, as `bench generate` does) instead of the blocks themselves, which compress against their repeats far better than a real chain', 'BLOCK_ARCHIVE_REPLAY_DISTINCT', int(1)))
    .addOption(opt('--first <n>', 'with --repeat: number of the first block', 'BLOCK_ARCHIVE_REPLAY_FIRST', int(0), 0))
    .addOption(opt('--only <list>', 'serve only these recorded blocks (e.g. 18500000 for the one with trace_block)', 'BLOCK_ARCHIVE_REPLAY_ONLY', numberList))
    .addOption(opt('--host <host>', 'interface to listen on', 'BLOCK_ARCHIVE_REPLAY_HOST', undefined, '127.0.0.1'))
    .addOption(opt('--port <n>', 'port (0 = any free port)', 'BLOCK_ARCHIVE_REPLAY_PORT', int(0), 8545))
    .action(async (o) => {
      const starknet = (RECORDED_STARKNET_CHAINS as readonly string[]).includes(o.chain)
      const substrate = (RECORDED_SUBSTRATE_CHAINS as readonly string[]).includes(o.chain)
      if ((starknet || substrate) && o.repeat) throw new InvalidArgumentError('--repeat serves EVM chains only')
      if (o.distinct && !o.repeat) throw new InvalidArgumentError('--distinct goes with --repeat')
      if (substrate) return replaySubstrate(o.chain, o)
      const [{ loadRecordedChain, loadRecordedStarknet, blockList, suggestIngest }, { ReplayServer }] = await Promise.all([import('../ingest/recorded.js'), import('../ingest/replay.js')])
      let recorded = starknet ? loadRecordedStarknet(o.chain as RecordedStarknetChain) : loadRecordedChain(o.chain as RecordedChainName)
      if (o.only) recorded = recorded.filter((r) => o.only.includes(r.number))
      if (o.distinct) recorded = (await import('../bench-data/tile.js')).distinctCopies(recorded, o.distinct, 'block-archive-replay')
      const server = new ReplayServer(recorded, { host: o.host, port: o.port, repeat: o.repeat ? { times: o.repeat, first: o.first } : undefined })
      if (o.distinct) server.prepareAll()
      const url = await server.start()
      console.log(`rpc: ${url}`)
      const numbers = server.numbers()
      const sparse = !o.repeat && numbers.length > 1 && numbers[numbers.length - 1] - numbers[0] + 1 !== numbers.length
      console.log(`blocks: ${o.repeat ? `${server.first}-${server.last}` : blockList(numbers)}${sparse ? ' (only these: other numbers answer null, so ingest them with --blocks)' : ''}`)
      // the ingest commands that fit: every served block with what all of them have; then the blocks some tables were recorded for
      for (const [i, c] of suggestIngest(recorded, o.chain, url, o.repeat ? { first: server.first, last: server.last } : undefined).entries()) {
        console.log(i === 0 ? `ingest: ${c.command}` : `  ${c.what}: ${c.command}`)
      }
      const stop = () => server.close().then(() => process.exit(0))
      process.once('SIGINT', stop)
      process.once('SIGTERM', stop)
    })
}

/** `replay-rpc` for a recorded Substrate chain: serves it and prints the ingest command that fits. */
async function replaySubstrate(chain: RecordedSubstrateChain, o: { only?: number[]; host?: string; port?: number }): Promise<void> {
  const [{ blockList }, { loadRecordedSubstrate, SubstrateReplayServer }] = await Promise.all([import('../ingest/recorded.js'), import('../ingest/substrate/rpc/replay.js')])
  const recorded = loadRecordedSubstrate(chain)
  if (o.only) recorded.blocks = recorded.blocks.filter((b) => o.only!.includes(b.number))
  if (recorded.blocks.length === 0) throw new InvalidArgumentError(`--only leaves none of the recorded blocks of ${chain}`)
  const server = new SubstrateReplayServer(recorded, { host: o.host, port: o.port })
  const url = await server.start()
  const blocks = blockList(server.numbers())
  console.log(`rpc: ${url}`)
  console.log(`blocks: ${blocks} (only these: other numbers answer null, so ingest them with --blocks)`)
  console.log(`ingest: npx block-archive ingest --family substrate --rpc ${url} --dataset ${chain} --out data/replay/${chain} --blocks ${blocks}`)
  const stop = () => server.close().then(() => process.exit(0))
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
}
