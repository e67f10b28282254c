import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, it } from 'node:test'
import { REPO_ROOT } from './helpers/dataset.js'

/*
 * `npm ci` installs exactly what package-lock.json lists, and refuses a lock that lacks a package
 * some locked package depends on, optional ones included. DuckDB's bindings and anvil ship one
 * optional package per platform; a lock written on one platform by an older npm kept only that
 * platform's, and `npm ci` failed on a fresh clone. What npm checks, read here from the files.
 * And the install scripts: npm 11.19 asks that each dependency with one be approved or denied in
 * package.json's `allowScripts`.
 */

interface LockEntry {
  version?: string
  optional?: boolean
  os?: string[]
  cpu?: string[]
  dependencies?: Record<string, string>
  devDependencies?: Record<string, string>
  optionalDependencies?: Record<string, string>
  hasInstallScript?: boolean
}

const readJson = async (file: string) => JSON.parse(await readFile(path.join(REPO_ROOT, file), 'utf8'))

/** Where node would find `name` from the package at `from` (a lock key such as `node_modules/a/node_modules/b`). */
function resolve(packages: Record<string, LockEntry>, from: string, name: string): LockEntry | undefined {
  for (let base = from; ; ) {
    const hit = packages[`${base ? `${base}/` : ''}node_modules/${name}`]
    if (hit || !base) return hit
    const up = base.lastIndexOf('/node_modules/')
    base = up < 0 ? '' : base.slice(0, up)
  }
}

describe('package-lock.json', () => {
  it('lists every platform package of @duckdb/node-bindings and @foundry-rs/anvil, and every optional dependency of every locked package', async () => {
    const lock = await readJson('package-lock.json')
    const packages: Record<string, LockEntry> = lock.packages
    for (const parent of ['@duckdb/node-bindings', '@foundry-rs/anvil']) {
      const entry = packages[`node_modules/${parent}`]
      assert.ok(entry, `${parent} is locked`)
      const platforms = Object.entries(entry.optionalDependencies ?? {})
      assert.ok(platforms.length >= 5, `${parent} lists its platform packages (${platforms.length})`)
      for (const [name, version] of platforms) {
        const got = packages[`node_modules/${name}`]
        assert.ok(got, `${name}@${version} (optional dependency of ${parent}) is missing from package-lock.json`)
        assert.equal(got.version, version, name)
        assert.equal(got.optional, true, `${name} is optional`)
        assert.ok(got.os?.length && got.cpu?.length, `${name} names its os and cpu`)
      }
    }
    const missing = Object.entries(packages).flatMap(([key, entry]) =>
      Object.keys(entry.optionalDependencies ?? {})
        .filter((name) => !resolve(packages, key, name))
        .map((name) => `${name} (optional dependency of ${key || 'the package'})`),
    )
    assert.deepEqual(missing, [])
  })

  it("matches package.json's dependencies (npm ci refuses a lock out of step)", async () => {
    const pkg = await readJson('package.json')
    const root: LockEntry = (await readJson('package-lock.json')).packages['']
    assert.deepEqual(root.dependencies, pkg.dependencies)
    assert.deepEqual(root.devDependencies, pkg.devDependencies)
  })

  it('names every locked package that has an install script in package.json\'s allowScripts', async () => {
    // npm 11.19 ends every install with a warning listing the packages with install scripts that
    // `allowScripts` does not name, and its help says it skips their scripts.
    const [lock, pkg] = await Promise.all([readJson('package-lock.json'), readJson('package.json')])
    const withScripts = Object.entries(lock.packages as Record<string, LockEntry>)
      .filter(([key, entry]) => key && entry.hasInstallScript)
      .map(([key]) => key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length))
    assert.ok(withScripts.includes('sqlite3') && withScripts.includes('@foundry-rs/anvil'), withScripts.join(', '))
    const allow: Record<string, boolean> = pkg.allowScripts ?? {}
    assert.deepEqual(withScripts.filter((name) => typeof allow[name] !== 'boolean'), [], 'not in allowScripts')
    assert.deepEqual(Object.keys(allow).filter((name) => !withScripts.includes(name)), [], 'in allowScripts but without an install script')
    // chopsticks (the Substrate test node) needs sqlite3's binding, anvil's package checks its binary
    for (const name of ['sqlite3', '@foundry-rs/anvil']) assert.equal(allow[name], true, name)
  })
})
