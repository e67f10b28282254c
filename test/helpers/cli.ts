import { spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

/* The built CLI as child processes, for tests. */

export const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src/cli.js')
export const children = new Set<ChildProcess>()

/** Start a long-running command; resolves with the `<prefix>: <url>` lines it prints. */
export function startCli(args: string[], prefixes: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Promise<{ child: ChildProcess; lines: Map<string, string[]>; stderr: () => string }> {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn', ...env } })
  children.add(child)
  child.once('exit', () => children.delete(child))
  let stderr = ''
  child.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-10_000)))
  const lines = new Map<string, string[]>()
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${args[0]} did not print ${prefixes} in time: ${stderr}`)), timeoutMs)
    child.once('exit', (code) => reject(new Error(`${args[0]} exited with ${code}: ${stderr}`)))
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^([\w ]+?): (\S+)/.exec(line)
      if (!m) return
      lines.set(m[1], [...(lines.get(m[1]) ?? []), m[2]])
      if (prefixes.every((p) => lines.has(p))) {
        clearTimeout(timer)
        resolve({ child, lines, stderr: () => stderr })
      }
    })
  })
}

/** Run a command to its end. */
export function runCli(args: string[], stdin?: string, env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } })
    children.add(child)
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    child.stdin.end(stdin)
    child.once('exit', (code) => {
      children.delete(child)
      resolve({ code, stdout, stderr })
    })
  })
}

/** Poll `probe` every `intervalMs` until it gives a value. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000, intervalMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await probe().catch(() => undefined)
    if (v !== undefined) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, intervalMs))
  }
}

/** Kill every child still running (in `after`). */
export function killChildren(): void {
  for (const c of children) c.kill('SIGKILL')
}

/** The sum of a Prometheus metric's samples (all label sets) at `baseUrl/metrics`. */
export async function metricSum(baseUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text()
  return text.split('\n').filter((l) => l.startsWith(name + '{') || l.startsWith(name + ' ')).reduce((n, l) => n + Number(l.split(' ').at(-1)), 0)
}

/** Router flags of a test whose test is not about dead workers (see stallTolerant in dataset.ts): pings every 200 ms, dead after 30 s. */
export const STALL_TOLERANT_ROUTER = ['--heartbeat-ms', '200', '--missed-heartbeats', '150']

/**
 * The jemalloc fields of a worker's `/status` → `node` when it inherits this process's environment:
 * the setting as given (the suite's, or what importing src/fast-path.ts chose here) and the page fault
 * cost it was chosen by, if measured; the worker measures nothing itself.
 */
export function jemallocInherited(): { jemalloc: string | null; page_fault_us: number | null } {
  const fault = process.env.BLOCK_ARCHIVE_PAGE_FAULT_US
  return { jemalloc: process.env.DUCKDB_JE_MALLOC_CONF ?? null, page_fault_us: fault ? Number(fault) : null }
}
