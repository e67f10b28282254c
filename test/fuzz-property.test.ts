import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import fc from 'fast-check'
import { fuzzCase, token, type FuzzCase } from './helpers/arbitraries.js'
import { tempDir } from './helpers/dataset.js'
import { buildFuzzDatasets, checkHealthy, runCase, startFuzzCluster, type FuzzCluster, type FuzzTarget } from './helpers/fuzz.js'

/*
 * Property-based fuzzing of worker queries, every family (helpers/arbitraries.ts generates, helpers/
 * fuzz.ts sends and checks): wrong types, unknown keys, 10,000–20,000-value lists, deep nesting, bad
 * hex, odd block numbers, truncated and non-JSON bodies, wrong content types, giant strings, other
 * routes and methods, other spellings of valid queries, and valid queries drawn from the data.
 * Properties: no 5xx, no request over its timeout, no connection error; every 4xx is JSON with a
 * stable `error` code and a `message` (naming the `path` of a schema error); what each case expects
 * (the family's reference answer, the answer of the canonical spelling, a given status, code and
 * path); afterwards the worker still answers a valid query and holds no slot or lease.
 *
 * A fixed seed and a random one (printed; `FUZZ_SEED=<n>` replays it). `npm run bench -- fuzz` runs
 * 10,000 cases and more.
 */

const FIXED_SEED = 20_141_014
const RANDOM_SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : Math.floor(Math.random() * 2 ** 31)
/** Cases per family and seed (split across the family's datasets). */
const RUNS = { fixed: 130, random: 70 }
// A hang, not a slow answer on a busy machine (CPU burners beside the suite stretch answers to seconds).
const TIMEOUT_MS = 30_000

describe('fuzz: worker queries of every family (fast-check)', { timeout: 900_000 }, () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  let forms: Awaited<ReturnType<typeof tempDir>>
  let fz: FuzzCluster

  before(async () => {
    tmp = await tempDir('ba-fuzz-')
    // EVM: the anvil chain's first 64 blocks in 4 chunks (the deployments of blocks 1–7, then the
    // chain's 3-block cycle of transfers, which the blocks above 64 repeat).
    await buildFuzzDatasets(tmp.dir, { evmBlocks: 64 })
    // The worker answers from its local forms (DuckDB copies of the chunks), the reference from the data.
    forms = await tempDir('ba-fuzz-forms-')
    fz = await startFuzzCluster(tmp.dir, { localForms: forms.dir })
    console.log(`# fuzz seeds: fixed ${FIXED_SEED}, random ${RANDOM_SEED} (replay: FUZZ_SEED=${RANDOM_SEED} node --test dist/test/fuzz-property.test.js)`)
  })

  after(async () => {
    await fz?.stop()
    await tmp?.cleanup()
    await forms?.cleanup()
  })

  // The families at the same time (the worker runs 4 queries at once).
  describe('every family', { concurrency: true }, () => {
  for (const family of ['evm', 'starknet', 'substrate'] as const) {
    it(`${family}: no 5xx or hang, JSON errors naming the problem, answers equal to the reference`, async () => {
      const targets = fz.targets.filter((t) => t.family === family)
      const statuses = new Map<string, number>()
      const categories = new Map<string, number>()
      let cases = 0
      const t0 = performance.now()
      for (const [seed, runs] of [[FIXED_SEED, RUNS.fixed], [RANDOM_SEED, RUNS.random]] as const) {
        await Promise.all(
          targets.map((t, i) =>
            fc.assert(
              fc.asyncProperty(fuzzCase(t.model), async (c) => {
                const r = await runCase(t, c, TIMEOUT_MS)
                cases++
                statuses.set(r.outcome, (statuses.get(r.outcome) ?? 0) + 1)
                categories.set(c.category, (categories.get(c.category) ?? 0) + 1)
                if (r.failure) throw new Error(`${t.name} [${c.category}] ${c.what}\n${r.failure}`)
              }),
              { seed: seed + i, numRuns: Math.ceil(runs / targets.length) },
            ),
          ),
        )
      }
      for (const t of targets) assert.equal(await checkHealthy(t, fz.cluster, TIMEOUT_MS, false), undefined, t.name)
      const list = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ×${n}`).join(', ')
      console.log(`# fuzz ${family}: ${cases} cases in ${((performance.now() - t0) / 1000).toFixed(1)} s; statuses: ${list(statuses)}; categories: ${list(categories)}`)
      assert.ok(cases >= RUNS.fixed + RUNS.random)
      // Not only refusals: a good share of the cases must have been answered and compared.
      assert.ok((statuses.get('200') ?? 0) >= cases / 10, `only ${statuses.get('200') ?? 0} of ${cases} cases answered 200`)
    })
  }
  })

  it('afterwards the worker answers valid queries and holds no query slot or chunk lease', async () => {
    for (const t of fz.targets) assert.equal(await checkHealthy(t, fz.cluster, TIMEOUT_MS), undefined, t.name)
  })

  it('regressions: cases the fuzzing found', async () => {
    const by = (family: string): FuzzTarget => fz.targets.find((t) => t.family === family)!
    const regressions: [FuzzTarget, FuzzCase][] = []
    // `type` looked up with inherited keys: "toString", "constructor", "__proto__" … answered
    // 400 wrong-family ("a query of type "valueOf" does not apply") instead of unknown-type.
    for (const family of ['evm', 'starknet', 'substrate']) {
      for (const type of ['toString', 'constructor', '__proto__', 'hasOwnProperty', 'valueOf']) {
        regressions.push([by(family), { category: 'type', what: `type ${type}`, body: { json: { type, fromBlock: 0 } }, expect: { kind: 'refuse', status: 400, codes: ['unknown-type'], path: 'type', mentions: [type] } }])
      }
    }
    // Also kept as examples: nesting beyond any stack, a body above the limit, -0 and 1e1 as block numbers.
    const evm = by('evm')
    regressions.push(
      [evm, { category: 'deep-nesting', what: '200,000 nested arrays', body: { json: { fromBlock: 0, logs: token({ deep: 200_000, shape: 'array' }) } }, expect: { kind: 'refuse', status: 400, codes: ['invalid-query'], path: 'logs[0]' } }],
      [evm, { category: 'giant-string', what: '9 MiB body', body: { json: { fromBlock: 0, logs: [{ address: [token({ giant: 9 << 20, char: 'f', prefix: '0x' })] }] } }, expect: { kind: 'refuse', status: 413, codes: ['body-too-large'] } }],
      [evm, { category: 'block-number', what: 'fromBlock -0', body: { json: { fromBlock: token({ raw: '-0' }), toBlock: 3 } }, expect: { kind: 'same', as: { fromBlock: 0, toBlock: 3 } } }],
      [evm, { category: 'block-number', what: 'fromBlock 1e1', body: { json: { fromBlock: token({ raw: '1e1' }), toBlock: 12, logs: [{}] } }, expect: { kind: 'same', as: { fromBlock: 10, toBlock: 12, logs: [{}] } } }],
    )
    for (const [t, c] of regressions) {
      const r = await runCase(t, c, TIMEOUT_MS)
      assert.equal(r.failure, undefined, `${t.name}: ${c.what}`)
    }
  })
})
