import assert from 'node:assert/strict'
import { readdirSync } from 'node:fs'
import path from 'node:path'
import { HttpClient } from '@subsquid/http-client'
import { ArchiveClient } from '@subsquid/util-internal-archive-client'
import { startCluster, type Cluster, type ClusterOptions } from '../../src/server/cluster.js'
import { LocalStorage } from '../../src/server/storage.js'
import { InvalidQuery, NoBlocksInRange, type Obj } from './answers.js'
import { runCli } from './cli.js'
import { stallTolerant } from './dataset.js'
import { postJson } from './http.js'

/*
 * What the reference tests of every family share to walk queries through a router and its workers
 * like a client: the served dataset and its chunks, the worker URL cache, the retry on a 503
 * `not-available`, the walk that compares every answer with the family's reference evaluation, the
 * stats, and the pieces of query generation that do not depend on the family (seeded random
 * numbers, ranges, random field selections). The family comes in as a `WalkReference`.
 */

// ------------------------------------------------------------------------------------ served layout

export interface ChunkInfo {
  first: number
  last: number
  /** First block number the chunk answers for (after the previous chunk; gaps belong to the next chunk). */
  coverFrom: number
  /** Its tables, sorted. */
  tables: string[]
}

/** Chunks of a dataset as stored (docs/protocol.md §8: `<top>/<first>-<last>-<hash>/<table>.parquet`). */
export function readLayout(dir: string): ChunkInfo[] {
  const chunks: ChunkInfo[] = []
  for (const top of readdirSync(dir).filter((x) => /^\d+$/.test(x))) {
    for (const name of readdirSync(path.join(dir, top))) {
      const m = /^(\d+)-(\d+)-/.exec(name)
      if (!m) continue
      const tables = readdirSync(path.join(dir, top, name)).filter((f) => f.endsWith('.parquet')).map((f) => f.replace(/\.parquet$/, '')).sort()
      chunks.push({ first: Number(m[1]), last: Number(m[2]), coverFrom: 0, tables })
    }
  }
  chunks.sort((a, b) => a.first - b.first)
  chunks.forEach((c, i) => (c.coverFrom = i === 0 ? 0 : chunks[i - 1].last + 1))
  return chunks
}

// ------------------------------------------------------------------------------------ serving and walking

export interface Stats {
  queries: number
  requests: number
  answers: number
  items: number
  refusals: number
}
export const newStats = (): Stats => ({ queries: 0, requests: 0, answers: 0, items: 0, refusals: 0 })

/** What a walk needs of a family's reference evaluator. */
export interface WalkReference<B> {
  /** Throws InvalidQuery (answers.ts) for a query the worker must refuse. */
  validate(query: Obj): void
  /** The reference answer (throws NoBlocksInRange for a range without blocks). */
  evaluate(data: B[], query: Obj): Obj[]
  firstDifference(got: Obj[], expected: Obj[]): string | undefined
  itemCount(blocks: Obj[]): number
  /**
   * The family's table-availability rule: for a query, what a chunk lacks of what it needs (the
   * worker answers 400 `table-not-available` when the first chunk of the range lacks something, and
   * returns no block from such a chunk). Without it every chunk has every table.
   */
  lacking?(query: Obj): (chunk: ChunkInfo | undefined) => string[]
}

/** A dataset served by a cluster, with its full answer (`data`). */
export interface Served<B> {
  /** Named in messages when several datasets are walked. */
  name?: string
  base: string
  height: number
  chunks: ChunkInfo[]
  data: B[]
  workerUrls: Map<ChunkInfo, string>
  stats: Stats
  reference: WalkReference<B>
}

const chunkOf = <B>(s: Served<B>, n: number) => s.chunks.find((c) => c.coverFrom <= n && n <= c.last)

async function workerFor<B>(s: Served<B>, n: number): Promise<string> {
  const c = chunkOf(s, n)!
  let url = s.workerUrls.get(c)
  if (!url) {
    const res = await fetch(`${s.base}/${n}/worker`)
    assert.equal(res.status, 200, `router: no worker for ${s.name ? `${s.name} ` : ''}block ${n}`)
    url = await res.text()
    s.workerUrls.set(c, url)
  }
  return url
}

/**
 * Post `body` to the worker serving block `n`. Right after start the router may move a chunk to the
 * second worker and the first one drops it: its 503 `not-available` sends the client back to the
 * router, as a client does.
 */
export async function postRouted<B>(s: Served<B>, n: number, body: Obj): Promise<Awaited<ReturnType<typeof postJson>>> {
  for (let attempt = 0; ; attempt++) {
    const res = await postJson(await workerFor(s, n), body)
    if (res.status !== 503 || attempt >= 50 || JSON.parse(res.text).error !== 'not-available') return res
    s.workerUrls.delete(chunkOf(s, n)!)
    await new Promise((r) => setTimeout(r, 100))
  }
}

