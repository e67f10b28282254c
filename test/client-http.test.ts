import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import zlib from 'node:zlib'
import { after, before, describe, it } from 'node:test'
import { ArchiveClient, ConnectionError, lastBlockOfText, ProtocolError, type Block } from '../src/client/archive-client.js'
import { httpRequest, textOf } from '../src/http-request.js'

/*
 * The client's HTTP layer (src/http-request.ts) against a node:http server that answers
 * the ways real servers and proxies do: compressed, redirected, cut off mid-answer, too slow.
 */

const BLOCKS = [{ header: { number: 5, hash: '0x05' } }, { header: { number: 6, hash: '0x06' } }]
const TEXT = JSON.stringify(BLOCKS)
const UNICODE = JSON.stringify([{ header: { number: 7 }, events: [{ name: 'Café €5', args: ['Ωmega', '0xff'] }] }])

describe('client HTTP requests', { timeout: 600_000 }, () => {
  let server: http.Server
  let base: string
  const seen: { url: string; method: string; body: string }[] = []

  before(async () => {
    server = http.createServer((req, res) => {
      let body = ''
      req.on('data', (d) => (body += d))
      req.on('end', () => {
        seen.push({ url: req.url!, method: req.method!, body })
        const json = { 'content-type': 'application/json' }
        switch (req.url) {
          case '/gzip':
          case '/br':
          case '/deflate': {
            const enc = req.url.slice(1)
            const packed = enc === 'gzip' ? zlib.gzipSync(TEXT) : enc === 'br' ? zlib.brotliCompressSync(TEXT) : zlib.deflateSync(TEXT)
            res.writeHead(200, { ...json, 'content-encoding': enc })
            // In two writes, so the decoder gets it in pieces.
            res.write(packed.subarray(0, 7))
            res.end(packed.subarray(7))
            return
          }
          case '/utf8': {
            // A multi-byte character split between two writes (Substrate names, say), and plain ASCII.
            const bytes = Buffer.from(UNICODE)
            const at = bytes.indexOf(0xe2) + 1
            res.writeHead(200, json)
            res.write(bytes.subarray(0, at))
            return void setTimeout(() => res.end(bytes.subarray(at)), 20)
          }
          case '/moved':
            res.writeHead(307, { location: '/gzip' })
            return res.end()
          case '/cut':
            res.writeHead(200, { ...json, 'content-length': TEXT.length })
            res.write(TEXT.slice(0, 10))
            setTimeout(() => res.socket?.destroy(), 20)
            return
          case '/slow':
            setTimeout(() => res.end(TEXT), 2_000)
            return
          case '/ds/height':
            res.writeHead(200, { 'content-type': 'text/plain' })
            return res.end('100')
          case '/ds/5/worker':
          case '/ds/7/worker':
            res.writeHead(200, { 'content-type': 'text/plain' })
            return res.end(req.url === '/ds/5/worker' ? `${base}/gzip` : `${base}/cut`)
          default:
            res.writeHead(404)
            res.end('no')
        }
      })
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })

  after(async () => {
    server.closeAllConnections()
    await new Promise((r) => server.close(r))
  })

  for (const enc of ['gzip', 'br', 'deflate']) {
    it(`decompresses ${enc} answers`, async () => {
      const res = await httpRequest(`${base}/${enc}`, { method: 'POST', body: '{"x":1}', timeoutMs: 5_000 })
      assert.equal(res.status, 200)
      assert.equal(res.text, TEXT)
      assert.equal(seen.at(-1)!.body, '{"x":1}')
    })
  }

  it('decodes UTF-8 answers, a character split between pieces included, and ASCII ones', async () => {
    const res = await httpRequest(`${base}/utf8`, { method: 'POST', body: '{}', timeoutMs: 5_000 })
    assert.equal(res.text, UNICODE)
    assert.deepEqual(JSON.parse(res.text)[0].events[0].name, 'Café €5')
    assert.equal((await httpRequest(`${base}/gzip`, { method: 'POST', body: '{}', timeoutMs: 5_000 })).text, TEXT)
  })

  it('joins big answers in kept buffers: ASCII, UTF-8 split between parts, and a shorter answer after a longer one', () => {
    const pieces = (text: string, at: number[]) => {
      const bytes = Buffer.from(text)
      return [0, ...at].map((a, i) => bytes.subarray(a, [...at, bytes.length][i]))
    }
    const ascii = JSON.stringify(Array.from({ length: 60_000 }, (_, i) => ({ n: i, hash: `0x${i.toString(16).padStart(64, '0')}` })))
    assert.ok(ascii.length > 3 << 20)
    assert.equal(textOf(pieces(ascii, [65_536, 1 << 20, ascii.length - 10])), ascii)
    const unicode = ascii.slice(0, 2 << 20) + 'Café €5' + ascii.slice(0, 1 << 20)
    const split = Buffer.from(unicode).indexOf(0xe2) + 1
    assert.equal(textOf(pieces(unicode, [1000, split, split + 1])), unicode)
    const shorter = ascii.slice(0, (1 << 20) + 5)
    assert.equal(textOf(pieces(shorter, [7, 1 << 19])), shorter)
  })

  it('follows a redirect with the method and body of the request', async () => {
    const res = await httpRequest(`${base}/moved`, { method: 'POST', body: '{"y":2}', timeoutMs: 5_000 })
    assert.equal(res.text, TEXT)
    assert.deepEqual(seen.at(-1), { url: '/gzip', method: 'POST', body: '{"y":2}' })
  })

  it('runs the range loop over compressed answers', async () => {
    const client = new ArchiveClient(`${base}/ds`, { maxAttempts: 1 })
    const blocks = []
    for await (const b of client.blocks({}, { fromBlock: 5, toBlock: 6 })) blocks.push(b)
    assert.deepEqual(blocks, BLOCKS)
  })

  it('says an answer broke off, and the client retries it', async () => {
    await assert.rejects(httpRequest(`${base}/cut`, { timeoutMs: 5_000 }), (e: Error & { answered?: boolean }) => e.answered === true)
    const errors: Error[] = []
    const client = new ArchiveClient(`${base}/ds`, { maxAttempts: 2, backoffMs: [10], onRetry: ({ error }) => errors.push(error) })
    await assert.rejects(client.query({ fromBlock: 7 }), (e: unknown) => {
      assert.ok(e instanceof ConnectionError)
      assert.match(e.message, /^the answer of http:\/\/127\.0\.0\.1:\d+\/cut broke off/)
      return true
    })
    assert.equal(errors.length, 1, 'retried once')
  })

  it('times out, and aborts on the signal', async () => {
    await assert.rejects(httpRequest(`${base}/slow`, { timeoutMs: 100 }), (e: Error) => e.name === 'TimeoutError')
    const ac = new AbortController()
    setTimeout(() => ac.abort(new Error('stop')), 50)
    await assert.rejects(httpRequest(`${base}/slow`, { timeoutMs: 5_000, signal: ac.signal }), /stop/)
  })

  it('names a refused connection', async () => {
    const closed = http.createServer()
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r))
    const port = (closed.address() as AddressInfo).port
    await new Promise((r) => closed.close(r))
    const client = new ArchiveClient(`http://127.0.0.1:${port}/ds`)
    await assert.rejects(client.getHeight(), (e: unknown) => e instanceof ConnectionError && e.code === 'ECONNREFUSED' && /connection refused/.test(e.message))
  })
})

