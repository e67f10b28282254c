import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { existsSync } from 'node:fs'
import path from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { DEFAULT_FAMILY, FAMILIES, FAMILY_NAMES, FAMILY_OF_QUERY_TYPE, SOURCE_MODULES, familyByName, sourceModuleOf } from '../src/families/index.js'
import { flagKey, flagName } from '../src/ingest/source-module.js'
import { familyFlags, sourceSpec, type SourceOptions } from '../src/ingest/sources.js'
import { validateQuery } from '../src/query/validate.js'
import { ApiError } from '../src/errors.js'
import { runCli } from './helpers/cli.js'

/*
 * The family registry (src/families/index.ts): each family is its declaration plus its source
 * module, listed once. What follows from the list (family names, query types, ingest flags, the
 * source an ingest reads) is checked against the list, and the shared ingest code is checked to
 * name no family, so that adding a family stays its declaration, its source module (with its
 * normaliser) and one registry line.
 */

const REPO = fileURLToPath(new URL('../../', import.meta.url))

/** Files that must know families only through the registry. */
const SHARED = ['src/ingest/loop.ts', 'src/commands/ingest.ts', 'src/ingest/sources.ts', 'src/ingest/fetch-worker.ts', 'src/ingest/fetch-pool.ts', 'src/query/validate.ts']

/** Every module specifier a TypeScript file imports (static, `export … from`, dynamic), resolved to a repo path. */
async function importsOf(file: string): Promise<string[]> {
  const text = await readFile(path.join(REPO, file), 'utf8')
  const specs = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|(?:^|\n)\s*import\s+['"]([^'"]+)['"]/g)].map((m) => m[1] ?? m[2] ?? m[3])
  return specs.map((s) => (s.startsWith('.') ? path.relative(REPO, path.resolve(path.dirname(path.join(REPO, file)), s)).replace(/\.js$/, '.ts') : s))
}