/**
 * Walk `q` from `fromBlock` to `toBlock` (or the height) as a client does, comparing every answer
 * with the reference for the range it covers; a 400 is expected (and ends the walk) for an invalid
 * query, where the rest of the range has no block, and where its first chunk lacks a table the
 * query needs (`lacking`). Returns the blocks received.
 */
export async function walkServed<B>(s: Served<B>, q: Obj, what: string): Promise<Obj[]> {
  const { data, height, stats, reference: ref } = s
  const label = s.name ? `${s.name}: ` : ''
  stats.queries++
  const received: Obj[] = []
  const lacking = ref.lacking?.(q) ?? (() => [])
  let invalid = false
  try {
    ref.validate(q)
  } catch (e) {
    if (!(e instanceof InvalidQuery)) throw e
    invalid = true
  }
  const to = q.toBlock ?? Infinity
  for (let next = q.fromBlock; next <= to && next <= height;) {
    const sub = { ...q, fromBlock: next }
    const res = await postRouted(s, next, sub)
    stats.requests++
    const ctx = () => `${label}${what}\nquery: ${JSON.stringify(sub).slice(0, 1500)}\nanswer ${res.status}: ${res.text.slice(0, 300)}`
    if (invalid) {
      assert.equal(res.status, 400, ctx())
      assert.equal(JSON.parse(res.text).error, 'invalid-query', ctx())
      stats.refusals++
      break
    }
    let noBlocks = false
    try {
      ref.evaluate(data, { ...sub, toBlock: to === Infinity ? undefined : to })
    } catch (e) {
      if (!(e instanceof NoBlocksInRange)) throw e
      noBlocks = true
    }
    const missing = lacking(chunkOf(s, next))
    if (noBlocks || missing.length > 0) {
      const codes = [...(noBlocks ? ['no-blocks-in-range'] : []), ...(missing.length ? ['table-not-available'] : [])]
      assert.equal(res.status, 400, `expected 400 ${codes.join('/')}${missing.length ? ` (missing tables: ${missing.join(', ')})` : ''}\n${ctx()}`)
      const body = JSON.parse(res.text)
      assert.ok(codes.includes(body.error), `expected ${codes.join(' or ')}, got ${body.error}\n${ctx()}`)
      stats.refusals++
      break
    }
    assert.equal(res.status, 200, ctx())
    const got: Obj[] = JSON.parse(res.text)
    assert.ok(Array.isArray(got) && got.length > 0, `empty answer\n${ctx()}`)
    const last = got[got.length - 1].header?.number
    assert.ok(Number.isInteger(last) && last >= next && last <= to, `last block ${last} outside [${next}, ${to}]\n${ctx()}`)
    for (const b of got) {
      const without = lacking(chunkOf(s, b.header.number))
      assert.equal(without.length, 0, `block ${b.header.number} returned from a chunk without ${without.join(', ')}\n${ctx()}`)
    }
    const expected = ref.evaluate(data, { ...sub, toBlock: last })
    const diff = ref.firstDifference(got, expected)
    assert.equal(diff, undefined, `${label}${what}\n${diff}\nquery: ${JSON.stringify(sub).slice(0, 1500)}`)
    stats.answers++
    stats.items += ref.itemCount(got)
    received.push(...got)
    next = last + 1
  }
  return received
}

/** Walk queries a few at a time (the workers run up to 4 queries each); returns how many selected items. */
export async function walkAll<B>(s: Served<B>, queries: GenQuery[]): Promise<number> {
  let nonEmpty = 0
  const queue = [...queries]
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        const got = await walkServed(s, next.q, next.name)
        if (s.reference.itemCount(got) > 0) nonEmpty++
      }
    }),
  )
  return nonEmpty
}

/** The client's range loop: ask for the blocks from `next`, continue after the last block returned. */
export async function walkRange<T extends { header: Obj }>(from: number, to: number, blocksFrom: (next: number) => Promise<T[]>): Promise<T[]> {
  const out: T[] = []
  for (let next = from; next <= to;) {
    const blocks = await blocksFrom(next)
    assert.ok(blocks.length > 0)
    out.push(...blocks)
    next = blocks[blocks.length - 1].header.number + 1
  }
  return out
}

/** `q` walked over [from, to] through the router, every answer 200; `check` sees each block. */
export function fetchRange<B extends { header: Obj }>(s: Served<B>, q: Obj, from: number, to: number, check: (b: B) => void): Promise<B[]> {
  return walkRange(from, to, async (next) => {
    const res = await postRouted(s, next, { ...q, fromBlock: next })
    assert.equal(res.status, 200, res.text.slice(0, 500))
    const blocks = JSON.parse(res.text) as B[]
    blocks.forEach(check)
    return blocks
  })
}

/** The dataset height once the router sees every chunk (or the last height seen). */
export async function waitForHeight(base: string, want: number): Promise<number> {
  let height = -1
  for (let i = 0; i < 100; i++) {
    const res = await fetch(`${base}/height`)
    height = res.ok ? Number(await res.text()) : -1
    if (height >= want) break
    await new Promise((r) => setTimeout(r, 100))
  }
  return height
}

