/** Defaults of the compaction flags (src/commands/compact.ts), apart from the compactor so that the CLI shows them without loading it. */
export const DEFAULT_COMPACT_FANOUT = 4
export const DEFAULT_COMPACT_GRACE_MS = 5 * 60_000
