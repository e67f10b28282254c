import { setFlagsFromString } from 'node:v8'
import { isMainThread, parentPort, Worker } from 'node:worker_threads'

/*
 * The commands that answer queries (`worker`, `serve`, `demo`) run in a worker thread whose V8
 * young generation is 12 MB instead of Node's 48. V8 sizes it only when an isolate starts, so a
 * process cannot change its own; a thread gets its own through `resourceLimits`, in the same
 * process (a signal or a kill reaches everything, nothing is left behind). With the smaller young
 * generation the workers read 24 MiB slices (one statement per 20 MiB answer) within the memory
 * that 16 MiB slices took: an all tx+logs sync 15 % less worker CPU, the peak under 16 clients no
 * higher (docs/benchmark-history.md, step 38). A speed trick: the CLI starts it through
 * src/fast-path.ts (`BLOCK_ARCHIVE_PLAIN=1` or `BLOCK_ARCHIVE_SERVE_THREAD=off` run them in the
 * main thread).
 */

const SERVING_COMMANDS = new Set(['worker', 'serve', 'demo'])
const YOUNG_GENERATION_MB = 12
/**
 * The old generation the serving thread starts with. V8 sizes a fresh heap's old generation from
 * what it holds, about 16 MB for a worker, and an answer of 2 MB promotes enough from the small
 * young generation to start a full collection every 2–3 answers: 12 mark-compacts in 30 logs+tx
 * answers, about 10 ms of CPU per answer. With 64 MB: none in 30, the same peak RSS
 * (docs/benchmark-history.md, step 49). `BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB` sets another size
 * (0: V8's own sizing), and `--initial-old-space-size` on node's command line wins. A V8 flag, so
 * it is set for the process before the thread's heap is made.
 */
export const INITIAL_OLD_SPACE_MB = 64

/** The initial old generation to give the serving thread, in MB; undefined: V8's own sizing. */
function initialOldSpaceMb(): number | undefined {
  if (process.execArgv.some((a) => /^--initial[-_]old[-_]space[-_]size/.test(a))) return undefined
  const given = process.env.BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB
  const mb = given === undefined || given === '' ? INITIAL_OLD_SPACE_MB : Number(given)
  if (!Number.isInteger(mb) || mb < 0) throw new Error(`BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB must be a whole number of MB (0: V8's own sizing), not ${JSON.stringify(given)}`)
  return mb > 0 ? mb : undefined
}

/**
 * In the main thread, for a serving command: runs this CLI again in a worker thread with the same
 * arguments, forwards Ctrl-C / SIGTERM to it and exits with its exit code. Returns false when the
 * command runs here (another command, `--help`, a thread already).
 */
export function startServingThread(cliUrl: URL, argv: string[]): boolean {
  const args = argv.slice(2)
  if (!isMainThread || !SERVING_COMMANDS.has(commandOf(args))) return false
  if (args.some((a) => a === '--help' || a === '-h')) return false
  let oldSpaceMb: number | undefined
  try {
    oldSpaceMb = initialOldSpaceMb()
  } catch (e) {
    console.error(`error: ${(e as Error).message}`)
    process.exit(1)
  }
  if (oldSpaceMb) setFlagsFromString(`--initial-old-space-size=${oldSpaceMb}`)
  const thread = new Worker(cliUrl, {
    argv: args,
    resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB },
    // The thread's stderr is a pipe to this one: it learns here whether the log goes to a terminal (src/log.ts).
    env: { ...process.env, BLOCK_ARCHIVE_STDERR_TTY: process.stderr.isTTY ? '1' : '0', BLOCK_ARCHIVE_INITIAL_OLD_SPACE_MB: String(oldSpaceMb ?? 0) },
  })
  const forward = (signal: NodeJS.Signals) => thread.postMessage({ signal })
  process.on('SIGINT', forward)
  process.on('SIGTERM', forward)
  thread.on('error', (e) => {
    console.error(e instanceof Error ? (e.stack ?? e.message) : e)
    process.exitCode = 1
  })
  thread.on('exit', (code) => process.exit(process.exitCode || code))
  return true
}

/** The subcommand's name: the first word that is not an option (nor the global `--log-format`'s value). */
function commandOf(args: string[]): string {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--log-format') i++
    else if (!args[i].startsWith('-')) return args[i]
  }
  return ''
}

/** Calls `handler` on Ctrl-C / SIGTERM, in the main thread or (forwarded) in the serving thread. */
export function onSignal(handler: (signal: string) => void): void {
  if (isMainThread) {
    process.on('SIGINT', handler)
    process.on('SIGTERM', handler)
  } else {
    parentPort?.on('message', (m: { signal?: string }) => {
      if (m?.signal) handler(m.signal)
    })
    // Listening for signals does not keep the thread alive by itself, as in the main thread.
    parentPort?.unref()
  }
}
