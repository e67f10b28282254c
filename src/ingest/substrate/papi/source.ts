import { readdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { substrateFamily } from '../../../families/substrate.js'
import { log } from '../../../log.js'
import { MalformedRpcData } from '../../evm/normalize.js'
import { BadRpcAnswer, BlockNotAvailable, blockOfRows, type BlockOfRows, type BlockSource, type RowsBatch } from '../../source.js'
import { newTransferStats, type TransferStats } from '../../rpc.js'
import { decodePapiBlock, isPapiBlock, papiBlockNumber, papiRows } from './decoded.js'

/*
 * Substrate blocks already decoded by polkadot-api, as JSON files in a folder (`--decoded-dir`):
 * every `<anything>.json` or `<anything>.json.gz` in it (not in sub-folders) that holds one such block
 * (`{hash, number, parent, extrinsics, events, …}`, see decoded.ts). The block number comes from the
 * content, not the file name; JSON files that are not such a block (e.g. the same block from an
 * Ethereum RPC lying next to it) are skipped.
 *
 *   head             the highest block number in the folder (scanned again on every call, so files
 *                    added meanwhile count: `--follow` works on a folder being filled)
 *   every table      the file holding block n, decoded with `decodePapiBlock` → `substrateRows`
 *
 * A number no file holds (after a fresh scan) is `BlockNotAvailable`; for a folder with gaps give the
 * numbers (`--blocks`). Two files with the same number but different hashes, unreadable JSON, or a
 * block that does not have the decoded shape are `BadRpcAnswer`. Scanning parses each new file once
 * (each fetch worker scans for itself); a fetch reads and parses the file again.
 */

export interface DecodedDirOptions {
  /** The folder of JSON files. */
  dir: string
}

const FILE = /\.json(\.gz)?$/i
const METHOD = 'polkadot-api decoded block file'

export class PapiDirSource implements BlockSource {
  readonly family = substrateFamily
  readonly dir: string
  /** file name → its block number, -1 for files that hold no block */
  private readonly scanned = new Map<string, number>()
  private readonly byNumber = new Map<number, { file: string; hash: string }>()

  constructor(opts: DecodedDirOptions, readonly stats: TransferStats = newTransferStats()) {
    this.dir = path.resolve(opts.dir)
  }

  tables(): string[] {
    return ['blocks', 'extrinsics', 'calls', 'events']
  }

  describe(): Record<string, string> {
    const m = 'JSON files of blocks decoded by polkadot-api (--decoded-dir)'
    return { blocks: m, extrinsics: m, calls: m, events: m }
  }

  async head(): Promise<number> {
    await this.scan()
    const numbers = this.numbersNow()
    if (!numbers.length) {
      log.warn({ dir: this.dir, files: this.scanned.size }, 'the folder holds no block decoded by polkadot-api (yet)')
      return -1
    }
    return numbers[numbers.length - 1]
  }

  /** The block numbers in the folder, ascending (after a scan). */
  async numbers(): Promise<number[]> {
    await this.scan()
    return this.numbersNow()
  }

  /** What the folder holds, for error messages. */
  private holds(): string {
    const all = this.numbersNow()
    if (!all.length) return 'it holds no block'
    const range = all.length === 1 ? `block ${all[0]}` : `blocks ${all[0]}–${all[all.length - 1]}`
    const gaps = all.length > 1 && all[all.length - 1] - all[0] + 1 !== all.length ? ' with gaps' : ''
    return `the folder holds ${range}${gaps} (${all.length} file${all.length === 1 ? "" : "s"}); give --from or --blocks`
  }

  private numbersNow(): number[] {
    return [...this.byNumber.keys()].sort((a, b) => a - b)
  }

  async fetchRows(numbers: number[]): Promise<RowsBatch> {
    const blocks: BlockOfRows[] = []
    let normalizeMs = 0
    for (const n of numbers) {
      let raw: any
      try {
        if (!this.byNumber.has(n)) await this.scan()
        const at = this.byNumber.get(n)
        if (!at) throw new BlockNotAvailable(n, `${this.dir} (no JSON file holds this block; ${this.holds()})`)
        raw = await this.read(at.file, n)
        if (!isPapiBlock(raw) || papiBlockNumber(raw) !== n) throw new BadRpcAnswer(n, METHOD, `${at.file} no longer holds block ${n}`)
      } catch (error) {
        return { blocks, error: { error }, normalizeMs }
      }
      const t0 = performance.now()
      try {
        const rows = papiRows(decodePapiBlock(raw))
        const header = rows.blocks[0]
        blocks.push(blockOfRows(substrateFamily, { number: n, hash: header.hash as string, parentHash: header.parent_hash as string }, rows))
        normalizeMs += performance.now() - t0
      } catch (e) {
        const error = e instanceof MalformedRpcData ? new BadRpcAnswer(n, METHOD, e.message) : e
        const identity = { number: n, hash: String(raw.hash ?? '').toLowerCase(), parentHash: String(raw.parent ?? '').toLowerCase() }
        return { blocks, error: { error, block: identity }, normalizeMs: normalizeMs + performance.now() - t0 }
      }
    }
    return { blocks, normalizeMs }
  }

  /** Parse the files not seen yet. */
  private async scan(): Promise<void> {
    const names = (await readdir(this.dir, { withFileTypes: true })).filter((d) => d.isFile() && FILE.test(d.name)).map((d) => d.name).sort()
    for (const name of names) {
      if (this.scanned.has(name)) continue
      const b = await this.read(name, -1)
      if (!isPapiBlock(b)) {
        this.scanned.set(name, -1)
        log.debug({ file: name }, 'not a block decoded by polkadot-api: skipped')
        continue
      }
      const n = papiBlockNumber(b)
      const hash = String(b.hash).toLowerCase()
      const other = this.byNumber.get(n)
      if (other && other.hash !== hash) throw new BadRpcAnswer(n, METHOD, `${other.file} and ${name} hold different blocks ${n} (${other.hash}, ${hash})`)
      this.scanned.set(name, n)
      if (!other) this.byNumber.set(n, { file: name, hash })
    }
  }

  private async read(name: string, block: number): Promise<any> {
    const buf = await readFile(path.join(this.dir, name))
    this.stats.requests++
    this.stats.calls++
    const t0 = performance.now()
    try {
      const text = (buf[0] === 0x1f && buf[1] === 0x8b ? gunzipSync(buf) : buf).toString('utf8')
      this.stats.bytes += text.length
      return JSON.parse(text)
    } catch (e) {
      throw new BadRpcAnswer(block, METHOD, `${name} is not (gzipped) JSON: ${(e as Error).message}`)
    } finally {
      this.stats.parseMs += performance.now() - t0
    }
  }
}

/** The source a Substrate ingest with `--decoded-dir` reads (source-module.ts); pass the loop's `rpc.stats` to count files read there. */
export function createPapiDirSource(options: DecodedDirOptions, stats?: TransferStats): PapiDirSource {
  return new PapiDirSource(options, stats)
}
