import fc from 'fast-check'
import { fuzzCase, type FuzzCase } from '../test/helpers/arbitraries.js'
import { tempDir } from '../test/helpers/dataset.js'
import { buildFuzzDatasets, checkHealthy, runCase, startFuzzCluster, type FuzzTarget } from '../test/helpers/fuzz.js'
import { machine, printTable } from './lib/report.js'

/*
 * `bench fuzz`: property-based fuzzing of worker queries of every family (test/helpers/arbitraries.ts,
 * checked by test/helpers/fuzz.ts): `--cases` cases split evenly across the families (Substrate's
 * share across its two datasets), generated from `--seed`, a few in flight. Prints the cases per
 * family and category, every status seen, the failures with what replays each one, and the time.
 * The same `--seed` and `--cases` generate the same cases; `--only <dataset>:<index>` runs one.
 */

export interface FuzzBenchOptions {
  cases: number
  seed?: number
  concurrency: number
  timeoutMs: number
  only?: string
  /** Print every case as it runs. */
  verbose?: boolean
}

interface Tally {
  cases: number
  failures: number
  ms: number
  outcomes: Map<string, number>
  categories: Map<string, number>
}

const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1)

/** Cases per dataset: `total` split evenly across families, a family's share across its datasets. */
function shares(targets: FuzzTarget[], total: number): Map<FuzzTarget, number> {
  const families = [...new Set(targets.map((t) => t.family))]
  const out = new Map<FuzzTarget, number>()
  families.forEach((f, i) => {
    const perFamily = Math.floor(total / families.length) + (i < total % families.length ? 1 : 0)
    const ts = targets.filter((t) => t.family === f)
    ts.forEach((t, j) => out.set(t, Math.floor(perFamily / ts.length) + (j < perFamily % ts.length ? 1 : 0)))
  })
  return out
}

