import { runIngest, type IngestOptions, type IngestResult } from '../../loop.js'
import { loadRecordedSidecar, SidecarReplayServer, type SidecarChain } from './replay.js'

/*
 * A Substrate dataset from recorded Sidecar answers (fixtures/substrate/substrate-api-sidecar, see
 * fixtures/SOURCES.md) through the real ingest loop: a replay Sidecar on 127.0.0.1 and `runIngest`
 * with `family: 'substrate'`, every recorded block of the chain (a sparse dataset).
 */

export async function ingestRecordedSidecar(
  outDir: string,
  datasetName: string,
  chain: SidecarChain,
  opts: Partial<Omit<IngestOptions, 'family' | 'sidecar' | 'rpc' | 'out' | 'dataset'>> & { fixturesDir?: string } = {},
): Promise<IngestResult> {
  const { fixturesDir, ...rest } = opts
  const recorded = loadRecordedSidecar(chain, fixturesDir)
  const server = new SidecarReplayServer(recorded)
  const url = await server.start()
  try {
    return await runIngest({
      progress: 'none',
      confirmations: 0,
      ...rest,
      blocks: rest.blocks ?? recorded.map((r) => r.number),
      family: 'substrate',
      sidecar: url,
      out: outDir,
      dataset: datasetName,
    })
  } finally {
    await server.close()
  }
}