/**
 * Timers for a cluster over data that does not change while it serves (pass them in `opts` of
 * `startServed`): pings every 500 ms (a worker dead after 30 s) and head files checked every second,
 * in place of every 100 ms. The same code runs, at a fraction of the background CPU, which otherwise
 * grows with the time a test takes on a loaded machine.
 */
export const STATIC_DATA_TIMERS = { heartbeatMs: 500, missedHeartbeats: 60, headWatch: { folderMs: 1000, s3Ms: 1000 } } satisfies Partial<ClusterOptions>

/**
 * A router and two workers over the datasets stored under `root` (one copy of each chunk, 100 ms
 * heartbeats; `opts` adds budgets, concurrency, …), returned once the router serves each dataset of
 * `want` up to its height: `heights` has the height each reached (or the last one seen).
 */
export async function startServed(root: string, want: Record<string, number>, opts: Omit<Partial<ClusterOptions>, 'storage'> = {}): Promise<{ cluster: Cluster; heights: Record<string, number> }> {
  const cluster = await startCluster({ storage: new LocalStorage(root), workers: 2, replication: 1, ...stallTolerant(100), ...opts })
  try {
    const heights: Record<string, number> = {}
    for (const [name, height] of Object.entries(want)) {
      const base = cluster.datasets.get(name)
      assert.ok(base, `the router serves ${name}`)
      heights[name] = await waitForHeight(base, height)
    }
    return { cluster, heights }
  } catch (e) {
    await cluster.stop()
    throw e
  }
}

// ------------------------------------------------------------------------------------ generated queries

/** Deterministic pseudo-random numbers (mulberry32). */
export function rng(seed: number) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)],
    chance: (p: number) => next() < p,
  }
}
export type Rng = ReturnType<typeof rng>

export interface Range {
  fromBlock: number
  toBlock?: number
}

/** A generated query and what it is named in messages. */
export interface GenQuery {
  name: string
  q: Obj
}

export function inRange<B extends { header: Obj }>(data: B[], range: Range): B[] {
  return data.filter((b) => b.header.number >= range.fromBlock && b.header.number <= (range.toBlock ?? Infinity))
}

/**
 * 1–3 random values for a list filter: frequent ones (the first of `values`, most frequent first),
 * rare ones, `miss` (also when there are no values); `spell` may write a value another way.
 */
export function randomValues<T>(r: Rng, values: T[], miss: unknown, spell: (v: T) => unknown): unknown[] {
  const out: unknown[] = []
  const n = 1 + r.int(3)
  for (let i = 0; i < n; i++) {
    const roll = r.next()
    if (values.length === 0 || roll < 0.12) out.push(miss)
    else out.push(spell(roll < 0.55 ? values[r.int(Math.min(3, values.length))] : values[values.length - 1 - r.int(Math.min(5, values.length))]))
  }
  return out
}

/**
 * Random field selection: some selectors (`selectors`: each with its fields, in order), some fields
 * each, identifier fields sometimes set to false.
 */
export function randomFields(r: Rng, selectors: [string, readonly string[]][], idFields: Record<string, readonly string[]>): Obj {
  const fields: Obj = {}
  for (const [sel, names] of selectors) {
    if (!r.chance(0.6)) continue
    const f: Obj = {}
    for (const n of names) {
      const roll = r.next()
      if (roll < 0.3) f[n] = true
      else if (roll < 0.4) f[n] = false
    }
    const ids = idFields[sel]
    if (ids.length && r.chance(0.2)) f[r.pick(ids)] = false
    fields[sel] = f
  }
  return fields
}

/**
 * Blocks 0..`last` of the Substrate node at `rpcUrl` ingested through the CLI (`ingest --family
 * substrate --rpc`, chunks of `chunkBlocks`) into `root`/`dataset`, then served by `startServed`
 * (with `opts`); resolves once the router serves them all, with the archive client of the dataset.
 */
export async function ingestServed(rpcUrl: string, root: string, dataset: string, last: number, chunkBlocks: number, opts: Omit<Partial<ClusterOptions>, 'storage'> = {}): Promise<{ cluster: Cluster; gateway: string; client: ArchiveClient }> {
  const out = path.join(root, dataset)
  const ingest = await runCli(['ingest', '--family', 'substrate', '--rpc', rpcUrl, '--dataset', dataset, '--out', out, '--from', '0', '--to', String(last), '--chunk-blocks', String(chunkBlocks), '--workers', '0'])
  assert.equal(ingest.code, 0, ingest.stderr)
  const { cluster, heights } = await startServed(root, { [dataset]: last }, opts)
  try {
    assert.equal(heights[dataset], last)
    const gateway = cluster.datasets.get(dataset)!
    return { cluster, gateway, client: new ArchiveClient({ http: new HttpClient({ httpTimeout: 30_000 }), url: gateway }) }
  } catch (e) {
    await cluster.stop()
    throw e
  }
}
