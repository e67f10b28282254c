import assert from 'node:assert/strict'
import { postJson } from './http.js'

/* Compaction tests: small chunks of the recorded anvil chain and real queries over every table. */

export const QUERIES = [
  { fromBlock: 0, includeAllBlocks: true, fields: { block: { number: true, hash: true, parentHash: true, timestamp: true, gasUsed: true, miner: true } } },
  { fromBlock: 0, transactions: [{}], fields: { transaction: { hash: true, from: true, to: true, input: true, value: true, gasUsed: true, status: true } } },
  { fromBlock: 3, logs: [{}], fields: { log: { address: true, topics: true, data: true, transactionHash: true } } },
  { fromBlock: 0, traces: [{}], fields: { trace: { type: true, callFrom: true, callTo: true, callInput: true, createResultAddress: true } } },
  { fromBlock: 0, stateDiffs: [{}], fields: { stateDiff: { address: true, key: true, kind: true, prev: true, next: true } } },
  { fromBlock: 5, transactions: [{ sighash: ['0xa9059cbb'] }], logs: [{ topic0: ['0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'] }], fields: { transaction: { hash: true, input: true }, log: { data: true, topics: true } } },
]

/** The answers to QUERIES (or those at indexes `which`) up to `last` (each must be 200). */
export async function answers(url: string, last: number, which?: number[]): Promise<string[]> {
  const out: string[] = []
  for (const q of which ? which.map((i) => QUERIES[i]) : QUERIES) {
    const res = await postJson(url, { ...q, toBlock: last })
    assert.equal(res.status, 200, res.text)
    out.push(res.text)
  }
  return out
}
