import http from 'node:http'
import path from 'node:path'
import { ingestRecordedStarknet } from '../../src/ingest/recorded.js'
import { ingestRecordedSidecar } from '../../src/ingest/substrate/sidecar/recorded.js'
import { startCluster, type Cluster } from '../../src/server/cluster.js'
import { ArchiveStorage, LocalStorage } from '../../src/server/storage.js'
import { ChunkCache } from '../../src/storage/chunk-cache.js'
import { until } from './cli.js'
import { InvalidQuery, NoBlocksInRange, byFrequency, type Obj } from './answers.js'
import { renderBody, type Family, type FamilyModel, type FilterModel, type FuzzCase, type ListModel } from './arbitraries.js'
import { anvilRecords, writeDataset } from './dataset.js'
import * as evm from './reference-evm.js'
import * as sn from './reference-starknet.js'
import * as sub from './reference-substrate.js'
import { SUBSTRATE_REFERENCE } from './walk-substrate.js'
import { STATIC_DATA_TIMERS, fetchRange, newStats, readLayout, type ChunkInfo, type Served, type WalkReference } from './walk.js'

/*
 * What the fuzz test (test/fuzz-property.test.ts) and `npm run bench -- fuzz` share: one dataset per
 * family served by a router and one worker in this process, the family models the arbitraries draw
 * from (helpers/arbitraries.ts), and `runCase`, which sends one generated case with a timeout and
 * says what is wrong with the answer, if anything:
 *
 * - never a 5xx, a timeout or a connection error;
 * - every 4xx is JSON `{error, message, path?}` with a stable code (`kebab-case`), a non-empty
 *   message, and for a schema error (`invalid-query`) the `path` of the value, named in the message;
 * - what the case expects: the answer the family's reference evaluator computes (the same walk as
 *   the reference tests: 400 where the reference says invalid / no blocks / table missing), the
 *   exact status and body of an equivalent canonical query, or a given status, code and path.
 *
 * Datasets: EVM = the recorded anvil dev chain (128 blocks or the first of them, traces and state diffs, chunks of 16);
 * Starknet = the recorded mainnet blocks (traces, state updates in some chunks only); Substrate =
 * the recorded Sidecar blocks of kusama (nested calls) and moonbeam (EVM logs, Ethereum.transact).
 */

export const FUZZ_DATASETS: { name: string; family: Family }[] = [
  { name: 'evm', family: 'evm' },
  { name: 'starknet', family: 'starknet' },
  { name: 'kusama', family: 'substrate' },
  { name: 'moonbeam', family: 'substrate' },
]

/** The worker's body limit in the fuzz cluster (the default, 8 MiB): bigger bodies must get 413. */
export const FUZZ_BODY_LIMIT = 8 * 1024 * 1024

/**
 * Write the datasets of FUZZ_DATASETS under `root` (a few seconds). `evmBlocks`: the first that many
 * blocks of the anvil chain only (all 128 by default).
 */
export async function buildFuzzDatasets(root: string, opts: { evmBlocks?: number } = {}): Promise<void> {
  await writeDataset(path.join(root, 'evm'), 'evm', (await anvilRecords()).slice(0, opts.evmBlocks), 16)
  await ingestRecordedStarknet(path.join(root, 'starknet'), 'starknet')
  for (const chain of ['kusama', 'moonbeam'] as const) await ingestRecordedSidecar(path.join(root, chain), chain, chain, { workers: 0 })
}

/** One dataset under fuzz. */
export interface FuzzTarget {
  name: string
  family: Family
  model: FamilyModel
  served: Served<any>
  /** `POST` URL of the dataset's queries on the worker. */
  queryUrl: string
  /** The worker's base URL. */
  workerUrl: string
  /** The dataset's base URL at the router (`/height`, `/<block>/worker`). */
  routerBase: string
}

export interface FuzzCluster {
  cluster: Cluster
  targets: FuzzTarget[]
  stop(): Promise<void>
}

// ------------------------------------------------------------------------------------ references and models

