import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks } from '../src/chunks/layout.js'
import { anvilRecords, DATASET_CACHE_ENV, tempDir, writeDataset, writeDatasetChunks } from './helpers/dataset.js'

/*
 * The suite writes each distinct test dataset once per run and copies it after that
 * (helpers/dataset.ts). That holds only while the chunk writer is deterministic: the same records
 * give the same bytes. A copy must be byte for byte what writing the records gives, a changed record
 * must not get another dataset's chunks, and a copy must not share files with the cache (tests
 * corrupt their datasets on purpose).
 */

/** Every file under `dir` (its relative path) with the SHA-256 of its bytes. */
async function tree(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {}
  for (const name of (await readdir(dir, { recursive: true })).sort()) {
    const file = path.join(dir, name)
    const bytes = await readFile(file).catch((e) => (e.code === 'EISDIR' ? undefined : Promise.reject(e)))
    if (bytes) out[name] = createHash('sha256').update(bytes).digest('hex')
  }
  return out
}

describe('test datasets written once per run and copied', () => {
  let tmp: Awaited<ReturnType<typeof tempDir>>
  const saved = process.env[DATASET_CACHE_ENV]
  before(async () => {
    tmp = await tempDir('ba-dataset-cache-')
  })
  after(async () => {
    if (saved === undefined) delete process.env[DATASET_CACHE_ENV]
    else process.env[DATASET_CACHE_ENV] = saved
    await tmp?.cleanup()
  })

  it('a copy holds the bytes a fresh write gives; a changed record is written anew; copies share no file', async () => {
    const records = (await anvilRecords()).slice(0, 24)
    const cache = path.join(tmp.dir, 'cache')
    await mkdir(cache)
    const dirs = ['plain', 'first', 'copy', 'changed', 'changed-plain'].map((n) => path.join(tmp.dir, n))
    const changed = records.map((r, i) => (i === 20 ? { ...r, block: { ...r.block, extraData: '0x01' } } : r))

    delete process.env[DATASET_CACHE_ENV]
    const plainRefs = await writeDataset(dirs[0], 'x', records, 16)
    await writeDataset(dirs[4], 'x', changed, 16)
    process.env[DATASET_CACHE_ENV] = cache
    const firstRefs = await writeDataset(dirs[1], 'x', records, 16)
    assert.equal((await readdir(cache)).length, 1, 'one dataset in the cache')
    const copyRefs = await writeDataset(dirs[2], 'x', records, 16)
    assert.equal((await readdir(cache)).length, 1, 'the second call copied it')
    assert.deepEqual(firstRefs, plainRefs)
    assert.deepEqual(copyRefs, plainRefs)
    assert.deepEqual(await listLocalChunks(dirs[2]), plainRefs, 'what a reader lists')
    const plain = await tree(dirs[0])
    assert.ok(Object.keys(plain).filter((f) => f.endsWith('.parquet')).length >= 10, 'two chunks of Parquet files')
    assert.deepEqual(await tree(dirs[1]), plain)
    assert.deepEqual(await tree(dirs[2]), plain)

    // The same chunk sizes given as a list are the same dataset; another record is another one.
    assert.deepEqual(await writeDatasetChunks(path.join(tmp.dir, 'sizes'), 'x', records, [16, 8]), plainRefs)
    assert.equal((await readdir(cache)).length, 1)
    await writeDataset(dirs[3], 'x', changed, 16)
    assert.equal((await readdir(cache)).length, 2, 'a changed record is not taken from the cache')
    assert.deepEqual(await tree(dirs[3]), await tree(dirs[4]))
    assert.notDeepEqual(await tree(dirs[3]), plain)

    // Corrupting a copy leaves the cache and the next copy alone.
    const file = path.join(dirs[2], copyRefs[0].path, 'logs.parquet')
    await writeFile(file, 'not parquet')
    await writeDataset(path.join(tmp.dir, 'after-corruption'), 'x', records, 16)
    assert.deepEqual(await tree(path.join(tmp.dir, 'after-corruption')), plain)
  })
})
