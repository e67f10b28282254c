/* The names of the recorded chains in fixtures/, apart from their loaders so that `replay-rpc --help` lists them without loading those. */

/** Chains with recorded blocks in fixtures/evm/squid-sdk. */
export const RECORDED_CHAINS = ['ethereum', 'polygon', 'arbitrum', 'cronos', 'tempo-mainnet', 'stable', 'stable-testnet'] as const
export type RecordedChainName = (typeof RECORDED_CHAINS)[number]

/** Recorded Starknet chains in fixtures/starknet. */
export const RECORDED_STARKNET_CHAINS = ['starknet-mainnet', 'starknet-sepolia'] as const
export type RecordedStarknetChain = (typeof RECORDED_STARKNET_CHAINS)[number]

/** Recorded Substrate chains: raw SCALE blocks with their events and metadata (src/ingest/substrate/rpc/replay.ts). */
export const RECORDED_SUBSTRATE_CHAINS = ['rococo-contracts', 'polkadot', 'rococo'] as const
export type RecordedSubstrateChain = (typeof RECORDED_SUBSTRATE_CHAINS)[number]
