import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { describe, it } from 'node:test'
import { IngestProgress } from '../src/ingest/progress.js'
import { log, logFormat, parseLogFormat, prettyLine, setActiveLine, setLogFormat } from '../src/log.js'
import { CLI, runCli, startCli, until } from './helpers/cli.js'
import { tempDir } from './helpers/dataset.js'

/*
 * The log on stderr: pretty lines for people or JSON lines (LOG_FORMAT, --log-format wins), the help
 * naming LOG_LEVEL and LOG_FORMAT, and log lines written above an active progress bar, not into it.
 */

/** Run `fn` with process.stderr.write captured (and silenced). */
function captureStderr(fn: () => void): string[] {
  const writes: string[] = []
  const write = process.stderr.write
  process.stderr.write = ((chunk: string | Uint8Array) => {
    writes.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString())
    return true
  }) as typeof process.stderr.write
  try {
    fn()
  } finally {
    process.stderr.write = write
  }
  return writes
}

describe('log format', () => {
  it('prettyLine: time, level, message, then key=value fields', () => {
    const time = new Date(2026, 0, 2, 12, 3, 4).getTime()
    const line = JSON.stringify({ level: 30, time, url: 'http://127.0.0.1:8080', storage: '/data/x y', n: 3, ok: true, list: [1, 2], msg: 'router listening' })
    assert.equal(prettyLine(line), '12:03:04 INFO  router listening url=http://127.0.0.1:8080 storage="/data/x y" n=3 ok=true list=[1,2]\n')
    assert.equal(prettyLine(JSON.stringify({ level: 40, time, msg: 'slow' })), '12:03:04 WARN  slow\n')
    // An error: type and message inline; its stack (from the first frame) under it from level error up.
    const err = { type: 'TypeError', message: 'boom\nsecond line', stack: 'TypeError: boom\nsecond line\n    at f (/x.js:1:1)\n    at g (/y.js:2:2)' }
    assert.equal(
      prettyLine(JSON.stringify({ level: 50, time, err, incident: 'ab12', msg: 'internal error' })),
      '12:03:04 ERROR internal error incident=ab12 err="TypeError: boom\\nsecond line"\n    at f (/x.js:1:1)\n    at g (/y.js:2:2)\n',
    )
    assert.equal(prettyLine(JSON.stringify({ level: 40, time, err: { type: 'Error', message: 'retry', stack: 'Error: retry\n    at f' }, msg: 'rpc' })), '12:03:04 WARN  rpc err=retry\n')
    // With colors, ANSI codes around the parts; something that is not JSON passes through.
    assert.match(prettyLine(JSON.stringify({ level: 30, time, msg: 'x' }), true), /\x1b\[32mINFO \x1b\[0m x\n$/)
    assert.equal(prettyLine('not json'), 'not json\n')
  })

  it('parseLogFormat accepts pretty and json only', () => {
    assert.equal(parseLogFormat('pretty'), 'pretty')
    assert.equal(parseLogFormat(' JSON '), 'json')
    assert.equal(parseLogFormat('text'), undefined)
    assert.equal(parseLogFormat(undefined), undefined)
  })

  it('a log line clears the active line, is written, and the line is redrawn after it', () => {
    const before = logFormat()
    setLogFormat('pretty')
    const events: string[] = []
    setActiveLine({ clear: () => events.push('clear'), redraw: () => events.push('redraw') })
    try {
      const writes = captureStderr(() => log.warn({ block: 7 }, 'between'))
      assert.equal(writes.length, 1)
      assert.match(writes[0], /^\d\d:\d\d:\d\d WARN  between block=7\n$/)
      assert.deepEqual(events, ['clear', 'redraw'])
    } finally {
      setActiveLine(undefined)
      setLogFormat(before)
    }
  })

  it('with a progress bar on a terminal, log lines go above the bar and the bar is drawn again', () => {
    const tty = process.stderr.isTTY
    const before = logFormat()
    Object.defineProperty(process.stderr, 'isTTY', { value: true, configurable: true })
    setLogFormat('pretty')
    const progress = new IngestProgress('bar')
    try {
      const writes = captureStderr(() => {
        progress.update({ block: 10, blocks: 11, rows: 100, target: 99, start: 0 })
        log.warn('a warning while the bar runs')
      }).join('')
      const logAt = writes.indexOf('a warning while the bar runs\n')
      assert.ok(logAt > 0, JSON.stringify(writes))
      const barBefore = writes.lastIndexOf('ingest [', logAt)
      assert.ok(barBefore >= 0 && barBefore < logAt, 'the bar was drawn first')
      // Between the bar and the log line: the bar's line is erased, line wrapping (which the bar
      // turns off) is back on.
      assert.ok(writes.slice(barBefore, logAt).includes('\r\x1b[2K\x1b[?7h'), JSON.stringify(writes))
      // After the log line: wrapping off again, the cursor position saved, and the bar drawn again.
      const after = writes.slice(logAt)
      assert.ok(after.includes('\x1b[?7l\x1b7'), JSON.stringify(after))
      assert.ok(after.indexOf('ingest [') > after.indexOf('\x1b7'), JSON.stringify(after))
    } finally {
      captureStderr(() => progress.stop())
      setLogFormat(before)
      Object.defineProperty(process.stderr, 'isTTY', { value: tty, configurable: true })
    }
    // After stop(), log lines no longer touch the bar.
    const writes = captureStderr(() => log.warn('after the bar'))
    assert.equal(writes.length, logFormat() === 'json' ? 0 : 1) // JSON lines go through pino's own destination
  })
})

describe('log format on the CLI', () => {
  it('--help names LOG_LEVEL, LOG_FORMAT and --log-format, also for a command', async () => {
    for (const args of [['--help'], ['serve', '--help'], ['ingest', '--help']]) {
      const r = await runCli(args)
      assert.equal(r.code, 0, r.stderr)
      assert.match(r.stdout, /--log-format <format>/, args.join(' '))
      assert.match(r.stdout, /LOG_LEVEL=debug\|info\|warn\|error/, args.join(' '))
      assert.match(r.stdout, /LOG_FORMAT=pretty\|json/, args.join(' '))
    }
    const bad = await runCli(['--log-format', 'text', 'serve', '--help'])
    assert.notEqual(bad.code, 0)
    assert.match(bad.stderr, /pretty, json/)
    const badEnv = await runCli(['serve', '--data', '/nonexistent-block-archive-folder'], undefined, { LOG_FORMAT: 'text' })
    assert.equal(badEnv.code, 1)
    assert.match(badEnv.stderr, /LOG_FORMAT=text is not a log format; expected one of pretty, json/)
  })

  // The serving commands run in a worker thread, whose own stderr is never a terminal.
  it('serve on a terminal logs pretty lines, as the other commands do', { skip: !existsSync('/usr/bin/script') && 'needs script(1) for a terminal' }, async () => {
    const tmp = await tempDir('ba-logtty-')
    const command = [process.execPath, CLI, 'serve', '--data', tmp.dir, '--port', '0', '--workers', '1'].map((a) => `'${a}'`).join(' ')
    const child = spawn('/usr/bin/script', ['-qfc', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info', LOG_FORMAT: '', NO_COLOR: '1' } })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    try {
      await until('router listening', async () => (/router listening/.test(out) ? true : undefined), 60_000)
      const lines = out.split(/\r?\n/).filter((l) => /router listening/.test(l))
      assert.match(lines[0], /^\d\d:\d\d:\d\d INFO  router listening url=http:\/\/127\.0\.0\.1:\d+ storage=/, out)
      assert.doesNotMatch(out, /"level":/, out)
    } finally {
      const exited = new Promise((resolve) => child.once('exit', resolve))
      child.kill('SIGTERM')
      await exited
      await tmp.cleanup()
    }
  })

  it('JSON when stderr is not a terminal; LOG_FORMAT=pretty or --log-format pretty give pretty lines; the flag wins', async () => {
    const tmp = await tempDir('ba-logfmt-')
    /** `serve` over an empty folder until it has logged "router listening"; its stderr lines. */
    const serve = async (args: string[], env: Record<string, string>) => {
      const { child, stderr } = await startCli([...args, 'serve', '--data', tmp.dir, '--port', '0', '--workers', '1'], ['router'], { LOG_LEVEL: 'info', ...env })
      try {
        await until('router listening', async () => (stderr().includes('router listening') ? true : undefined))
      } finally {
        const exited = new Promise((resolve) => child.once('exit', resolve))
        child.kill('SIGTERM')
        await exited
      }
      return stderr().split('\n').filter(Boolean)
    }
    try {
      const isJson = (l: string) => l.startsWith('{') && typeof JSON.parse(l).level === 'number'
      const isPretty = (l: string) => /^\d\d:\d\d:\d\d (INFO |WARN |ERROR) /.test(l)
      const auto = await serve([], { LOG_FORMAT: '' })
      const env = await serve([], { LOG_FORMAT: 'pretty' })
      const flag = await serve(['--log-format', 'pretty'], { LOG_FORMAT: 'json' })
      const flagJson = await serve(['--log-format', 'json'], { LOG_FORMAT: 'pretty' })
      for (const lines of [auto, flagJson]) {
        assert.ok(lines.every(isJson), lines.join('\n'))
        assert.ok(lines.some((l) => JSON.parse(l).msg === 'router listening'), lines.join('\n'))
      }
      for (const lines of [env, flag]) {
        assert.ok(lines.every((l) => isPretty(l) || l.startsWith('    at ')), lines.join('\n'))
        assert.ok(lines.some((l) => / INFO  router listening url=http:\/\/127\.0\.0\.1:\d+ storage=/.test(l)), lines.join('\n'))
      }
    } finally {
      await tmp.cleanup()
    }
  })
})
