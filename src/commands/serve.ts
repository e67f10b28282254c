import type { Command } from 'commander'

// Placeholder: serve/router/worker/query/demo are being built (issue 3).
export function registerServe(program: Command): void {
  program.command('serve').description('run a router and workers over a chunk folder').action(() => {
    throw new Error('not implemented yet')
  })
}
