import { readdirSync, readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { defaultFixturesDir } from '../../recorded.js'

/*
 * A replay Substrate API Sidecar: answers `GET /blocks/head`, `GET /blocks/head/header` and
 * `GET /blocks/{n}` from recorded `/blocks/{n}` answers (fixtures/substrate/substrate-api-sidecar),
 * so the Sidecar source's real HTTP path runs on recorded mainnet data. The head is the highest
 * recorded block; unknown numbers answer 404 as sidecar does for blocks it cannot find.
 */

export interface RecordedSidecarBlock {
  number: number
  /** sidecar's `/blocks/{n}` answer */
  block: any
}

/** Chains with recorded sidecar blocks in fixtures/substrate/substrate-api-sidecar/decoded-blocks. */
export const SIDECAR_CHAINS = ['polkadot', 'kusama', 'moonbeam'] as const
export type SidecarChain = (typeof SIDECAR_CHAINS)[number]

export function sidecarFixturesDir(chain: string, fixtures = defaultFixturesDir()): string {
  return path.join(fixtures, 'substrate', 'substrate-api-sidecar', 'decoded-blocks', chain, 'blocks')
}

/** The recorded blocks of one chain, by number. */
export function loadRecordedSidecar(chain: SidecarChain | string, fixtures = defaultFixturesDir()): RecordedSidecarBlock[] {
  const dir = sidecarFixturesDir(chain, fixtures)
  const out: RecordedSidecarBlock[] = []
  for (const name of readdirSync(dir)) {
    if (!/^\d+\.json(\.gz)?$/.test(name)) continue
    const buf = readFileSync(path.join(dir, name))
    const block = JSON.parse((name.endsWith('.gz') ? gunzipSync(buf) : buf).toString('utf8'))
    out.push({ number: Number(block.number), block })
  }
  return out.sort((a, b) => a.number - b.number)
}

export interface SidecarReplayOptions {
  host?: string
  port?: number
  /** Test hook: answer request number k (from 1) with this HTTP status instead. */
  failRequest?: (k: number, url: string) => number | undefined
  /** Test hook: change a block before it is sent. */
  mutate?: (block: any) => any
}

export class SidecarReplayServer {
  private server?: Server
  private readonly texts = new Map<number, string>()
  private readonly head: number
  private requestCount = 0
  url = ''

  constructor(private readonly blocks: RecordedSidecarBlock[], private readonly opts: SidecarReplayOptions = {}) {
    for (const b of blocks) this.texts.set(b.number, JSON.stringify(b.block))
    this.head = blocks.reduce((m, b) => Math.max(m, b.number), -1)
  }

  get requests(): number {
    return this.requestCount
  }

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const k = ++this.requestCount
      const url = (req.url ?? '/').split('?')[0].replace(/\/+$/, '')
      const send = (status: number, body: string) => {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(body)
      }
      const fail = this.opts.failRequest?.(k, url)
      if (fail) return send(fail, JSON.stringify({ code: fail, message: 'injected failure' }))
      if (req.method !== 'GET') return send(405, JSON.stringify({ code: 405, message: 'only GET' }))
      let m: RegExpExecArray | null
      if (url === '/blocks/head' || url === '/blocks/head/header') {
        if (this.head < 0) return send(404, JSON.stringify({ code: 404, message: 'no blocks recorded' }))
        if (url.endsWith('/header')) {
          const b = this.blocks.find((x) => x.number === this.head)!.block
          return send(200, JSON.stringify({ parentHash: b.parentHash, number: String(b.number), stateRoot: b.stateRoot, extrinsicsRoot: b.extrinsicsRoot, digest: { logs: b.logs } }))
        }
        return send(200, this.blockText(this.head))
      }
      if ((m = /^\/blocks\/(\d+)$/.exec(url))) {
        const n = Number(m[1])
        if (!this.texts.has(n)) return send(404, JSON.stringify({ code: 404, message: `Block ${n} not found` }))
        return send(200, this.blockText(n))
      }
      send(404, JSON.stringify({ code: 404, message: `no route ${url}` }))
    })
    await new Promise<void>((resolve) => this.server!.listen(this.opts.port ?? 0, this.opts.host ?? '127.0.0.1', resolve))
    const addr = this.server.address() as AddressInfo
    this.url = `http://${this.opts.host ?? '127.0.0.1'}:${addr.port}`
    return this.url
  }

  private blockText(n: number): string {
    const text = this.texts.get(n)!
    return this.opts.mutate ? JSON.stringify(this.opts.mutate(JSON.parse(text))) : text
  }

  async close(): Promise<void> {
    const s = this.server
    if (!s) return
    this.server = undefined
    s.closeAllConnections()
    await new Promise<void>((resolve) => s.close(() => resolve()))
  }
}
