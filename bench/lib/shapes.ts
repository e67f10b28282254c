/*
 * The query shapes the benchmarks time, each as a real protocol query (taken from
 * fixtures/queries/ethereum and re-based: block range → one chunk of the synthetic dataset, filter
 * values → values the tiled blocks contain, since the originals' contracts are not in them) and as
 * the hand-written SQL a perfect engine would run for it (the "engine limit").
 */

const USDC = '0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48'
const USDT = '0xdac17f958d2ee523a2206206994597c13d831ec7'
const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef'
const ERC20_TRANSFER = '0xa9059cbb'
const NO_SUCH_TOPIC = '0x' + 'ab'.repeat(32)

/** One SQL statement of a shape: rows of `table` → JSON objects with `cols` keys. */
export interface Stmt {
  table: string
  /** [JSON key, SQL expression over the table's columns] */
  cols: [string, string][]
  /** Condition; `{range}` is replaced by the block-range condition on the table's block column. */
  where: string
  /** Appended to `FROM {table}` (a SEMI JOIN to the matched items of another table). */
  join?: string
  /** Column(s) used for the (block, item) order and to group by block. */
  block: string
  order: string
}

export interface Shape {
  name: string
  /** Fixture it was derived from. */
  from: string
  description: string
  query: (fromBlock: number, toBlock: number) => Record<string, unknown>
  sql: Stmt[]
}

const HEADER_ID: [string, string][] = [['number', 'number'], ['hash', 'hash'], ['parentHash', 'parent_hash']]
const header = (extra: [string, string][], where: string): Stmt => ({
  table: 'blocks', cols: [...HEADER_ID, ...extra], where, block: 'number', order: 'number',
})
/** Headers of the blocks that have items, plus the first and last block of the range (docs/protocol.md §3.7). */
const headersOf = (table: string, cond: string): string =>
  `{range} AND (number IN (SELECT block_number FROM {${table}} WHERE {range:block_number} AND ${cond}) OR number = {from} OR number = {to})`

const logCond = `topic0 = '${TRANSFER}' AND address = '${USDC}'`
const txCond = `"to" = '${USDT}' AND sighash = '${ERC20_TRANSFER}'`
const traceCond = `call_to = '${USDT}'`
const diffCond = `address = '${USDC}'`

const TOPICS = 'list_filter([topic0, topic1, topic2, topic3], t -> t IS NOT NULL)'

