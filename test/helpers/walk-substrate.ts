import assert from 'node:assert/strict'
import {
  BLOCK_FIELDS,
  FIELDS,
  ID_FIELDS,
  KINDS,
  LISTS,
  LIST_NAMES,
  OUTPUT_KEY,
  evaluate,
  firstDifference,
  itemCount,
  itemKey,
  matchedItems,
  relatedItems,
  validate,
  type FullBlock,
  type Obj,
} from './reference-substrate.js'
import { inRange, randomFields as randomFieldsOf, type GenQuery, type Range, type Rng, type WalkReference } from './walk.js'

/*
 * What the two Substrate reference tests (recorded Sidecar blocks; a live chopsticks node) share on
 * top of walk.ts: the reference as the walk uses it, random field selections, and the tallies of
 * what each relation flag selects. How each generates its queries stays with the test.
 */

/** The Substrate reference as the walk uses it (every chunk has every table). */
export const SUBSTRATE_REFERENCE: WalkReference<FullBlock> = { validate, evaluate, firstDifference, itemCount }

/** Random field selection: some selectors, some fields each, identifier fields sometimes set to false. */
export const randomFields = (r: Rng): Obj => randomFieldsOf(r, [['block', BLOCK_FIELDS], ...KINDS.map((k) => [k, FIELDS[k]] as [string, readonly string[]])], ID_FIELDS)

/*
 * What each relation flag selects, compared with simpler rules it must differ from somewhere in the
 * data: "same extrinsic" (every item of the target kind in the matched items' extrinsics), for
 * `siblings` "same depth" (same extrinsic, same address length), for calls' `events` "same call"
 * (events whose callAddress equals the call's address), for events' `stack` "the call only".
 */
export interface RelationTally {
  /** single requests with this flag whose relation selected something */
  cases: number
  /** … and the result is a strict subset of "same extrinsic" */
  notSameExtrinsic: number
  /** … and the result differs from the alternative rule of the flag (see above; undefined: none) */
  notAlternative: number
}

const key = (a: number[]) => a.join('.')

/** The tallies by `list.flag` over the single-request queries of each dataset (`data`, `queries`). */
export function relationTallies(sets: { data: FullBlock[]; queries: GenQuery[] }[]): Map<string, RelationTally> {
  const tallies = new Map<string, RelationTally>()
  for (const { data, queries } of sets) {
    for (const { q } of queries) {
      for (const list of LIST_NAMES) {
        const requests: Obj[] = q[list] ?? []
        if (requests.length !== 1) continue
        const request = requests[0]
        try {
          validate({ [list]: requests })
        } catch {
          continue
        }
        for (const flag of Object.keys(LISTS[list].relations)) {
          if (request[flag] !== true) continue
          const rel = LISTS[list].relations[flag]
          let got = 0
          let sameExt = 0
          let altDiffers = false
          for (const b of inRange(data, q as Range)) {
            const sources = matchedItems(b, list, request)
            const related = relatedItems(b, list, flag, sources)
            const targets: Obj[] = b[OUTPUT_KEY[rel.target]]
            const exts = new Set(sources.map((x) => x.extrinsicIndex).filter((x) => x != null))
            const inExt = targets.filter((t) => exts.has(rel.target === 'extrinsic' ? t.index : t.extrinsicIndex))
            let alternative = inExt
            if (flag === 'siblings') alternative = inExt.filter((t) => sources.some((x) => x.extrinsicIndex === t.extrinsicIndex && x.address.length === t.address.length))
            else if (flag === 'events') alternative = inExt.filter((t) => sources.some((x) => x.extrinsicIndex === t.extrinsicIndex && key(x.address) === key(t.callAddress ?? [-1])))
            // (an event list's `stack` targets calls)
            else if (flag === 'stack' && LISTS[list].kind === 'event') alternative = inExt.filter((t) => sources.some((x) => x.extrinsicIndex === t.extrinsicIndex && x.callAddress && key(x.callAddress) === key(t.address)))
            for (const t of related) assert.ok(inExt.includes(t), `${list}.${flag}: a related item outside the matched items' extrinsics`)
            got += related.length
            sameExt += inExt.length
            const keys = (xs: Obj[]) => JSON.stringify(xs.map((x) => itemKey(rel.target, x)).sort())
            if (keys(related) !== keys(alternative)) altDiffers = true
          }
          const t = tallies.get(`${list}.${flag}`) ?? { cases: 0, notSameExtrinsic: 0, notAlternative: 0 }
          if (got > 0) {
            t.cases++
            if (got < sameExt) t.notSameExtrinsic++
            if (altDiffers) t.notAlternative++
          }
          tallies.set(`${list}.${flag}`, t)
        }
      }
    }
  }
  return tallies
}
