import assert from 'node:assert/strict'
import { readdirSync } from 'node:fs'
import path from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { LONGEST_FIRST, suiteOrder } from './helpers/suite-order.js'

/*
 * `npm test` starts the test files that take longest first (test/helpers/run-suite.ts): every name
 * it lists is a test file that exists (a renamed file would fall back to name order unnoticed), and
 * the order puts them first, then the others by name, every file once.
 */

const here = path.dirname(fileURLToPath(import.meta.url))
const files = readdirSync(here).filter((f) => f.endsWith('.test.js')).map((f) => path.join(here, f))

describe('the order npm test runs the files in', () => {
  it('names only test files that exist, each once', () => {
    const names = new Set(files.map((f) => path.basename(f, '.test.js')))
    assert.deepEqual(LONGEST_FIRST.filter((n) => !names.has(n)), [])
    assert.equal(new Set(LONGEST_FIRST).size, LONGEST_FIRST.length)
  })

  it('starts the longest files first, then the others in name order, every file once', () => {
    const ordered = suiteOrder([...files].reverse())
    assert.equal(ordered.length, files.length)
    assert.deepEqual(new Set(ordered), new Set(files))
    assert.deepEqual(ordered.slice(0, LONGEST_FIRST.length).map((f) => path.basename(f, '.test.js')), LONGEST_FIRST)
    const rest = ordered.slice(LONGEST_FIRST.length)
    assert.deepEqual(rest, [...rest].sort())
  })
})
