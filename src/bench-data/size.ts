import { readdir, stat } from 'node:fs/promises'
import path from 'node:path'

/** Total bytes of the files under `dir`. */
export async function dirSize(dir: string): Promise<number> {
  let total = 0
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) total += await dirSize(p)
    else if (e.isFile()) total += (await stat(p)).size
  }
  return total
}