export const SHAPES: Shape[] = [
  {
    name: 'logs+tx',
    from: 'transaction_logs_for_logs.json, logs_no_predicate_with_transaction.json',
    description: 'USDC Transfer logs (topic0 + address) with their transactions',
    query: (fromBlock, toBlock) => ({
      fromBlock, toBlock,
      logs: [{ address: [USDC], topic0: [TRANSFER], transaction: true }],
      fields: {
        block: { number: true, hash: true, timestamp: true },
        log: { address: true, topics: true, data: true, transactionHash: true, logIndex: true },
        transaction: { from: true, to: true, hash: true, input: true, value: true, gasUsed: true, status: true },
      },
    }),
    sql: [
      header([['timestamp', 'timestamp']], headersOf('logs', logCond)),
      {
        table: 'logs', block: 'block_number', order: 'block_number, log_index', where: `{range} AND ${logCond}`,
        cols: [['logIndex', 'log_index'], ['transactionIndex', 'transaction_index'], ['address', 'address'],
          ['topics', TOPICS], ['data', 'data'], ['transactionHash', 'transaction_hash']],
      },
      {
        table: 'transactions', block: 'block_number', order: 'block_number, transaction_index',
        where: '{range}',
        join: `SEMI JOIN (SELECT block_number, transaction_index FROM {logs} WHERE {range:block_number} AND ${logCond}) USING (block_number, transaction_index)`,
        cols: [['transactionIndex', 'transaction_index'], ['from', '"from"'], ['to', '"to"'], ['hash', 'hash'], ['input', 'input'],
          ['value', 'value'], ['gasUsed', 'gas_used'], ['status', 'status']],
      },
    ],
  },
  {
    name: 'headers',
    from: 'include_all_blocks.json',
    description: 'every block header of the range (includeAllBlocks, no items)',
    query: (fromBlock, toBlock) => ({
      fromBlock, toBlock, includeAllBlocks: true,
      fields: { block: { number: true, hash: true, difficulty: true, size: true, sha3Uncles: true, gasLimit: true, gasUsed: true, timestamp: true, nonce: true } },
    }),
    sql: [
      header([['difficulty', 'difficulty'], ['size', 'size'], ['sha3Uncles', 'sha3_uncles'], ['gasLimit', 'gas_limit'],
        ['gasUsed', 'gas_used'], ['timestamp', 'timestamp'], ['nonce', 'nonce']], '{range}'),
    ],
  },
  {
    name: 'tx by to+sighash',
    from: 'sighash_filtering.json',
    description: 'USDT transfer() calls (transactions by to + sighash)',
    query: (fromBlock, toBlock) => ({
      fromBlock, toBlock,
      transactions: [{ to: [USDT], sighash: [ERC20_TRANSFER] }],
      fields: { block: { timestamp: true }, transaction: { from: true, to: true, hash: true, input: true, sighash: true } },
    }),
    sql: [
      header([['timestamp', 'timestamp']], headersOf('transactions', txCond)),
      {
        table: 'transactions', block: 'block_number', order: 'block_number, transaction_index', where: `{range} AND ${txCond}`,
        cols: [['transactionIndex', 'transaction_index'], ['from', '"from"'], ['to', '"to"'], ['hash', 'hash'], ['input', 'input'], ['sighash', 'sighash']],
      },
    ],
  },
  {
    name: 'traces by callTo',
    from: 'transaction_traces_for_traces.json, trace_call_type.json',
    description: 'call traces into USDT',
    query: (fromBlock, toBlock) => ({
      fromBlock, toBlock,
      traces: [{ callTo: [USDT] }],
      fields: {
        block: { number: true, hash: true },
        trace: { transactionIndex: true, traceAddress: true, type: true, callFrom: true, callTo: true, callValue: true,
          callGas: true, callCallType: true, callSighash: true },
      },
    }),
    sql: [
      header([], headersOf('traces', traceCond)),
      {
        table: 'traces', block: 'block_number', order: 'block_number, transaction_index, trace_address', where: `{range} AND ${traceCond}`,
        cols: [['transactionIndex', 'transaction_index'], ['traceAddress', 'trace_address'], ['type', 'type'],
          ['action', `{'from': call_from, 'to': call_to, 'value': call_value, 'gas': call_gas, 'callType': call_type, 'sighash': call_sighash}`]],
      },
    ],
  },
  {
    name: 'statediffs by address',
    from: 'statediffs.json',
    description: 'state diffs of the USDC contract',
    query: (fromBlock, toBlock) => ({
      fromBlock, toBlock,
      stateDiffs: [{ address: [USDC] }],
      fields: {
        block: { number: true, hash: true, parentHash: true },
        stateDiff: { kind: true, prev: true, next: true, transactionIndex: true, address: true, key: true },
      },
    }),
    sql: [
      header([], headersOf('statediffs', diffCond)),
      {
        table: 'statediffs', block: 'block_number', order: 'block_number, transaction_index, address, key', where: `{range} AND ${diffCond}`,
        cols: [['transactionIndex', 'transaction_index'], ['address', 'address'], ['key', 'key'], ['kind', 'kind'], ['prev', 'prev'], ['next', 'next']],
      },
    ],
  },
  {
    name: 'logs, no match',
    from: 'topics_filtering.json',
    description: 'logs by a topic0 the chunk does not contain (the cost of looking at a chunk for nothing)',
    query: (fromBlock, toBlock) => ({
      fromBlock, toBlock,
      logs: [{ topic0: [NO_SUCH_TOPIC] }],
      fields: { log: { address: true, topics: true, data: true } },
    }),
    sql: [
      header([], headersOf('logs', `topic0 = '${NO_SUCH_TOPIC}'`)),
      {
        table: 'logs', block: 'block_number', order: 'block_number, log_index', where: `{range} AND topic0 = '${NO_SUCH_TOPIC}'`,
        cols: [['logIndex', 'log_index'], ['transactionIndex', 'transaction_index'], ['address', 'address'], ['topics', TOPICS], ['data', 'data']],
      },
    ],
  },
  {
    name: 'all tx+logs',
    from: 'load_all_tx_and_logs.json',
    description: 'every transaction and log with the fields a typical indexer selects (heavy output)',
    query: (fromBlock, toBlock) => ({
      fromBlock, toBlock, includeAllBlocks: true,
      logs: [{}], transactions: [{}],
      fields: {
        block: { number: true, hash: true, difficulty: true, size: true, sha3Uncles: true, gasLimit: true, gasUsed: true, timestamp: true, nonce: true },
        transaction: { from: true, to: true, hash: true, cumulativeGasUsed: true, gas: true, gasPrice: true, gasUsed: true,
          effectiveGasPrice: true, maxFeePerGas: true, maxPriorityFeePerGas: true, nonce: true, input: true, contractAddress: true,
          type: true, value: true, status: true, chainId: true },
        log: { address: true, topics: true, data: true, transactionHash: true },
      },
    }),
    sql: [
      header([['difficulty', 'difficulty'], ['size', 'size'], ['sha3Uncles', 'sha3_uncles'], ['gasLimit', 'gas_limit'],
        ['gasUsed', 'gas_used'], ['timestamp', 'timestamp'], ['nonce', 'nonce']], '{range}'),
      {
        table: 'transactions', block: 'block_number', order: 'block_number, transaction_index', where: '{range}',
        cols: [['transactionIndex', 'transaction_index'], ['from', '"from"'], ['to', '"to"'], ['hash', 'hash'],
          ['cumulativeGasUsed', 'cumulative_gas_used'], ['gas', 'gas'], ['gasPrice', 'gas_price'], ['gasUsed', 'gas_used'],
          ['effectiveGasPrice', 'effective_gas_price'], ['maxFeePerGas', 'max_fee_per_gas'], ['maxPriorityFeePerGas', 'max_priority_fee_per_gas'],
          ['nonce', 'nonce'], ['input', 'input'], ['contractAddress', 'contract_address'], ['type', 'type'], ['value', 'value'],
          ['status', 'status'], ['chainId', 'chain_id']],
      },
      {
        table: 'logs', block: 'block_number', order: 'block_number, log_index', where: '{range}',
        cols: [['logIndex', 'log_index'], ['transactionIndex', 'transaction_index'], ['address', 'address'], ['topics', TOPICS],
          ['data', 'data'], ['transactionHash', 'transaction_hash']],
      },
    ],
  },
]

export function shapeByName(name: string): Shape {
  const s = SHAPES.find((s) => s.name === name)
  if (!s) throw new Error(`unknown shape ${name}; known: ${SHAPES.map((s) => s.name).join(', ')}`)
  return s
}
