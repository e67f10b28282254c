import type { FamilyDecl } from './declaration.js'
import { evmFamily } from './evm.js'
import { starknetFamily } from './starknet.js'
import { substrateFamily } from './substrate.js'

/** Every family, by the name a dataset's `dataset.json` gives. */
export const FAMILIES: Record<FamilyDecl['name'], FamilyDecl> = {
  evm: evmFamily,
  starknet: starknetFamily,
  substrate: substrateFamily,
}

export function familyByName(name: string): FamilyDecl {
  const f = (FAMILIES as Record<string, FamilyDecl | undefined>)[name]
  if (!f) throw new Error(`unknown dataset family "${name}" (known: ${Object.keys(FAMILIES).join(', ')})`)
  return f
}
