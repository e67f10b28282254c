import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'

/* What the reference evaluators of every family share: comparing answers, loading real queries. */

export type Obj = Record<string, any>

/**
 * The first difference between an answer and the reference's, as a sentence (undefined when equal).
 * `keyOf` names an item of an output array, to list the missing and extra ones.
 */
export function firstDifference(got: Obj[], expected: Obj[], keyOf: (output: string, item: Obj) => string): string | undefined {
  const gn = got.map((b) => b?.header?.number)
  const en = expected.map((b) => b.header.number)
  if (JSON.stringify(gn) !== JSON.stringify(en)) {
    const missing = en.filter((n) => !gn.includes(n))
    const extra = gn.filter((n) => !en.includes(n))
    return `blocks differ: ${got.length} returned, ${expected.length} expected; missing ${JSON.stringify(missing.slice(0, 10))}, extra ${JSON.stringify(extra.slice(0, 10))}`
  }
  for (let i = 0; i < got.length; i++) {
    const g = got[i]
    const e = expected[i]
    const n = e.header.number
    const gk = Object.keys(g)
    if (gk[0] !== 'header') return `block ${n}: first key is ${gk[0]}, not header`
    const ek = Object.keys(e)
    if (JSON.stringify([...gk].sort()) !== JSON.stringify([...ek].sort())) return `block ${n}: keys ${JSON.stringify(gk)}, expected ${JSON.stringify(ek)}`
    const d = diffValue(g.header, e.header)
    if (d) return `block ${n} header: ${d}`
    for (const k of ek.slice(1)) {
      const ga: Obj[] = g[k]
      const ea: Obj[] = e[k]
      if (!Array.isArray(ga)) return `block ${n}: ${k} is not an array`
      if (ga.length !== ea.length) {
        const gks = ga.map((x) => keyOf(k, x))
        const eks = ea.map((x) => keyOf(k, x))
        return `block ${n}: ${ga.length} ${k}, expected ${ea.length}; missing ${JSON.stringify(eks.filter((x) => !gks.includes(x)).slice(0, 10))}, extra ${JSON.stringify(gks.filter((x) => !eks.includes(x)).slice(0, 10))}`
      }
      for (let j = 0; j < ea.length; j++) {
        const d = diffValue(ga[j], ea[j])
        if (d) return `block ${n} ${k}[${j}]: ${d}; got ${JSON.stringify(ga[j]).slice(0, 400)}, expected ${JSON.stringify(ea[j]).slice(0, 400)}`
      }
    }
  }
  return undefined
}

function diffValue(g: any, e: any, path = ''): string | undefined {
  if (e === null || typeof e !== 'object') {
    return Object.is(g, e) ? undefined : `${path || 'value'}: ${JSON.stringify(g)} ≠ expected ${JSON.stringify(e)}`
  }
  if (g === null || typeof g !== 'object' || Array.isArray(g) !== Array.isArray(e)) return `${path}: ${JSON.stringify(g)?.slice(0, 200)} ≠ expected ${JSON.stringify(e).slice(0, 200)}`
  if (Array.isArray(e)) {
    if (g.length !== e.length) return `${path}: length ${g.length} ≠ expected ${e.length}`
    for (let i = 0; i < e.length; i++) {
      const d = diffValue(g[i], e[i], `${path}[${i}]`)
      if (d) return d
    }
    return undefined
  }
  for (const k of new Set([...Object.keys(g), ...Object.keys(e)])) {
    if (!(k in e)) return `${path}.${k}: present (${JSON.stringify(g[k])?.slice(0, 100)}) but not expected`
    if (!(k in g)) return `${path}.${k}: missing (expected ${JSON.stringify(e[k])?.slice(0, 100)})`
    const d = diffValue(g[k], e[k], `${path}.${k}`)
    if (d) return d
  }
  return undefined
}

export interface NamedQuery {
  name: string
  query: Obj
}

/** The real queries of a folder (`fixtures/queries/<family>`), by file name. */
export function loadQueries(dir: string): NamedQuery[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => ({ name: f.replace(/\.json$/, ''), query: JSON.parse(readFileSync(path.join(dir, f), 'utf8')) }))
}
