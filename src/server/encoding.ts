import zlib from 'node:zlib'
import type { Transform } from 'node:stream'

export type ContentEncoding = 'br' | 'gzip' | 'identity'

/**
 * When answers are compressed: `auto` unless the client is on this machine (loopback, and no proxy
 * header says the request was forwarded), `always` / `never` as the client accepts or not at all.
 */
export type CompressionMode = 'auto' | 'always' | 'never'
export const COMPRESSION_MODES: readonly CompressionMode[] = ['auto', 'always', 'never']

const PROXY_HEADERS = ['forwarded', 'x-forwarded-for', 'x-real-ip', 'via']

/**
 * Whether to compress an answer. On loopback, compressing only costs CPU that the worker and the
 * client share: measured (docs/benchmark-history.md, step 18) all tx+logs sync 34.5k → 57–60k items/s
 * without it.
 */
export function compressFor(mode: CompressionMode, remoteAddress: string | undefined, headers: Record<string, unknown>): boolean {
  if (mode !== 'auto') return mode === 'always'
  const loopback = remoteAddress !== undefined && (remoteAddress === '::1' || /^(::ffff:)?127\./.test(remoteAddress))
  return !loopback || PROXY_HEADERS.some((h) => headers[h] !== undefined)
}

/**
 * Pick the response encoding from `accept-encoding`: the highest q-value among br and gzip, br on a
 * tie (smaller at comparable speed with the quality we use), identity when neither is accepted.
 */
export function negotiateEncoding(header: string | undefined): ContentEncoding {
  if (!header) return 'identity'
  const q = new Map<string, number>()
  for (const part of header.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';')
    if (!name) continue
    const qParam = params.map((p) => p.trim()).find((p) => p.startsWith('q='))
    const value = qParam ? Number(qParam.slice(2)) : 1
    q.set(name, Number.isFinite(value) ? value : 0)
  }
  const star = q.get('*') ?? 0
  const br = q.get('br') ?? star
  const gzip = q.get('gzip') ?? star
  if (br <= 0 && gzip <= 0) return 'identity'
  return br >= gzip ? 'br' : 'gzip'
}

/** A compressing stream for the encoding; undefined for identity. */
export function compressor(enc: ContentEncoding): Transform | undefined {
  switch (enc) {
    case 'br':
      // Quality 11 (the default) is far too slow for streaming. On a 21 MB mainnet-sized answer
      // (docs/benchmark-history.md, step 3): quality 1 226 MB/s, ratio 3.9; quality 4 36 MB/s, ratio
      // 4.5 (slower than the engine produces JSON); gzip level 5 65 MB/s, ratio 3.6.
      return zlib.createBrotliCompress({
        params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 1, [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT },
      })
    case 'gzip':
      // Level 1: 102 MB/s, ratio 3.5, against level 5: 65 MB/s, ratio 3.6 (same answer).
      return zlib.createGzip({ level: 1 })
    default:
      return undefined
  }
}
