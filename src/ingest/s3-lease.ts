import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { log } from '../log.js'
import { retry } from '../retry.js'
import { deleteObjects, getText, putText } from '../storage/s3.js'
import { DatasetLocked, LeaseLost } from './locked.js'

/*
 * The object-storage stand-in for the local `.ingest.lock`: an object naming its holder, valid until
 * `expiresAt` and rewritten every TTL/3 while the ingest runs; an expired one is taken over.
 *
 * S3 has no lock, and s3rver (the tests' server) has no conditional PUT either, so taking the lease
 * is write-then-read: write ours, wait `settleMs`, read it back. Of two ingests that start together,
 * the one whose write landed last keeps the lease and the other stops. Two holders remain possible
 * only if one stalls between its read and its write for longer than `settleMs`; the next renewal or
 * pre-publish check of the overwritten holder then stops it. Real S3 (and MinIO) accept
 * `If-None-Match: *` and `If-Match: <etag>` on PUT, which would make taking and renewing atomic.
 *
 * `expiresAt` is the writer's clock read by another machine's clock: clocks must agree to well
 * within the TTL.
 *
 * s3rver rewrites an object in place: a read that meets a write sees the object cut short, and a
 * write whose request is aborted (a stalled machine, the request's time limit) leaves it cut short
 * until the next write. Real S3 replaces objects whole. So a lease that does not parse is read again
 * a few times; one that stays cut short is what remains of an aborted write, no one's valid lease:
 * it counts as no lease (taken, renewed over, or deleted on release), with a warning.
 */

export interface LeaseRecord {
  owner: string
  host: string
  pid: number
  acquiredAt: string
  expiresAt: string
}

export interface LeaseOptions {
  /** How long a lease is valid without renewal (default 60 s); it is renewed every third of it. */
  ttlMs?: number
  /** How long to wait between writing the lease and reading it back (default 2 s). */
  settleMs?: number
}

const describe = (r: LeaseRecord) => `owner ${r.owner} (host ${r.host}, pid ${r.pid})`

export class S3Lease {
  readonly owner = randomBytes(8).toString('hex')
  private readonly ttlMs: number
  private readonly settleMs: number
  private acquiredAt = ''
  /** Expiry of our lease as last written. */
  private expiresAt = 0
  private timer?: NodeJS.Timeout
  private renewing?: Promise<void>
  /** Why the lease is no longer ours. */
  private lost?: string

  constructor(
    private readonly bucket: string,
    private readonly key: string,
    /** The dataset URL, for messages. */
    private readonly where: string,
    o: LeaseOptions = {},
  ) {
    this.ttlMs = o.ttlMs ?? 60_000
    this.settleMs = o.settleMs ?? 2000
  }

  async acquire(): Promise<void> {
    const have = await this.read()
    if (have === TORN) log.warn({ key: this.key, bucket: this.bucket }, 'the ingest lease object is cut short (an aborted write); taking it over')
    else if (have && have.owner !== this.owner && Date.parse(have.expiresAt) > Date.now()) {
      throw new DatasetLocked(
        `another ingest is writing ${this.where}: ${describe(have)} holds its lease (${this.key}) until ${have.expiresAt}; ` +
          'the lease is renewed while that ingest runs and can be taken over once it has expired',
      )
    }
    if (have && have !== TORN) log.warn({ holder: have.owner, host: have.host, pid: have.pid, expiredAt: have.expiresAt }, 'taking over an expired ingest lease')
    this.acquiredAt = new Date().toISOString()
    await this.write()
    await new Promise((resolve) => setTimeout(resolve, this.settleMs))
    const back = await this.readBack()
    if (back?.owner !== this.owner) {
      throw new DatasetLocked(
        `another ingest took the lease on ${this.where} at the same time: ` +
          (back ? `${describe(back)} holds it until ${back.expiresAt}` : 'the lease object was deleted meanwhile'),
      )
    }
    this.timer = setInterval(() => this.renew(), Math.max(10, Math.floor(this.ttlMs / 3)))
    this.timer.unref()
  }

  /**
   * How long a check stays good for a publish: a check that found the lease ours and unexpired
   * rules out another holder until our lease expires (an unexpired lease is never taken over), but
   * an ingest that stalled after it (a long pause of the machine) checks again. A tenth of the TTL,
   * well inside the two thirds left after a renewal.
   */
  get recheckAfterMs(): number {
    return Math.floor(this.ttlMs / 10)
  }

