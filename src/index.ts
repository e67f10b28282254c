/*
 * The package entry point (`import { ArchiveClient } from 'block-archive'`): the client of the v2
 * archive protocol. Only the client: importing it loads neither DuckDB nor the servers.
 */

export { ArchiveClient, ConnectionError, HttpError, ProtocolError, isRetryable } from './client/archive-client.js'
export type { ArchiveQuery, Batch, Block, BlockHeader, ClientOptions, RangeOptions } from './client/archive-client.js'
