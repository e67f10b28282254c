import http from 'node:http'
import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { createHttp, listen, toApiError } from '../src/server/http.js'
import type { ChunkRef } from '../src/chunks/layout.js'
import { LocalStorage } from '../src/server/storage.js'
import { compressFor } from '../src/server/encoding.js'
import { WorkerServer } from '../src/server/worker-http.js'
import { slabStats } from '../src/query/row-texts.js'
import { slabsEnabled } from '../src/fast-path.js'
import { anvilRecords, tempDir, writeDataset, type AnvilRecord } from './helpers/dataset.js'
import { postAndHangUp, postJson, request } from './helpers/http.js'

/*
 * A standalone worker (no router: it serves every chunk of its folder) over real chunks of the
 * recorded anvil chain, through real HTTP with a raw client, so encodings are seen as sent.
 */

const hexNum = (h: string) => parseInt(h, 16)

function checkHeaders(blocks: any[], records: AnvilRecord[]): void {
  for (const b of blocks) {
    const r = records.find((x) => x.number === b.header.number)
    assert.ok(r, `block ${b.header.number} is not in the source`)
    assert.equal(b.header.hash, r.block.hash.toLowerCase())
    assert.equal(b.header.parentHash, r.block.parentHash.toLowerCase())
    assert.equal(b.header.timestamp, hexNum(r.block.timestamp))
    assert.equal(b.header.gasUsed, r.block.gasUsed.toLowerCase())
  }
}

const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i)

/** Every block, every transaction with its input (contract code): a large answer. */
const BIG_QUERY = {
  fromBlock: 0,
  includeAllBlocks: true,
  transactions: [{}],
  logs: [{}],
  traces: [{}],
  fields: {
    block: { timestamp: true, logsBloom: true, extraData: true },
    transaction: { hash: true, input: true, from: true, to: true, value: true },
    log: { data: true, topics: true, address: true },
    trace: { createInit: true, createResultCode: true, callInput: true, callResultOutput: true },
  },
}

