import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { ArchiveClient, HttpError, type Block } from '../src/client/archive-client.js'
import { ApiError } from '../src/errors.js'
import { KeyStore, parseKeys, signTicket, workerToken } from '../src/server/auth.js'
import { startCluster, type Cluster } from '../src/server/cluster.js'
import { KeyConcurrency, TokenBuckets } from '../src/server/rate-limit.js'
import { LocalStorage } from '../src/server/storage.js'
import { STALL_TOLERANT_ROUTER, killChildren, runCli, startCli, until } from './helpers/cli.js'
import { stallTolerant, anvilRecords, tempDir, writeDataset, type AnvilRecord } from './helpers/dataset.js'
import { postJson, request, type RawAnswer } from './helpers/http.js'
import { ALL_FIELDS, assertMatchesSource, fullSync, blocksOf, runProcessor } from './helpers/processor-expect.js'

/*
 * Access control (docs/serving.md, "Access control and limits"): API keys at the router (Bearer,
 * Basic, or in the path for the SDK's setGateway), signed tickets in the worker URLs the router hands
 * out, rate limits, and keys kept out of logs, metrics, error bodies and the status page. The real
 * @subsquid/evm-processor syncs through a key-in-path base URL, and retries an expired ticket.
 */

const key = (label: string) => `${label}-${randomBytes(12).toString('hex')}`
const KEYS = {
  alice: key('alice'),
  bob: key('bob'),
  carol: key('carol'),
  dave: key('dave'),
  erin: key('erin'),
}
const SECRET = randomBytes(32)

const json = (a: RawAnswer) => JSON.parse(a.text)
const bearer = (k: string) => ({ authorization: `Bearer ${k}` })
const HEADERS_ONLY = { fields: { block: { number: true, hash: true } }, includeAllBlocks: true }

/** Every value of `o` that contains any of the keys (for "never shown" checks). */
function assertNoKey(where: string, text: string): void {
  for (const [name, k] of Object.entries(KEYS)) {
    assert.ok(!text.includes(k), `${where} contains the key of ${name}`)
    // Not a long piece of it either (a prefix cut at 16 characters would still identify it).
    assert.ok(!text.includes(k.slice(-16)), `${where} contains part of the key of ${name}`)
  }
}

describe('keys file reloads', () => {
  it('a file caught empty while it is rewritten keeps the keys; an empty file that stays empty for a second is applied', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'ba-keys-'))
    try {
      const file = path.join(dir, 'keys.txt')
      await writeFile(file, `${'a'.repeat(24)} alice\n${'b'.repeat(24)} bob\n`)
      const store = new KeyStore(file, 60_000)
      assert.deepEqual(store.size, { keys: 2, revoked: 0 })
      await writeFile(file, '')
      assert.equal(store.reloadIfChanged(), false)
      assert.deepEqual(store.size, { keys: 2, revoked: 0 }, 'kept while the file may be half written')
      await writeFile(file, `${'a'.repeat(24)} alice\n`)
      assert.equal(store.reloadIfChanged(), true)
      assert.deepEqual(store.size, { keys: 1, revoked: 0 })
      await writeFile(file, '')
      assert.equal(store.reloadIfChanged(), false)
      // A writer stalled between truncating and writing: still empty at the next checks, kept for a second.
      assert.equal(store.reloadIfChanged(), false, 'empty for less than a second')
      assert.deepEqual(store.size, { keys: 1, revoked: 0 })
      await new Promise((r) => setTimeout(r, 1100))
      assert.equal(store.reloadIfChanged(), true, 'still empty a second later')
      assert.deepEqual(store.size, { keys: 0, revoked: 0 })
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})