/** Table of each item kind (EVM and Starknet chunks may lack some; Substrate chunks have all). */
const TABLE_OF: Record<string, string> = {
  transaction: 'transactions', log: 'logs', trace: 'traces', stateDiff: 'statediffs',
  event: 'events', message: 'messages', stateUpdate: 'state_updates', storageDiff: 'storage_diffs',
}

function lackingBy(involved: (q: Obj) => Set<string>) {
  return (q: Obj) => {
    const kinds = [...involved(q)]
    return (c: ChunkInfo | undefined) => kinds.filter((k) => !c?.tables.includes(TABLE_OF[k])).map((k) => TABLE_OF[k])
  }
}

const REFERENCES: Record<Family, WalkReference<any>> = {
  evm: {
    validate: (q) => {
      for (const k of evm.KINDS) for (const r of (q[evm.REQUEST_KEY[k]] ?? []) as Obj[]) evm.compileRequest(k, r)
    },
    evaluate: evm.evaluate,
    firstDifference: evm.firstDifference,
    itemCount: (blocks) => blocks.reduce((n, b) => n + evm.KINDS.reduce((m, k) => m + (b[evm.REQUEST_KEY[k]]?.length ?? 0), 0), 0),
    lacking: lackingBy(evm.involvedKinds),
  },
  starknet: {
    validate: (q) => {
      for (const k of sn.KINDS) for (const r of (q[sn.REQUEST_KEY[k]] ?? []) as Obj[]) sn.compileRequest(k, r)
    },
    evaluate: sn.evaluate,
    firstDifference: sn.firstDifference,
    itemCount: sn.itemCount,
    lacking: lackingBy(sn.involvedKinds),
  },
  substrate: SUBSTRATE_REFERENCE,
}

const seen = (values: unknown[]) => byFrequency(values.filter((v) => v !== null && v !== undefined))

/** A family model from the reference's filters and relations (the protocol's names) and the data's values. */
export function modelOf(family: Family, data: any[], height: number): FamilyModel {
  const blocks = data.map((b) => b.header.number as number)
  const lists: ListModel[] = []
  let selectors: [string, readonly string[]][]
  if (family === 'substrate') {
    for (const name of sub.LIST_NAMES) {
      const decl = sub.LISTS[name]
      lists.push({
        name,
        filters: Object.entries(decl.filters).map(([key, f]) => ({ key, kind: 'in', values: f.values === 'hex' ? 'hex' : 'exact', seen: sub.valuesOf(data, name, key) })),
        relations: Object.keys(decl.relations),
      })
    }
    selectors = [['block', sub.BLOCK_FIELDS], ...sub.KINDS.map((k) => [k, sub.FIELDS[k]] as [string, readonly string[]])]
  } else if (family === 'starknet') {
    for (const kind of sn.KINDS) {
      const items = sn.itemsOf(data, kind).map((x) => x.item)
      const filters: FilterModel[] = Object.entries(sn.FILTERS[kind]).map(([key, f]) =>
        f.kind === 'in' ? { key, kind: 'in', values: f.values, seen: seen(items.map(f.get)) } : { key, kind: f.kind, seen: seen(items.map((i) => (i.nonce == null ? null : Number(i.nonce)))) },
      )
      lists.push({ name: sn.REQUEST_KEY[kind], filters, relations: Object.keys(sn.RELATIONS[kind]) })
    }
    selectors = [['block', sn.BLOCK_FIELDS], ...sn.KINDS.map((k) => [k, sn.FIELDS[k]] as [string, readonly string[]])]
  } else {
    for (const kind of evm.KINDS) {
      const items = evm.itemsOf(data, kind).map((x) => x.item)
      const filters: FilterModel[] = Object.entries(evm.FILTERS[kind]).map(([key, f]): FilterModel => {
        if (f.kind === 'in') return { key, kind: 'in', values: f.values === 'int' ? 'int' : f.values, seen: seen(items.map(f.get)) }
        if (f.kind === 'nonZero') return { key, kind: 'nonZero', seen: [] }
        return { key, kind: f.kind, seen: seen(items.map((i) => (i.nonce == null ? null : Number(i.nonce)))) }
      })
      lists.push({ name: evm.REQUEST_KEY[kind], filters, relations: Object.keys(evm.RELATIONS[kind]) })
    }
    selectors = Object.entries(evm.ALL_FIELDS).map(([sel, f]) => [sel, Object.keys(f)])
  }
  // parentBlockHash is checked against the stored hash of block fromBlock − 1 when this worker has it.
  const parents = new Map<number, string>()
  const have = new Set(blocks)
  for (const b of data) if (have.has(b.header.number - 1)) parents.set(b.header.number, b.header.parentHash)
  return {
    family,
    type: family === 'evm' ? undefined : family,
    typeAliases: family === 'evm' ? [undefined, 'evm', 'eth'] : [family],
    lists,
    selectors,
    blocks,
    height,
    parents,
    hashValues: family === 'starknet' ? 'felt' : 'hex',
  }
}

