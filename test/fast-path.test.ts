import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { generateDataset } from '../src/bench-data/generate.js'
import { listLocalChunks, readDatasetMeta } from '../src/chunks/layout.js'
import { familyByName } from '../src/families/index.js'
import { ingestRecordedStarknet } from '../src/ingest/recorded.js'
import { ingestRecordedSidecar } from '../src/ingest/substrate/sidecar/recorded.js'
import { jemallocInherited, killChildren, startCli, until } from './helpers/cli.js'
import { anvilRecords, tempDir, writeDataset } from './helpers/dataset.js'
import { allFieldsQuery, declaredQueries } from './helpers/declared-queries.js'

/*
 * The speed tricks behind src/fast-path.ts change no byte of an answer: the same queries, through
 * `serve` with BLOCK_ARCHIVE_PLAIN=1 (columns read through node-api's values, no slabs, the main
 * thread, jemalloc's defaults) and without (DuckDB's string layout read directly, native copies
 * into reused slabs, the serving thread), give the same bytes. EVM, Starknet and Substrate
 * (Moonbeam) queries generated from their declarations, each request list unfiltered, and a large
 * answer (every transaction and log of 24 synthetic mainnet-like blocks with every field: more than
 * a slab, cut by a 6 MiB size budget into several answers, slabs reused from one answer to the next).
 */

type Obj = Record<string, any>

/** At most `n` of `items`, spread over the list. */
const sample = <T>(items: T[], n: number): T[] => (items.length <= n ? items : Array.from({ length: n }, (_, i) => items[Math.floor((i * items.length) / n)]))

interface Served {
  router: string
  worker: string
}

/**
 * Every answer of a query over its range, as the client walks it: the status and bytes of each (a
 * refusal ends the walk: a chunk without a table the query asks for).
 */
async function walk(s: Served, dataset: string, query: Obj): Promise<{ status: number; bytes: Buffer }[]> {
  const out: { status: number; bytes: Buffer }[] = []
  let from = query.fromBlock as number
  for (;;) {
    const worker = await until(`a worker for ${dataset} block ${from}`, async () => {
      const r = await fetch(`${s.router}/datasets/${dataset}/${from}/worker`)
      return r.ok ? (await r.text()).trim() : undefined
    }, 60_000)
    const res = await fetch(worker, {
      method: 'POST', headers: { 'content-type': 'application/json', 'accept-encoding': 'identity' }, body: JSON.stringify({ ...query, fromBlock: from }),
    })
    const bytes = Buffer.from(await res.arrayBuffer())
    out.push({ status: res.status, bytes })
    if (res.status !== 200) {
      assert.equal(res.status, 400, `${dataset} from ${from}: ${bytes.subarray(0, 300).toString()}`)
      return out
    }
    const blocks = JSON.parse(bytes.toString('utf8')) as { header: { number: number } }[]
    const last = blocks[blocks.length - 1].header.number
    if (last >= query.toBlock) return out
    from = last + 1
  }
}