describe('access control, tickets and limits', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let records: AnvilRecord[]
  let keysFile: string
  let cluster: Cluster
  let router: string
  const keysText = () =>
    [
      '# test keys',
      `${KEYS.alice} alice`,
      `${KEYS.bob} bob revoked`,
      `${KEYS.carol} carol rps=8 burst=1`,
      `${KEYS.dave}   # no name: shown as key-<hash>`,
    ].join('\n') + '\n'

  before(async () => {
    tmp = await tempDir()
    records = await anvilRecords()
    await writeDataset(path.join(tmp.dir, 'data', 'anvil'), 'anvil', records, 16)
    await writeDataset(path.join(tmp.dir, 'data', 'other'), 'other', records.slice(0, 32), 16)
    keysFile = path.join(tmp.dir, 'keys.txt')
    await writeFile(keysFile, keysText())
    cluster = await startCluster({
      storage: new LocalStorage(path.join(tmp.dir, 'data')),
      workers: 2,
      replication: 1,
      ...stallTolerant(500),
      budgets: { sizeBytes: 200_000 },
      access: { keysFile, keysReloadMs: 100, ticketSecret: SECRET },
    })
    router = cluster.router.url
    await until('both datasets served', async () => ((await heightOf('anvil')) === 127 && (await heightOf('other')) === 31 ? true : undefined))
  })

  after(async () => {
    killChildren()
    await cluster?.stop()
    await tmp?.cleanup()
  })

  async function heightOf(name: string): Promise<number | undefined> {
    const a = await request(`${router}/datasets/${name}/height`, { headers: bearer(KEYS.alice) })
    return a.status === 200 ? Number(a.text) : undefined
  }

  /** A worker URL (with its ticket) for `block`, as alice. */
  async function workerFor(dataset: string, block: number, k = KEYS.alice): Promise<string> {
    const a = await request(`${router}/datasets/${dataset}/${block}/worker`, { headers: bearer(k) })
    assert.equal(a.status, 200, a.text)
    return a.text
  }

  it('answers 401 without a key and 403 for an unknown or revoked key, as JSON, on both dataset routes', async () => {
    for (const route of ['height', '0/worker']) {
      const none = await request(`${router}/datasets/anvil/${route}`)
      assert.equal(none.status, 401)
      assert.equal(json(none).error, 'api-key-required')
      assert.match(none.headers['www-authenticate'] ?? '', /^Bearer/)
      assert.match(none.headers['content-type'] ?? '', /^application\/json/)

      const unknown = await request(`${router}/datasets/anvil/${route}`, { headers: bearer(key('mallory')) })
      assert.equal(unknown.status, 403)
      assert.equal(json(unknown).error, 'invalid-api-key')
      const unknownInPath = await request(`${router}/k/${key('mallory')}/datasets/anvil/${route}`)
      assert.equal(unknownInPath.status, 403)
      assert.equal(json(unknownInPath).error, 'invalid-api-key')

      const revoked = await request(`${router}/datasets/anvil/${route}`, { headers: bearer(KEYS.bob) })
      assert.equal(revoked.status, 403)
      assert.equal(json(revoked).error, 'revoked-api-key')
      const revokedInPath = await request(`${router}/k/${KEYS.bob}/datasets/anvil/${route}`)
      assert.equal(revokedInPath.status, 403)
      for (const a of [none, unknown, unknownInPath, revoked, revokedInPath]) assertNoKey('an error body', a.text)
    }
  })

  it('accepts a key as Bearer, as Basic (what the SDK sends for http://<key>@host) and in the path', async () => {
    const viaBearer = await request(`${router}/datasets/anvil/height`, { headers: bearer(KEYS.alice) })
    assert.equal(viaBearer.status, 200)
    assert.equal(viaBearer.text, '127')
    const viaBasic = await request(`${router}/datasets/anvil/height`, { headers: { authorization: `Basic ${Buffer.from(`${KEYS.alice}:`).toString('base64')}` } })
    assert.equal(viaBasic.text, '127')
    const viaPath = await request(`${router}/k/${KEYS.alice}/datasets/anvil/height`)
    assert.equal(viaPath.status, 200)
    assert.equal(viaPath.text, '127')
    const worker = await request(`${router}/k/${KEYS.alice}/datasets/anvil/40/worker`)
    assert.equal(worker.status, 200)
    assert.match(worker.text, /^http:\/\/127\.0\.0\.1:\d+\/datasets\/anvil\/query\?ticket=[\w-]+\.[\w-]+$/)
    assertNoKey('a worker URL', worker.text)
    // The ticket names the key by its id, never the key itself; the unnamed key gets key-<hash>.
    const payload = (url: string) => JSON.parse(Buffer.from(new URL(url).searchParams.get('ticket')!.split('.')[0], 'base64url').toString())
    const t = payload(worker.text)
    assert.equal(t.k, 'alice')
    assert.equal(t.d, 'anvil')
    assert.deepEqual([t.f, t.t], [40, 47], 'from the block to the end of its chunk')
    assert.ok(t.e > Date.now() + 50_000 && t.e <= Date.now() + 60_000, 'expires in 60 s')
    assert.match(payload(await workerFor('anvil', 0, KEYS.dave)).k, /^key-[0-9a-f]{8}$/)
    // The answer works as the SDK uses it: POST to exactly that URL.
    const answer = await postJson(worker.text, { fromBlock: 40, toBlock: 41, ...HEADERS_ONLY })
    assert.equal(answer.status, 200, answer.text)
    assert.deepEqual(json(answer).map((b: Block) => b.header.number), [40, 41])
  })

  it('the real @subsquid/evm-processor syncs the whole dataset through a key-in-path base URL', async () => {
    const run = await runProcessor(tmp.dir, 'keyed', fullSync(`${router}/k/${KEYS.alice}/datasets/anvil`, records))
    assert.equal(run.code, 0, run.stderr)
    assert.ok(run.batches.length > 1, 'expected several batches')
    assertMatchesSource(blocksOf(run), records)
  })

  it('workers refuse queries without a valid ticket for the dataset and block', async () => {
    const url = await workerFor('anvil', 0)
    const bare = url.split('?')[0]
    const ticket = new URL(url).searchParams.get('ticket')!
    const query = { fromBlock: 0, toBlock: 3, ...HEADERS_ONLY }
    const refused = async (target: string, body: object, code: string) => {
      const a = await postJson(target, body)
      assert.equal(a.status, 403, `${target}: ${a.text}`)
      assert.equal(json(a).error, code, a.text)
      assertNoKey('a worker error body', a.text)
      return a
    }

    assert.equal((await postJson(url, query)).status, 200)
    await refused(bare, query, 'invalid-ticket')
    await refused(`${bare}?ticket=`, query, 'invalid-ticket')
    await refused(`${bare}?ticket=garbage`, query, 'invalid-ticket')
    // Tampered: another payload under the same signature, or another signature.
    const [payload, sig] = ticket.split('.')
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString())
    const forged = Buffer.from(JSON.stringify({ ...claims, t: 127, e: claims.e + 3_600_000 })).toString('base64url')
    await refused(`${bare}?ticket=${forged}.${sig}`, query, 'invalid-ticket')
    await refused(`${bare}?ticket=${payload}.${sig.slice(0, 10)}${sig[10] === 'A' ? 'B' : 'A'}${sig.slice(11)}`, query, 'invalid-ticket')
    const otherSecret = signTicket(randomBytes(32), { dataset: 'anvil', from: 0, to: 15, key: 'alice', expires: Date.now() + 60_000 })
    await refused(`${bare}?ticket=${otherSecret}`, query, 'invalid-ticket')
    // A ticket for another dataset, sent to this dataset's route on the same worker.
    const otherUrl = await workerFor('other', 0)
    await refused(`${bare}?ticket=${new URL(otherUrl).searchParams.get('ticket')}`, query, 'invalid-ticket')
    // fromBlock outside the ticket's range (block 0's chunk: 0–15).
    const outside = await refused(url, { ...query, fromBlock: 16, toBlock: 20 }, 'invalid-ticket')
    assert.match(json(outside).message, /fromBlock 0–15, not 16/)
    assert.equal((await postJson(url, { ...query, fromBlock: 15, toBlock: 15 })).status, 200, 'the end of the range is in it')
    // Expired: 403 ticket-expired with Retry-After: 0, which the SDK and our client retry (via the router).
    const expired = signTicket(SECRET, { dataset: 'anvil', from: 0, to: 15, key: 'alice', expires: Date.now() - 1 })
    const late = await refused(`${bare}?ticket=${expired}`, query, 'ticket-expired')
    assert.equal(late.headers['retry-after'], '0')
  })

  it('an expired ticket is retried by asking the router again: by our client and by the real SDK', async () => {
    // A front for the router that hands out one expired ticket first.
    let served = 0
    const front = http.createServer(async (req, res) => {
      const a = await request(`${router}${req.url}`, { headers: req.headers.authorization ? { authorization: req.headers.authorization } : {} })
      let text = a.text
      if (/\/worker$/.test(req.url!) && a.status === 200 && served++ === 0) {
        const u = new URL(text)
        const t = JSON.parse(Buffer.from(u.searchParams.get('ticket')!.split('.')[0], 'base64url').toString())
        u.searchParams.set('ticket', signTicket(SECRET, { dataset: t.d, from: t.f, to: t.t, key: t.k, expires: Date.now() - 1000 }))
        text = u.toString()
      }
      res.writeHead(a.status, { 'content-type': String(a.headers['content-type']) }).end(text)
    })
    await new Promise<void>((r) => front.listen(0, '127.0.0.1', r))
    const base = `http://127.0.0.1:${(front.address() as AddressInfo).port}`
    try {
      const retries: Error[] = []
      const client = new ArchiveClient(`${base}/datasets/anvil`, { apiKey: KEYS.alice, onRetry: ({ error }) => retries.push(error), backoffMs: [10] })
      const got: number[] = []
      for await (const b of client.blocks(HEADERS_ONLY, { fromBlock: 0, toBlock: 30 })) got.push(b.header.number)
      assert.deepEqual(got, records.slice(0, 31).map((r) => r.number))
      assert.equal(retries.length, 1)
      assert.ok(retries[0] instanceof HttpError && retries[0].status === 403 && JSON.parse(retries[0].body).error === 'ticket-expired')
      assert.ok(!retries[0].message.includes('ticket=ey'), 'the ticket is not in the message')

      served = 0
      const run = await runProcessor(tmp.dir, 'expired', {
        gateway: `${base}/k/${KEYS.alice}/datasets/anvil`,
        from: 0,
        to: 30,
        includeAllBlocks: true,
        fields: { block: { timestamp: true } },
      })
      assert.equal(run.code, 0, run.stderr)
      assert.ok(served > 1, 'the SDK asked again')
      assert.deepEqual(blocksOf(run).map((b) => b.header.height), records.slice(0, 31).map((r) => r.number))
    } finally {
      await new Promise((r) => front.close(r))
    }
  })

  it('rate limits per key with 429 + Retry-After, and our client still completes a sync under it', async () => {
    // carol: 8 requests/s, bursts of 1. Requests sent at once: the burst passes, the rest are refused
    // (sent one after the other, a stall of the machine between them refills the bucket).
    const atOnce = await Promise.all(Array.from({ length: 6 }, () => request(`${router}/datasets/anvil/height`, { headers: bearer(KEYS.carol) })))
    const statuses = atOnce.map((a) => a.status)
    assert.ok(statuses.includes(200) && statuses.every((s) => s === 200 || s === 429), String(statuses))
    const second = atOnce.find((a) => a.status === 429)
    assert.ok(second, String(statuses))
    assert.equal(json(second).error, 'rate-limited')
    assert.equal(second.headers['retry-after'], '1')
    assertNoKey('a 429 body', second.text)
    // Other keys have their own bucket (and no limit here).
    assert.equal((await request(`${router}/datasets/anvil/height`, { headers: bearer(KEYS.alice) })).status, 200)

    const limited: number[] = []
    const started = Date.now()
    const client = new ArchiveClient(`${router}/k/${KEYS.carol}/datasets/anvil`, {
      maxAttempts: 20,
      // The pause is Retry-After (1 s) or this, whichever is longer.
      backoffMs: [100],
      onRetry: ({ error }) => limited.push((error as HttpError).status),
    })
    const got: number[] = []
    for await (const b of client.blocks(HEADERS_ONLY, { fromBlock: 0, parallel: 2, segmentBlocks: 32 })) got.push(b.header.number)
    assert.deepEqual(got, records.map((r) => r.number))
    assert.ok(limited.length > 0 && limited.every((s) => s === 429), `retries: ${limited}`)
    assert.ok(Date.now() - started >= 1000, 'the limit slowed it down')
  })

  it('limits the queries at once per key on a worker (the limit travels in the ticket)', async () => {
    const url = await workerFor('anvil', 0)
    const bare = url.split('?')[0]
    const ticket = signTicket(SECRET, { dataset: 'anvil', from: 0, to: 15, key: 'dave', expires: Date.now() + 60_000, concurrency: 1 })
    const heavy = { fromBlock: 0, transactions: [{}], logs: [{}], traces: [{}], stateDiffs: [{}], fields: ALL_FIELDS, includeAllBlocks: true }
    const answers = await Promise.all(Array.from({ length: 8 }, () => postJson(`${bare}?ticket=${ticket}`, heavy)))
    const statuses = answers.map((a) => a.status)
    assert.ok(statuses.includes(200), String(statuses))
    const refused = answers.filter((a) => a.status === 429)
    assert.ok(refused.length > 0, String(statuses))
    for (const a of refused) {
      assert.equal(json(a).error, 'rate-limited')
      assert.equal(a.headers['retry-after'], '1')
    }
    // Without a limit in the ticket, the same burst is only bounded by the worker's admission control.
    const open = signTicket(SECRET, { dataset: 'anvil', from: 0, to: 15, key: 'dave', expires: Date.now() + 60_000 })
    const all = await Promise.all(Array.from({ length: 4 }, () => postJson(`${bare}?ticket=${open}`, heavy)))
    assert.ok(all.every((a) => a.status === 200 || (a.status === 503 && json(a).error === 'busy')), String(all.map((a) => a.status)))
  })

  it('re-reads the keys file when it changes', async () => {
    const ask = () => request(`${router}/k/${KEYS.erin}/datasets/anvil/height`)
    assert.equal((await ask()).status, 403)
    await writeFile(keysFile, keysText() + `${KEYS.erin} erin\n`)
    await until('erin accepted', async () => ((await ask()).status === 200 ? true : undefined), 5000)
    await writeFile(keysFile, keysText() + `${KEYS.erin} erin revoked\n`)
    await until('erin revoked', async () => ((await ask()).status === 403 ? true : undefined), 5000)
    assert.equal(json(await ask()).error, 'revoked-api-key')
    // A broken file keeps the keys loaded before.
    await writeFile(keysFile, 'not-a-key\n')
    await new Promise((r) => setTimeout(r, 400))
    assert.equal((await request(`${router}/datasets/anvil/height`, { headers: bearer(KEYS.alice) })).status, 200)
    await writeFile(keysFile, keysText())
    await until('erin unknown again', async () => (json(await ask()).error === 'invalid-api-key' ? true : undefined), 5000)
  })

  it('refuses worker pings not signed with the secret', async () => {
    const ping = { worker_id: 'intruder', worker_url: 'http://127.0.0.1:1', state: {} }
    const none = await postJson(`${router}/ping`, ping)
    assert.equal(none.status, 401)
    assert.equal(json(none).error, 'worker-token-required')
    const wrong = await postJson(`${router}/ping`, ping, { 'x-worker-token': workerToken(randomBytes(32)) })
    assert.equal(wrong.status, 403)
    assert.equal(json(wrong).error, 'invalid-worker-token')
    const stale = await postJson(`${router}/ping`, ping, { 'x-worker-token': workerToken(SECRET, Date.now() - 3_600_000) })
    assert.equal(stale.status, 403)
    const status = json(await request(`${router}/status`))
    assert.ok(!status.workers.some((w: { id: string }) => w.id === 'intruder'))
  })

  it('never shows a key in /status, the status page, /metrics or not-found answers', async () => {
    await request(`${router}/k/${KEYS.alice}/datasets/anvil/nothing/here`)
    const notFound = await request(`${router}/k/${KEYS.alice}/datasets/anvil/1/2/3`)
    assert.equal(notFound.status, 404)
    assert.match(json(notFound).message, /\/k\/…\//)
    const badUrl = await request(`${router}/k/${KEYS.alice}/datasets/%E0%A4%A/height`)
    assert.equal(badUrl.status, 400)
    assert.equal(json(badUrl).error, 'bad-request')
    assert.equal((await request(`${router}/datasets/anvil/height`)).status, 401)
    const status = await request(`${router}/status`)
    assert.deepEqual(json(status).access, {
      apiKeys: { keys: 3, revoked: 1 },
      tickets: true,
      ticketTtlS: 60,
      rateLimit: null,
      keyConcurrency: null,
    })
    const page = await request(`${router}/`, { headers: { accept: 'text/html' } })
    const metrics = await request(`${router}/metrics`)
    assert.match(metrics.text, /block_archive_access_denied_total\{service="router",code="api-key-required"\} [1-9]/)
    assert.match(metrics.text, /route="\/k\/:key\/datasets\/:name\/height"/)
    for (const [where, a] of Object.entries({ notFound, badUrl, status, page, metrics })) assertNoKey(where, a.text)
    for (const w of cluster.workers) assertNoKey('worker metrics', (await request(`${w.url}/metrics`)).text)
  })

  it('router CLI: keys and tickets never in its log (trace level), --api-key for query, no start without a secret', async () => {
    const secretFile = path.join(tmp.dir, 'secret')
    await writeFile(secretFile, randomBytes(24).toString('hex') + '\n')
    const noSecret = await runCli(['router', '--data', path.join(tmp.dir, 'data'), '--port', '0', '--keys-file', keysFile], undefined, { BLOCK_ARCHIVE_TICKET_SECRET: '' })
    assert.notEqual(noSecret.code, 0)
    assert.match(noSecret.stderr, /--keys-file needs the ticket secret/)

    const env = { LOG_LEVEL: 'trace', LOG_FORMAT: 'json' }
    const r = await startCli(['router', '--data', path.join(tmp.dir, 'data'), '--port', '0', ...STALL_TOLERANT_ROUTER, '--keys-file', keysFile, '--ticket-secret-file', secretFile, '--rate-limit', '50'], ['router'], env)
    let routerLog = ''
    r.child.stderr!.on('data', (d) => (routerLog += d))
    const url = r.lines.get('router')![0]
    const w = await startCli(['worker', '--router', url, '--port', '0', '--heartbeat-ms', '200'], ['worker'], { ...env, BLOCK_ARCHIVE_TICKET_SECRET_FILE: secretFile })
    let workerLog = ''
    w.child.stderr!.on('data', (d) => (workerLog += d))
    await until('the CLI router serves anvil', async () => {
      const a = await request(`${url}/datasets/anvil/height`, { headers: bearer(KEYS.alice) })
      return a.text === '127' ? true : undefined
    })
    // Everything that touches a key: good, unknown, revoked, in the path, a bad route, a bad URL.
    const tickets: string[] = []
    for (const k of [KEYS.alice, KEYS.dave]) {
      const a = await request(`${url}/k/${k}/datasets/anvil/0/worker`)
      assert.equal(a.status, 200, a.text)
      tickets.push(new URL(a.text).searchParams.get('ticket')!)
      assert.equal((await postJson(a.text, { fromBlock: 0, toBlock: 1, ...HEADERS_ONLY })).status, 200)
      assert.equal((await postJson(a.text, { fromBlock: 0, toBlock: 1, bogus: 1 })).status, 400)
    }
    await request(`${url}/datasets/anvil/height`, { headers: bearer(KEYS.bob) })
    await request(`${url}/k/${KEYS.bob}/datasets/anvil/height`)
    await request(`${url}/k/${KEYS.carol}/datasets/anvil/x/y/z`)
    await request(`${url}/k/${KEYS.carol}/datasets/%E0%A4%A/height`)
    await request(`${url}/datasets/anvil/height`, { headers: { authorization: `Basic ${Buffer.from(`:${KEYS.carol}`).toString('base64')}` } })

    // query --api-key (and its environment variable)
    const q = await runCli(['query', `${url}/datasets/anvil`, '--to', '5', '-q', '--api-key', KEYS.alice, JSON.stringify(HEADERS_ONLY)])
    assert.equal(q.code, 0, q.stderr)
    assert.deepEqual(q.stdout.trim().split('\n').map((l) => JSON.parse(l).header.number), [0, 1, 2, 3, 4, 5])
    const qEnv = await runCli(['query', `${url}/datasets/anvil`, '--to', '2', '-q'], undefined, { BLOCK_ARCHIVE_API_KEY: KEYS.dave })
    assert.equal(qEnv.code, 0, qEnv.stderr)
    const qNone = await runCli(['query', `${url}/datasets/anvil`, '--to', '2', '-q'], undefined, { BLOCK_ARCHIVE_API_KEY: '' })
    assert.notEqual(qNone.code, 0)
    assert.match(qNone.stderr, /401/)
    const qPath = await runCli(['query', `${url}/k/${KEYS.bob}/datasets/anvil`, '--to', '2', '-q'])
    assert.notEqual(qPath.code, 0)
    assert.match(qPath.stderr, /403/)
    assert.ok(!qPath.stderr.includes(KEYS.bob), 'the client does not print the key of its base URL either')

    r.child.kill('SIGTERM')
    w.child.kill('SIGTERM')
    await Promise.all([r.child, w.child].map((c) => new Promise((res) => (c.exitCode !== null ? res(null) : c.once('exit', res)))))
    const logs = { router: r.stderr() + routerLog, worker: w.stderr() + workerLog }
    assert.ok(logs.router.split('\n').length > 5, 'the router logged at trace level')
    for (const [who, text] of Object.entries(logs)) {
      assertNoKey(`the ${who} log`, text)
      for (const t of tickets) {
        assert.ok(!text.includes(t.split('.')[1]), `the ${who} log contains a ticket`)
      }
    }
    assert.match(logs.router, /"keys":3,"revoked":1/)
  })

  it('without access control: keys are ignored, worker URLs carry no ticket, rate limits are per address', async () => {
    const open = await startCluster({
      storage: new LocalStorage(path.join(tmp.dir, 'data')),
      workers: 1,
      ...stallTolerant(500),
      access: { rateLimit: 2, rateBurst: 2 },
    })
    try {
      const base = open.router.url
      await until('served', async () => ((await request(`${base}/datasets/anvil/height`)).text === '127' ? true : undefined))
      await new Promise((r) => setTimeout(r, 1100))
      const viaPath = await request(`${base}/k/anything-goes/datasets/anvil/0/worker`)
      assert.equal(viaPath.status, 200)
      assert.doesNotMatch(viaPath.text, /\?/)
      const q = await postJson(viaPath.text, { fromBlock: 0, toBlock: 0, ...HEADERS_ONLY })
      assert.equal(q.status, 200)
      // The bucket holds at most 2 and refills 2 a second: of requests sent at once, at most 2 pass plus
      // what refilled while they were answered (a busy machine spreads them out: then try again).
      let third: Awaited<ReturnType<typeof request>> | undefined
      for (let burst = 0; burst < 10 && !third; burst++) {
        const t0 = performance.now()
        const atOnce = await Promise.all(Array.from({ length: 8 }, () => request(`${base}/datasets/anvil/height`)))
        const seconds = (performance.now() - t0) / 1000
        const statuses = atOnce.map((a) => a.status)
        assert.ok(statuses.every((s) => s === 200 || s === 429), String(statuses))
        assert.ok(statuses.filter((s) => s === 200).length <= 2 + Math.ceil(2 * seconds), `${statuses} in ${seconds.toFixed(2)} s`)
        third = atOnce.find((a) => a.status === 429)
      }
      assert.ok(third, 'no request was limited in 10 bursts of 8')
      assert.match(json(third).message, /from this address/)
      assert.ok(Number(third.headers['retry-after']) >= 1)
      assert.deepEqual(json(await request(`${base}/status`)).access, {
        apiKeys: null,
        tickets: false,
        ticketTtlS: null,
        rateLimit: { rps: 2, burst: 2, per: 'address' },
        keyConcurrency: null,
      })
    } finally {
      await open.stop()
    }
  })
})

