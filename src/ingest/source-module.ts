import type { FamilyDecl } from '../families/declaration.js'
import type { RpcClientOptions, TransferStats } from './rpc.js'
import type { BlockSource } from './source.js'

/*
 * What the ingest needs to know of a family besides its declaration: the flags its `ingest` takes,
 * how those options become a source spec (plain data, so that fetch workers build their own source
 * from it), and how a spec becomes the source. Each family has one such module (EVM, Starknet and
 * Substrate: `src/ingest/<family>/source-module.ts`), listed in the registry (src/families/index.ts);
 * the ingest loop and the `ingest` command know families only through the registry.
 */

/**
 * One `ingest` flag of a family. The option's key in `IngestOptions` is the flag's long name in
 * camelCase (`--state-diffs` → `stateDiffs`), as commander names it.
 */
export interface FlagDecl {
  /** Commander flags, e.g. `--traces <how>` or `--state-updates`. */
  flags: string
  /** Its `--help` text. A flag several families take is declared by each: the help joins their texts with "; ". */
  description: string
  /** The environment variable it also reads. */
  env: string
  /** The values this family accepts; a flag several families take accepts all of theirs. */
  choices?: string[]
  /** Its default, which every family taking the flag must share (the default is "not given"). */
  default?: string | boolean
  /**
   * Given to another family's ingest, the flag is ignored (it only tunes how this family fetches),
   * instead of refused as asking for something that ingest cannot do.
   */
  ignoredElsewhere?: boolean
}

/** Settings every source may use, whatever its family (the loop's defaults applied). */
export interface SourceSettings {
  /** The node's endpoint (`--rpc`). */
  rpc?: string
  /** Blocks per fetch. */
  batchSize: number
  /** Fetches (and requests) in flight. */
  concurrency: number
  attempts?: number
  backoffMs?: number
  maxBackoffMs?: number
  timeoutMs?: number
}

/** Which family's source an ingest reads and how: plain data, so that fetch workers can build their own. */
export interface SourceSpec<S = unknown> {
  family: string
  /** The family's own source options. */
  options: S
  /** A source reading a node over JSON-RPC: the connection (each fetch worker gets its share of `concurrency`). */
  rpc?: RpcClientOptions
  /**
   * The source fetches raw answers into a spool on disk (EVM by default: `BlockSource.spoolWriter`):
   * the loop makes a folder for it, sets `spoolDir` and closes more chunks at once.
   */
  spool?: boolean
  spoolDir?: string
}

export interface SourceModule<O extends object = object, S = unknown, N extends string = string> {
  /** The family's declaration. */
  readonly family: FamilyDecl<N>
  /** The `ingest` flags of this family (their values arrive in `O` under their camelCase names). */
  readonly flags: FlagDecl[]
  /**
   * The options (this family's, and the settings of every source) → the spec; throws a one-line
   * message naming the flags when they do not make a source.
   */
  spec(o: O & SourceSettings): Omit<SourceSpec<S>, 'family'>
  /** The spec → the source, with what it moves counted in `stats`; loads only this family's modules. */
  create(spec: SourceSpec<S>, stats: TransferStats): Promise<BlockSource>
}

/** The options a source module reads. */
export type OptionsOf<M> = M extends SourceModule<infer O, any, any> ? O : never

/** The key a flag's value has in the options: its long name in camelCase. */
export function flagKey(flag: FlagDecl): string {
  const long = /--([a-z0-9-]+)/.exec(flag.flags)
  if (!long) throw new Error(`flag "${flag.flags}" has no long name`)
  return long[1].replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase())
}

/** The flag as a user writes it, without its argument: `--traces`. */
export function flagName(flag: FlagDecl): string {
  return /--[a-z0-9-]+/.exec(flag.flags)![0]
}

/** The JSON-RPC connection of a source that reads a node over HTTP (`--rpc` and the connection settings). */
export function jsonRpcConnection(s: SourceSettings): RpcClientOptions {
  if (!s.rpc) throw new Error('--rpc <url> is required')
  return { url: s.rpc, concurrency: s.concurrency, attempts: s.attempts, backoffMs: s.backoffMs, maxBackoffMs: s.maxBackoffMs, timeoutMs: s.timeoutMs }
}