describe('the plain path (BLOCK_ARCHIVE_PLAIN=1) and the fast path give the same bytes', { timeout: 1_800_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let plain: Served
  let fast: Served
  const queries: { dataset: string; what: string; query: Obj }[] = []

  before(async () => {
    tmp = await tempDir('ba-fast-path-')
    const data = path.join(tmp.dir, 'data')
    await writeDataset(path.join(data, 'evm'), 'evm', (await anvilRecords()).slice(0, 64), 16)
    await ingestRecordedStarknet(path.join(data, 'starknet'), 'starknet')
    await ingestRecordedSidecar(path.join(data, 'moonbeam'), 'moonbeam', 'moonbeam', { workers: 0 })
    await generateDataset({ out: path.join(data, 'mainnet'), blocks: 24, chunkBlocks: 12, seed: 'fast-path', force: true })
    for (const name of ['evm', 'starknet', 'moonbeam', 'mainnet']) {
      const root = path.join(data, name)
      const family = familyByName((await readDatasetMeta(root))!.family)
      const refs = await listLocalChunks(root)
      const view = { chunks: refs.map((ref, i) => ({ ...ref, coverFrom: i > 0 ? refs[i - 1].last + 1 : 0, dir: path.join(root, ref.path) })), height: refs[refs.length - 1].last }
      // Every request list unfiltered: the temp-table plan, block order over local forms.
      const all = Object.fromEntries(family.items.flatMap((item) => item.requests.map((r) => [r.name, [{}]])))
      if (name === 'mainnet') {
        queries.push({ dataset: name, what: 'every transaction and log (a large answer)', query: { ...allFieldsQuery(family, view), transactions: [{}], logs: [{}] } })
        continue
      }
      queries.push({ dataset: name, what: 'every request list unfiltered', query: { ...allFieldsQuery(family, view), ...all } })
      // Filtered requests with relation flags: the keyed plan.
      for (const query of sample(await declaredQueries(family, view), 8)) queries.push({ dataset: name, what: 'declared', query })
    }
    const serve = async (plainPath: boolean): Promise<Served> => {
      const s = await startCli(
        ['serve', '--data', data, '--port', '0', '--workers', '1', '--cache', path.join(tmp.dir, plainPath ? 'cache-plain' : 'cache-fast'), '--heartbeat-ms', '200', '--missed-heartbeats', '150', '--max-response-bytes', String(6 * 1024 * 1024),
          // No time budget: where an answer is cut must not depend on the machine's speed.
          '--max-response-ms', '600000'],
        ['router', 'worker'],
        { BLOCK_ARCHIVE_PLAIN: plainPath ? '1' : '0' },
        180_000,
      )
      return { router: s.lines.get('router')![0], worker: s.lines.get('worker')![0] }
    }
    plain = await serve(true)
    fast = await serve(false)
  })

  after(async () => {
    killChildren()
    await tmp?.cleanup()
  })

  it('the worker says which path it runs', async () => {
    const node = async (s: Served) => ((await (await fetch(`${s.worker}/status`)).json()) as Obj).node
    // The plain path sets no jemalloc option of its own: it runs with what it was given.
    assert.deepEqual(await node(plain), { thread: 'main', young_generation_mb: null, initial_old_space_mb: null, native_row_copy: false, plain_path: true, ...jemallocInherited() })
    const f = await node(fast)
    assert.equal(f.plain_path, false)
    assert.equal(f.thread, 'serving')
  })

  it('EVM, Starknet and Substrate queries and a large answer: byte for byte', async () => {
    let bytes = 0
    let cut = 0
    let largeAnswers: { status: number; bytes: Buffer }[] | undefined
    for (const dataset of new Set(queries.map((q) => q.dataset))) {
      await until(`${dataset} served by both`, async () => {
        for (const s of [plain, fast]) if (!(await fetch(`${s.router}/datasets/${dataset}/height`)).ok) return undefined
        return true
      }, 120_000)
    }
    for (const { dataset, what, query } of queries) {
      const p = await walk(plain, dataset, query)
      const f = await walk(fast, dataset, query)
      const where = `${dataset}, ${what}: ${JSON.stringify(query).slice(0, 300)}`
      assert.equal(f.length, p.length, `${where}: as many answers`)
      p.forEach((answer, i) => {
        assert.equal(f[i].status, answer.status, `${where}: answer ${i}`)
        assert.ok(answer.bytes.equals(f[i].bytes), `${where}: answer ${i} differs`)
      })
      if (dataset === 'mainnet') largeAnswers = f
      bytes += p.reduce((n, a) => n + a.bytes.length, 0)
      if (p.filter((a) => a.status === 200).length > 1) cut++
    }
    // The large answer's walk on the fast path (compared above with the plain path's).
    const answers = largeAnswers!
    assert.ok(answers[0].bytes.length > 4 * 1024 * 1024, `an answer larger than a slab (${answers[0].bytes.length} bytes)`)
    assert.ok(cut >= 1, 'an answer was cut by the size budget')
    assert.ok(bytes > 20 * 1024 * 1024, `${bytes} bytes compared`)
  })
})
