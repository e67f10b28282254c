import { isMainThread } from 'node:worker_threads'
import { pino } from 'pino'

/*
 * Process-wide logger on stderr. Two forms of the same records:
 * - `json`: pino's JSON lines (for files, pipes, log collectors);
 * - `pretty`: one short line per record for people, `12:03:04 INFO  router listening url=… storage=…`.
 * The default is pretty when stderr is a terminal and JSON otherwise; `LOG_FORMAT=pretty|json` or the
 * CLI's `--log-format` (which wins) choose. `LOG_LEVEL` sets the level (default info; warn under
 * `node --test`).
 *
 * A line redrawn in place at the bottom of the terminal (the ingest progress bar) registers itself
 * with `setActiveLine`: each log line then clears it first and redraws it after, so the two do not mix.
 */

export const LOG_FORMATS = ['pretty', 'json'] as const
export type LogFormat = (typeof LOG_FORMATS)[number]

export function parseLogFormat(value: string | undefined): LogFormat | undefined {
  const v = value?.trim().toLowerCase()
  return (LOG_FORMATS as readonly string[]).includes(v ?? '') ? (v as LogFormat) : undefined
}

/** A line kept at the bottom of stderr and redrawn in place (a progress bar). */
export interface ActiveLine {
  /** Erase it (the cursor ends at the start of its line). */
  clear(): void
  /** Draw it again below what was just written. */
  redraw(): void
}

/**
 * Whether stderr is a terminal. A serving thread's stderr is a pipe to the main thread (never a TTY),
 * so the main thread says it in BLOCK_ARCHIVE_STDERR_TTY (src/commands/serving-thread.ts); without
 * that, `serve` on a terminal logged JSON lines between its human ones.
 */
export const stderrIsTerminal = (): boolean => (isMainThread ? process.stderr.isTTY === true : process.env.BLOCK_ARCHIVE_STDERR_TTY === '1')

let format: LogFormat = parseLogFormat(process.env.LOG_FORMAT) ?? (stderrIsTerminal() ? 'pretty' : 'json')
let activeLine: ActiveLine | undefined
const jsonOut = pino.destination(2)

export function logFormat(): LogFormat {
  return format
}

export function setLogFormat(f: LogFormat): void {
  if (f === format) return
  flushJson()
  format = f
}

/** Register (or, with undefined, remove) the line that log lines must not overwrite. */
export function setActiveLine(line: ActiveLine | undefined): void {
  if (line) flushJson()
  activeLine = line
}

function flushJson(): void {
  try {
    jsonOut.flushSync()
  } catch {
    // not ready or nothing to flush
  }
}

const colors = (): boolean => !process.env.NO_COLOR && stderrIsTerminal() && (!isMainThread || process.stderr.hasColors?.() !== false)

/** Where pino writes each serialized record (one JSON line). */
const destination = {
  write(line: string): void {
    if (format === 'json' && !activeLine) {
      jsonOut.write(line)
      return
    }
    const text = format === 'pretty' ? prettyLine(line, colors()) : line
    if (!activeLine) {
      process.stderr.write(text)
      return
    }
    activeLine.clear()
    process.stderr.write(text)
    activeLine.redraw()
  },
}

export const log = pino(
  { level: process.env.LOG_LEVEL ?? (process.env.NODE_TEST_CONTEXT ? 'warn' : 'info'), base: undefined },
  destination,
)

const LEVELS: Record<number, [label: string, color: string]> = {
  10: ['TRACE', '90'],
  20: ['DEBUG', '90'],
  30: ['INFO ', '32'],
  40: ['WARN ', '33'],
  50: ['ERROR', '31'],
  60: ['FATAL', '41;97'],
}

/** A value as `key=value` shows it: bare when that is unambiguous, else as JSON. */
function pretty(v: unknown): string {
  if (typeof v === 'string') return v !== '' && /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v)
  if (v === null || typeof v !== 'object') return String(v)
  return JSON.stringify(v)
}

function two(n: number): string {
  return String(n).padStart(2, '0')
}

/**
 * One pino JSON line → `HH:MM:SS LEVEL message key=value …\n` (local time). An `err` shows as its
 * type and message; from level error up, its stack follows on indented lines.
 */
export function prettyLine(line: string, color = false): string {
  let rec: Record<string, unknown>
  try {
    rec = JSON.parse(line)
  } catch {
    return line.endsWith('\n') ? line : line + '\n'
  }
  const paint = (code: string, s: string) => (color ? `\x1b[${code}m${s}\x1b[0m` : s)
  const { time, level, msg, err, ...fields } = rec
  const t = new Date(typeof time === 'number' ? time : Date.now())
  const [label, code] = LEVELS[level as number] ?? [String(level).padEnd(5), '0']
  let out = `${paint('2', `${two(t.getHours())}:${two(t.getMinutes())}:${two(t.getSeconds())}`)} ${paint(code, label)} ${msg ?? ''}`
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue
    out += ` ${paint('2', `${k}=`)}${pretty(v)}`
  }
  let stack = ''
  if (err !== undefined) {
    const e = err as { type?: string; message?: string; stack?: string }
    if (e && typeof e === 'object' && typeof e.message === 'string') {
      out += ` ${paint('2', 'err=')}${pretty(e.type && e.type !== 'Error' ? `${e.type}: ${e.message}` : e.message)}`
      if ((level as number) >= 50 && typeof e.stack === 'string') {
        // The stack's first lines repeat the message: keep it from the first frame on.
        const lines = e.stack.split('\n')
        const first = lines.findIndex((l) => /^\s+at /.test(l))
        stack = first < 0 ? '' : lines.slice(first).map((l) => `    ${l.trim()}\n`).join('')
      }
    } else {
      out += ` ${paint('2', 'err=')}${pretty(err)}`
    }
  }
  return `${out}\n${stack}`
}
