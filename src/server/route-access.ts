import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { ApiError } from '../errors.js'
import { accessDenied, checkWorkerToken, WORKER_TOKEN_HEADER } from './auth.js'

/*
 * Who may call each route (docs/serving.md, "Access control and limits"). Every route gets its
 * check from here, when it is registered: a route that does not say otherwise serves data and is
 * checked, so a new route cannot be left open by forgetting a call.
 */

/**
 * - `public`: anyone (listing, status, health, metrics); a route must ask for it
 *   (`{ config: { access: 'public' } }`).
 * - `data`: clients; with access control on, the router wants an API key and applies the rate limit,
 *   the worker wants a ticket. The default.
 * - `peer`: the router and its workers talking to each other, signed with the ticket secret.
 */
export type RouteAccess = 'public' | 'data' | 'peer'

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: RouteAccess
  }
}

/** Throws the answer (an ApiError) when the request may not go on; runs before the body is read. */
export type AccessCheck = (req: FastifyRequest, reply: FastifyReply) => void | Promise<void>

export type AccessChecks = Record<Exclude<RouteAccess, 'public'>, AccessCheck>

export interface RouteEntry {
  method: string
  url: string
  access: RouteAccess
}

/** `{ config: { access: 'public' } }`: the options of a route open to anyone. */
export const PUBLIC = { config: { access: 'public' as const } }

const tables = new WeakMap<FastifyInstance, RouteEntry[]>()

/** Give every route registered on `app` from now on the check of its access (`data` unless it says). */
export function guardRoutes(app: FastifyInstance, checks: AccessChecks): void {
  const table: RouteEntry[] = []
  tables.set(app, table)
  app.addHook('onRoute', (route) => {
    const access = route.config?.access ?? 'data'
    route.config = { ...route.config, access }
    for (const method of [route.method].flat()) table.push({ method, url: route.url, access })
    if (access === 'public') return
    const check = checks[access]
    const guard: onRequestHookHandler = async (req, reply) => {
      await check(req, reply)
    }
    route.onRequest = [guard, ...[route.onRequest ?? []].flat()]
  })
}

/** Every route registered on `app` since guardRoutes, with its access. */
export function routeTable(app: FastifyInstance): readonly RouteEntry[] {
  const table = tables.get(app)
  if (!table) throw new Error('routeTable: guardRoutes was not called on this instance')
  return table
}

/** The `peer` check of either side: with a ticket secret, the request carries a token signed with it. */
export function peerCheck(service: 'router' | 'worker', secret: Buffer | undefined): AccessCheck {
  return (req) => {
    if (!secret) return
    try {
      checkWorkerToken(secret, req.headers[WORKER_TOKEN_HEADER])
    } catch (e) {
      if (e instanceof ApiError) accessDenied.inc({ service, code: e.code })
      throw e
    }
  }
}
