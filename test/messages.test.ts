import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { killChildren, runCli, startCli } from './helpers/cli.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'

/*
 * What a newcomer reads after the usual first mistakes: a query without a URL, a base URL without
 * `/datasets/<name>`, an ingest pointed at a web server that is no JSON-RPC node, and datasets one
 * folder too deep for `serve --data`.
 */

describe('messages for first mistakes', { timeout: 600_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let router: string
  let serveLog: () => string

  before(async () => {
    tmp = await tempDir('ba-messages-')
    const records = (await anvilRecords()).slice(0, 16)
    const data = path.join(tmp.dir, 'data')
    await writeDataset(path.join(data, 'anvil'), 'anvil', records, 16)
    // two levels down: data/more/deep is a dataset, data/more is not
    await writeDataset(path.join(data, 'more', 'deep'), 'deep', records, 16)
    const s = await startCli(['serve', '--data', data, '--port', '0', '--workers', '1', '--local-forms', 'off', '--cache', path.join(tmp.dir, 'cache')], ['router', 'dataset anvil'])
    router = s.lines.get('router')![0]
    serveLog = s.stderr
  })

  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  it('query with something that is not a URL says what a base URL looks like', async () => {
    const r = await runCli(['query', 'not-a-url', '{}'])
    assert.equal(r.code, 1)
    assert.equal(r.stderr, '"not-a-url" is not a dataset base URL: it looks like http://HOST:PORT/datasets/<name>, e.g. http://127.0.0.1:8080/datasets/ethereum (serve prints each dataset\'s)\n')
  })

  it('replay-rpc --distinct without --repeat says what it goes with', async () => {
    const r = await runCli(['replay-rpc', '--distinct', '5'])
    assert.equal(r.code, 1)
    assert.equal(r.stderr, '--distinct goes with --repeat\n')
  })

  it("the router's 404 for a path outside /datasets/<name> says where datasets are and lists them", async () => {
    const res = await fetch(`${router}/anvil/height`)
    assert.equal(res.status, 404)
    const body = (await res.json()) as { message: string }
    assert.equal(
      body.message,
      "no such route: GET /anvil/height; did you mean /datasets/anvil/height? a dataset's base URL is http://HOST:PORT/datasets/<name> (GET …/height, GET …/<block>/worker; GET /datasets lists them); datasets: anvil",
    )
    const q = await runCli(['query', router, '{}', '--max-attempts', '1'])
    assert.notEqual(q.code, 0)
    assert.match(q.stderr, /no such route: GET \/height; a dataset's base URL is http:\/\/HOST:PORT\/datasets\/<name> .*; datasets: anvil/)
  })

  it('serve --data names the datasets one folder too deep that it does not serve, and why', async () => {
    const line = serveLog()
      .split('\n')
      .find((l) => l.includes('not serving the datasets in'))
    assert.ok(line, serveLog())
    const more = path.join(tmp.dir, 'data', 'more')
    assert.ok(
      line.includes(`not serving the datasets in ${more} (deep): it has no dataset.json, and --data ${path.join(tmp.dir, 'data')} serves only its dataset folders one level down; give --data ${more} too`),
      line,
    )
  })

  it('ingest from a web server that is no JSON-RPC node stops at once with a short message', async () => {
    // what `python3 -m http.server` answers to a POST
    const page = `<!DOCTYPE HTML>\n<html lang="en">\n<head><title>Error response</title></head>\n<body>\n<h1>Error response</h1>\n<p>Error code: 501</p>\n<p>Message: Unsupported method ('POST').</p>\n${'<p>padding</p>\n'.repeat(100)}</body>\n</html>\n`
    let posts = 0
    const web = http.createServer((req, res) => {
      posts++
      req.resume()
      res.writeHead(501, 'Unsupported method', { 'content-type': 'text/html' }).end(page)
    })
    await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(web.address() as AddressInfo).port}`
    try {
      const r = await runCli(['ingest', '--rpc', url, '--dataset', 'x', '--out', path.join(tmp.dir, 'x'), '--to', '10'], undefined, { LOG_LEVEL: 'warn' })
      assert.equal(r.code, 1, r.stderr)
      assert.equal(posts, 1, 'asked once, not retried')
      const lines = r.stderr.trim().split('\n')
      assert.equal(lines.length, 1, r.stderr)
      assert.match(lines[0], new RegExp(`^${url} is not a JSON-RPC node: HTTP 501 Unsupported method: Error response Error response Error code: 501 Message: Unsupported method \\('POST'\\)\\. padding .*…$`))
      assert.ok(lines[0].length < 300, lines[0])
    } finally {
      web.close()
    }
  })
})
