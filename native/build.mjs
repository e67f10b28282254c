// Builds the optional native string copy (native/string-copy.c → build/string-copy.node) with the
// machine's C compiler against Node's own headers. Without a compiler or headers it says so and
// exits 0: the worker then copies rows as @duckdb/node-bindings does (src/query/row-texts.ts).
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, statSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')
const source = path.join(root, 'native', 'string-copy.c')
const out = path.join(root, 'build', 'string-copy.node')
const headers = [
  process.env.BLOCK_ARCHIVE_NODE_HEADERS,
  path.join(path.dirname(process.execPath), '..', 'include', 'node'),
  '/usr/include/node',
].find((dir) => dir && existsSync(path.join(dir, 'node_api.h')))

if (existsSync(out) && statSync(out).mtimeMs >= statSync(source).mtimeMs) process.exit(0)
if (!headers) {
  console.warn('native/build.mjs: Node\'s headers (node_api.h) not found; workers copy rows without the native addon (slower)')
  process.exit(0)
}
mkdirSync(path.dirname(out), { recursive: true })
const cc = process.env.CC || 'cc'
const r = spawnSync(cc, ['-O2', '-shared', '-fPIC', '-Wall', '-I', headers, source, '-o', out], { stdio: ['ignore', 'inherit', 'inherit'] })
if (r.error || r.status !== 0) {
  console.warn(`native/build.mjs: ${cc} could not build ${path.relative(root, out)} (${r.error?.message ?? `exit ${r.status}`}); workers copy rows without the native addon (slower)`)
}
