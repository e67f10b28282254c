import { cpus, totalmem } from 'node:os'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { pageFaultMicros } from '../../src/page-faults.js'

/** A result table, printed as Markdown so it can go into BENCHMARKS.md as is. */
export function printTable(title: string, header: string[], rows: (string | number)[][]): void {
  const cells = [header, ...rows.map((r) => r.map(String))]
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)))
  const line = (r: string[]) => '| ' + r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' | ') + ' |'
  console.log(`\n### ${title}\n`)
  console.log(line(header))
  console.log('|' + widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : '-'.repeat(w + 1) + ':')).join('|') + '|')
  for (const r of cells.slice(1)) console.log(line(r))
  console.log()
}

export function machine(): string {
  const require = createRequire(import.meta.url)
  let duckdb = '?'
  try {
    duckdb = JSON.parse(readFileSync(require.resolve('@duckdb/node-api/package.json'), 'utf8')).version
  } catch {
    /* version unknown */
  }
  const cpu = cpus()
  return `${cpu.length} × ${cpu[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, node ${process.version}, ` +
    `@duckdb/node-api ${duckdb}, ${new Date().toISOString().slice(0, 10)}, a page fault ≈ ${pageFaultMicros(64 * 2 ** 20, 3).toFixed(1)} µs`
}

export function note(text: string): void {
  console.log(text)
}