  /** Throws LeaseLost unless the stored lease is still ours and unexpired. */
  async check(): Promise<void> {
    await this.renewing
    if (!this.lost) {
      const have = await this.readBack()
      if (have?.owner !== this.owner) this.lost = this.takenBy(have)
      else if (Date.parse(have.expiresAt) <= Date.now()) this.lost = `it expired at ${have.expiresAt} (renewals failed)`
    }
    if (this.lost) {
      this.stop()
      throw new LeaseLost(`lost the ingest lease on ${this.where}: ${this.lost}. Stopping before publishing another chunk; another ingest may be writing the dataset`)
    }
  }

  /** Stop renewing and delete the lease object if it is still ours. */
  async release(): Promise<void> {
    this.stop()
    await this.renewing
    try {
      const have = await this.read()
      if (have === TORN || have?.owner === this.owner) await deleteObjects(this.bucket, [this.key])
    } catch (e: any) {
      log.warn({ err: e?.message, key: this.key }, 'could not release the ingest lease; it expires by itself')
    }
  }

  private stop(): void {
    clearInterval(this.timer)
    this.timer = undefined
  }

  private renew(): void {
    if (this.renewing || this.lost) return
    this.renewing = (async () => {
      try {
        const have = await this.readBack()
        if (have?.owner !== this.owner) {
          this.lost = this.takenBy(have)
          this.stop()
          return
        }
        await this.write()
      } catch (e: any) {
        log.warn({ err: e?.message, key: this.key }, 'could not renew the ingest lease; retrying')
        if (Date.now() >= this.expiresAt) this.lost = `it expired at ${new Date(this.expiresAt).toISOString()} (renewals failed: ${e?.message})`
      } finally {
        this.renewing = undefined
      }
    })()
  }

  private takenBy(have: LeaseRecord | undefined): string {
    return have ? `${describe(have)} holds it now (until ${have.expiresAt})` : 'the lease object was deleted'
  }

  /** The stored lease, undefined without one, TORN when it stays cut short over a few reads. */
  private async read(): Promise<LeaseRecord | undefined | typeof TORN> {
    const cut = new Error('cut short')
    return retry(async () => {
      const text = await this.attempts((signal) => getText(this.bucket, this.key, signal))
      if (text == null) return undefined
      const record = parseLease(text)
      if (!record) throw cut
      return record
    }, { attempts: TORN_READS, retryable: (e) => e === cut, pauseMs: (n) => 100 * n }).catch((e) => {
      if (e === cut) return TORN
      throw e
    })
  }

  /**
   * The stored lease where ours should be: one cut short is what an aborted write of ours (or a
   * writer racing us) left, so ours is written again and read back.
   */
  private async readBack(): Promise<LeaseRecord | undefined> {
    for (let i = 1; ; i++) {
      const have = await this.read()
      if (have !== TORN) return have
      if (i >= 3) throw new Error(`the ingest lease ${this.key} in bucket ${this.bucket} stays cut short after writing it again; is the object store healthy?`)
      log.warn({ key: this.key, bucket: this.bucket }, 'the ingest lease object is cut short (an aborted write); writing it again')
      await this.write()
    }
  }

  private async write(): Promise<void> {
    const expiresAt = Date.now() + this.ttlMs
    const record: LeaseRecord = { owner: this.owner, host: hostname(), pid: process.pid, acquiredAt: this.acquiredAt, expiresAt: new Date(expiresAt).toISOString() }
    await this.attempts((signal) => putText(this.bucket, this.key, JSON.stringify(record, null, 2) + '\n', signal))
    this.expiresAt = expiresAt
  }

  /**
   * Lease requests get a time limit well inside the TTL and are tried 3 times: a request that hangs
   * must not outlive the lease. (s3rver even rewrites an object in place, so a read that meets a
   * write can stall until the connection closes.)
   */
  private async attempts<T>(f: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const limitMs = Math.min(10_000, Math.max(1000, Math.floor(this.ttlMs / 6)))
    return retry(() => f(AbortSignal.timeout(limitMs)), { attempts: 3, retryable: () => true, pauseMs: (n) => 100 * n })
  }
}

/** What a lease object that does not parse is taken for after TORN_READS reads. */
const TORN = Symbol('torn lease')
const TORN_READS = 4


function parseLease(text: string): LeaseRecord | undefined {
  try {
    const r = JSON.parse(text)
    return typeof r?.owner === 'string' && typeof r?.expiresAt === 'string' ? r : undefined
  } catch {
    return undefined
  }
}
