import type { FamilyDecl, ItemDecl, RelationDecl, RequestDecl } from '../families/declaration.js'
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
  /** The request list it came from (its filters, relations and implicit condition). */
  request: RequestDecl
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
        const decl = r.request.relations[flag]
        const target = itemOf(family, decl.target)
        involved.add(target.selector)
        return { flag, decl, target }
      })
      scans.push({ id: scans.length, item, request: r.request, filters: r.filters, relations })
    }
  }
  return {
    family,
    query,
    scans: simplify(scans),
    kinds: family.items.filter((i) => involved.has(i.selector)),
    fields: query.fields,
  }
}

/**
 * A request with no condition at all (`{}`, or only `*NonZero: false`) of a list without an implicit
 * condition selects every item of its kind (`evmLogs: [{}]` is not every event).
 */
export function unfiltered(scan: ScanPlan): boolean {
  if (scan.request.where) return false
  return Object.entries(scan.filters).every(([name, value]) => scan.request.filters[name].kind === 'nonZero' && value !== true)
}

/**
 * When a kind is selected whole by an unfiltered request, relations into it add nothing and its
 * other requests matter only for their relations into other kinds: drop what is redundant (a
 * `traces: [{}]` with `subtraces` would otherwise join every trace with every trace of its
 * transaction).
 */
function simplify(scans: ScanPlan[]): ScanPlan[] {
  const whole = new Set(scans.filter(unfiltered).map((s) => s.item.selector))
  if (whole.size === 0) return scans
  const kept: ScanPlan[] = []
  const firstWhole = new Set<string>()
  for (const scan of scans) {
    const relations = scan.relations.filter((r) => !whole.has(r.target.selector))
    const isWhole = unfiltered(scan)
    const redundant = whole.has(scan.item.selector) && (isWhole ? firstWhole.has(scan.item.selector) : true)
    if (isWhole) firstWhole.add(scan.item.selector)
    // A redundant request still matters for its relations into other kinds.
    if (redundant && relations.length === 0) continue
    kept.push({ ...scan, id: kept.length, relations })
  }
  return kept
}

/** Tables a plan reads (the header table included). */
export function planTables(plan: QueryPlan): string[] {
  return [plan.family.header.table, ...plan.kinds.map((k) => k.table)]
}
