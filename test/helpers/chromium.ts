import { accessSync, constants } from 'node:fs'
import path from 'node:path'

/*
 * The Chromium the status page test drives (playwright-core brings no browser): $CHROMIUM_PATH if
 * set, else the first of chromium, chromium-browser, google-chrome, google-chrome-stable on the PATH
 * (Debian's and Ubuntu's packages, Google's).
 */

const NAMES = ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable']

export const CHROMIUM_HINT =
  'the status page test needs a Chromium: install one (Debian: apt-get install chromium) or point CHROMIUM_PATH at its executable'

const executable = (file: string) => {
  try {
    accessSync(file, constants.X_OK)
    return true
  } catch {
    return false
  }
}

/** The Chromium executable to use, or undefined when there is none. */
export function findChromium(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.CHROMIUM_PATH) return executable(env.CHROMIUM_PATH) ? env.CHROMIUM_PATH : undefined
  for (const dir of (env.PATH ?? '').split(path.delimiter).filter(Boolean)) {
    for (const name of NAMES) {
      const file = path.join(dir, name)
      if (executable(file)) return file
    }
  }
  return undefined
}
