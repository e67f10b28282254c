import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { SubstrateProcessorRunConfig } from './substrate-processor-run.js'

/* The real `@subsquid/substrate-processor` run in a child process (substrate-processor-run.ts), and what it received. */

const RUNNER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'substrate-processor-run.js')

export interface Run {
  code: number | null
  blocks: any[]
  batches: number
  /** Query bodies the processor POSTed to the workers (from its debug log). */
  queries: string[]
  /** Its error/warning log lines. */
  problems: string[]
  stderr: string
}

/** Run the processor over [from, to] in a child process. */
export async function runSubstrateProcessor(dir: string, name: string, config: Omit<SubstrateProcessorRunConfig, 'out'>): Promise<Run> {
  const out = path.join(dir, `${name}.ndjson`)
  const configPath = path.join(dir, `${name}.json`)
  await writeFile(configPath, JSON.stringify({ ...config, out }))
  const child = spawn(process.execPath, [RUNNER], {
    // the archive client's debug log holds every request body (http-client `http request`)
    env: { ...process.env, SUBSTRATE_PROCESSOR_RUN_CONFIG: configPath, SQD_DEBUG: 'sqd:processor:archive', PROMETHEUS_PORT: '0' },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr!.on('data', (d) => (stderr += d))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  const timeout = setTimeout(() => child.kill('SIGKILL'), 60_000)
  try {
    const code = await exited
    const lines = existsSync(out) ? readFileSync(out, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []
    const log = stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => { try { return JSON.parse(l) } catch { return {} } })
    const queries = log.filter((l: any) => l.msg === 'http request' && l.httpRequestMethod === 'POST').map((l: any) => (typeof l.httpRequestBody === 'string' ? l.httpRequestBody : JSON.stringify(l.httpRequestBody)))
    const problems = log.filter((l: any) => l.level >= 4 /* WARN, ERROR, FATAL */).map((l: any) => JSON.stringify(l))
    return { code, blocks: lines.flatMap((l) => l.blocks), batches: lines.length, queries, problems, stderr: stderr.slice(-20_000) }
  } finally {
    clearTimeout(timeout)
    child.kill('SIGKILL')
  }
}

/** Fail with the processor's own account of what went wrong, and the queries it sent. */
export function assertRan(run: Run, name: string): void {
  if (run.code === 0 && run.problems.length === 0) return
  console.log(`processor run "${name}" exited with ${run.code}\nqueries sent:\n${run.queries.join('\n')}\nerrors:\n${run.problems.join('\n')}\nstderr tail:\n${run.stderr.slice(-5000)}`)
  assert.fail(`processor run "${name}" exited with ${run.code}: ${run.problems.join('\n') || run.stderr.slice(-2000)}`)
}

