import assert from 'node:assert/strict'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { listLocalChunks, readChunkMeta } from '../src/chunks/layout.js'
import { runIngest, type IngestResult } from '../src/ingest/loop.js'
import { callData, compile, startAnvil, words, type Anvil } from './helpers/anvil.js'
import { compareRows, expectTables, readTable, type NodeBlock } from './helpers/ingest-expect.js'
import { tempDir } from './helpers/dataset.js'

/*
 * End to end on a live anvil node: contracts compiled with solc-js, a transaction mix with logs,
 * nested calls (call, staticcall, delegatecall), creates (CREATE, CREATE2), reverts (top level and
 * caught sub-calls), selfdestructs, storage changes and legacy / access-list / EIP-1559
 * transactions; a few hundred blocks ingested while they are produced (--follow), then the chunk
 * files are read back with DuckDB and every column of every row is compared with the node's answers.
 */

const SOURCE = `// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

contract Token {
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    constructor() { balanceOf[msg.sender] = 1e27; emit Transfer(address(0), msg.sender, 1e27); }
    function transfer(address to, uint256 v) external returns (bool) { return move(msg.sender, to, v); }
    function approve(address s, uint256 v) external returns (bool) { allowance[msg.sender][s] = v; emit Approval(msg.sender, s, v); return true; }
    function transferFrom(address f, address to, uint256 v) external returns (bool) {
        require(allowance[f][msg.sender] >= v, "allowance");
        allowance[f][msg.sender] -= v;
        return move(f, to, v);
    }
    function move(address f, address to, uint256 v) internal returns (bool) {
        require(balanceOf[f] >= v, "balance");
        balanceOf[f] -= v; balanceOf[to] += v;
        emit Transfer(f, to, v);
        return true;
    }
}

contract Child {
    uint256 public x;
    event Set(uint256 v);
    constructor(uint256 v) payable { x = v; }
    function set(uint256 v) external { x = v; emit Set(v); }
    function boom() external pure { revert("boom"); }
    function kill(address payable to) external { selfdestruct(to); }
}

contract Hub {
    uint256 public counter;
    event Made(address indexed child, uint256 v);
    event Seen(uint256 x);
    function make(uint256 v) external payable returns (address c) { c = address(new Child{value: msg.value}(v)); emit Made(c, v); }
    function make2(uint256 v, bytes32 salt) external returns (address c) { c = address(new Child{salt: salt}(v)); emit Made(c, v); }
    function nested(address c, uint256 v) external {
        counter += 1;
        Child(c).set(v);
        emit Seen(Child(c).x());
        try Child(c).boom() {} catch {}
    }
    function delegate(address c, uint256 v) external {
        (bool ok, ) = c.delegatecall(abi.encodeWithSignature("set(uint256)", v));
        require(ok, "delegate");
    }
    function makeAndKill(uint256 v) external payable {
        Child c = new Child{value: msg.value}(v);
        c.kill(payable(msg.sender));
    }
    function pull(address token, address from, uint256 v) external { Token(token).transferFrom(from, address(this), v); }
    function fail() external { counter = 99; revert("nope"); }
}
`

let anvil: Anvil
let tmp: { dir: string; cleanup: () => Promise<void> }
before(async () => {
  tmp = await tempDir('ba-ingest-anvil-')
  anvil = await startAnvil(['--hardfork', 'cancun'])
})
after(async () => {
  await anvil?.stop()
  await tmp?.cleanup()
})

const hexq = (n: number | bigint) => '0x' + BigInt(n).toString(16)

async function receiptOf(hash: string): Promise<any> {
  for (;;) {
    const r = await anvil.rpc('eth_getTransactionReceipt', [hash])
    if (r) return r
    await new Promise((res) => setTimeout(res, 20))
  }
}