describe('access control building blocks', () => {
  it('parses line and JSON keys files; errors name the line, never the key', () => {
    const k = 'k'.repeat(20)
    const [ci, old, ...rest] = parseKeys(`# c\n${k} ci rps=2.5 burst=3 concurrency=1\n\n${'z'.repeat(16)} revoked # old\n`).values()
    assert.deepEqual(ci, { id: 'ci', revoked: false, rps: 2.5, burst: 3, concurrency: 1 })
    assert.match(old.id, /^key-[0-9a-f]{8}$/)
    assert.equal(old.revoked, true)
    assert.equal(rest.length, 0)
    const fromJson = parseKeys(JSON.stringify({ keys: [{ key: k, name: 'ci', rps: 1 }] }))
    assert.deepEqual([...fromJson.values()], [{ id: 'ci', revoked: false, rps: 1, burst: undefined, concurrency: undefined }])
    const secretish = 'short-secret'
    for (const [text, re] of [
      [`${secretish}\n`, /line 1: a key must be at least 16/],
      [`${k} a\n${k} b\n`, /line 2: the same key as line 1/],
      [`${k} a\n${'y'.repeat(16)} a\n`, /name "a" is also used/],
      [`${k} rps=fast\n`, /rps must be a number/],
      [`${k} a b\n`, /unexpected "b"/],
      [`{"keys": [{"key": "${secretish}"`, /not valid JSON/],
      [`{"keys": [{"key": "${k}", "rate": 1}]}`, /unknown member "rate"/],
    ] as const) {
      assert.throws(() => parseKeys(text), (e: Error) => re.test(e.message) && !e.message.includes(secretish) && !e.message.includes(k))
    }
  })

  it('token buckets refill at the rate; per-key concurrency counts and releases once', () => {
    const b = new TokenBuckets()
    const limit = { rps: 2, burst: 2 }
    assert.equal(b.take('a', limit, 0), 0)
    assert.equal(b.take('a', limit, 0), 0)
    assert.equal(b.take('a', limit, 0), 1)
    assert.equal(b.take('b', limit, 0), 0, 'another client has its own bucket')
    assert.equal(b.take('a', limit, 500), 0, 'half a second = one token at 2/s')
    assert.equal(b.take('a', { rps: 0, burst: 1 }, 500), 0, 'rate 0 = no limit')
    assert.equal(b.take('c', { rps: 0.1, burst: 1 }, 0), 0)
    assert.equal(b.take('c', { rps: 0.1, burst: 1 }, 0), 10)
    const c = new KeyConcurrency()
    const r1 = c.acquire('k', 2)
    const r2 = c.acquire('k', 2)
    assert.throws(() => c.acquire('k', 2), (e: ApiError) => e.status === 429 && e.code === 'rate-limited' && e.retryAfter === 1)
    r1()
    r1()
    assert.equal(c.count('k'), 1)
    r2()
    assert.equal(c.count('k'), 0)
    assert.doesNotThrow(() => c.acquire('k', undefined))
  })
})
