import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { mkdir, readdir } from 'node:fs/promises'
import path from 'node:path'
import { listLocalChunks, type ChunkMeta } from '../../src/chunks/layout.js'
import { downloadObject, getText, listObjects } from '../../src/storage/s3.js'
import { readTable } from './ingest-expect.js'

/* Checks the fault tests share: what a dataset in a bucket shows readers, and how it compares with a reference ingest. */

export const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex')

/** Fail instead of hanging when a promise does not settle in time (a stall nothing gives up on). */
export function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let t: NodeJS.Timeout
  return Promise.race([
    p,
    new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: still running after ${ms} ms (a stall nothing gave up on)`)), ms))),
  ]).finally(() => clearTimeout(t))
}

/** The chunk folders under `bucket/prefix`: folder → file name → size. */
export async function chunkFolders(bucket: string, prefix: string): Promise<Map<string, Map<string, number>>> {
  const out = new Map<string, Map<string, number>>()
  for (const o of await listObjects(bucket, prefix + '/')) {
    const m = /^(\d{10}\/\d{10}-\d{10}-\w+)\/([^/]+)$/.exec(o.key.slice(prefix.length + 1))
    if (!m) continue
    if (!out.has(m[1])) out.set(m[1], new Map())
    out.get(m[1])!.set(m[2], o.size)
  }
  return out
}

/**
 * What readers can see is complete: every chunk folder whose blocks.parquet exists holds exactly the
 * files its meta.json lists, with their sizes (and, with `hashes`, their SHA-256). Returns the visible chunks.
 */
export async function assertNoPartialChunk(bucket: string, prefix: string, scratch?: string): Promise<string[]> {
  const visible: string[] = []
  for (const [chunk, files] of await chunkFolders(bucket, prefix)) {
    if (!files.has('blocks.parquet')) continue
    visible.push(chunk)
    const text = await getText(bucket, `${prefix}/${chunk}/meta.json`)
    assert.ok(text, `${chunk}: visible (blocks.parquet) without meta.json`)
    const meta = JSON.parse(text) as ChunkMeta
    const listed = Object.fromEntries(Object.entries(meta.files!).map(([f, x]) => [f, x.size]))
    assert.deepEqual(Object.fromEntries([...files].filter(([f]) => f !== 'meta.json')), listed, `${chunk}: visible with other files than its manifest lists`)
    if (scratch) {
      for (const [f, x] of Object.entries(meta.files!)) {
        const r = await downloadObject(bucket, `${prefix}/${chunk}/${f}`, path.join(scratch, 'check'))
        assert.equal(r.sha256, x.sha256, `${chunk}/${f}: other bytes than its manifest lists`)
      }
    }
  }
  return visible.sort()
}

/** Download the dataset under `bucket/prefix` into `dest`. */
export async function downloadDataset(bucket: string, prefix: string, dest: string): Promise<void> {
  for (const o of await listObjects(bucket, prefix + '/')) {
    const file = path.join(dest, o.key.slice(prefix.length + 1))
    await mkdir(path.dirname(file), { recursive: true })
    await downloadObject(bucket, o.key, file)
  }
}

/**
 * The dataset in folder `copy` is the reference ingest's, chunk for chunk and byte for byte, and
 * holds blocks `0..last` exactly once each.
 */
export async function assertSameDataset(copy: string, reference: string, last: number): Promise<void> {
  const want = await listLocalChunks(reference)
  assert.deepEqual((await listLocalChunks(copy)).map((c) => c.path), want.map((c) => c.path))
  for (const c of want) {
    const files = (await readdir(path.join(reference, c.path))).sort()
    assert.deepEqual((await readdir(path.join(copy, c.path))).sort(), files, c.path)
    for (const f of files) assert.equal(sha256(path.join(copy, c.path, f)), sha256(path.join(reference, c.path, f)), `${c.path}/${f}`)
  }
  const blocks = (await readTable(copy, 'blocks')).map((b) => Number(b.number)).sort((a, b) => a - b)
  assert.deepEqual(blocks, Array.from({ length: last + 1 }, (_, i) => i), 'every block exactly once')
}