// ------------------------------------------------------------------------------------ the cluster

/**
 * A router and one worker in this process over the datasets under `root` (built by
 * buildFuzzDatasets), with the full answer of every dataset fetched for the reference. Budgets: the
 * default size (20 MiB, so answers are cut like in production) but a long time budget, so that the
 * same query always gets the same answer (equivalence cases compare bodies byte for byte).
 */
export async function startFuzzCluster(root: string, opts: { concurrency?: number; queue?: number; localForms?: string } = {}): Promise<FuzzCluster> {
  const cluster = await startCluster({
    storage: new LocalStorage(root),
    // With a cache folder the worker answers from the local forms (once built) instead of the Parquet files.
    workerStorage: opts.localForms
      ? (i) => new ArchiveStorage({ roots: [root], cache: new ChunkCache({ root: path.join(opts.localForms!, `worker-${i}`), label: `fuzz-${i}`, formsAfterReads: 0 }) })
      : undefined,
    workers: 1,
    replication: 1,
    // The data does not change while it is fuzzed: slow pings and head checks (the same code runs).
    ...STATIC_DATA_TIMERS,
    concurrency: opts.concurrency ?? 4,
    queue: opts.queue ?? 256,
    queueTimeoutMs: 120_000,
    budgets: { timeMs: 120_000 },
    bodyLimit: FUZZ_BODY_LIMIT,
  })
  try {
    if (opts.localForms) {
      await until('local forms built', async () => cluster.workers.every((w) => w.node!.localForms().pending === 0 && w.node!.localForms().built > 0) || undefined, 300_000)
    }
    const targets: FuzzTarget[] = []
    for (const { name, family } of FUZZ_DATASETS) {
      const dir = path.join(root, name)
      const chunks = readLayout(dir)
      const routerBase = cluster.datasets.get(name)
      if (!routerBase) throw new Error(`the router does not serve ${name}`)
      // All of it, or the model's height (what above-height cases are judged by) would be wrong.
      const last = chunks[chunks.length - 1].last
      const height = await until(`the router serves ${name} up to ${last}`, async () => {
        const res = await fetch(`${routerBase}/height`)
        const h = res.ok ? Number(await res.text()) : -1
        return h >= last ? h : undefined
      }, 120_000)
      const served: Served<any> = { name, base: routerBase, height, chunks, data: [], workerUrls: new Map(), stats: newStats(), reference: REFERENCES[family] }
      served.data = await fetchFull(family, served)
      const workerUrl = cluster.workers[0].url
      const queryUrl = `${workerUrl}/datasets/${encodeURIComponent(name)}/query`
      // Every chunk is on the one worker.
      for (const c of chunks) served.workerUrls.set(c, queryUrl)
      targets.push({ name, family, model: { ...modelOf(family, served.data, height), name }, served, queryUrl, workerUrl, routerBase })
    }
    return { cluster, targets, stop: () => cluster.stop() }
  } catch (e) {
    await cluster.stop()
    throw e
  }
}

