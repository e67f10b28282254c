import path from 'node:path'

/* The order `npm test` starts the test files in (test/helpers/run-suite.ts). */

/** The test files that took longest (wall) on a 2-core VM, longest first (`npm run bench -- suite` lists them). */
export const LONGEST_FIRST = [
  'query-plans', 'faults-compact-kill', 'freshness', 's3-cluster', 'substrate-runtime-upgrade', 'query-budgets',
  'substrate-node-reference', 'readme-session', 'ingest-sql-normalizer', 'ingest-resume', 'substrate-finality',
  'follow-head', 'faults-s3', 'query-export', 'compaction', 'access-control', 'substrate-rpc', 'gear-chopsticks',
  'substrate-processor', 'faults-ingest-kill',
]

/** `files` with the known long ones first (in LONGEST_FIRST's order), the others after them in name order. */
export function suiteOrder(files: string[]): string[] {
  const rank = (file: string) => {
    const i = LONGEST_FIRST.indexOf(path.basename(file).replace(/\.test\.js$/, ''))
    return i < 0 ? LONGEST_FIRST.length : i
  }
  return [...files].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0))
}
