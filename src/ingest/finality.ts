import { log } from '../log.js'
import type { BlockSource, FinalityLevel } from './source.js'

/*
 * How far up the chain the ingest publishes: the node's finalized or safe head, its latest block, or
 * the latest block minus a number of confirmations. With no choice given the node is asked at
 * start: its finalized head when it tells one, else its latest block (and the log says so).
 */

/** `finalized`, `safe`, `latest`, or a number of confirmations (blocks behind the latest). */
export type Finality = FinalityLevel | 'latest' | number

export const FINALITY_CHOICES = ['finalized', 'safe', 'latest'] as const

export function describeFinality(f: Finality): string {
  if (typeof f === 'number') return f === 0 ? 'the latest block' : `the latest block − ${f} confirmations`
  return f === 'latest' ? 'the latest block' : `the ${f} head`
}

/** Blocks above the finality can be replaced by a reorg; at or below a node's finalized head they should not be. */
export function reorgsExpected(f: Finality): boolean {
  return typeof f === 'number' || f === 'latest'
}

/** An explicit finality the node cannot tell. */
export class FinalityNotAvailable extends Error {}

/**
 * The highest block the ingest may publish, read from the node on each call. A finalized (or safe)
 * head that goes backwards is reported, never followed: the highest one seen stays.
 */
export class FinalityHead {
  private highest = -1
  /** Times the node's finalized/safe head went backwards. */
  regressions = 0

  constructor(private readonly source: BlockSource, readonly finality: Finality) {}

  /** The node's latest block at the last read (for the lag the head file reports). */
  latest = -1

  async read(): Promise<number> {
    const f = this.finality
    if (typeof f === 'number' || f === 'latest') {
      this.latest = await this.source.head()
      return this.latest - (typeof f === 'number' ? f : 0)
    }
    const [h, latest] = await Promise.all([this.source.finalizedHead?.(f), this.source.head()])
    this.latest = latest
    if (h == null) {
      if (this.highest < 0) throw new FinalityNotAvailable(`the node does not tell its ${f} head`)
      log.warn({ finality: f, highestSeen: this.highest }, `the node did not tell its ${f} head this time; keeping the highest one seen`)
      return this.highest
    }
    if (h < this.highest) {
      this.regressions++
      log.warn({ finality: f, announced: h, highestSeen: this.highest }, `the node's ${f} head went backwards; keeping the highest one seen`)
      return this.highest
    }
    this.highest = h
    return h
  }

  /** The highest finalized/safe head seen so far (-1: none, or a latest/confirmations finality). */
  get known(): number {
    return this.highest
  }
}

/**
 * The finality of an ingest: the one asked for (checked against the node), or the node's finalized
 * head when it tells one, else its latest block. Logs the choice with the node's heads.
 */
export async function chooseFinality(source: BlockSource, wanted: Finality | undefined): Promise<Finality> {
  const latest = await source.head()
  if (typeof wanted === 'number' || wanted === 'latest') {
    log.info({ finality: wanted, latest }, `publishing blocks up to ${describeFinality(wanted)}; a reorg above it is re-read`)
    return wanted
  }
  const level = wanted ?? 'finalized'
  const head = await source.finalizedHead?.(level)
  if (head != null) {
    log.info({ finality: level, [level]: head, latest }, `publishing blocks up to the node's ${level} head${wanted ? '' : ' (the default where the node tells it)'}`)
    return level
  }
  if (wanted) {
    throw new FinalityNotAvailable(
      `--finality ${wanted}: the node does not tell its ${wanted} head (${FINALITY_SOURCES}); pass --finality latest or a number of confirmations`,
    )
  }
  log.info({ finality: 'latest', latest }, 'the node does not tell a finalized head: publishing blocks up to its latest block; a reorg is re-read (--max-reorg-depth)')
  return 'latest'
}

const FINALITY_SOURCES = 'EVM: eth_getBlockByNumber("finalized"/"safe"); Substrate: chain_getFinalizedHead, finalized only; Starknet: ACCEPTED_ON_L1 blocks, finalized only; a Sidecar: its head; a folder of decoded blocks: none'
