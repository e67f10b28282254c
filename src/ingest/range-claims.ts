import { randomBytes } from 'node:crypto'
import { readdir, readFile, rm, writeFile, rename } from 'node:fs/promises'
import { hostname } from 'node:os'
import path from 'node:path'
import { log } from '../log.js'
import { alive } from '../pid.js'
import { sleep } from '../retry.js'
import { deleteObjects, getText, joinKey, listObjects, putText, type S3Location } from '../storage/s3.js'
import { DatasetLocked } from './locked.js'

/*
 * Range claims: what lets several ingests write one dataset at once (a backfill in parallel,
 * docs/ingest.md "Backfill in parallel"). Each ingest claims the blocks it writes with a small JSON
 * file at the dataset root, `.ingest-lease-<from>-<to>.json` (`<to>` is `head` for an ingest that
 * follows the head or reads up to it: its range has no end). A claim overlapping a live claim is
 * refused, naming it. The claim is renewed while the ingest runs; it stays after an ingest that
 * stopped before its range was complete (marked `stoppedAt`), so the router keeps reporting the
 * blocks still missing as being filled (rather than serving around them), and is deleted once
 * the range is complete. The next ingest of an overlapping range takes a stopped or dead claim over.
 *
 * Live: written by a process of this machine that still runs, or by another machine and not
 * expired (renewed every TTL/3). Two ingests whose overlapping claims are written at the same time
 * both see each other after the settle wait; the earlier `acquiredAt` (then the smaller owner id)
 * keeps its claim and the other stops.
 */

export interface ClaimRange {
  from: number
  /** Last block; null: no end (an ingest up to the head). */
  to: number | null
}

export interface ClaimRecord extends ClaimRange {
  owner: string
  host: string
  pid: number
  acquiredAt: string
  expiresAt: string
  /** The ingest stopped before its range was complete (the blocks left are still to be filled). */
  stoppedAt?: string
}

export interface ClaimOptions {
  /** How long a claim is valid without renewal for readers on other machines (default 60 s); renewed every third of it. */
  ttlMs?: number
  /** Wait between writing the claim and reading the claims again (default 2 s in object storage, 50 ms in a folder). */
  settleMs?: number
}

/** Where claims are kept: the dataset folder, or its object-storage prefix. */
export interface ClaimStore {
  /** The dataset, for messages. */
  readonly where: string
  /** Default settle wait (object storage needs longer: its writes are not atomic here). */
  readonly settleMs: number
  /** The claim files: name → text (undefined when it vanished meanwhile). */
  list(): Promise<{ name: string; text: string | undefined }[]>
  write(name: string, text: string): Promise<void>
  remove(name: string): Promise<void>
}

const NAME_RE = /^\.ingest-lease-(\d+)-(\d+|head)\.json$/

export const claimName = (r: ClaimRange) => `.ingest-lease-${r.from}-${r.to ?? 'head'}.json`

export function parseClaimName(name: string): ClaimRange | undefined {
  const m = NAME_RE.exec(name)
  if (!m) return undefined
  return { from: Number(m[1]), to: m[2] === 'head' ? null : Number(m[2]) }
}

export function overlaps(a: ClaimRange, b: ClaimRange): boolean {
  return a.from <= (b.to ?? Infinity) && b.from <= (a.to ?? Infinity)
}

/** Whether the ingest that wrote the claim still runs (as far as this machine can tell). */
export function claimLive(r: ClaimRecord, now = Date.now()): boolean {
  if (r.stoppedAt) return false
  if (r.host === hostname()) return alive(r.pid)
  return Date.parse(r.expiresAt) > now
}

export const describeClaim = (r: ClaimRecord) =>
  `owner ${r.owner} (host ${r.host}, pid ${r.pid}) holds its lease (${claimName(r)}, blocks ${r.from}–${r.to ?? 'head'})`

export function parseClaim(name: string, text: string | undefined): ClaimRecord | undefined {
  const range = parseClaimName(name)
  if (!range || text == null) return undefined
  try {
    const r = JSON.parse(text)
    if (typeof r?.owner !== 'string' || typeof r?.expiresAt !== 'string') return undefined
    return { ...r, ...range }
  } catch {
    return undefined // cut short by a write in progress: read at the next listing
  }
}

/** Every readable claim of a store. */
export async function readClaims(store: ClaimStore): Promise<ClaimRecord[]> {
  const out: ClaimRecord[] = []
  for (const { name, text } of await store.list()) {
    const r = parseClaim(name, text)
    if (r) out.push(r)
  }
  return out.sort((a, b) => a.from - b.from)
}

export class FolderClaims implements ClaimStore {
  readonly settleMs = 50
  constructor(readonly where: string) {}

  async list(): Promise<{ name: string; text: string | undefined }[]> {
    const names = (await readdir(this.where).catch(() => [] as string[])).filter((n) => NAME_RE.test(n))
    return Promise.all(names.map(async (name) => ({ name, text: await readFile(path.join(this.where, name), 'utf8').catch(() => undefined) })))
  }

  async write(name: string, text: string): Promise<void> {
    // whole or not at all for readers: written aside, then renamed
    const tmp = path.join(this.where, `.${name}.${process.pid}-${randomBytes(3).toString('hex')}`)
    await writeFile(tmp, text)
    await rename(tmp, path.join(this.where, name))
  }

