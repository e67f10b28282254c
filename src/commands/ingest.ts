import type { Command } from 'commander'

// Placeholder: the ingest command is being built (issue 2).
export function registerIngest(program: Command): void {
  program.command('ingest').description('pull blocks from a chain source and write Parquet chunks').action(() => {
    throw new Error('not implemented yet')
  })
}
