import {
  FILTERS,
  KINDS,
  REQUEST_KEY,
  RELATIONS,
  byFrequency,
  involvedKinds,
  itemsOf,
  matches,
  type FullBlock,
  type Kind,
  type Obj,
} from './reference-evm.js'

/*
 * Re-basing real queries (fixtures/queries/<chain>/*.json, recorded against mainnet chunks we do not
 * have) onto the data we do have: their block range is replaced, and every address / topic /
 * sighash / nonce filter gets values that occur in the data, while the query keeps its shape (keys,
 * flags, number of requests, selected fields, letter case of the values).
 *
 * For each request a "seed" item is chosen among the items of the range that satisfy the request's
 * kept conditions (trace `type`, `callCallType`, state-diff `kind`, transaction `type`, the
 * `*NonZero` flags); each re-based list becomes: the original values (they normally miss), the seed's
 * value (so the AND of all keys matches at least the seed) and the most frequent value of that key in
 * the range (so single keys match more than the seed). An empty list stays empty.
 */

export { loadQueries, type NamedQuery } from './answers.js'

/** List filters whose original values are kept when some item satisfies them. */
const KEPT: Record<Kind, string[]> = {
  transaction: ['type'],
  log: [],
  trace: ['type', 'callCallType'],
  stateDiff: ['kind'],
}

const isRelation = (kind: Kind, key: string) => key in RELATIONS[kind]

/** Keep the letter case style of the original values: upper-case hex digits if any original has them. */
function styled(original: unknown[], v: any): any {
  if (typeof v !== 'string' || !original.some((o) => typeof o === 'string' && /[A-F]/.test(o.slice(2)))) return v
  // Mixed case like checksummed addresses: upper-case every other letter.
  let i = 0
  return '0x' + v.slice(2).replace(/[a-f]/g, (c) => (i++ % 2 === 0 ? c.toUpperCase() : c))
}

export interface RebaseRange {
  fromBlock: number
  toBlock: number
}

/**
 * Re-base `fixture` onto `data`. Multi-block queries get `range`; single-block ones
 * (`fromBlock == toBlock`) get the block of `data` (within `range`) where the query selects most.
 */
export function rebase(fixture: Obj, data: FullBlock[], range: RebaseRange): Obj {
  const q: Obj = structuredClone(fixture)
  const inRange = data.filter((b) => b.header.number >= range.fromBlock && b.header.number <= range.toBlock)
  if (fixture.fromBlock !== undefined && fixture.fromBlock === fixture.toBlock) {
    let best: { block: FullBlock; score: number } | undefined
    for (const b of inRange) {
      const candidate = rebaseRequests(fixture, [b])
      const score = countSelected(candidate, b)
      if (!best || score > best.score) best = { block: b, score }
    }
    const n = best!.block.header.number
    return { ...rebaseRequests(q, [best!.block]), fromBlock: n, toBlock: n }
  }
  const out = rebaseRequests(q, inRange)
  out.fromBlock = range.fromBlock
  // A query without toBlock (statediffs.json has neither bound) keeps running to the end.
  if (fixture.toBlock !== undefined) out.toBlock = range.toBlock
  return out
}

function countSelected(query: Obj, b: FullBlock): number {
  let n = 0
  for (const kind of KINDS) {
    for (const r of (query[REQUEST_KEY[kind]] ?? []) as Obj[]) n += (b[REQUEST_KEY[kind]] as Obj[]).filter((i) => matches(kind, r, i)).length
  }
  // Items only reachable by relations count too, a little.
  for (const kind of involvedKinds(query)) n += (b[REQUEST_KEY[kind]] as Obj[]).length / 1000
  return n
}

function rebaseRequests(query: Obj, blocks: FullBlock[]): Obj {
  const q = structuredClone(query)
  for (const kind of KINDS) {
    const requests: Obj[] | undefined = q[REQUEST_KEY[kind]]
    if (!Array.isArray(requests)) continue
    q[REQUEST_KEY[kind]] = requests.map((r) => rebaseRequest(kind, r, blocks))
  }
  return q
}

function rebaseRequest(kind: Kind, request: Obj, blocks: FullBlock[]): Obj {
  const filters = FILTERS[kind]
  const items = itemsOf(blocks, kind).map((x) => x.item)
  const keys = Object.keys(request).filter((k) => !isRelation(kind, k) && request[k] !== null && request[k] !== undefined)
  const listKeys = keys.filter((k) => filters[k]?.kind === 'in' && Array.isArray(request[k]) && request[k].length > 0)
  const flags = keys.filter((k) => filters[k]?.kind === 'nonZero')
  const nonce = keys.filter((k) => k === 'firstNonce' || k === 'lastNonce')
  if (listKeys.length === 0 && nonce.length === 0) return request

  const flagRequest = Object.fromEntries(flags.map((k) => [k, request[k]]))
  const keptAll = listKeys.filter((k) => KEPT[kind].includes(k))
  const keptRequest = { ...flagRequest, ...Object.fromEntries(keptAll.map((k) => [k, request[k]])) }
  const kept = items.some((i) => matches(kind, keptRequest, i)) ? keptAll : []
  const rebased = listKeys.filter((k) => !kept.includes(k))
  const condition = kept.length ? keptRequest : flagRequest
  const value = (k: string, i: Obj) => (filters[k] as { get: (i: Obj) => any }).get(i)

  const candidates = items.filter((i) => matches(kind, condition, i) && rebased.every((k) => value(k, i) != null) && (nonce.length === 0 || i.nonce != null))
  if (candidates.length === 0) return request
  const freq = new Map<string, Map<any, number>>()
  for (const k of rebased) {
    const m = new Map<any, number>()
    for (const i of items) {
      const v = value(k, i)
      if (v != null) m.set(v, (m.get(v) ?? 0) + 1)
    }
    freq.set(k, m)
  }
  let seed = candidates[0]
  let bestScore = -1
  for (const c of candidates) {
    const score = rebased.reduce((s, k) => s + (freq.get(k)!.get(value(k, c)) ?? 0), 0)
    if (score > bestScore) {
      bestScore = score
      seed = c
    }
  }
  const out: Obj = { ...request }
  for (const k of rebased) {
    const original: unknown[] = request[k]
    const top = byFrequency(items.map((i) => value(k, i)))[0]
    out[k] = [...new Set([...original, styled(original, value(k, seed)), styled(original, top)])]
  }
  if (nonce.length) {
    const n = Number(seed.nonce)
    if ('firstNonce' in request) out.firstNonce = Math.max(0, n - 2)
    if ('lastNonce' in request) out.lastNonce = n + 3
  }
  return out
}
