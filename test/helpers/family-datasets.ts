import path from 'node:path'
import { ingestRecordedStarknet } from '../../src/ingest/recorded.js'
import { ingestRecordedSidecar } from '../../src/ingest/substrate/sidecar/recorded.js'
import { anvilRecords, writeDataset } from './dataset.js'

/**
 * One small dataset of each family, from recorded data, in `dir`: `evm` (the anvil chain's 32
 * blocks in 2 chunks of 16: the contract deployments of blocks 1–7, then its 3-block cycle of
 * transfers; every block bigger than a 4 KiB slice), `starknet` and `moonbeam`. Their roots, in
 * that order.
 */
export async function familyDatasets(dir: string): Promise<string[]> {
  const evm = path.join(dir, 'evm')
  await writeDataset(evm, 'evm', (await anvilRecords()).slice(0, 32), 16)
  const starknet = path.join(dir, 'starknet')
  await ingestRecordedStarknet(starknet, 'starknet')
  const moonbeam = path.join(dir, 'moonbeam')
  await ingestRecordedSidecar(moonbeam, 'moonbeam', 'moonbeam', { workers: 0 })
  return [evm, starknet, moonbeam]
}
