import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { describeJsonError, jsonErrorPosition } from '../src/server/json-error.js'
import type { WorkerServer } from '../src/server/worker-http.js'
import { anvilRecords, startStandaloneWorker, tempDir, writeDataset } from './helpers/dataset.js'
import { postJson } from './helpers/http.js'

/*
 * A body that is not JSON is answered 400 `invalid-json` with where it breaks: V8's reason, the
 * position, line and column, and an excerpt around it (a real worker over real HTTP).
 */

describe('invalid JSON bodies: the answer says where', () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let worker: WorkerServer
  let queryUrl: string

  before(async () => {
    tmp = await tempDir('ba-json-')
    const dir = path.join(tmp.dir, 'dense')
    await writeDataset(dir, 'dense', (await anvilRecords()).slice(0, 8), 8)
    worker = await startStandaloneWorker(dir)
    queryUrl = `${worker.url}/datasets/dense/query`
  })

  after(async () => {
    await worker?.stop()
    await tmp?.cleanup()
  })

  const post = async (body: string, contentType = 'application/json') => {
    const res = await postJson(queryUrl, body, { 'content-type': contentType })
    assert.equal(res.headers['content-type']?.split(';')[0], 'application/json')
    return { status: res.status, body: JSON.parse(res.text) as { error: string; message: string } }
  }

  const cases: [body: string, reason: RegExp, position: number, line: number, column: number, excerpt: string][] = [
    ['{"fromBlock":0,}', /property name/, 15, 1, 16, '`{"fromBlock":0,}`'],
    ['{"fromBlock": ', /end of input/, 14, 1, 15, '`{"fromBlock": `'],
    ['{fromBlock: 1}', /property name/, 1, 1, 2, '`{fromBlock: 1}`'],
    ['[1,2', /',' or ']'/, 4, 1, 5, '`[1,2`'],
    ['{"fromBlock":0} x', /after JSON/, 16, 1, 17, '`{"fromBlock":0} x`'],
    // V8 names no position for a bad literal ("Unexpected token '}', … is not valid JSON"): found by scanning.
    ['{"fromBlock":0,"includeAllBlocks":tru}', /Unexpected token '}'/, 37, 1, 38, '`…0,"includeAllBlocks":tru}`'],
    // Line and column count from the last line break; the excerpt keeps to one line (\n escaped).
    ['{\n  "fromBlock": 0,\n  "logs": [{"address": ["0x1"],}]\n}', /property name/, 51, 3, 32, '`…": [{"address": ["0x1"],}]\\n}`'],
  ]

  for (const [body, reason, position, line, column, excerpt] of cases) {
    it(`${JSON.stringify(body)} → position ${position}, line ${line}, column ${column}`, async () => {
      const res = await post(body)
      assert.equal(res.status, 400)
      assert.equal(res.body.error, 'invalid-json')
      const m = res.body.message
      assert.match(m, /^the request body is not valid JSON: /)
      assert.match(m, reason)
      assert.ok(m.includes(`at position ${position} (line ${line}, column ${column})`), m)
      assert.ok(m.endsWith(` near ${excerpt}`), m)
      // V8's copy of the whole body is not repeated in the message.
      assert.doesNotMatch(m, /is not valid JSON$/)
    })
  }

  it('a long body gives a short excerpt around the position', async () => {
    const body = `{"fromBlock":0,"logs":[${Array.from({ length: 200 }, () => '{"address":["0x00"]}').join(',')}],oops}`
    const res = await post(body)
    assert.equal(res.status, 400)
    const pos = body.indexOf('oops')
    assert.ok(res.body.message.includes(`at position ${pos} (line 1, column ${pos + 1})`), res.body.message)
    assert.ok(res.body.message.length < 200, res.body.message)
    assert.ok(res.body.message.includes('…'), res.body.message)
  })

  it('the same with a charset parameter; empty bodies and __proto__ keys keep their own messages; valid JSON still works', async () => {
    const res = await post('{"fromBlock":0,}', 'application/json; charset=utf-8')
    assert.equal(res.status, 400)
    assert.match(res.body.message, /at position 15 \(line 1, column 16\)/)
    const empty = await post('')
    assert.equal(empty.status, 400)
    assert.equal(empty.body.error, 'invalid-json')
    assert.match(empty.body.message, /empty/)
    const proto = await post('{"fromBlock":0,"__proto__":{"x":1}}')
    assert.equal(proto.status, 400)
    assert.equal(proto.body.error, 'invalid-json')
    assert.match(proto.body.message, /__proto__/)
    const ok = await postJson(queryUrl, '{"fromBlock":0,"toBlock":0}', { 'content-type': 'application/json; charset=utf-8' })
    assert.equal(ok.status, 200, ok.text)
    assert.equal(JSON.parse(ok.text)[0].header.number, 0)
  })
})

describe('jsonErrorPosition (the fallback when V8 names no position)', () => {
  it('agrees with V8 wherever V8 names one', () => {
    const bodies = ['{"a":1,}', '{a:1}', '[1,2', '[1,]', '{"a":1} x', '{"a":"b\nc"}', '{"a":01}', '{"a" 1}', '"abc', '{"a":"\\q"}', '{"a":-}', '[true,fals,1]', '{"a":nul}']
    for (const b of bodies) {
      let v8: number | undefined
      try {
        JSON.parse(b)
      } catch (e) {
        const m = /at position (\d+)/.exec((e as Error).message)
        v8 = m ? Number(m[1]) : undefined
      }
      if (v8 !== undefined) assert.equal(jsonErrorPosition(b), v8, JSON.stringify(b))
    }
    assert.equal(jsonErrorPosition('[true,fals,1]'), 10)
    assert.equal(jsonErrorPosition('{"a":nul}'), 8)
    assert.equal(jsonErrorPosition('nul'), 3)
    assert.equal(jsonErrorPosition('{"a":[1,{"b":null}],"c":"\\u00e9"}'), -1)
    // Deep nesting costs no stack.
    assert.equal(jsonErrorPosition('['.repeat(200_000)), 200_000)
    assert.match(describeJsonError('['.repeat(200_000)), /end of input at position 200000/)
  })
})
