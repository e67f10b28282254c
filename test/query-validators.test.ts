import assert from 'node:assert/strict'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { describe, it } from 'node:test'
import { Ajv, type ValidateFunction } from 'ajv'
import { FAMILY_NAMES, FAMILY_OF_QUERY_TYPE, familyByName } from '../src/families/index.js'
import { AJV_OPTIONS, loadPrecompiled, precompiledFile, querySchema } from '../src/query/validate.js'
import { REPO_ROOT, tempDir } from './helpers/dataset.js'

/*
 * The query validators `npm run build` writes as code (src/query/precompile-validators.ts) judge
 * every query as the schema compiled at run time does: the real queries of fixtures/queries, and
 * each of them broken in many ways (wrong types, unknown keys, bad hex, negative blocks), give the
 * same verdict and the same first error. A file generated from another schema is not used.
 */

const QUERIES = path.join(REPO_ROOT, 'fixtures', 'queries')

function realQueries(): { name: string; family: string; query: Record<string, any> }[] {
  const out = []
  for (const dir of readdirSync(QUERIES, { withFileTypes: true })) {
    if (!dir.isDirectory()) continue
    for (const f of readdirSync(path.join(QUERIES, dir.name)).filter((f) => f.endsWith('.json'))) {
      const query = JSON.parse(readFileSync(path.join(QUERIES, dir.name, f), 'utf8'))
      const family = FAMILY_OF_QUERY_TYPE.get(query.type ?? 'evm') ?? 'evm'
      out.push({ name: `${dir.name}/${f}`, family, query })
    }
  }
  return out
}

/** The query broken in each of many ways, one at a time. */
function broken(q: Record<string, any>): Record<string, any>[] {
  const out: Record<string, any>[] = []
  const copy = () => structuredClone(q)
  for (const [key, value] of Object.entries(q)) {
    for (const bad of [-1, 'x', true, {}, [], 1.5, null]) out.push({ ...copy(), [key]: bad })
    if (Array.isArray(value) && value.length) {
      const c = copy()
      c[key][0] = { ...c[key][0], noSuchFilter: ['0x00'] }
      out.push(c)
      for (const [filter, v] of Object.entries(value[0] as Record<string, unknown>)) {
        for (const bad of [['not hex'], ['0xZZ'], [1], 'x', [null], [[]]]) {
          const d = copy()
          d[key][0][filter] = bad
          out.push(d)
        }
        if (Array.isArray(v) && v.length) {
          const d = copy()
          d[key][0][filter] = [...v, ...v]
          out.push(d)
        }
      }
    }
    if (key === 'fields' && value && typeof value === 'object') {
      for (const selector of Object.keys(value)) {
        const c = copy()
        c.fields[selector] = { ...c.fields[selector], noSuchField: true }
        out.push(c)
        const d = copy()
        d.fields[selector] = { ...d.fields[selector], [Object.keys(value[selector])[0] ?? 'x']: 'yes' }
        out.push(d)
      }
      out.push({ ...copy(), fields: { ...value, noSuchItem: {} } })
    }
  }
  out.push({ ...copy(), noSuchKey: 1 })
  const { fromBlock: _, ...withoutFrom } = copy()
  out.push(withoutFrom)
  return out
}

const verdict = (v: ValidateFunction, q: unknown) => {
  const ok = v(q)
  const e = v.errors?.[0]
  return ok ? { ok } : { ok, keyword: e?.keyword, instancePath: e?.instancePath, params: e?.params, message: e?.message }
}

describe('precompiled query validators', () => {
  it('judge the real queries and every broken variant as the schema compiled at run time does', (t) => {
    const compiled = new Map<string, ValidateFunction>()
    const built = new Map<string, ValidateFunction>()
    for (const name of FAMILY_NAMES) {
      const schema = querySchema(familyByName(name))
      compiled.set(name, new Ajv(AJV_OPTIONS).compile(schema))
      const v = loadPrecompiled(precompiledFile(name), schema)
      assert.ok(v, `the build wrote ${precompiledFile(name)} from this declaration's schema`)
      built.set(name, v)
    }
    const queries = realQueries()
    assert.ok(queries.length >= 40, `${queries.length} real queries`)
    const families = new Set<string>()
    let cases = 0
    let invalid = 0
    let validReal = 0
    for (const { name, family, query } of queries) {
      families.add(family)
      for (const q of [query, ...broken(query)]) {
        const want = verdict(compiled.get(family)!, q)
        assert.deepEqual(verdict(built.get(family)!, q), want, `${name}: ${JSON.stringify(q).slice(0, 200)}`)
        cases++
        if (!want.ok) invalid++
      }
      if (compiled.get(family)!(query)) validReal++
    }
    assert.deepEqual([...families].sort(), [...FAMILY_NAMES].sort(), 'queries of every family')
    assert.ok(invalid > cases / 2, `${invalid} of ${cases} cases invalid`)
    t.diagnostic(`${cases} cases, ${invalid} invalid, ${validReal} of ${queries.length} real queries valid`)
    // (a few of the recorded queries lack fromBlock, which this protocol requires)
    assert.ok(validReal >= queries.length * 0.75, `${validReal} of ${queries.length} real queries valid`)
  })

  it('a validator generated from another schema is not used', async () => {
    const tmp = await tempDir('ba-validators-')
    try {
      const schema = querySchema(familyByName('evm'))
      const file = path.join(tmp.dir, 'evm.cjs')
      const code = readFileSync(precompiledFile('evm'), 'utf8')
      writeFileSync(file, code)
      assert.ok(loadPrecompiled(file, schema), 'the same file, the same schema: used')
      const other = path.join(tmp.dir, 'evm-other.cjs')
      writeFileSync(other, code)
      const changed = { ...schema, properties: { ...(schema as { properties: object }).properties, extra: { type: 'string' } } }
      assert.equal(loadPrecompiled(other, changed), undefined, 'a schema that changed since the build: not used')
      assert.equal(loadPrecompiled(path.join(tmp.dir, 'missing.cjs'), schema), undefined)
    } finally {
      await tmp.cleanup()
    }
  })
})
