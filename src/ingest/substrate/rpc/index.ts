export { SubstrateRpcSource, SYSTEM_EVENTS_KEY, runtimeVersionKey, type SubstrateRpcOptions } from './fetch.js'
export { createTransport, HttpTransport, WsTransport, type SubstrateTransport, type TransportOptions } from './transport.js'
export type * from './types.js'
