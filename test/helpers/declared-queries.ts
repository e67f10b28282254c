import path from 'node:path'
import { connect, ident, lit } from '../../src/db.js'
import type { FamilyDecl } from '../../src/families/declaration.js'
import type { DatasetView } from '../../src/query/types.js'

/* Real queries generated from a family's declaration, with filter values the dataset holds. */

type Obj = Record<string, any>
type Chunks = Pick<DatasetView, 'chunks' | 'height'>

/** The most frequent value of a column in the dataset (undefined when it holds none). */
async function frequentValue(view: Chunks, table: string, column: string): Promise<string | number | undefined> {
  const files = view.chunks.map((c) => path.join(c.dir, `${table}.parquet`))
  const con = await connect()
  try {
    const r = await con.runAndReadAll(
      `SELECT ${ident(column)} FROM read_parquet([${files.map(lit).join(', ')}], union_by_name = true) WHERE ${ident(column)} IS NOT NULL ` +
        `GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1`,
    )
    const v = r.getRows()[0]?.[0]
    return typeof v === 'bigint' ? Number(v) : (v as string | number | undefined)
  } catch {
    return undefined // a table no chunk has
  } finally {
    con.closeSync()
  }
}

/** The whole dataset range with every field of every kind (and the family's query type). */
export function allFieldsQuery(family: FamilyDecl, view: Chunks): Obj {
  const fields: Obj = {}
  for (const item of [family.header, ...family.items]) fields[item.selector] = Object.fromEntries(Object.keys(item.fields).map((f) => [f, true]))
  const base: Obj = { fromBlock: view.chunks[0].first, toBlock: view.height, fields }
  const type = family.queryTypes.find((t) => t !== undefined)
  if (type) base.type = type
  return base
}

/** Queries from the declaration: each request list by a frequent value of a filter column, with its relation flags. */
export async function declaredQueries(family: FamilyDecl, view: Chunks): Promise<Obj[]> {
  const base = allFieldsQuery(family, view)
  const out: Obj[] = []
  for (const item of family.items) {
    for (const req of item.requests) {
      let request: Obj | undefined
      for (const [name, f] of Object.entries(req.filters)) {
        if (f.kind !== 'in') continue
        const value = await frequentValue(view, item.table, f.column)
        if (value === undefined) continue
        request = { [name]: [value] }
        break
      }
      if (!request) continue
      const flags = Object.keys(req.relations)
      for (const on of [[], ...flags.map((f) => [f]), ...(flags.length > 1 ? [flags] : [])]) {
        out.push({ ...base, [req.name]: [{ ...request, ...Object.fromEntries(on.map((f) => [f, true])) }] })
      }
      // Every block of the range; and only identifier fields (header weights known without reading the headers).
      const all = { ...request, ...Object.fromEntries(flags.map((f) => [f, true])) }
      out.push({ ...base, includeAllBlocks: true, [req.name]: [all] })
      out.push({ ...base, fields: {}, [req.name]: [all] })
    }
  }
  return out
}
