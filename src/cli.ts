#!/usr/bin/env node
// First: sets DuckDB's allocator options before its library is loaded.
import './allocator.js'
import { Command } from 'commander'
import { registerIngest } from './commands/ingest.js'
import { registerDemo } from './commands/demo.js'
import { registerServe } from './commands/serve.js'

const program = new Command()
program
  .name('block-archive')
  .description('Historical blockchain data archive: ingest chains into Parquet chunks and serve them over the SQD v2 archive protocol')
  .version('0.1.0')

registerIngest(program)
registerServe(program)
registerDemo(program)

program.parseAsync(process.argv).catch((e) => {
  console.error(e instanceof Error ? e.message : e)
  process.exit(typeof e?.exitCode === 'number' ? e.exitCode : 1)
})
