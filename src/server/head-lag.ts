import { Gauge } from 'prom-client'
import type { DatasetHead } from '../chunks/head-file.js'
import { registry } from '../metrics.js'

/*
 * How far a dataset served by the router is behind its node, from the head file its ingest writes
 * (src/chunks/head-file.ts): in blocks, the node's head minus the router's height; in seconds, how
 * long ago the node first reported (as confirmed) a block the router does not serve yet. The times
 * come from the ingest's clock, so they assume the two machines' clocks agree.
 */

export interface DatasetLag {
  /** The node's head as the ingest last read it. */
  nodeHead: number
  /** The node's head minus the height (≥ 0; includes the ingest's --confirmations). */
  blocks: number
  /** Seconds since the first confirmed block above the height was reported by the node (0 when it is served). */
  seconds: number
  /** When the ingest last wrote its head file (ms since the epoch). */
  headWrittenAt: number
}

/** Sightings kept per dataset (the oldest unserved ones are the ones that matter). */
const MAX_SIGHTINGS = 1000

export class HeadLag {
  private head?: DatasetHead
  /** `block` was reported by the node by time `at`; ascending by block. */
  private sightings: { block: number; at: number }[] = []

  note(head: DatasetHead): void {
    this.head = head
    if (head.node) this.sight(head.node.confirmed, head.node.at)
    if (head.behind) this.sight(head.behind.block, head.behind.since)
  }

  lag(height: number, now = Date.now()): DatasetLag | undefined {
    const node = this.head?.node
    if (!node) return undefined
    while (this.sightings.length && this.sightings[0].block <= height) this.sightings.shift()
    let since = Infinity
    for (const s of this.sightings) since = Math.min(since, s.at)
    return {
      nodeHead: node.head,
      blocks: Math.max(0, node.head - height),
      seconds: since === Infinity ? 0 : Math.max(0, now - since) / 1000,
      headWrittenAt: this.head!.writtenAt,
    }
  }

  private sight(block: number, at: number): void {
    const same = this.sightings.find((s) => s.block === block)
    if (same) {
      same.at = Math.min(same.at, at)
      return
    }
    this.sightings.push({ block, at })
    this.sightings.sort((a, b) => a.block - b.block)
    if (this.sightings.length > MAX_SIGHTINGS) this.sightings.length = MAX_SIGHTINGS
  }
}

export const routerLagBlocks = new Gauge({
  name: 'block_archive_router_head_lag_blocks',
  help: "The node's head minus the height the router announces, per dataset (from the ingest's head.json; absent without one)",
  labelNames: ['dataset'] as const,
  registers: [registry],
})

export const routerLagSeconds = new Gauge({
  name: 'block_archive_router_head_lag_seconds',
  help: 'How long ago the node reported the oldest confirmed block the router does not serve yet, per dataset (0 when caught up)',
  labelNames: ['dataset'] as const,
  registers: [registry],
})