/*
 * Parallel segments hand on answers unparsed when the last block's number can be read from the end
 * of the text (`lastBlockOfText`), and parse them when the reader takes them. Against servers that
 * write the header's fields in another order (the text read finds nothing: parsed at once), and
 * one whose last block carries a nested `{"header":{"number":…` object (the text read is wrong:
 * the parse says so instead of continuing from the wrong block).
 */
describe('client: answers parsed when read in parallel mode', { timeout: 600_000 }, () => {
  let server: http.Server
  let base: string
  const block = (mode: string, n: number, last: boolean) => {
    const header = mode === 'hash-first' ? `{"hash":"0x${n}","number":${n}}` : `{"number":${n},"hash":"0x${n}"}`
    const events = mode === 'nested' && last ? `,"events":[{"header":{"number":${n + 50},"x":1}}]`
      // Odd blocks hold the characters that begin a block after an item: a false cut.
      : mode === 'nested-cut' && n % 2 === 1 ? `,"events":[{"x":1},{"header":{"number":${n + 50},"x":1}}]`
      : ',"events":[]'
    return `{"header":${header}${events}}`
  }

  before(async () => {
    server = http.createServer((req, res) => {
      let body = ''
      req.on('data', (d) => (body += d))
      req.on('end', () => {
        const [, mode, rest] = /^\/(\w[\w-]*)\/(.*)$/.exec(req.url!)!
        if (rest === 'height') return res.end('9')
        if (rest.endsWith('/worker')) return res.end(`${base}/${mode}/query`)
        const q = JSON.parse(body)
        const to = Math.min(q.fromBlock + 1, q.toBlock ?? 9)
        const blocks = []
        for (let n = q.fromBlock; n <= to; n++) blocks.push(block(mode, n, n === to))
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(`[${blocks.join(',')}]`)
      })
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })

  after(async () => {
    server.closeAllConnections()
    await new Promise((r) => server.close(r))
  })

  it('reads the last block from the text where it can, and parses at once where it cannot', async () => {
    assert.equal(lastBlockOfText(`[${block('number-first', 3, false)},${block('number-first', 4, true)}]`), 4)
    assert.equal(lastBlockOfText(`[${block('hash-first', 3, false)},${block('hash-first', 4, true)}]`), undefined)
    for (const mode of ['number-first', 'hash-first']) {
      const client = new ArchiveClient(`${base}/${mode}`, { maxAttempts: 1 })
      const got = []
      for await (const b of client.blocks({}, { fromBlock: 0, toBlock: 9, parallel: 2, segmentBlocks: 4 })) got.push(b.header.number)
      assert.deepEqual(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], mode)
    }
  })

  it('fails when the text read and the parsed answer disagree', async () => {
    const client = new ArchiveClient(`${base}/nested`, { maxAttempts: 1 })
    await assert.rejects(async () => {
      for await (const _ of client.blocks({}, { fromBlock: 0, toBlock: 9, parallel: 2, segmentBlocks: 4 }));
    }, (e: unknown) => e instanceof ProtocolError && /ends at block 1, not at 51/.test(e.message))
    // Sequentially nothing is read from the text: the same server's answers are fine.
    const got = []
    for await (const b of client.blocks({}, { fromBlock: 0, toBlock: 9 })) got.push(b.header.number)
    assert.equal(got.length, 10)
  })

  it('streams blocks one by one from answers whose values hold the characters that begin a block', async () => {
    const client = new ArchiveClient(`${base}/nested-cut`, { maxAttempts: 1 })
    const streamed: Block[] = []
    for await (const b of client.blocks({}, { fromBlock: 0, toBlock: 9 })) streamed.push(b)
    assert.deepEqual(streamed.map((b) => b.header.number), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert.deepEqual(streamed[3].events, [{ x: 1 }, { header: { number: 53, x: 1 } }])
    assert.deepEqual(streamed[4].events, [])
    const batches: Block[] = []
    for await (const batch of client.batches({}, { fromBlock: 0, toBlock: 9 })) batches.push(...batch.blocks)
    assert.deepEqual(streamed, batches)
  })
})
