import { Registry, collectDefaultMetrics } from 'prom-client'

/** One registry per process, served at `/metrics` by the router and the workers. */
export const registry = new Registry()
collectDefaultMetrics({ register: registry })
