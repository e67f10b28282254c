import { randomBytes } from 'node:crypto'
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { connect, ident, lit } from '../db.js'
import type { FamilyDecl } from '../families/declaration.js'
import { chunkSummaries } from '../chunks/chunk-summary.js'
import { footerNulls } from '../chunks/chunk-nulls.js'
import { chunkPath, exists, hashFile, parseChunkPath, shortHash, type ChunkMeta, type ChunkRef } from '../chunks/layout.js'
import { parquetOptions, sortOrder, type ParquetSettings } from '../chunks/writer.js'
import type { Merge } from './plan.js'

/*
 * Writing a merged chunk: per table one DuckDB statement reads the table's Parquet file of every
 * chunk merged and writes them as one zstd Parquet file, sorted as the family declares (rows equal on
 * every sort key keep their chunk and row order, as in the chunks merged). Its meta.json is a normal
 * chunk's plus what compaction needs (`tier`, `sealed`, `replaces`, `compactedAt`). Built in a temp
 * folder of `buildRoot` and renamed to its chunk path there, like a chunk the ingest writes.
 */

export interface MergeInput {
  merge: Merge
  /** A local folder with the files of each chunk of `merge.chunks`, in the same order. */
  folders: string[]
  /** Top folder of the merged chunk (its first chunk's). */
  top: number
}

export async function writeMerged(family: FamilyDecl, buildRoot: string, input: MergeInput, o: ParquetSettings = {}): Promise<ChunkRef> {
  const { merge, folders } = input
  const firstMeta = merge.chunks[0].meta
  const lastMeta = merge.chunks[merge.chunks.length - 1].meta
  const tmpDir = path.join(buildRoot, `.tmp-${process.pid}-merge-${randomBytes(4).toString('hex')}`)
  await mkdir(tmpDir, { recursive: true })
  try {
    const rows: Record<string, number> = {}
    let summaries: Record<string, string | null> | undefined
    let nulls: ChunkMeta['nulls']
    const con = await connect()
    try {
      for (const name of firstMeta.tables) {
        const table = family.tables.find((t) => t.name === name)
        if (!table) throw new Error(`family ${family.name} has no table ${name} (chunk ${merge.chunks[0].ref.path})`)
        const files: string[] = []
        for (const dir of folders) {
          const f = path.join(dir, `${name}.parquet`)
          if (await exists(f)) files.push(f)
        }
        const out = path.join(tmpDir, `${name}.parquet`)
        const list = `[${files.map(lit).join(', ')}]`
        const columns = table.columns.map((c) => ident(c.name)).join(', ')
        const written = files.length
          ? await con.runAndReadAll(
              `COPY (SELECT ${columns} FROM read_parquet(${list}, filename = true, file_row_number = true, union_by_name = true) ` +
                `ORDER BY ${sortOrder(table)}, list_position(${list}, filename), file_row_number) TO ${lit(out)} ${parquetOptions(family, table, o)}`,
            )
          : await con.runAndReadAll(
              `COPY (SELECT ${table.columns.map((c) => `CAST(NULL AS ${c.type}) AS ${ident(c.name)}`).join(', ')} LIMIT 0) TO ${lit(out)} ${parquetOptions(family, table, o)}`,
            )
        rows[name] = Number(written.getRows()[0][0])
      }
      summaries = await chunkSummaries(con, tmpDir, family, firstMeta.tables, rows)
      nulls = await footerNulls(con, tmpDir, firstMeta.tables)
    } finally {
      con.closeSync()
    }
    const names = (await readdir(tmpDir)).sort()
    const infos = await Promise.all(names.map((n) => hashFile(path.join(tmpDir, n))))
    const meta: ChunkMeta = {
      ...firstMeta, // what the ingest adds (dataset, sources) is the same in every chunk merged (plan.ts)
      first: firstMeta.first,
      last: lastMeta.last,
      lastHash: lastMeta.lastHash,
      firstParentHash: firstMeta.firstParentHash,
      previousLast: firstMeta.previousLast,
      blockCount: merge.chunks.reduce((n, c) => n + c.meta.blockCount, 0),
      rowBytes: merge.chunks.reduce((n, c) => n + (c.meta.rowBytes ?? 0), 0),
      tables: firstMeta.tables,
      rows,
      summaries,
      nulls,
      files: Object.fromEntries(names.map((n, i) => [n, infos[i]])),
      tier: merge.tier,
      sealed: merge.sealed || undefined,
      replaces: merge.chunks.map((c) => c.ref.path),
      compactedAt: new Date().toISOString(),
    }
    await writeFile(path.join(tmpDir, 'meta.json'), JSON.stringify(meta, null, 2))
    const rel = chunkPath(input.top, meta.first, meta.last, shortHash(meta.lastHash))
    const dest = path.join(buildRoot, rel)
    await mkdir(path.dirname(dest), { recursive: true })
    await rename(tmpDir, dest)
    return parseChunkPath(rel)!
  } catch (e) {
    await rm(tmpDir, { recursive: true, force: true })
    throw e
  }
}
