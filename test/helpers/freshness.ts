import type { Anvil } from './anvil.js'

/*
 * How long a block takes from the node to the archive's clients: the node's confirmed head is polled
 * every few ms (the moment it first covers a block is the block's start), the router's /height likewise; once
 * the height covers a block, it is asked for through the router (`/<block>/worker`, then the worker's
 * query), and the answer's hash is compared with the node's.
 */

export interface BlockFreshness {
  block: number
  /** When the node first reported it (ms since the epoch, this machine's clock: to line up with logs). */
  seenAt: number
  /** Node reported it → the ingest's head.json says it is published (ms; with `storageLast`). */
  publishedMs?: number
  /** Node reported it → router's /height covers it (ms). */
  heightMs: number
  /** Node reported it → a worker answered it through the router (ms). */
  answerMs: number
}

export interface FreshnessRun {
  blocks: BlockFreshness[]
  /** Blocks reported by the node during the run and never answered by the deadline. */
  unanswered: number[]
  /** Blocks answered with another hash than the node's (block: node hash vs archive hash). */
  mismatches: string[]
}

export interface FreshnessOptions {
  anvil: Anvil
  /** Router base URL. */
  router: string
  dataset: string
  /** How long new blocks are followed. */
  seconds: number
  /** After that, how long to wait for the last ones. */
  drainMs?: number
  /** Head and height polling interval (ms, default 20). */
  pollMs?: number
  /** The dataset's last published block as its head.json says (polled every `storagePollMs`, for the stage breakdown). */
  storageLast?: () => Promise<number | undefined>
  /** Default 50 ms. */
  storagePollMs?: number
  /**
   * The node's confirmed head, as the ingest's finality reads it (a block's lag counts from when
   * this first covers it). Default: the latest block (`eth_blockNumber`).
   */
  head?: () => Promise<number>
}

/** The node's finalized head (what `ingest --follow` publishes up to by default). */
export async function finalizedHead(anvil: Anvil): Promise<number> {
  return Number(BigInt((await anvil.rpc('eth_getBlockByNumber', ['finalized', false])).number))
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Follow the blocks the node reports for `seconds` (those it had before are not counted). */
export async function measureFreshness(o: FreshnessOptions): Promise<FreshnessRun> {
  const poll = o.pollMs ?? 20
  const base = `${o.router}/datasets/${encodeURIComponent(o.dataset)}`
  const seenAt = new Map<number, number>()
  const heightAt = new Map<number, number>()
  const answered = new Map<number, { at: number; hash: string }>()
  const answering = new Set<number>()
  const nodeHead = o.head ?? (async () => Number(BigInt(await o.anvil.rpc('eth_blockNumber'))))
  let head = await nodeHead()
  const firstCounted = head + 1
  const until = Date.now() + o.seconds * 1000
  let watching = true

  const nodeLoop = (async () => {
    while (watching && Date.now() < until) {
      const n = await nodeHead()
      const now = performance.now()
      for (let b = head + 1; b <= n; b++) seenAt.set(b, now)
      head = Math.max(head, n)
      await sleep(poll)
    }
  })()

  const answer = async (block: number) => {
    for (;;) {
      try {
        const r = await fetch(`${base}/${block}/worker`)
        const url = await r.text()
        if (r.ok) {
          const q = await fetch(url, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ fromBlock: block, toBlock: block, includeAllBlocks: true, fields: { block: { number: true, hash: true } } }),
          })
          const body = await q.text()
          if (q.ok) {
            const got = (JSON.parse(body) as { header: { number: number; hash: string } }[]).find((b) => b.header.number === block)
            if (got) {
              answered.set(block, { at: performance.now(), hash: got.header.hash })
              return
            }
          }
        }
      } catch {
        // a worker restarting its fetch pass: ask again
      }
      if (!watching) return
      await sleep(poll)
    }
  }

  const publishedAt = new Map<number, number>()
  const storageLoop = (async () => {
    let last = -1
    while (watching && o.storageLast) {
      const l = await o.storageLast().catch(() => undefined)
      const now = performance.now()
      if (l !== undefined && l > last) {
        for (const [b] of seenAt) if (b <= l && !publishedAt.has(b)) publishedAt.set(b, now)
        last = l
      }
      await sleep(o.storagePollMs ?? 50)
    }
  })()

  let height = -1
  const routerLoop = (async () => {
    while (watching) {
      try {
        const h = Number(await (await fetch(`${base}/height`)).text())
        const now = performance.now()
        if (h > height) {
          for (const [b] of seenAt) {
            if (b <= h && !heightAt.has(b)) heightAt.set(b, now)
            if (b <= h && !answering.has(b)) {
              answering.add(b)
              void answer(b)
            }
          }
          height = h
        }
      } catch {
        // router busy: poll again
      }
      await sleep(poll)
    }
  })()

  await nodeLoop
  const drainUntil = Date.now() + (o.drainMs ?? 30_000)
  while (Date.now() < drainUntil && [...seenAt.keys()].some((b) => !answered.has(b))) await sleep(50)
  watching = false
  await routerLoop
  await storageLoop

  const blocks: BlockFreshness[] = []
  const unanswered: number[] = []
  const mismatches: string[] = []
  for (const [b, at] of [...seenAt].sort((x, y) => x[0] - y[0])) {
    if (b < firstCounted) continue
    const a = answered.get(b)
    if (!a) {
      unanswered.push(b)
      continue
    }
    const node = await o.anvil.rpc('eth_getBlockByNumber', ['0x' + b.toString(16), false])
    if (node.hash !== a.hash) mismatches.push(`${b}: node ${node.hash}, archive ${a.hash}`)
    const p = publishedAt.get(b)
    blocks.push({ block: b, seenAt: performance.timeOrigin + at, heightMs: heightAt.get(b)! - at, answerMs: a.at - at, ...(p !== undefined ? { publishedMs: p - at } : {}) })
  }
  return { blocks, unanswered, mismatches }
}

/** The q-quantile (0–1) of `values`, nearest rank. */
export function quantile(values: number[], q: number): number {
  if (!values.length) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]
}

/** One line: p50/p99/max of both lags. */
export function describeFreshness(label: string, run: FreshnessRun): string {
  const f = (xs: number[]) => `p50 ${quantile(xs, 0.5).toFixed(0)} ms, p99 ${quantile(xs, 0.99).toFixed(0)} ms, max ${Math.max(...xs).toFixed(0)} ms`
  const h = run.blocks.map((b) => b.heightMs)
  const a = run.blocks.map((b) => b.answerMs)
  const p = run.blocks.flatMap((b) => (b.publishedMs === undefined ? [] : [b.publishedMs]))
  return `${label}: ${run.blocks.length} blocks; ${p.length ? `node → in storage ${f(p)}; ` : ''}node → /height ${f(h)}; node → answered ${f(a)}`
}