export async function runFuzz(o: FuzzBenchOptions): Promise<void> {
  const seed = o.seed ?? Math.floor(Math.random() * 2 ** 31)
  console.log(`machine: ${machine()}`)
  console.log(`seed ${seed}, ${o.cases} cases, ${o.concurrency} in flight, ${o.timeoutMs} ms timeout per request`)
  const tmp = await tempDir('ba-bench-fuzz-')
  const t0 = performance.now()
  await buildFuzzDatasets(tmp.dir)
  const fz = await startFuzzCluster(tmp.dir)
  const setupMs = performance.now() - t0
  try {
    const count = shares(fz.targets, o.cases)
    // The cases of each dataset, generated up front (big values are rendered when sent).
    const work: { t: FuzzTarget; index: number; c: FuzzCase }[] = []
    fz.targets.forEach((t, i) => {
      const n = count.get(t)!
      if (n === 0) return
      const cases = fc.sample(fuzzCase(t.model), { seed: seed + i, numRuns: n })
      cases.forEach((c, index) => work.push({ t, index, c }))
    })
    let todo = work
    if (o.only) {
      const [name, idx] = o.only.split(':')
      todo = work.filter((w) => w.t.name === name && w.index === Number(idx))
      if (todo.length === 0) throw new Error(`no case ${o.only} (datasets: ${fz.targets.map((t) => t.name).join(', ')})`)
    } else {
      // Interleave the datasets so that all of them are under fuzz at once.
      todo = [...work].sort((a, b) => a.index - b.index || fz.targets.indexOf(a.t) - fz.targets.indexOf(b.t))
    }
    const tallies = new Map<string, Tally>()
    const tallyOf = (k: string) => {
      let t = tallies.get(k)
      if (!t) tallies.set(k, (t = { cases: 0, failures: 0, ms: 0, outcomes: new Map(), categories: new Map() }))
      return t
    }
    const failures: { t: FuzzTarget; index: number; c: FuzzCase; failure: string }[] = []
    const started = performance.now()
    let next = 0
    let done = 0
    let lastReport = started
    await Promise.all(
      Array.from({ length: Math.max(1, o.concurrency) }, async () => {
        for (let i = next++; i < todo.length; i = next++) {
          const { t, index, c } = todo[i]
          const r = await runCase(t, c, o.timeoutMs)
          for (const key of [t.family, `${t.family}/${t.name}`, 'all']) {
            const tally = tallyOf(key)
            tally.cases++
            tally.ms += r.ms
            bump(tally.outcomes, r.outcome)
            bump(tally.categories, c.category)
            if (r.failure) tally.failures++
          }
          if (o.verbose) console.log(`${t.name}:${index} ${c.category} ${r.outcome} ${r.ms.toFixed(0)} ms: ${c.what}`)
          if (r.failure) {
            failures.push({ t, index, c, failure: r.failure })
            console.log(`FAIL ${t.name}:${index} [${c.category}] ${c.what}\n  ${r.failure.split('\n').join('\n  ').slice(0, 2000)}`)
          }
          done++
          if (performance.now() - lastReport > 10_000) {
            lastReport = performance.now()
            console.log(`… ${done}/${todo.length} cases, ${failures.length} failures, ${((lastReport - started) / 1000).toFixed(0)} s`)
          }
        }
      }),
    )
    const wallMs = performance.now() - started
    // The worker still answers, and holds no slot or lease, after everything.
    for (const t of fz.targets) {
      const problem = await checkHealthy(t, fz.cluster, o.timeoutMs)
      if (problem) {
        failures.push({ t, index: -1, c: { category: 'health', what: 'a valid query after the cases', expect: { kind: 'any' } }, failure: problem })
        tallyOf('all').failures++
        console.log(`FAIL ${t.name}: after the cases: ${problem}`)
      }
    }

    const keys = [...tallies.keys()].filter((k) => k !== 'all').sort()
    const all = tallyOf('all')
    printTable(`fuzz: cases per family and dataset (seed ${seed})`, ['family / dataset', 'cases', 'failures', 'mean ms per case'], [
      ...keys.map((k) => {
        const t = tallies.get(k)!
        return [k, t.cases, t.failures, (t.ms / t.cases).toFixed(1)]
      }),
      ['all', all.cases, all.failures, all.cases ? (all.ms / all.cases).toFixed(1) : '-'],
    ])
    const families = keys.filter((k) => !k.includes('/'))
    const categories = [...all.categories.keys()].sort()
    printTable('fuzz: cases per category', ['category', ...families, 'all'], categories.map((c) => [c, ...families.map((f) => tallies.get(f)!.categories.get(c) ?? 0), all.categories.get(c) ?? 0]))
    const outcomes = [...all.outcomes.keys()].sort()
    printTable('fuzz: statuses seen', ['status', ...families, 'all'], outcomes.map((s) => [s, ...families.map((f) => tallies.get(f)!.outcomes.get(s) ?? 0), all.outcomes.get(s) ?? 0]))
    console.log(`${all.cases} cases in ${(wallMs / 1000).toFixed(1)} s (${(all.cases / (wallMs / 1000)).toFixed(0)} cases/s), setup (datasets, cluster, full answers) ${(setupMs / 1000).toFixed(1)} s`)
    const fiveXX = outcomes.filter((s) => /^5/.test(s) || s === 'timeout' || s.startsWith('error')).reduce((n, s) => n + all.outcomes.get(s)!, 0)
    console.log(`5xx, timeouts and connection errors: ${fiveXX}; failures: ${failures.length}`)
    if (failures.length) {
      console.log('\nfailures (replay one with the command after it):')
      for (const f of failures.slice(0, 50)) {
        console.log(`- ${f.t.name}:${f.index} [${f.c.category}] ${f.c.what}: ${f.failure.split('\n')[0].slice(0, 300)}`)
        if (f.index >= 0) console.log(`  npm run bench -- fuzz --seed ${seed} --cases ${o.cases} --only ${f.t.name}:${f.index}`)
      }
      process.exitCode = 1
    }
  } finally {
    await fz.stop()
    await tmp.cleanup()
  }
}
