import type { FamilyDecl } from './declaration.js'
import { evmFamily } from './evm.js'
import { starknetFamily } from './starknet.js'

/** Every family, by the name a dataset's `dataset.json` gives. */
export const FAMILIES: Record<FamilyDecl['name'], FamilyDecl | undefined> = {
  evm: evmFamily,
  starknet: starknetFamily,
  substrate: undefined,
}

export function familyByName(name: string): FamilyDecl {
  const f = (FAMILIES as Record<string, FamilyDecl | undefined>)[name]
  if (!f) throw new Error(`unknown dataset family "${name}" (known: ${Object.entries(FAMILIES).filter(([, f]) => f).map(([n]) => n).join(', ')})`)
  return f
}