describe('worker HTTP', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let chunks: ChunkRef[]
  let worker: WorkerServer
  let busyWorker: WorkerServer
  let queryUrl: string

  before(async () => {
    tmp = await tempDir()
    records = await anvilRecords()
    chunks = await writeDataset(path.join(tmp.dir, 'dense'), 'dense', records, 16)
    const storage = new LocalStorage(path.join(tmp.dir, 'dense'))
    // The folder does not change: the listing at start is the only one needed (a listing every
    // second only adds background CPU, more of it the slower a loaded machine runs the file).
    const common = { storage, heartbeatMs: 3_600_000, dropGraceMs: 2000, queueTimeoutMs: 10_000 }
    // Budgets far above what the fixture needs, so an answer covers the whole requested range.
    worker = new WorkerServer({ ...common, concurrency: 2, queue: 4, bodyLimit: 64 * 1024, budgets: { sizeBytes: 1 << 30, timeMs: 60_000 } })
    await worker.start('127.0.0.1', 0)
    busyWorker = new WorkerServer({ ...common, concurrency: 1, queue: 0, compression: 'always' })
    await busyWorker.start('127.0.0.1', 0)
    queryUrl = `${worker.url}/datasets/dense/query`
  })

  after(async () => {
    await worker?.stop()
    await busyWorker?.stop()
    await tmp?.cleanup()
  })

  it('streams the blocks of a range as JSON with the source headers', async () => {
    const q = { fromBlock: 5, toBlock: 40, includeAllBlocks: true, fields: { block: { timestamp: true, gasUsed: true } } }
    const res = await postJson(queryUrl, q)
    assert.equal(res.status, 200, res.text)
    assert.equal(res.headers['content-type'], 'application/json')
    assert.equal(res.headers['content-encoding'], undefined)
    const blocks = JSON.parse(res.text)
    assert.deepEqual(blocks.map((b: any) => b.header.number), range(5, 40))
    checkHeaders(blocks, records)
    // Blocks 5–40 lie in chunks 0–15, 16–31 and 32–47. An answer that fits one piece is sent whole,
    // with its length and the count as a header; a longer one streams, the count in a trailer.
    assert.equal(res.headers['x-num-read-chunks'], '3')
    assert.equal(res.headers['content-length'], String(Buffer.byteLength(res.text)))
    assert.equal(res.headers['transfer-encoding'], undefined)
    const long = await postJson(queryUrl, { fromBlock: 0, toBlock: 63, includeAllBlocks: true, transactions: [{}], fields: { transaction: { input: true } } })
    assert.equal(long.status, 200, long.text)
    assert.ok(long.text.length > 64 * 1024, `${long.text.length} bytes: not longer than one piece`)
    assert.equal(long.headers['transfer-encoding'], 'chunked')
    assert.equal(long.headers['content-length'], undefined)
    assert.equal(long.trailers['x-num-read-chunks'], '4')
    assert.deepEqual(JSON.parse(long.text).map((b: any) => b.header.number), range(0, 63))
  })

  it('compresses with gzip or br as a client behind a proxy accepts, to the same JSON', async () => {
    const q = { fromBlock: 0, toBlock: 63, includeAllBlocks: true, transactions: [{}], fields: { transaction: { input: true } } }
    const plain = await postJson(queryUrl, q, { 'accept-encoding': 'identity' })
    assert.equal(plain.headers['content-encoding'], undefined)
    // `auto`: a client on this machine gets plain JSON; a request a proxy forwarded is compressed.
    const local = await postJson(queryUrl, q, { 'accept-encoding': 'gzip, br' })
    assert.equal(local.headers['content-encoding'], undefined)
    assert.equal(local.text, plain.text)
    const cases: [string, string][] = [
      ['gzip', 'gzip'],
      ['br', 'br'],
      ['gzip, deflate, br', 'br'],
      ['gzip;q=1.0, br;q=0.5', 'gzip'],
      ['br;q=0, gzip', 'gzip'],
    ]
    for (const [accept, expected] of cases) {
      const res = await postJson(queryUrl, q, { 'accept-encoding': accept, 'x-forwarded-for': '203.0.113.7' })
      assert.equal(res.status, 200)
      assert.equal(res.headers['content-encoding'], expected, accept)
      assert.equal(res.headers['content-type'], 'application/json')
      assert.ok(res.raw.length < plain.raw.length / 2, `${accept}: ${res.raw.length} of ${plain.raw.length} bytes`)
      assert.deepEqual(JSON.parse(res.text), JSON.parse(plain.text), accept)
    }
  })

  it('answers stay byte for byte the same when several run at once, slow readers among them, reusing each other\'s row memory', async () => {
    // Each answer's rows lie in slabs that the next answers reuse once it is on the socket
    // (src/query/row-texts.ts): one reused too early would show here as other blocks' bytes.
    const queries = [0, 7, 21, 40].flatMap((fromBlock) => [
      { ...BIG_QUERY, fromBlock },
      { fromBlock, includeAllBlocks: true, transactions: [{}], logs: [{}], fields: { transaction: { input: true, hash: true }, log: { data: true } } },
    ])
    // One at a time: nothing else writes into a slab meanwhile.
    const expected: string[] = []
    for (const q of queries) expected.push((await postJson(queryUrl, q)).text)
    assert.ok(expected.every((t) => t.length > 64 * 1024), 'streamed answers (more than one piece)')
    const reused = slabStats.slabsReused
    // Six at a time (2 running, 4 queued), a third of them compressed (a proxy's client), a third read
    // slowly. Two rounds run each of the 8 queries at least once among others (4 of them twice), each
    // way of reading meeting both kinds of query; more rounds only repeat those mixes.
    for (let round = 0; round < 2; round++) {
      const picked = Array.from({ length: 6 }, (_, i) => (round * 6 + i) % queries.length)
      const answers = await Promise.all(picked.map((q, i) =>
        postJson(queryUrl, queries[q], i % 3 === 1 ? { 'accept-encoding': 'gzip', 'x-forwarded-for': '203.0.113.7' } : {}, i % 3 === 2 ? 150 : undefined)))
      answers.forEach((a, i) => {
        assert.equal(a.status, 200, a.text)
        assert.ok(a.text === expected[picked[i]], `round ${round}, query ${picked[i]}: ${a.text.length} bytes against ${expected[picked[i]].length}`)
      })
    }
    if (slabsEnabled) assert.ok(slabStats.slabsReused > reused, 'answers wrote into slabs of answers before them')
  })

  it('compresses for clients on this machine with --compression always', async () => {
    const q = { fromBlock: 0, toBlock: 20, includeAllBlocks: true, transactions: [{}], fields: { transaction: { input: true } } }
    const res = await postJson(`${busyWorker.url}/datasets/dense/query`, q, { 'accept-encoding': 'br' })
    assert.equal(res.status, 200, res.text)
    assert.equal(res.headers['content-encoding'], 'br')
    assert.deepEqual(JSON.parse(res.text).map((b: any) => b.header.number), range(0, 20))
  })

  it('decides on compression from the peer address, the mode and proxy headers', () => {
    assert.equal(compressFor('auto', '127.0.0.1', {}), false)
    assert.equal(compressFor('auto', '::ffff:127.0.0.1', {}), false)
    assert.equal(compressFor('auto', '::1', {}), false)
    assert.equal(compressFor('auto', '::1', { via: '1.1 nginx' }), true)
    assert.equal(compressFor('auto', '10.1.2.3', {}), true)
    assert.equal(compressFor('auto', '::ffff:192.168.0.9', {}), true)
    assert.equal(compressFor('always', '127.0.0.1', {}), true)
    assert.equal(compressFor('never', '10.1.2.3', {}), false)
  })

  it('a 500 names an incident id, never the error message, a stack or a file path', () => {
    const secret = new Error('ENOENT: no such file /var/lib/secret/chunk.parquet at 10.1.2.3:9000')
    const err = toApiError(secret)
    assert.equal(err.status, 500)
    assert.equal(err.code, 'internal-error')
    assert.match(err.message, /^internal error \(incident [0-9a-f]{8}; the server log has the details\)$/)
    assert.doesNotMatch(JSON.stringify(err.body()), /secret|10\.1\.2\.3|ENOENT|at /)
  })

  it('413 reaches a client still uploading a body over the limit (chunked, no content-length), every time', async () => {
    // The default 8 MiB limit and 40 MiB uploads in 1 MiB writes: before the body was drained, 1 in
    // 6 such uploads saw EPIPE instead of the 413.
    const app = createHttp({ service: 'worker', access: { data: () => {}, peer: () => {} } })
    app.post('/q', async () => ({}))
    const url = `${await listen(app, '127.0.0.1', 0)}/q`
    const chunk = Buffer.alloc(1024 * 1024, 32)
    const upload = () => new Promise<string>((resolve) => {
      const req = http.request(url, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        let text = ''
        res.on('data', (c) => (text += c))
        res.on('end', () => resolve(`${res.statusCode} ${JSON.parse(text).error}`))
      })
      req.on('error', (e: any) => resolve(`error ${e.code}`))
      let sent = 0
      const write = () => {
        while (sent < 40) {
          sent++
          if (!req.write(chunk)) return void req.once('drain', write)
        }
        req.end()
      }
      write()
    })
    try {
      const outcomes: string[] = []
      for (let i = 0; i < 24; i++) outcomes.push(await upload())
      assert.deepEqual(outcomes, Array(24).fill('413 body-too-large'))
    } finally {
      await app.close()
    }
  })

  it('answers 413 for a body over the limit', async () => {
    const addresses = records.flatMap((r) => r.block.transactions.map((t: any) => t.from.toLowerCase()))
    const big = { fromBlock: 0, logs: [{ address: Array.from({ length: 2000 }, (_, i) => addresses[i % addresses.length]) }] }
    assert.ok(JSON.stringify(big).length > 64 * 1024)
    const res = await postJson(queryUrl, big)
    assert.equal(res.status, 413)
    assert.equal(res.headers['content-type']?.split(';')[0], 'application/json')
    assert.equal(JSON.parse(res.text).error, 'body-too-large')
  })

  it('answers 415 for a body that is not JSON', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
      const res = await request(queryUrl, { method: 'POST', headers: { 'content-type': type }, body: '{"fromBlock":0}' })
      assert.equal(res.status, 415, type)
      const body = JSON.parse(res.text)
      assert.equal(body.error, 'unsupported-media-type')
      assert.match(body.message, /JSON/)
    }
  })

  it('answers 400 for invalid JSON and empty bodies', async () => {
    for (const body of ['{"fromBlock": ', '{fromBlock: 1}', '', '[1,2']) {
      const res = await postJson(queryUrl, body)
      assert.equal(res.status, 400, JSON.stringify(body))
      const j = JSON.parse(res.text)
      assert.equal(j.error, 'invalid-json')
      assert.ok(j.message.length > 10)
    }
  })

  it('answers 400 naming the path of an invalid query, and for blocks above the height', async () => {
    const res = await postJson(queryUrl, { fromBlock: 0, logs: [{ adress: ['0x00'] }] })
    assert.equal(res.status, 400)
    const j = JSON.parse(res.text)
    assert.equal(j.path, 'logs[0].adress')
    assert.ok(j.error && j.message)
    const above = await postJson(queryUrl, { fromBlock: chunks.at(-1)!.last + 1 })
    assert.equal(above.status, 400)
    assert.match(JSON.parse(above.text).message, new RegExp(String(chunks.at(-1)!.last + 1)))
    // Integers past 2^53 − 1 cannot be represented exactly: refused, not silently rounded.
    for (const [body, path] of [
      ['{"fromBlock":0,"transactions":[{"firstNonce":18446744073709551615}]}', 'transactions[0].firstNonce'],
      ['{"fromBlock":0,"transactions":[{"type":[-1]}]}', 'transactions[0].type[0]'],
    ]) {
      const r = await postJson(queryUrl, body)
      assert.equal(r.status, 400, body)
      assert.equal(JSON.parse(r.text).path, path)
    }
  })

  it('answers 404 for unknown datasets and routes', async () => {
    const cases: [string, string][] = [
      ['POST', `${worker.url}/datasets/nope/query`],
      ['GET', queryUrl],
      ['POST', `${worker.url}/query`],
      ['GET', `${worker.url}/`],
    ]
    for (const [method, url] of cases) {
      const res = await request(url, { method, headers: { 'content-type': 'application/json' }, body: method === 'POST' ? '{"fromBlock":0}' : undefined })
      assert.equal(res.status, 404, `${method} ${url}`)
      assert.ok(JSON.parse(res.text).message)
    }
  })

  it('refuses queries beyond its slots and queue with 503 and Retry-After', async () => {
    const url = `${busyWorker.url}/datasets/dense/query`
    const answers = await Promise.all(Array.from({ length: 24 }, () => postJson(url, BIG_QUERY)))
    const busy = answers.filter((a) => a.status === 503)
    const ok = answers.filter((a) => a.status === 200)
    assert.equal(busy.length + ok.length, answers.length, answers.map((a) => a.status).join(','))
    assert.ok(ok.length >= 1)
    assert.ok(busy.length >= 1, 'no query was refused')
    for (const b of busy) {
      assert.equal(b.headers['retry-after'], '1')
      assert.equal(JSON.parse(b.text).error, 'busy')
    }
    // Slots are given back: the next query runs.
    assert.equal((await postJson(url, { fromBlock: 0, toBlock: 3 })).status, 200)
    const status = JSON.parse((await request(`${busyWorker.url}/status`)).text)
    assert.equal(status.queries.active, 0)
    assert.equal(status.queries.queued, 0)
  })

  it('survives a client hanging up mid-stream and frees the slot', async () => {
    const full = await postJson(queryUrl, BIG_QUERY)
    assert.equal(full.status, 200)
    assert.ok(full.raw.length > 200_000, `answer of ${full.raw.length} bytes is too small to hang up in the middle`)
    for (let i = 0; i < 3; i++) {
      const got = await postAndHangUp(queryUrl, BIG_QUERY, 1000)
      assert.ok(got < full.raw.length, 'the answer was read to the end')
    }
    const deadline = Date.now() + 5000
    for (;;) {
      const s = JSON.parse((await request(`${worker.url}/status`)).text)
      if (s.queries.active === 0) break
      assert.ok(Date.now() < deadline, 'query slots were not freed after the clients went away')
      await new Promise((r) => setTimeout(r, 20))
    }
    const after = await postJson(queryUrl, { fromBlock: 100, toBlock: 110, includeAllBlocks: true })
    assert.equal(after.status, 200)
    assert.deepEqual(JSON.parse(after.text).map((b: any) => b.header.number), range(100, 110))
  })

  it('reports what it holds and its metrics', async () => {
    const status = JSON.parse((await request(`${worker.url}/status`)).text)
    assert.deepEqual(status.state.available, { dense: [[0, chunks.at(-1)!.last]] })
    assert.equal(status.router_url, null)
    const metrics = (await request(`${worker.url}/metrics`)).text
    const m = new RegExp(`^block_archive_worker_query_blocks_total\\{worker="${worker.url}",dataset="dense"\\} (\\d+)$`, 'm').exec(metrics)
    assert.ok(m && Number(m[1]) > 0, 'no blocks counted')
    assert.match(metrics, /block_archive_http_requests_total\{service="worker",route="\/datasets\/:name\/query",status="413"\} 1/)
    assert.match(metrics, /^block_archive_duckdb_memory_bytes \d+$/m)
  })
})