  async remove(name: string): Promise<void> {
    await rm(path.join(this.where, name), { force: true })
  }
}

export class S3Claims implements ClaimStore {
  readonly settleMs = 2000
  constructor(private readonly loc: S3Location, readonly where: string) {}

  private key(name: string): string {
    return joinKey(this.loc.prefix, name)
  }

  async list(): Promise<{ name: string; text: string | undefined }[]> {
    const base = this.loc.prefix ? this.loc.prefix + '/' : ''
    const names = (await listObjects(this.loc.bucket, base + '.ingest-lease-')).map((o) => o.key.slice(base.length)).filter((n) => NAME_RE.test(n))
    return Promise.all(names.map(async (name) => ({ name, text: await getText(this.loc.bucket, this.key(name)) })))
  }

  write(name: string, text: string): Promise<void> {
    return putText(this.loc.bucket, this.key(name), text)
  }

  remove(name: string): Promise<void> {
    return deleteObjects(this.loc.bucket, [this.key(name)])
  }
}

/** This ingest's claim on its range. */
export class RangeClaim {
  readonly owner: string
  private readonly ttlMs: number
  private readonly settleMs: number
  private acquiredAt = ''
  private timer?: NodeJS.Timeout
  private renewing?: Promise<void>
  private held = false

  constructor(
    private readonly store: ClaimStore,
    readonly range: ClaimRange,
    o: ClaimOptions & { owner?: string } = {},
  ) {
    this.owner = o.owner ?? randomBytes(8).toString('hex')
    this.ttlMs = o.ttlMs ?? 60_000
    this.settleMs = o.settleMs ?? store.settleMs
  }

  get name(): string {
    return claimName(this.range)
  }

  /** Take the range, or throw DatasetLocked naming the live claim it overlaps. */
  async acquire(): Promise<void> {
    const overlapping = (await readClaims(this.store)).filter((c) => c.owner !== this.owner && overlaps(c, this.range))
    const live = overlapping.find((c) => claimLive(c))
    if (live) throw this.refusal(live)
    for (const c of overlapping) {
      // stopped or dead: ours now where it lies inside our range (a claim reaching past it stays, for its
      // other blocks); a dead claim up to the head goes anyway (it stands for no unfinished range)
      if (c.to === null || (c.from >= this.range.from && c.to <= (this.range.to ?? Infinity))) {
        log.info({ claim: claimName(c), owner: c.owner, host: c.host, pid: c.pid, stoppedAt: c.stoppedAt }, 'taking over the range claim of an ingest that stopped')
        await this.store.remove(claimName(c))
      }
    }
    this.acquiredAt = new Date().toISOString()
    await this.write()
    this.held = true
    await sleep(this.settleMs)
    const rivals = (await readClaims(this.store)).filter((c) => c.owner !== this.owner && overlaps(c, this.range) && claimLive(c))
    const first = rivals.find((c) => c.acquiredAt < this.acquiredAt || (c.acquiredAt === this.acquiredAt && c.owner < this.owner))
    if (first) {
      await this.release(false, true)
      throw new DatasetLocked(`another ingest claimed overlapping blocks of ${this.store.where} at the same time: ${describeClaim(first)}; this one stops`)
    }
    this.timer = setInterval(() => this.renew(), Math.max(10, Math.floor(this.ttlMs / 3)))
    this.timer.unref()
  }

  /**
   * Stop renewing. `complete`: the range is written, the claim goes; else it stays, marked
   * stopped, so the blocks left are still reported as being filled. `discard`: it goes (lost a race).
   */
  async release(complete: boolean, discard = false): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
    await this.renewing
    if (!this.held) return
    this.held = false
    try {
      const mine = (await readClaims(this.store)).find((c) => claimName(c) === this.name)
      if (mine && mine.owner !== this.owner) return // taken over meanwhile
      if (complete || discard || this.range.to === null) await this.store.remove(this.name)
      else await this.write(new Date().toISOString())
    } catch (e: any) {
      log.warn({ err: e?.message, claim: this.name }, 'could not release the range claim; it expires by itself')
    }
  }

  /** Stop renewing and leave the claim as it is (live until it expires): a pass of the same ingest follows and takes it on. */
  async handOver(): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
    await this.renewing
    this.held = false
  }

  private refusal(c: ClaimRecord): DatasetLocked {
    return new DatasetLocked(
      `another ingest is writing ${this.store.where}: ${describeClaim(c)} until ${c.expiresAt}, which overlaps blocks ${this.range.from}–${this.range.to ?? 'head'}; ` +
        'give a range outside it (--from/--to), or wait for that ingest to end',
    )
  }

  private renew(): void {
    if (this.renewing || !this.held) return
    this.renewing = this.write()
      .catch((e) => log.warn({ err: e?.message, claim: this.name }, 'could not renew the range claim; retrying'))
      .finally(() => (this.renewing = undefined))
  }

  private async write(stoppedAt?: string): Promise<void> {
    const record: ClaimRecord = {
      owner: this.owner,
      host: hostname(),
      pid: process.pid,
      from: this.range.from,
      to: this.range.to,
      acquiredAt: this.acquiredAt,
      expiresAt: new Date(Date.now() + this.ttlMs).toISOString(),
      ...(stoppedAt ? { stoppedAt } : {}),
    }
    await this.store.write(this.name, JSON.stringify(record, null, 2) + '\n')
  }
}