describe('family registry', () => {
  it('every registered family has a declaration and a source module, under one name', () => {
    assert.ok(SOURCE_MODULES.length >= 3)
    assert.equal(new Set(FAMILY_NAMES).size, FAMILY_NAMES.length, 'family names are unique')
    assert.deepEqual(Object.keys(FAMILIES), FAMILY_NAMES)
    assert.equal(DEFAULT_FAMILY, FAMILY_NAMES[0])
    for (const m of SOURCE_MODULES) {
      const name = m.family.name
      assert.match(name, /^[a-z][a-z0-9-]*$/)
      // the declaration: tables, a header item on a table, item kinds on tables
      assert.equal(familyByName(name), m.family)
      assert.ok(m.family.tables.length > 0, `${name}: tables`)
      const tables = new Set(m.family.tables.map((t) => t.name))
      for (const item of [m.family.header, ...m.family.items]) assert.ok(tables.has(item.table), `${name}: ${item.selector} reads table ${item.table}`)
      assert.ok(m.family.queryTypes.length > 0, `${name}: query types`)
      // the source module: flags, spec, create
      assert.equal(sourceModuleOf(name), m)
      assert.equal(typeof m.spec, 'function')
      assert.equal(typeof m.create, 'function')
      for (const f of m.flags) {
        assert.match(f.flags, /^--[a-z0-9-]+( <[^>]+>)?$/, `${name}: ${f.flags}`)
        assert.match(f.env, /^BLOCK_ARCHIVE_[A-Z0-9_]+$/, `${name}: ${f.flags} reads an environment variable`)
        assert.ok(f.description.length > 10, `${name}: ${f.flags} has a --help text`)
        if (f.choices && f.default !== undefined) assert.ok(f.choices.includes(f.default as string), `${name}: ${f.flags} default is a choice`)
      }
    }
    assert.throws(() => familyByName('solana'), /unknown dataset family "solana" \(known: evm, starknet, substrate\)/)
    assert.throws(() => familyByName('toString'), /unknown dataset family/)
  })

  it('every query type maps to exactly one family, and a query of it is taken by that family only', () => {
    const seen = new Map<string, string>()
    for (const m of SOURCE_MODULES) {
      for (const t of m.family.queryTypes) {
        if (t === undefined) continue
        assert.ok(!seen.has(t), `query type "${t}" is declared by ${seen.get(t)} and ${m.family.name}`)
        seen.set(t, m.family.name)
      }
    }
    assert.deepEqual([...FAMILY_OF_QUERY_TYPE], [...seen])
    // a query without `type` belongs to one family only
    assert.equal(SOURCE_MODULES.filter((m) => m.family.queryTypes.includes(undefined)).length, 1)
    const wrongFamily = (f: () => unknown) => assert.throws(f, (e: unknown) => e instanceof ApiError && e.status === 400 && e.code === 'wrong-family')
    for (const [type, owner] of FAMILY_OF_QUERY_TYPE) {
      for (const m of SOURCE_MODULES) {
        const q = { type, fromBlock: 0 }
        if (m.family.name === owner) assert.equal(validateQuery(m.family, q).fromBlock, 0)
        else wrongFamily(() => validateQuery(m.family, q))
      }
    }
    assert.throws(() => validateQuery(FAMILIES[DEFAULT_FAMILY], { type: 'solana', fromBlock: 0 }), new RegExp(`known: ${[...seen.keys()].join(', ')}`))
  })

  it('the ingest loop, the ingest command, source specs, fetch workers and query validation import no family module and name no family', async () => {
    const familyPaths = FAMILY_NAMES.flatMap((n) => [`src/families/${n}.ts`, `src/ingest/${n}/`])
    for (const file of SHARED) {
      const imports = await importsOf(file)
      assert.ok(imports.length > 0, `${file}: imports found`)
      for (const i of imports) {
        assert.ok(!familyPaths.some((p) => i === p || i.startsWith(p)), `${file} imports ${i}, a family's own module: go through src/families/index.ts`)
      }
      const text = await readFile(path.join(REPO, file), 'utf8')
      for (const n of FAMILY_NAMES) assert.ok(!new RegExp(`['"\`]${n}['"\`]`).test(text), `${file} names the family "${n}"`)
    }
  })

  it('a flag several families take is one ingest flag, with each family\'s values', () => {
    const flags = familyFlags()
    assert.equal(new Set(flags.map((f) => f.flags)).size, flags.length)
    for (const f of flags) {
      assert.equal(f.key, flagKey(f))
      for (const o of f.owners) {
        assert.equal(o.flag.env, f.env)
        assert.equal(o.flag.default, f.default)
        for (const c of o.flag.choices ?? []) assert.ok(f.choices!.includes(c))
        assert.ok(f.description.includes(o.flag.description))
      }
    }
    // the families' own flags are all there
    const all = new Set(flags.map((f) => f.flags))
    for (const m of SOURCE_MODULES) for (const f of m.flags) assert.ok(all.has(f.flags))
  })

  it('another family\'s flag (or a value only another family takes) is refused, naming that family', () => {
    const base = { rpc: 'http://127.0.0.1:1', batchSize: 20, concurrency: 4 }
    let refused = 0
    for (const f of familyFlags()) {
      for (const owner of f.owners) {
        const values = owner.flag.choices ? owner.flag.choices.filter((c) => c !== f.default) : [typeof f.default === 'boolean' ? true : '/some/where']
        for (const value of values) {
          for (const family of FAMILY_NAMES) {
            const mine = sourceModuleOf(family).flags.find((x) => x.flags === f.flags)
            const takes = mine && (!mine.choices || mine.choices.includes(value as string))
            const o = { ...base, family, [f.key]: value } as SourceOptions
            if (takes || (!mine && f.owners.every((x) => x.flag.ignoredElsewhere))) continue
            const owners = f.owners.filter((x) => !x.flag.choices || x.flag.choices.includes(value as string)).map((x) => x.family)
            assert.throws(() => sourceSpec(o), new RegExp(`^Error: ${flagName(f)}${f.choices ? ` ${value}` : ''} is for --family ${owners.join(' or ')}$`), `${family} with ${f.key}=${value}`)
            refused++
          }
        }
      }
    }
    assert.ok(refused >= 5, `${refused} refusals checked`)
    // each family with only --rpc makes a spec of its family (those that need more say what)
    for (const family of FAMILY_NAMES) {
      const spec = sourceSpec({ ...base, family })
      assert.equal(spec.family, family)
      assert.throws(() => sourceSpec({ ...base, rpc: undefined, family }), /--rpc/)
    }
    assert.equal(sourceSpec(base).family, DEFAULT_FAMILY)
  })

  it('ingest --help lists --family with the registered families and every family\'s flags with their environment variables', async () => {
    const r = await runCli(['ingest', '--help'])
    assert.equal(r.code, 0, r.stderr)
    const help = r.stdout.replace(/\s+/g, ' ')
    assert.match(help, new RegExp(`--family <family> chain family of the node \\(choices: ${FAMILY_NAMES.map((n) => `"${n}"`).join(', ')}, default: "${DEFAULT_FAMILY}"`))
    for (const f of familyFlags()) {
      assert.ok(help.includes(f.flags), f.flags)
      assert.ok(help.includes(`env: ${f.env}`), f.env)
    }
  })

  it('the ingest command refuses another family\'s flag before it starts, in one line', async () => {
    const out = path.join(tmpdir(), `family-registry-${process.pid}`)
    const r = await runCli(['ingest', '--family', 'starknet', '--rpc', 'http://127.0.0.1:1', '--dataset', 'x', '--out', out, '--state-diffs', 'replay'])
    assert.equal(r.code, 1)
    assert.equal(r.stderr.trim(), '--state-diffs replay is for --family evm')
    assert.equal(existsSync(out), false, 'nothing was written')
  })
})
