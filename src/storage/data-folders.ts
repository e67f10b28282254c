import { stat } from 'node:fs/promises'
import path from 'node:path'
import { isS3Url } from './s3-url.js'

/*
 * Whether the `--data` folders given exist, without loading the storage layer: `serve` and `router`
 * check before they load their servers, so a mistyped folder fails at once.
 */

/** The error for a `--data` folder that does not exist. */
export const missingDataFolder = (folder: string) => new Error(`data folder ${folder} does not exist`)

/** Throws `missingDataFolder` for the first local folder of `urls` that does not exist (s3:// URLs are read later). */
export async function checkDataFolders(urls: readonly string[]): Promise<void> {
  for (const url of urls) {
    if (isS3Url(url)) continue
    const folder = path.resolve(url)
    await stat(folder).catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') throw missingDataFolder(folder)
    })
  }
}
