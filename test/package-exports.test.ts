import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { promisify } from 'node:util'
import { describe, it } from 'node:test'
import { REPO_ROOT, tempDir } from './helpers/dataset.js'

/*
 * The package as another project sees it: `import { ArchiveClient } from 'block-archive'` from a
 * folder whose node_modules/block-archive links to this checkout (as npm does for a file: or
 * workspace dependency), run by node and type-checked by this repo's tsc with NodeNext resolution.
 */

const run = promisify(execFile)

describe('package entry point', () => {
  it('declares the entry point and its types', async () => {
    const pkg = JSON.parse(await readFile(path.join(REPO_ROOT, 'package.json'), 'utf8'))
    assert.deepEqual(pkg.exports['.'], { types: './dist/src/index.d.ts', import: './dist/src/index.js' })
    assert.equal(pkg.types, './dist/src/index.d.ts')
    assert.equal(pkg.exports['./package.json'], './package.json')
  })

  it("import { ArchiveClient } from 'block-archive' runs and type-checks in another project", async () => {
    const tmp = await tempDir('ba-consumer-')
    try {
      await mkdir(path.join(tmp.dir, 'node_modules'))
      await symlink(REPO_ROOT, path.join(tmp.dir, 'node_modules/block-archive'), 'dir')
      await writeFile(path.join(tmp.dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }))

      // Run: the client constructs without a server (nothing is fetched before the first call);
      // the deep import the docs used before still resolves, and so does package.json.
      await writeFile(
        path.join(tmp.dir, 'run.mjs'),
        `import { ArchiveClient, HttpError, ProtocolError, ConnectionError, isRetryable } from 'block-archive'
import { ArchiveClient as Deep } from 'block-archive/dist/src/client/archive-client.js'
import pkg from 'block-archive/package.json' with { type: 'json' }
const client = new ArchiveClient('http://127.0.0.1:9/datasets/x/', { maxAttempts: 1 })
console.log(JSON.stringify({
  baseUrl: client.baseUrl,
  same: ArchiveClient === Deep,
  errors: [HttpError, ProtocolError, ConnectionError].map((c) => typeof c),
  retryable: isRetryable(new ProtocolError('x')),
  name: pkg.name,
}))
`,
      )
      const out = await run(process.execPath, ['run.mjs'], { cwd: tmp.dir })
      assert.deepEqual(JSON.parse(out.stdout), {
        baseUrl: 'http://127.0.0.1:9/datasets/x',
        same: true,
        errors: ['function', 'function', 'function'],
        retryable: false,
        name: 'block-archive',
      })

      // Type-check: the package's own types (no skipLibCheck), NodeNext resolution through "exports".
      await writeFile(
        path.join(tmp.dir, 'use.ts'),
        `import { ArchiveClient, HttpError, type Block, type ClientOptions, type RangeOptions, type ArchiveQuery, type Batch } from 'block-archive'

const opts: ClientOptions = { maxAttempts: 2, onRetry: ({ attempt, pauseMs }) => console.log(attempt, pauseMs) }
const client = new ArchiveClient('http://127.0.0.1:8080/datasets/ethereum', opts)
const query: ArchiveQuery = { logs: [{ address: ['0x00'] }], fields: { log: { data: true } } }
const range: RangeOptions = { fromBlock: 0, toBlock: 10 }
export async function main(): Promise<number> {
  let n = 0
  for await (const block of client.blocks(query, range)) {
    const b: Block = block
    n += b.header.number
  }
  const batches: AsyncGenerator<Batch> = client.batches(query, range)
  const height: number = await client.getHeight()
  try {
    await client.query({ fromBlock: 0 })
  } catch (e) {
    if (e instanceof HttpError) return e.status
  }
  void batches
  return n + height
}
`,
      )
      // A type error must be reported too (the check is real, not vacuous).
      await writeFile(path.join(tmp.dir, 'wrong.ts'), `import { ArchiveClient } from 'block-archive'\nnew ArchiveClient(42)\n`)
      const tsconfig = (files: string[]) => ({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ['node'],
          typeRoots: [path.join(REPO_ROOT, 'node_modules/@types')],
        },
        files,
      })
      const tsc = path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc')
      await writeFile(path.join(tmp.dir, 'tsconfig.json'), JSON.stringify(tsconfig(['use.ts'])))
      await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: tmp.dir }).catch((e) => assert.fail(`tsc: ${e.stdout}${e.stderr}`))
      await writeFile(path.join(tmp.dir, 'tsconfig.json'), JSON.stringify(tsconfig(['wrong.ts'])))
      const wrong = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: tmp.dir }).then(
        () => assert.fail('tsc accepted new ArchiveClient(42)'),
        (e) => String(e.stdout),
      )
      assert.match(wrong, /wrong\.ts.*TS2345/)
    } finally {
      await tmp.cleanup()
    }
  })
})
