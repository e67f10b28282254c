import { DEFAULT_FAMILY, SOURCE_MODULES, sourceModuleOf, type FamilyIngestOptions, type FamilyName } from '../families/index.js'
import type { TransferStats } from './rpc.js'
import type { BlockSource } from './source.js'
import { flagKey, flagName, type FlagDecl, type SourceSettings, type SourceSpec } from './source-module.js'

export type { SourceSpec } from './source-module.js'

/** Which source an ingest reads: its family (default: the first registered), that family's options and the settings of every source. */
export type SourceOptions = FamilyIngestOptions & SourceSettings & { family?: FamilyName }

/**
 * The spec of the source the options name (no side effects: the `ingest` command checks its flags
 * with it before starting). Throws a one-line message when the options do not make a source, or when
 * they give another family's flag (or a value only another family takes) to this one.
 */
export function sourceSpec(o: SourceOptions): SourceSpec {
  const family = o.family ?? DEFAULT_FAMILY
  const module = sourceModuleOf(family)
  const values = o as unknown as Record<string, unknown>
  for (const flag of familyFlags()) {
    const value = values[flag.key]
    if (value === undefined || value === flag.default) continue
    const own = module.flags.find((f) => f.flags === flag.flags)
    if (own && (!own.choices || own.choices.includes(value as string))) continue
    if (!own && flag.owners.every((o) => o.flag.ignoredElsewhere)) continue
    const owners = flag.owners.filter((o) => !o.flag.choices || o.flag.choices.includes(value as string)).map((o) => o.family)
    if (!owners.length) throw new Error(`${flagName(flag)} ${value}: expected one of ${flag.choices!.join(', ')}`)
    throw new Error(`${flagName(flag)}${flag.choices ? ` ${value}` : ''} is for --family ${owners.join(' or ')}`)
  }
  return { family, ...(module.spec as (o: SourceOptions) => Omit<SourceSpec, 'family'>)(o) }
}

/** An `ingest` flag with the families that take it: their declarations joined (texts, choices). */
export interface FamilyFlag extends FlagDecl {
  key: string
  owners: { family: FamilyName; flag: FlagDecl }[]
}

/** Every registered family's `ingest` flags, in registry order; a flag several families take is one. */
export function familyFlags(): FamilyFlag[] {
  const flags = new Map<string, FamilyFlag>()
  for (const m of SOURCE_MODULES) {
    for (const f of m.flags) {
      const seen = flags.get(f.flags)
      if (!seen) {
        flags.set(f.flags, { ...f, choices: f.choices && [...f.choices], key: flagKey(f), owners: [{ family: m.family.name, flag: f }] })
        continue
      }
      if (seen.env !== f.env || seen.default !== f.default) throw new Error(`${f.flags}: the families taking it declare different environment variables or defaults`)
      seen.description += '; ' + f.description
      if (seen.choices && f.choices) seen.choices.push(...f.choices.filter((c) => !seen.choices!.includes(c)))
      seen.owners.push({ family: m.family.name, flag: f })
    }
  }
  return [...flags.values()]
}

/**
 * The source a spec names; what it moves is counted in `stats`. Only that family's source code is
 * loaded (a fetch worker's heap, which every full garbage collection marks, stays small: an EVM
 * worker's 11.4 MB with every family loaded, 5.6 MB with its own); the registry adds the other
 * families' declarations and source modules, 0.2 MB.
 */
export function createSource(spec: SourceSpec, stats: TransferStats): Promise<BlockSource> {
  return (sourceModuleOf(spec.family).create as (spec: SourceSpec, stats: TransferStats) => Promise<BlockSource>)(spec, stats)
}
