import { readdirSync } from 'node:fs'
import path from 'node:path'
import { run } from 'node:test'
import { spec, tap } from 'node:test/reporters'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { suiteOrder } from './suite-order.js'

/*
 * `npm test`: node:test's runner over every built test file, three at once, as `node --test` would
 * run them, but not in name order: the files that take longest start first. In name order the
 * longest ones (chopsticks nodes, `substrate-*`) started in the last minute of the run and ran on
 * while the other slots sat empty. Loaded after test/helpers/suite-env.ts (`node --import`), which
 * the runner passes on to each test file with the rest of its options.
 *
 * Usage: node --import ./dist/test/helpers/suite-env.js dist/test/helpers/run-suite.js [--concurrency N] [files…]
 */

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({ options: { concurrency: { type: 'string', default: '3' } }, allowPositionals: true })
  const concurrency = Number(values.concurrency)
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    console.error(`error: --concurrency must be a whole number ≥ 1, not ${values.concurrency}`)
    process.exit(2)
  }
  const dir = path.dirname(path.dirname(fileURLToPath(import.meta.url)))
  const files = positionals.length > 0 ? positionals.map((f) => path.resolve(f)) : readdirSync(dir).filter((f) => f.endsWith('.test.js')).map((f) => path.join(dir, f))
  const stream = run({ files: suiteOrder(files), concurrency })
  // Any failure (a test, a file that did not load, a cancelled test) fails the run, as with `node --test`.
  stream.on('test:fail', () => (process.exitCode = 1))
  // The reporter `node --test` picks: spec on a terminal, TAP otherwise.
  stream.compose(process.stdout.isTTY ? new spec() : tap).pipe(process.stdout)
}

await main()
