import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { after, before, describe, it } from 'node:test'
import type { FastifyInstance } from 'fastify'
import { ApiError } from '../src/errors.js'
import { signTicket, workerToken, WORKER_TOKEN_HEADER } from '../src/server/auth.js'
import { createHttp } from '../src/server/http.js'
import { routeTable, type RouteEntry } from '../src/server/route-access.js'
import { RouterServer } from '../src/server/router-http.js'
import { DEFAULT_ROUTER_OPTIONS, DEFAULT_WORKER_LIMITS } from '../src/server/defaults.js'
import { LocalStorage } from '../src/server/storage.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { tempDir } from './helpers/dataset.js'

/*
 * Every route of the router and of a worker is public, data or peer (src/server/route-access.ts),
 * data unless it says otherwise. The routes registered must be exactly those of the table in
 * docs/serving.md ("Access control and limits"), and each, asked without credentials and with them,
 * must refuse or admit as its kind says.
 */

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const SECRET = randomBytes(32)
const KEY = `tester-${randomBytes(12).toString('hex')}`
/** The codes of access refusals: anything else means the request got past the check. */
const REFUSALS = new Set(['api-key-required', 'invalid-api-key', 'revoked-api-key', 'rate-limited', 'invalid-ticket', 'ticket-expired', 'worker-token-required', 'invalid-worker-token'])

type Service = 'router' | 'worker'
const line = (service: Service, r: { method: string; url: string; access: string }) => `${service} ${r.method} ${r.url} ${r.access}`