/** Every block, item and field of a dataset (chunk by chunk: a chunk may lack tables). */
async function fetchFull(family: Family, s: Served<any>): Promise<any[]> {
  if (family === 'substrate') return fetchRange(s, sub.fullQuery(0), 0, s.height, () => {})
  const out: any[] = []
  for (const c of s.chunks) {
    const all = family === 'evm' ? evm.KINDS : sn.KINDS
    const kinds = all.filter((k) => c.tables.includes(TABLE_OF[k]))
    const q = family === 'evm' ? evm.fullQuery(c.coverFrom, c.last, kinds as evm.Kind[]) : sn.fullQuery(c.coverFrom, c.last, kinds as sn.Kind[])
    const key = (k: string) => (family === 'evm' ? evm.REQUEST_KEY[k as evm.Kind] : sn.OUTPUT_KEY[k as sn.Kind])
    out.push(...(await fetchRange(s, q, c.coverFrom, c.last, (b: Obj) => {
      for (const k of all) if (!kinds.includes(k as never)) b[key(k)] = []
    })))
  }
  return out
}

// ------------------------------------------------------------------------------------ sending

export interface Answer {
  status: number
  headers: http.IncomingHttpHeaders
  text: string
  ms: number
}

export interface SendOptions {
  method?: string
  headers?: Record<string, string | undefined>
  body?: string | Buffer
  timeoutMs: number
  /** Close the connection early: after this many bytes of the body (announcing all of it), or of the answer. */
  hangUp?: { bodyBytes?: number; answerBytes?: number }
}

/**
 * One request on its own connection, with a timeout; rejects with `timeout after … ms` or the
 * socket error. With `hangUp` it resolves once it has hung up (status 0 if no answer had begun).
 */
export function send(url: string, o: SendOptions): Promise<Answer> {
  const t0 = performance.now()
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = {}
    for (const [k, v] of Object.entries(o.headers ?? {})) if (v !== undefined) headers[k] = v
    if (o.body !== undefined) headers['content-length'] = String(Buffer.byteLength(o.body))
    let status = 0
    let resHeaders: http.IncomingHttpHeaders = {}
    const parts: Buffer[] = []
    const hungUp = () => {
      clearTimeout(timer)
      req.destroy()
      resolve({ status, headers: resHeaders, text: Buffer.concat(parts).toString('utf8'), ms: performance.now() - t0 })
    }
    const req = http.request(url, { method: o.method ?? 'POST', headers, agent: false }, (res) => {
      status = res.statusCode!
      resHeaders = res.headers
      let got = 0
      res.on('data', (d: Buffer) => {
        parts.push(d)
        got += d.length
        if (o.hangUp?.answerBytes !== undefined && got >= o.hangUp.answerBytes) hungUp()
      })
      res.on('error', fail)
      res.on('end', () => {
        clearTimeout(timer)
        resolve({ status, headers: res.headers, text: Buffer.concat(parts).toString('utf8'), ms: performance.now() - t0 })
      })
    })
    const timer = setTimeout(() => req.destroy(new Error(`timeout after ${o.timeoutMs} ms`)), o.timeoutMs)
    function fail(e: Error) {
      clearTimeout(timer)
      reject(e)
    }
    req.on('error', fail)
    if (o.hangUp?.bodyBytes !== undefined && o.body !== undefined) {
      req.write(Buffer.from(o.body).subarray(0, o.hangUp.bodyBytes))
      setTimeout(hungUp, 20)
    } else req.end(o.body)
  })
}

const post = (url: string, body: string, timeoutMs: number) => send(url, { headers: { 'content-type': 'application/json' }, body, timeoutMs })

// ------------------------------------------------------------------------------------ judging

const CODE = /^[a-z][a-z0-9]*(-[a-z0-9]+)*$/

