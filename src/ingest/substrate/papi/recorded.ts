import path from 'node:path'
import { runIngest, type IngestOptions, type IngestResult } from '../../loop.js'
import { defaultFixturesDir } from '../../recorded.js'
import { PapiDirSource } from './source.js'

/*
 * A Substrate dataset from recorded blocks decoded by polkadot-api (fixtures/substrate/
 * ocelloids-services/derived, see fixtures/SOURCES.md: Moonbeam 16083402) through the real ingest
 * loop: `runIngest` with `family: 'substrate'` and `decodedDir`, every recorded block of the folder
 * (a sparse dataset). The Ethereum-RPC recording of the same block lying in that folder is not a
 * polkadot-api block and is skipped by the source.
 */

/** The folder of recorded polkadot-api blocks. */
export function papiFixturesDir(fixtures = defaultFixturesDir()): string {
  return path.join(fixtures, 'substrate', 'ocelloids-services', 'derived')
}

export async function ingestRecordedPapi(
  outDir: string,
  datasetName: string,
  opts: Partial<Omit<IngestOptions, 'family' | 'sidecar' | 'rpc' | 'decodedDir' | 'out' | 'dataset'>> & { dir?: string } = {},
): Promise<IngestResult> {
  const { dir = papiFixturesDir(), ...rest } = opts
  return runIngest({
    progress: 'none',
    confirmations: 0,
    ...rest,
    blocks: rest.blocks ?? (await new PapiDirSource({ dir }).numbers()),
    family: 'substrate',
    decodedDir: dir,
    out: outDir,
    dataset: datasetName,
  })
}