/** The table of docs/serving.md: `router GET / public`, … */
async function documentedRoutes(): Promise<string[]> {
  const doc = await readFile(path.join(REPO, 'docs/serving.md'), 'utf8')
  const rows = [...doc.matchAll(/^\| (router|worker) \| `(GET|POST) ([^`]+)` \| (public|data|peer) \|$/gm)]
  return rows.map(([, service, method, url, access]) => `${service} ${method} ${url} ${access}`).sort()
}

/** fastify's own list of routes (printRoutes), as `METHOD /path`: independent of route-access.ts's table. */
function fastifyRoutes(app: FastifyInstance): string[] {
  const out: string[] = []
  const stack: string[] = []
  for (const text of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const m = /^([│ ]*)[├└]── (\S+)(?: \(([^)]+)\))?$/.exec(text)
    if (!m) continue
    const depth = m[1].length / 4
    stack.length = depth
    stack.push(m[2])
    for (const method of m[3]?.split(', ') ?? []) out.push(`${method} ${stack.join('')}`)
  }
  return out.sort()
}

/** A URL of the route with its parameters filled in. */
function concrete(url: string, key = 'not-a-key-0123456789'): string {
  return url.replace(':name', 'ds').replace(':block', '5').replace(':key', key)
}

describe('route access', { timeout: 120_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let router: RouterServer
  let worker: WorkerServer

  before(async () => {
    tmp = await tempDir('ba-route-access-')
    const keysFile = path.join(tmp.dir, 'keys.txt')
    await writeFile(keysFile, `${KEY} tester\n`)
    const storage = new LocalStorage(tmp.dir)
    router = new RouterServer({ ...DEFAULT_ROUTER_OPTIONS, storage, access: { keysFile, ticketSecret: SECRET, rateLimit: 1000 } })
    worker = new WorkerServer({ storage, heartbeatMs: 2000, dropGraceMs: 1000, ...DEFAULT_WORKER_LIMITS, ticketSecret: SECRET })
    await router.app.ready()
    await worker.app.ready()
  })

  after(async () => {
    await router?.app.close()
    await worker?.app.close()
    await tmp?.cleanup()
  })

  const services = (): [Service, FastifyInstance][] => [['router', router.app], ['worker', worker.app]]

  it('the routes registered are exactly those of the table in docs/serving.md, with the same access', async () => {
    const registered: string[] = []
    for (const [service, app] of services()) {
      const table = routeTable(app)
      // route-access.ts saw every route fastify has (a route it missed would have no check).
      assert.deepEqual(table.map((r) => `${r.method} ${r.url}`).sort(), fastifyRoutes(app), `${service}: route table and fastify's routes`)
      for (const r of table) {
        assert.ok(['public', 'data', 'peer'].includes(r.access), `${line(service, r)}: unknown access`)
        if (r.method === 'HEAD') {
          const get = table.find((g) => g.method === 'GET' && g.url === r.url)
          assert.equal(get?.access, r.access, `${service} HEAD ${r.url}: same access as its GET`)
        } else registered.push(line(service, r))
      }
    }
    const documented = await documentedRoutes()
    assert.ok(documented.length >= 10, `docs/serving.md has the route table (found ${documented.length} rows)`)
    assert.deepEqual(registered.sort(), documented)
    // What the docs promised before the table, kept: the public routes.
    const publicRoutes = (service: Service) => documented.filter((d) => d.startsWith(`${service} `) && d.endsWith(' public')).map((d) => d.split(' ').slice(1, 3).join(' '))
    assert.deepEqual(publicRoutes('router'), ['GET /', 'GET /datasets', 'GET /health', 'GET /metrics', 'GET /ready', 'GET /status', 'POST /notify'])
    assert.deepEqual(publicRoutes('worker'), ['GET /health', 'GET /metrics', 'GET /ready', 'GET /status'])
  })

  /** Ask `route` of `app` with the given headers (and a key in the path when it takes one). */
  async function ask(app: FastifyInstance, r: RouteEntry, headers: Record<string, string> = {}, opts: { key?: string; query?: string } = {}) {
    const res = await app.inject({
      method: r.method as 'GET' | 'POST' | 'HEAD',
      url: concrete(r.url, opts.key) + (opts.query ?? ''),
      headers: r.method === 'POST' ? { 'content-type': 'application/json', ...headers } : headers,
      payload: r.method === 'POST' ? JSON.stringify({ fromBlock: 5 }) : undefined,
    })
    const code = res.statusCode >= 400 && res.body ? (JSON.parse(res.body) as { error?: string }).error : undefined
    return { status: res.statusCode, code, headers: res.headers }
  }

  it('without credentials, data and peer routes refuse as before and public ones answer', async () => {
    for (const [service, app] of services()) {
      for (const r of routeTable(app)) {
        const got = await ask(app, r)
        const what = `${line(service, r)} → ${got.status} ${got.code}`
        // A HEAD answer has no body: its status tells.
        const refused = (status: number, code: string) => assert.deepEqual([got.status, got.code], [status, r.method === 'HEAD' ? undefined : code], what)
        if (r.access === 'public') {
          assert.ok(!REFUSALS.has(got.code ?? ''), what)
          assert.ok(![401, 403, 429].includes(got.status), what)
        } else if (r.access === 'peer') {
          refused(401, 'worker-token-required')
        } else if (service === 'worker') {
          refused(403, 'invalid-ticket')
        } else if (r.url.includes(':key')) {
          // the key in the path is not one of the keys file
          refused(403, 'invalid-api-key')
        } else {
          refused(401, 'api-key-required')
          assert.equal(got.headers['www-authenticate'], 'Bearer realm="block-archive"', what)
        }
      }
    }
  })

  it('with credentials, data and peer routes let the request through to its handler', async () => {
    const ticket = signTicket(SECRET, { dataset: 'ds', from: 5, to: 5, key: 'tester', expires: Date.now() + 60_000 })
    for (const [service, app] of services()) {
      for (const r of routeTable(app)) {
        if (r.access === 'public') continue
        const got = r.access === 'peer'
          ? await ask(app, r, { [WORKER_TOKEN_HEADER]: workerToken(SECRET) })
          : service === 'worker'
            ? await ask(app, r, {}, { query: `?ticket=${ticket}` })
            : r.url.includes(':key')
              ? await ask(app, r, {}, { key: KEY })
              : await ask(app, r, { authorization: `Bearer ${KEY}` })
        const what = `${line(service, r)} → ${got.status} ${got.code}`
        assert.ok(!REFUSALS.has(got.code ?? ''), what)
        assert.ok(![401, 403, 429].includes(got.status), what)
      }
    }
  })

  it('a route registered without an access is a data route: its check runs before the handler', async () => {
    let handled = 0
    const app = createHttp({
      service: 'router',
      access: {
        data: () => {
          throw new ApiError(401, 'api-key-required', 'data check')
        },
        peer: () => {
          throw new ApiError(401, 'worker-token-required', 'peer check')
        },
      },
    })
    try {
      app.get('/new', async () => ++handled)
      app.post('/new-peer', { config: { access: 'peer' } }, async () => ++handled)
      app.get('/new-public', { config: { access: 'public' } }, async () => ++handled)
      await app.ready()
      assert.deepEqual(routeTable(app).filter((r) => r.url.startsWith('/new')).map((r) => line('router', r)), [
        'router GET /new data',
        'router HEAD /new data',
        'router POST /new-peer peer',
        'router GET /new-public public',
        'router HEAD /new-public public',
      ])
      const refused = await app.inject({ method: 'GET', url: '/new' })
      assert.deepEqual([refused.statusCode, JSON.parse(refused.body).error], [401, 'api-key-required'])
      const peer = await app.inject({ method: 'POST', url: '/new-peer' })
      assert.deepEqual([peer.statusCode, JSON.parse(peer.body).error], [401, 'worker-token-required'])
      assert.equal(handled, 0, 'no handler ran')
      const open = await app.inject({ method: 'GET', url: '/new-public' })
      assert.deepEqual([open.statusCode, open.body], [200, '1'])
    } finally {
      await app.close()
    }
  })
})
