import { createHash } from 'node:crypto'
import { mkdir, readdir, rm, stat } from 'node:fs/promises'
import path from 'node:path'
import { chunkTableNames } from '../src/chunks/layout.js'
import { parquetOptions, type ParquetSettings } from '../src/chunks/writer.js'
import { configureDb, connect, ident, lit } from '../src/db.js'
import { blockOrders } from '../src/families/declaration.js'
import { evmFamily } from '../src/families/evm.js'
import type { DatasetView } from '../src/query/types.js'
import type { LocalTables } from '../src/storage/local-forms.js'
import { FORMS_STORAGE_VERSION, LocalForms } from '../src/storage/local-forms.js'
import { readAnswer, UNCUT } from './lib/answer.js'
import { benchChunk } from './lib/chunk.js'
import { cpuClock, mb, ms, timeInterleaved, type Timing } from './lib/measure.js'
import { machine, printTable } from './lib/report.js'
import { SHAPES, shapeByName } from './lib/shapes.js'

export interface ChunkFormatBenchOptions {
  runs: number
  variant?: string[]
  localForm: boolean
}

/** Writer settings compared with today's (the first), each a Parquet file per table. */
const VARIANTS: { name: string; settings: ParquetSettings; metadataCache?: boolean }[] = [
  { name: 'zstd 3, groups 10,000 (before)', settings: { compression: 'zstd', compressionLevel: 3, rowGroupSize: 10_000 } },
  { name: 'zstd 3, groups 2,048', settings: { compression: 'zstd', compressionLevel: 3, rowGroupSize: 2048 } },
  { name: 'zstd 3, groups 2,048, metadata cache', settings: { compression: 'zstd', compressionLevel: 3, rowGroupSize: 2048 }, metadataCache: true },
  { name: 'zstd 3, groups 2,048, V2', settings: { compression: 'zstd', compressionLevel: 3, rowGroupSize: 2048, version: 'V2' } },
  { name: 'zstd 1, groups 2,048', settings: { compression: 'zstd', compressionLevel: 1, rowGroupSize: 2048 } },
  { name: 'zstd 3, groups 4,096', settings: { compression: 'zstd', compressionLevel: 3, rowGroupSize: 4096 } },
  { name: 'zstd 1, groups 10,000 (now)', settings: { compression: 'zstd', compressionLevel: 1, rowGroupSize: 10_000 } },
  { name: 'lz4_raw, groups 10,000', settings: { compression: 'lz4_raw', rowGroupSize: 10_000 } },
  { name: 'lz4_raw, groups 2,048', settings: { compression: 'lz4_raw', rowGroupSize: 2048 } },
  { name: 'snappy, groups 10,000', settings: { compression: 'snappy', rowGroupSize: 10_000 } },
  { name: 'uncompressed, groups 10,000', settings: { compression: 'uncompressed', rowGroupSize: 10_000 } },
  { name: 'zstd 3, groups 10,000, V2', settings: { compression: 'zstd', compressionLevel: 3, rowGroupSize: 10_000, version: 'V2' } },
  { name: 'lz4_raw, groups 10,000, V2', settings: { compression: 'lz4_raw', rowGroupSize: 10_000, version: 'V2' } },
]
/**
 * A chunk as one DuckDB database file. `storage`: the file's storage version (newer ones compress
 * more); `zstdFrom`: string and blob columns whose values average this many bytes or more are stored
 * with zstd (`USING COMPRESSION zstd`), the rest with DuckDB's own light compression.
 */
const NATIVE_VARIANTS: { name: string; storage?: string; zstdFrom?: number }[] = [
  { name: 'DuckDB file per chunk' },
  { name: 'DuckDB file, storage v1.5.0', storage: 'v1.5.0' },
  { name: 'DuckDB file, storage v1.5.0, zstd for wide columns', storage: 'v1.5.0', zstdFrom: 100 },
]

/** `timeInterleaved` by the process's CPU time: DuckDB runs with one thread, so this is the query's own work. */
const cpuInterleaved = (fns: (() => Promise<unknown>)[], runs: number, warmup = 1): Promise<Timing[]> => timeInterleaved(fns, runs, warmup, cpuClock)

const bytesOf = async (dir: string) => {
  let n = 0
  for (const f of await readdir(dir)) if (f.endsWith('.parquet') || f.endsWith('.duckdb')) n += (await stat(path.join(dir, f))).size
  return n
}

