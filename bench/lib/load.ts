/*
 * A load generator: `clients` loops, each sending the query of a shape with a random fromBlock
 * through the router (as a client would) for `durationMs`, reading every answer to the end.
 */

export interface LoadResult {
  answers: number
  /** JSON bytes of the answers (fetch decompresses gzip). */
  bytes: number
  /** Non-2xx answers (e.g. 503 when the worker's queue is full) and network errors. */
  rejected: number
  errors: string[]
  wallMs: number
  latencies: number[]
}

export interface LoadOptions {
  base: string
  height: number
  clients: number
  durationMs: number
  query: (fromBlock: number, toBlock: number) => Record<string, unknown>
  gzip?: boolean
  /** Blocks after fromBlock to ask for (default: to the height). */
  span?: number
}

export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const r: LoadResult = { answers: 0, bytes: 0, rejected: 0, errors: [], wallMs: 0, latencies: [] }
  const t0 = performance.now()
  const end = t0 + o.durationMs
  const loop = async () => {
    while (performance.now() < end) {
      const from = Math.floor(Math.random() * (o.height + 1))
      const to = o.span ? Math.min(o.height, from + o.span - 1) : o.height
      const q0 = performance.now()
      try {
        const routed = await fetch(`${o.base}/${from}/worker`)
        const url = (await routed.text()).trim()
        if (!routed.ok) throw new Error(`router ${routed.status}: ${url}`)
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'accept-encoding': o.gzip ? 'gzip' : 'identity' },
          body: JSON.stringify(o.query(from, to)),
        })
        let n = 0
        for await (const piece of res.body!) n += (piece as Uint8Array).length
        if (res.ok) {
          r.answers++
          r.bytes += n
          r.latencies.push(performance.now() - q0)
        } else {
          r.rejected++
          await new Promise((s) => setTimeout(s, 50))
        }
      } catch (e) {
        r.rejected++
        if (r.errors.length < 5) r.errors.push(e instanceof Error ? e.message : String(e))
        await new Promise((s) => setTimeout(s, 50))
      }
    }
  }
  await Promise.all(Array.from({ length: o.clients }, loop))
  r.wallMs = performance.now() - t0
  return r
}
