import type { FamilyDecl, ItemDecl, RelationDecl } from '../families/declaration.js'
import { itemOf } from '../families/declaration.js'
import type { ValidQuery } from './validate.js'

/*
 * What a validated query asks for, resolved against the family declaration: the scans (one per
 * request), the relations each request pulls in, and the item kinds that appear in the output.
 */

export interface RelationPlan {
  flag: string
  decl: RelationDecl
  target: ItemDecl
}

export interface ScanPlan {
  /** Position of the request in the query (unique across kinds). */
  id: number
  item: ItemDecl
  filters: Record<string, unknown>
  relations: RelationPlan[]
}

export interface QueryPlan {
  family: FamilyDecl
  query: ValidQuery
  scans: ScanPlan[]
  /** Item kinds with at least one source (request or relation), in family output order. */
  kinds: ItemDecl[]
  /** selector → selected field names. */
  fields: Record<string, string[]>
}

export function planQuery(family: FamilyDecl, query: ValidQuery): QueryPlan {
  const scans: ScanPlan[] = []
  const involved = new Set<string>()
  for (const item of family.items) {
    for (const r of query.requests.get(item.selector) ?? []) {
      involved.add(item.selector)
      const relations = r.relations.map((flag) => {
        const decl = item.relations[flag]
        const target = itemOf(family, decl.target)
        involved.add(target.selector)
        return { flag, decl, target }
      })
      scans.push({ id: scans.length, item, filters: r.filters, relations })
    }
  }
  return {
    family,
    query,
    scans,
    kinds: family.items.filter((i) => involved.has(i.selector)),
    fields: query.fields,
  }
}

/** Tables a plan reads (the header table included). */
export function planTables(plan: QueryPlan): string[] {
  return [plan.family.header.table, ...plan.kinds.map((k) => k.table)]
}