/** Produce the chain: returns the number of transactions sent. */
async function makeChain(rounds: number): Promise<number> {
  const c = compile(SOURCE)
  const [alice, bob, carol, dave] = await anvil.rpc('eth_accounts')
  const send = (tx: Record<string, unknown>) => anvil.rpc('eth_sendTransaction', [{ from: alice, ...tx }])
  const deploy = async (bytecode: string, from = alice) => (await receiptOf(await anvil.rpc('eth_sendTransaction', [{ from, data: bytecode }]))).contractAddress
  const token = await deploy(c.Token.bytecode)
  const hub = await deploy(c.Hub.bytecode)
  const child = (await receiptOf(await send({ to: hub, data: callData(c.Hub, 'make(uint256)', 7), value: hexq(1000) }))).logs[0].topics[1].replace(/^0x0{24}/, '0x')
  let sent = 3
  await receiptOf(await send({ to: token, data: callData(c.Token, 'approve(address,uint256)', hub, 10n ** 20n) }))
  sent++
  await anvil.rpc('evm_setAutomine', [false])
  for (let i = 0; i < rounds; i++) {
    const batch: Record<string, unknown>[] = [
      { to: token, data: callData(c.Token, 'transfer(address,uint256)', bob, 1000 + i) },
      { to: hub, data: callData(c.Hub, 'nested(address,uint256)', child, i), gas: hexq(300_000) },
      { from: bob, to: carol, value: hexq(12345 + i) }, // plain transfer
    ]
    if (i % 2 === 0) batch.push({ to: hub, data: callData(c.Hub, 'make2(uint256,bytes32)', i, '0x' + words(i + 1)), gas: hexq(500_000) })
    if (i % 3 === 0) batch.push({ to: hub, data: callData(c.Hub, 'makeAndKill(uint256)', i), value: hexq(777), gas: hexq(500_000) })
    if (i % 4 === 1) batch.push({ to: hub, data: callData(c.Hub, 'fail()'), gas: hexq(100_000) }) // reverts at the top level
    if (i % 4 === 2) batch.push({ from: dave, to: hub, data: callData(c.Hub, 'delegate(address,uint256)', child, i), gas: hexq(200_000), gasPrice: hexq(3_000_000_000) }) // legacy (own sender: anvil leaves a legacy tx queued behind another sender's 1559 nonce)
    if (i % 4 === 3) {
      batch.push({ from: dave, to: hub, data: callData(c.Hub, 'pull(address,address,uint256)', token, alice, 5), gas: hexq(200_000), gasPrice: hexq(3_000_000_000), accessList: [{ address: token, storageKeys: ['0x' + words(0)] }] })
    }
    if (i % 5 === 0) batch.push({ from: carol, data: c.Child.bytecode + words(i), value: hexq(1) }) // contract creation transaction
    for (const tx of batch) await send(tx)
    sent += batch.length
    await anvil.rpc('evm_mine', [])
    await anvil.rpc('anvil_mine', [hexq(4)]) // empty blocks between
    await new Promise((r) => setTimeout(r, 5))
  }
  await anvil.rpc('evm_setAutomine', [true])
  return sent
}

async function nodeAnswers(last: number, traces: 'trace_block' | 'callTracer', diffs: 'replay' | 'prestateTracer'): Promise<NodeBlock[]> {
  const out: NodeBlock[] = []
  for (let n = 0; n <= last; n++) {
    const q = hexq(n)
    const block = await anvil.rpc('eth_getBlockByNumber', [q, true])
    const nb: NodeBlock = { block, receipts: await anvil.rpc('eth_getBlockReceipts', [q]) }
    if (traces === 'trace_block') nb.traces = await anvil.rpc('trace_block', [q])
    else nb.callTraces = await anvil.rpc('debug_traceBlockByNumber', [q, { tracer: 'callTracer' }])
    if (diffs === 'replay') nb.replay = await anvil.rpc('trace_replayBlockTransactions', [q, ['stateDiff']])
    else nb.prestate = await anvil.rpc('debug_traceBlockByNumber', [q, { tracer: 'prestateTracer', tracerConfig: { diffMode: true } }])
    out.push(nb)
  }
  return out
}

async function compareAll(dir: string, expected: NodeBlock[]): Promise<number> {
  const want: Record<string, any[]> = {}
  for (const b of expected) for (const [t, rows] of Object.entries(expectTables(b))) (want[t] ??= []).push(...rows)
  let values = 0
  for (const t of ['blocks', 'transactions', 'logs', 'traces', 'statediffs']) values += compareRows(t, want[t] ?? [], await readTable(dir, t))
  return values
}

/**
 * Rounds of transactions: every kind of the mix (creates, self-destructs, delegate and static calls,
 * reverted sub-calls, legacy / access-list / 1559 transactions) comes back every 2 to 5 rounds, and
 * each round adds 5 blocks, so the chain spans two chunks of 64 while the ingest follows it.
 */
const ROUNDS = 24

