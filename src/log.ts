import { pino } from 'pino'

/** Process-wide logger: JSON lines on stderr; `LOG_LEVEL` sets the level (default info). */
export const log = pino(
  { level: process.env.LOG_LEVEL ?? (process.env.NODE_TEST_CONTEXT ? 'warn' : 'info'), base: undefined },
  pino.destination(2),
)