/**
 * `bench chunk-format`: the bench chunk rewritten with each writer setting (same rows, same order),
 * and the engine over each: answers compared byte for byte with today's file for every shape, then
 * per variant the file bytes, logs+tx, the JSON rate of all tx+logs and a full scan of every column,
 * interleaved, medians.
 */
export async function runChunkFormat(o: ChunkFormatBenchOptions): Promise<void> {
  configureDb({ threads: 1 })
  const { root, dir, meta } = await benchChunk()
  const tables = await chunkTableNames(dir)
  const con = await connect()
  const out = `${root}-formats`
  const chosen = VARIANTS.filter((v, i) => i === 0 || !o.variant?.length || o.variant.some((w) => v.name === w))
  const views: { name: string; dir: string; local?: LocalTables; bytes: number; metadataCache?: boolean; writeMs?: number }[] = []
  for (const v of chosen) {
    const vdir = path.join(out, v.name.replace(/[^a-z0-9]+/gi, '-'))
    await rm(vdir, { recursive: true, force: true })
    await mkdir(vdir, { recursive: true })
    const c0 = process.cpuUsage()
    for (const t of tables) {
      const decl = evmFamily.tables.find((d) => d.name === t)!
      // one thread and insertion order kept: the rows keep the file's order
      await con.run(`COPY (SELECT * FROM read_parquet(${lit(path.join(dir, `${t}.parquet`))})) TO ${lit(path.join(vdir, `${t}.parquet`))} ${parquetOptions(evmFamily, decl, v.settings)}`)
    }
    const c = process.cpuUsage(c0)
    views.push({ name: v.name, dir: vdir, bytes: await bytesOf(vdir), metadataCache: v.metadataCache, writeMs: (c.user + c.system) / 1000 })
  }
  const baseBytes = views[0].bytes
  for (const [i, nv] of NATIVE_VARIANTS.entries()) {
    if (o.variant?.length && !o.variant.includes(nv.name)) continue
    const file = path.join(out, `native-${i}`, 'chunk.duckdb')
    const alias = `native_chunk_${i}`
    await rm(path.dirname(file), { recursive: true, force: true })
    await mkdir(path.dirname(file), { recursive: true })
    await con.run(`ATTACH ${lit(file)} AS ${alias}${nv.storage ? ` (STORAGE_VERSION ${lit(nv.storage)})` : ''}`)
    const c0 = process.cpuUsage()
    for (const t of tables) {
      const src = `read_parquet(${lit(path.join(dir, `${t}.parquet`))})`
      const columns = (await con.runAndReadAll(`DESCRIBE SELECT * FROM ${src}`)).getRows().map(([name, type]) => ({ name: String(name), type: String(type) }))
      const defs: string[] = []
      for (const c of columns) {
        let zstd = false
        if (nv.zstdFrom !== undefined && (c.type === 'VARCHAR' || c.type === 'BLOB')) {
          const [[avg]] = (await con.runAndReadAll(`SELECT coalesce(avg(octet_length(${ident(c.name)}::BLOB)), 0) FROM ${src}`)).getRows()
          zstd = Number(avg) >= nv.zstdFrom
        }
        defs.push(`${ident(c.name)} ${c.type}${zstd ? ' USING COMPRESSION zstd' : ''}`)
      }
      await con.run(`CREATE TABLE ${alias}.${ident(t)} (${defs.join(', ')})`)
      await con.run(`INSERT INTO ${alias}.${ident(t)} SELECT * FROM ${src}`)
    }
    await con.run(`CHECKPOINT ${alias}`)
    const c = process.cpuUsage(c0)
    const local = Object.assign((t: string) => `${alias}.${ident(t)}`, { narrow: () => [] as string[], byBlock: () => undefined })
    views.push({ name: nv.name, dir, local, bytes: (await stat(file)).size, writeMs: (c.user + c.system) / 1000 })
  }
  const forms: LocalForms[] = []
  if (o.localForm) {
    for (const storageVersion of ['v1.0.0', FORMS_STORAGE_VERSION]) {
      const fdir = `${out}/local-form-${storageVersion}`
      await rm(fdir, { recursive: true, force: true })
      const c0 = process.cpuUsage()
      const f = new LocalForms({ file: `${fdir}/local-forms.duckdb`, label: 'bench', storageVersion })
      if (!(await f.build('bench', dir, tables, blockOrders(evmFamily)))) throw new Error('could not build the local form')
      const c = process.cpuUsage(c0)
      forms.push(f)
      const name = `local form of today's chunk (worker-built), storage ${storageVersion}${storageVersion === FORMS_STORAGE_VERSION ? ' (now)' : ''}`
      views.push({ name, dir, local: f.acquire('bench'), bytes: f.bytes, writeMs: (c.user + c.system) / 1000 })
    }
  }
  const dataset = (v: (typeof views)[number]): DatasetView => ({
    name: 'bench', family: evmFamily, height: meta.last,
    chunks: [{ top: 0, first: meta.first, last: meta.last, hash: '', path: '', coverFrom: 0, dir: v.dir, local: v.local }],
  })
  // DuckDB's cache of Parquet footers is a setting of the instance: each variant sets it as it asks
  let cached = false
  const setCache = async (metadataCache = false) => {
    if (metadataCache !== cached) await con.run(`SET parquet_metadata_cache = ${metadataCache}`)
    cached = metadataCache
  }
  const answer = async (view: DatasetView, query: unknown, hash = false, metadataCache = false) => {
    await setCache(metadataCache)
    const h = hash ? createHash('sha256') : undefined
    const n = await readAnswer(view, query, UNCUT, (piece) => h?.update(piece))
    return h ? h.digest('hex') : n
  }
  console.log(`machine: ${machine()}`)
  console.log(`one chunk, ${meta.blockCount} blocks (${mb(baseBytes)} MB of Parquet today); DuckDB threads 1; ${o.runs} interleaved runs, medians of CPU time (process, user + system)`)
  // answers byte for byte, every shape
  for (const shape of SHAPES) {
    const query = shape.query(meta.first, meta.last)
    const want = await answer(dataset(views[0]), query, true)
    for (const v of views.slice(1)) {
      if ((await answer(dataset(v), query, true, v.metadataCache)) !== want) throw new Error(`${v.name}: the answer to ${shape.name} differs from today's chunk`)
    }
  }
  console.log(`answers of all ${SHAPES.length} shapes identical byte for byte in every variant`)
  const scan = (v: (typeof views)[number]) => async () => {
    await setCache(v.metadataCache)
    for (const t of tables) {
      const src = v.local ? v.local(t) : `read_parquet(${lit(path.join(v.dir, `${t}.parquet`))})`
      await con.runAndReadAll(`SELECT max(COLUMNS(*)::VARCHAR) FROM ${src}`)
    }
  }
  const logsTx = shapeByName('logs+tx').query(meta.first, meta.last)
  const all = shapeByName('all tx+logs').query(meta.first, meta.last)
  const allBytes = Number(await answer(dataset(views[0]), all))
  const lt = await cpuInterleaved(views.map((v) => () => answer(dataset(v), logsTx, false, v.metadataCache)), o.runs, 2)
  const al = await cpuInterleaved(views.map((v) => () => answer(dataset(v), all, false, v.metadataCache)), o.runs, 1)
  const sc = await cpuInterleaved(views.map(scan), Math.max(3, Math.ceil(o.runs / 2)), 1)
  const others = SHAPES.filter((s) => s.name !== 'logs+tx' && s.name !== 'all tx+logs')
  const rest: Timing[][] = []
  for (const shape of others) {
    const q = shape.query(meta.first, meta.last)
    rest.push(await cpuInterleaved(views.map((v) => () => answer(dataset(v), q, false, v.metadataCache)), o.runs, 1))
  }
  printTable(`chunk format variants: the engine over one ${meta.blockCount}-block chunk, in process (all tx+logs: ${mb(allBytes)} MB of JSON)`,
    ['variant', 'MB', 'vs today', 'written in CPU ms', 'logs+tx CPU ms', 'all tx+logs MB per CPU s', 'full scan CPU ms', ...others.map((s) => `${s.name} CPU ms`)],
    views.map((v, i) => [v.name, mb(v.bytes), `${((v.bytes / baseBytes) * 100).toFixed(0)} %`, v.writeMs === undefined ? '' : ms(v.writeMs), ms(lt[i].median), (allBytes / 1e6 / (al[i].median / 1000)).toFixed(0),
      ms(sc[i].median), ...rest.map((r) => ms(r[i].median))]))
  for (const f of forms) await f.close()
  con.closeSync()
}