describe('anvil end to end', () => {
  let followed: IngestResult
  const parityDir = () => path.join(tmp.dir, 'parity')

  it('ingests a live chain while it grows (--follow, trace_block, replay state diffs) and every field matches the node', async () => {
    const ac = new AbortController()
    const ingest = runIngest({
      rpc: anvil.url, dataset: 'anvil', out: parityDir(), follow: true, confirmations: 2, chunkBlocks: 64, pollMs: 50, flushAfterMs: 500,
      traces: 'trace_block', stateDiffs: 'replay', batchSize: 8, concurrency: 2, progress: 'none', signal: ac.signal,
    })
    let failed: unknown
    ingest.catch((e) => (failed = e ?? new Error('the ingest failed')))
    const sent = await makeChain(ROUNDS)
    const head = parseInt(await anvil.rpc('eth_blockNumber'), 16)
    assert.ok(head >= 5 * ROUNDS, `head ${head}`)
    // stop once the ingest has reached head − 2
    const chunksUpTo = async () => (await listLocalChunks(parityDir()).catch(() => [])).at(-1)?.last ?? -1
    while ((await chunksUpTo()) < head - 2) {
      if (failed) throw failed // a failed ingest would never get there
      await new Promise((r) => setTimeout(r, 100))
    }
    ac.abort()
    followed = await ingest
    assert.equal(followed.last, head - 2)
    const expected = await nodeAnswers(head - 2, 'trace_block', 'replay')
    const values = await compareAll(parityDir(), expected)
    assert.ok(values > 800 * ROUNDS, `${values} values compared`)
    assert.ok(followed.rows.transactions >= sent - 30, `${followed.rows.transactions} of ${sent} transactions`)

    // the mix really is there
    const traces = await readTable(parityDir(), 'traces')
    const kinds = new Set(traces.map((t) => (t.type === 'call' ? `call:${t.call_type}` : t.type)))
    for (const k of ['create', 'suicide', 'call:call', 'call:staticcall', 'call:delegatecall']) assert.ok(kinds.has(k), `${k} traces in ${[...kinds]}`)
    assert.ok(traces.some((t) => t.error != null && (t.trace_address as unknown[]).length > 0), 'a reverted sub-call')
    const txs = await readTable(parityDir(), 'transactions')
    assert.deepEqual([...new Set(txs.map((t) => t.type))].sort(), ['0', '1', '2'])
    assert.ok(txs.some((t) => t.status === '0') && txs.some((t) => t.contract_address != null))
    const diffs = await readTable(parityDir(), 'statediffs')
    assert.ok(diffs.some((d) => String(d.key).startsWith('0x')) && diffs.some((d) => d.kind === '+') && diffs.some((d) => d.key === 'code'))
    const logs = (await readTable(parityDir(), 'logs')).length
    assert.ok(logs > ROUNDS, `${logs} logs`) // a token transfer in every round, and more
    const chunks = await listLocalChunks(parityDir())
    assert.ok(chunks.length >= 2, `${chunks.length} chunks`)
    for (const c of chunks) {
      const m = await readChunkMeta(parityDir(), c)
      assert.deepEqual(m.tables, ['blocks', 'transactions', 'logs', 'traces', 'statediffs'])
    }
  })

  it('the same chain through callTracer and prestateTracer diffs (debug_traceBlockByNumber) matches the node too', async (t) => {
    const dir = path.join(tmp.dir, 'geth')
    const r = await runIngest({
      rpc: anvil.url, dataset: 'anvil-geth', out: dir, to: followed.last, finality: 'latest', traces: 'callTracer', stateDiffs: 'prestateTracer',
      chunkBlocks: 100, batchSize: 10, progress: 'none',
    })
    assert.equal(r.last, followed.last)
    const rows = Object.values(r.rows).reduce((a, b) => a + b, 0)
    t.diagnostic(`rate: ${r.blocks} anvil blocks, ${rows} rows in ${(r.elapsedMs / 1000).toFixed(2)} s = ${(r.blocks / (r.elapsedMs / 1000)).toFixed(0)} blocks/s, ${(rows / (r.elapsedMs / 1000)).toFixed(0)} rows/s (callTracer + prestateTracer)`)
    await compareAll(dir, await nodeAnswers(followed.last, 'callTracer', 'prestateTracer'))
    // both trace sources give the same call trees (anvil's parity and geth tracers agree on these fields)
    const pick = async (d: string) => (await readTable(d, 'traces'))
      .map((t) => JSON.stringify([t.block_number, t.transaction_index, t.trace_address, t.type, t.call_type, t.call_from, t.call_to, t.create_result_address, t.error != null])).sort()
    assert.deepEqual(await pick(dir), await pick(parityDir()))
  })

  it('the same chain over ws:// (anvil serves WebSocket on its port too) gives the same blocks, transactions and logs', async () => {
    const dir = path.join(tmp.dir, 'ws')
    const r = await runIngest({
      rpc: anvil.url.replace(/^http/, 'ws'), dataset: 'anvil-ws', out: dir, to: followed.last, finality: 'latest', chunkBlocks: 100, batchSize: 10, progress: 'none',
    })
    assert.equal(r.last, followed.last)
    assert.ok(r.rows.transactions > 4 * ROUNDS, `${r.rows.transactions} transactions`)
    for (const t of ['blocks', 'transactions', 'logs']) {
      const rows = async (d: string) => (await readTable(d, t)).map((x) => JSON.stringify(x, (_k, v) => (typeof v === 'bigint' ? String(v) : v))).sort()
      assert.deepEqual(await rows(dir), await rows(parityDir()), t)
    }
  })
})
