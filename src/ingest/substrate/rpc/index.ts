export { SubstrateRpcSource, SYSTEM_EVENTS_KEY, runtimeVersionKey, type SubstrateRpcOptions } from './fetch.js'
export { createTransport, RpcTransport, type SubstrateTransport, type TransportOptions } from './transport.js'
export type * from './types.js'
