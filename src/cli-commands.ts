/* The CLI's commands (src/cli.ts loads this where the command runs). */
import { Command, Option } from 'commander'
import { registerIngest } from './commands/ingest.js'
import { registerReplayRpc } from './commands/replay-rpc.js'
import { registerDemo } from './commands/demo.js'
import { registerServe } from './commands/serve.js'
import { registerCompact } from './commands/compact.js'
import { LOG_FORMATS, parseLogFormat, setLogFormat, type LogFormat } from './log.js'

const program = new Command()
program
  .name('block-archive')
  .description('Historical blockchain data archive: ingest chains into Parquet chunks and serve them over the SQD v2 archive protocol')
  .version('0.1.0')
  .addOption(
    // LOG_FORMAT is read by the logger itself (also outside the CLI); empty counts as unset.
    new Option('--log-format <format>', 'form of the log on stderr (default: pretty on a terminal, JSON lines otherwise) (env: LOG_FORMAT)').choices(
      LOG_FORMATS,
    ),
  )
  // Subcommands' --help lists --log-format too, and ends with the environment note below.
  .configureHelp({ showGlobalOptions: true })
  .addHelpText(
    'afterAll',
    `
Logging (stderr):
  LOG_LEVEL=debug|info|warn|error  how much is logged (default info)
  LOG_FORMAT=pretty|json           short lines for people or JSON lines for
                                   machines (default: pretty when stderr is a
                                   terminal); --log-format wins`,
  )
  .hook('preAction', (cmd) => {
    const format = cmd.opts().logFormat as LogFormat | undefined
    if (format) return setLogFormat(format)
    const env = process.env.LOG_FORMAT?.trim()
    if (env && !parseLogFormat(env)) cmd.error(`error: LOG_FORMAT=${env} is not a log format; expected one of ${LOG_FORMATS.join(', ')}`)
  })

registerIngest(program)
registerReplayRpc(program)
registerServe(program)
registerDemo(program)
registerCompact(program)

program.parseAsync(process.argv).catch(async (e) => {
  console.error(e instanceof Error ? e.message : e)
  // Exiting while DuckDB is still starting on its own thread aborts the process natively (src/db.ts).
  await (await import('./db.js')).dbSettled()
  process.exit(typeof e?.exitCode === 'number' ? e.exitCode : 1)
})