/** What is wrong with the shape of any answer (status, JSON error body), or undefined. */
export function shapeProblem(a: Answer, method = 'POST'): string | undefined {
  if (a.status >= 500) return `status ${a.status}: ${a.text.slice(0, 300)}`
  if (a.status < 400) return undefined
  if (method === 'HEAD') return undefined
  if (!String(a.headers['content-type'] ?? '').startsWith('application/json')) return `${a.status} with content-type ${a.headers['content-type']}: ${a.text.slice(0, 200)}`
  let body: any
  try {
    body = JSON.parse(a.text)
  } catch {
    return `${a.status} with a body that is not JSON: ${a.text.slice(0, 200)}`
  }
  if (!body || typeof body !== 'object' || Array.isArray(body)) return `${a.status} with a JSON body that is not an object: ${a.text.slice(0, 200)}`
  if (typeof body.error !== 'string' || !CODE.test(body.error)) return `${a.status}: "error" is not a stable code: ${a.text.slice(0, 300)}`
  if (typeof body.message !== 'string' || body.message.trim() === '') return `${a.status} ${body.error}: no message: ${a.text.slice(0, 300)}`
  if (body.path !== undefined && typeof body.path !== 'string') return `${a.status} ${body.error}: "path" is not a string: ${a.text.slice(0, 300)}`
  if (body.error === 'invalid-query' && body.path && !body.message.includes(body.path) && !body.message.includes(`"${body.path}"`)) {
    return `invalid-query whose message does not name its path ${body.path}: ${body.message.slice(0, 300)}`
  }
  if (a.status === 503 || a.status === 429) {
    if (!/^\d+$/.test(String(a.headers['retry-after'] ?? ''))) return `${a.status} without Retry-After`
  }
  return undefined
}

const errorOf = (a: Answer): { error?: string; message?: string; path?: string; previousBlocks?: unknown } => {
  try {
    return JSON.parse(a.text)
  } catch {
    return {}
  }
}

const show = (q: unknown) => {
  const s = JSON.stringify(q) ?? String(q)
  return s.length > 600 ? s.slice(0, 600) + `… (${s.length} chars)` : s
}

/**
 * Check the answer `a` to query `q` (as posted, starting at `q.fromBlock`) against the family's
 * reference, as the reference tests' walk does; returns a failure, or where to continue (the
 * answer ended before the range did).
 */
function judgeStep(t: FuzzTarget, q: Obj, a: Answer): { failure?: string; next?: number } {
  const { served: s } = t
  const ref = s.reference
  const ctx = () => `query: ${show(q)}\nanswer ${a.status}: ${a.text.slice(0, 400)}`
  const refuse = (codes: string[], why: string) => {
    const e = errorOf(a)
    if (a.status !== 400 || !codes.includes(e.error ?? '')) return { failure: `expected 400 ${codes.join(' or ')} (${why})\n${ctx()}` }
    return {}
  }
  try {
    ref.validate(q)
  } catch (e) {
    if (!(e instanceof InvalidQuery)) throw e
    const r = refuse(['invalid-query'], `the reference refuses it: ${e.message}`)
    if (r.failure) return r
    return errorOf(a).path ? {} : { failure: `invalid-query without a path\n${ctx()}` }
  }
  if (q.fromBlock > s.height) return refuse(['above-height'], `fromBlock above the height ${s.height}`)
  const to = q.toBlock ?? Infinity
  let noBlocks = false
  try {
    ref.evaluate(s.data, { ...q, toBlock: to === Infinity ? undefined : to })
  } catch (e) {
    if (!(e instanceof NoBlocksInRange)) throw e
    noBlocks = true
  }
  const chunkOf = (n: number) => s.chunks.find((c) => c.coverFrom <= n && n <= c.last)
  const lacking = ref.lacking?.(q) ?? (() => [])
  const missing = lacking(chunkOf(q.fromBlock))
  if (noBlocks || missing.length) {
    return refuse([...(noBlocks ? ['no-blocks-in-range'] : []), ...(missing.length ? ['table-not-available'] : [])], noBlocks ? 'no block in the range' : `the first chunk lacks ${missing.join(', ')}`)
  }
  if (a.status !== 200) return { failure: `expected 200\n${ctx()}` }
  let got: Obj[]
  try {
    got = JSON.parse(a.text)
  } catch (e) {
    return { failure: `200 whose body is not JSON (${(e as Error).message})\n${ctx()}` }
  }
  if (!Array.isArray(got) || got.length === 0) return { failure: `200 with an empty or non-array answer\n${ctx()}` }
  const last = got[got.length - 1]?.header?.number
  if (!Number.isInteger(last) || last < q.fromBlock || last > to) return { failure: `last block ${last} outside [${q.fromBlock}, ${to}]\n${ctx()}` }
  for (const b of got) {
    const without = lacking(chunkOf(b.header?.number))
    if (without.length) return { failure: `block ${b.header?.number} returned from a chunk without ${without.join(', ')}\n${ctx()}` }
  }
  const diff = ref.firstDifference(got, ref.evaluate(s.data, { ...q, toBlock: last }))
  if (diff) return { failure: `answer differs from the reference: ${diff}\n${ctx()}` }
  return last < Math.min(to, s.height) ? { next: last + 1 } : {}
}

