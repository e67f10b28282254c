import type { FamilyDecl } from './declaration.js'
import type { OptionsOf } from '../ingest/source-module.js'
import { evmSource } from '../ingest/evm/source-module.js'
import { starknetSource } from '../ingest/starknet/source-module.js'
import { substrateSource } from '../ingest/substrate/source-module.js'

/*
 * The registry: every family, as the source module its ingest reads (src/ingest/<family>/source-module.ts),
 * which names the family's declaration. Adding a family is one line here; the family names, the
 * query types, the `ingest` flags and the sources all follow from this list. The first is the
 * default family of `ingest --family`.
 */
export const SOURCE_MODULES = [evmSource, starknetSource, substrateSource] as const

type Registered = (typeof SOURCE_MODULES)[number]

/** A registered family's name, as a dataset's `dataset.json` gives it. */
export type FamilyName = Registered['family']['name']

/** Every family, by the name a dataset's `dataset.json` gives. */
export const FAMILIES = Object.fromEntries(SOURCE_MODULES.map((m) => [m.family.name, m.family])) as Record<FamilyName, FamilyDecl>

export const FAMILY_NAMES = SOURCE_MODULES.map((m) => m.family.name) as FamilyName[]

export const DEFAULT_FAMILY: FamilyName = FAMILY_NAMES[0]

export function familyByName(name: string): FamilyDecl {
  const f = Object.hasOwn(FAMILIES, name) ? (FAMILIES as Record<string, FamilyDecl>)[name] : undefined
  if (!f) throw new Error(`unknown dataset family "${name}" (known: ${FAMILY_NAMES.join(', ')})`)
  return f
}

/** The source module of a registered family. */
export function sourceModuleOf(name: string): Registered {
  const m = SOURCE_MODULES.find((m) => m.family.name === name)
  if (!m) throw new Error(`unknown dataset family "${name}" (known: ${FAMILY_NAMES.join(', ')})`)
  return m
}

/** The query's `type` → the family whose queries it names (each declaration's `queryTypes`). */
export const FAMILY_OF_QUERY_TYPE: ReadonlyMap<string, FamilyName> = new Map(
  SOURCE_MODULES.flatMap((m) => m.family.queryTypes.filter((t): t is string => t !== undefined).map((t) => [t, m.family.name] as const)),
)

type AllKeys<U> = U extends unknown ? keyof U : never
type ValueOf<U, K extends PropertyKey> = U extends unknown ? (K extends keyof U ? U[K] : never) : never
type Union = OptionsOf<Registered>

/** The options of every family's ingest, together (a flag two families take accepts the values of both). */
export type FamilyIngestOptions = { [K in AllKeys<Union>]?: ValueOf<Union, K> }