/** Judge the first answer of `q`, then walk the rest of its range (the answer may stop early). */
async function judgeWalk(t: FuzzTarget, q: Obj, first: Answer, timeoutMs: number): Promise<string | undefined> {
  let step = judgeStep(t, q, first)
  for (let i = 0; step.next !== undefined; i++) {
    if (i > 1000) return `walk of ${show(q)} did not end`
    // A continuation has no parent hash to check (the client would send the last hash it got).
    const { parentBlockHash: _, ...rest } = q
    const sub = { ...rest, fromBlock: step.next }
    const a = await post(t.queryUrl, JSON.stringify(sub), timeoutMs)
    const p = shapeProblem(a)
    if (p) return `${p}\nquery: ${show(sub)}`
    step = judgeStep(t, sub, a)
  }
  return step.failure
}

export interface CaseResult {
  /** `200`, `400 invalid-query`, `timeout`, `error: ECONNRESET`, … */
  outcome: string
  failure?: string
  ms: number
}

/** Send a case and check every property; never throws for a failing server (returns `failure`). */
export async function runCase(t: FuzzTarget, c: FuzzCase, timeoutMs = 20_000): Promise<CaseResult> {
  const t0 = performance.now()
  const body = c.body === undefined ? undefined : renderBody(c.body)
  const url = c.path === undefined ? t.queryUrl : t.workerUrl + c.path
  const method = c.method ?? 'POST'
  const headers = c.headers ?? { 'content-type': 'application/json' }
  if (c.hangUp) {
    // The client goes away: whatever the worker did must not be a 5xx, and its query slot and
    // leases must come back (checkHealthy after the cases).
    try {
      const a = await send(url, { method, headers, body, timeoutMs, hangUp: c.hangUp })
      return { outcome: a.status ? `${a.status}, hung up` : 'hung up', failure: a.status >= 500 ? `status ${a.status} before the hang-up` : undefined, ms: performance.now() - t0 }
    } catch (e) {
      const msg = (e as Error).message
      return { outcome: msg.startsWith('timeout') ? 'timeout' : 'hung up', failure: msg.startsWith('timeout') ? msg : undefined, ms: performance.now() - t0 }
    }
  }
  let a: Answer
  try {
    a = await send(url, { method, headers, body, timeoutMs })
  } catch (e) {
    const msg = (e as Error).message
    const outcome = msg.startsWith('timeout') ? 'timeout' : `error: ${(e as NodeJS.ErrnoException).code ?? msg}`
    return { outcome, failure: `${outcome} (${msg})`, ms: performance.now() - t0 }
  }
  const outcome = a.status >= 400 ? `${a.status} ${errorOf(a).error ?? '?'}` : String(a.status)
  const done = (failure?: string): CaseResult => ({ outcome, failure, ms: performance.now() - t0 })
  const shape = shapeProblem(a, method)
  if (shape) return done(shape)
  const size = body === undefined ? 0 : Buffer.byteLength(body)
  if (size > FUZZ_BODY_LIMIT && method === 'POST' && c.path === undefined) {
    return done(a.status === 413 && errorOf(a).error === 'body-too-large' ? undefined : `a ${size}-byte body answered ${outcome}, not 413 body-too-large`)
  }
  const e = c.expect
  switch (e.kind) {
    case 'answer': {
      let q: Obj
      try {
        q = JSON.parse(typeof body === 'string' ? body : '')
      } catch {
        return done('an answer case whose body is not JSON (a bug of the arbitrary)')
      }
      return done(await judgeWalk(t, q, a, timeoutMs))
    }
    case 'same': {
      const canonical = JSON.stringify(e.as)
      let b: Answer
      try {
        b = await post(t.queryUrl, canonical, timeoutMs)
      } catch (err) {
        return done(`the canonical query failed: ${(err as Error).message}`)
      }
      if (b.status !== a.status || b.text !== a.text) {
        return done(`not answered like its canonical form:\n${a.status} ${a.text.slice(0, 300)}\nvs canonical ${b.status} ${b.text.slice(0, 300)}\ncanonical: ${show(e.as)}`)
      }
      return done(await judgeWalk(t, e.as, b, timeoutMs))
    }
    case 'refuse': {
      const err = errorOf(a)
      if (a.status !== e.status || !e.codes.includes(err.error ?? '')) return done(`expected ${e.status} ${e.codes.join(' or ')}, got ${a.status}: ${a.text.slice(0, 400)}`)
      if (e.path !== undefined && !(err.path ?? '').startsWith(e.path)) return done(`expected path ${e.path}…, got ${JSON.stringify(err.path)}: ${a.text.slice(0, 400)}`)
      if (e.path !== undefined && e.path !== '' && err.path === undefined) return done(`expected path ${e.path}, got none: ${a.text.slice(0, 400)}`)
      for (const m of e.mentions ?? []) if (!err.message?.includes(m)) return done(`the message does not mention ${JSON.stringify(m.slice(0, 100))}: ${err.message?.slice(0, 300)}`)
      if (e.codes.includes('fork') && !(Array.isArray(err.previousBlocks) && err.previousBlocks.length > 0)) return done(`409 fork without previousBlocks: ${a.text.slice(0, 300)}`)
      return done()
    }
    case 'client-error':
      return done(a.status >= 400 && a.status < 500 ? undefined : `expected a 4xx, got ${a.status}: ${a.text.slice(0, 300)}`)
    case 'any':
      return done()
  }
}

/**
 * A valid query of the dataset still gets the reference's answer (after a batch of cases), and the
 * worker has no query slot, queue place or chunk lease left taken.
 */
export async function checkHealthy(t: FuzzTarget, cluster: Cluster, timeoutMs = 20_000, idle = true): Promise<string | undefined> {
  const q: Obj = { ...(t.model.type ? { type: t.model.type } : {}), fromBlock: t.model.blocks[0], includeAllBlocks: true, fields: { block: { timestamp: true } } }
  for (const l of t.model.lists.slice(0, 2)) q[l.name] = [{}]
  let a: Answer
  try {
    a = await post(t.queryUrl, JSON.stringify(q), timeoutMs)
  } catch (e) {
    return `the canary query failed: ${(e as Error).message}`
  }
  const problem = shapeProblem(a) ?? (await judgeWalk(t, q, a, timeoutMs))
  if (problem) return `the canary query: ${problem}`
  if (!idle) return undefined
  // The worker releases a query's slot and leases after its last byte, or once a query whose client
  // hung up has stopped: that takes some seconds, far more on a machine stalled by CPU burners.
  const w = cluster.workers[0]
  const leases = () => w.node?.activeLeases() ?? 0
  const deadline = Date.now() + 120_000
  for (;;) {
    const { active, queued } = w.limiter.stats
    const held = leases()
    if (active === 0 && queued === 0 && held === 0) return undefined
    if (Date.now() > deadline) return `after the cases the worker still counts ${active} running and ${queued} queued queries, ${held} leases`
    await new Promise((r) => setTimeout(r, 50))
  }
}
