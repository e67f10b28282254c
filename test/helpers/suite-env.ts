/*
 * Loaded into every test file's process by `npm test` (`node --import`), and inherited by the
 * commands the tests start. Two settings of resources, not of behaviour, for a suite that runs three
 * test files at once on a 2-core machine:
 *
 * - One DuckDB thread per process. With DuckDB's default of a thread per core, each statement's
 *   calling thread polls for work while another thread runs its last task (docs/serving.md,
 *   `--db-threads`), which on a subset of the heaviest files cost about a fifth more CPU than one
 *   thread for the same tests.
 * - jemalloc's own decay times for DuckDB's memory (10 s) instead of the 250 ms the commands set
 *   for a serving worker's RSS (src/fast-path.ts): returning freed pages that soon made a fifth of
 *   the suite's CPU time kernel time (page faults on re-touched memory, TLB shootdowns), and the
 *   heaviest test file took a fifth more CPU.
 *
 * A test that checks the defaults removes the variables from its own process
 * (test/duckdb-resources.test.ts).
 *
 * And one setting of the machine left out: `NODE_EXTRA_CA_CERTS`. Node reads and parses that file
 * (often the whole system bundle, 220 KB) as every process starts, about 40 ms of CPU each on a
 * 2-core VM, and the suite starts some 350 Node processes (test files, the commands they run,
 * chopsticks). Every server the tests talk to is on 127.0.0.1 over plain HTTP, so no process of the
 * suite needs those certificates. The runner loads this module too, so the test files it starts
 * (and what they start) inherit the environment without it.
 *
 * And one setting of V8 for every Node process of the run: a function is optimised by TurboFan only
 * after 16 times the interrupt budget V8 gives it by default (`--interrupt-budget`). Most processes
 * of the suite live for seconds (a command, a test file), and much of the optimised code they
 * compiled was dropped at exit: `perf` over six heavy test files showed TurboFan's compiler at 9 of
 * 95 CPU s, and 1.6–1.8 s with the later tier-up (BENCHMARKS.md, "The test suite"). Hot loops
 * still get optimised, later. The flag is not one NODE_OPTIONS accepts, so
 * NODE_OPTIONS names a module that sets it (helpers/v8-tier-up.ts), which the commands the tests
 * start load too. It sets nothing else: a test that removes the settings above from its own
 * process starts commands without them.
 *
 * And one folder for the run: the datasets `writeDataset` writes are kept there and copied by the
 * test files that write the same ones (helpers/dataset.ts). The first process to load this module,
 * the runner, makes it and removes it when it exits.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import './v8-tier-up.js'

const tierUp = `--import=${new URL('./v8-tier-up.js', import.meta.url).href}`
if (!(process.env.NODE_OPTIONS ?? '').includes(tierUp)) process.env.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ''} ${tierUp}`.trim()

process.env.BLOCK_ARCHIVE_DB_THREADS ??= '1'
process.env.DUCKDB_JE_MALLOC_CONF ??= 'dirty_decay_ms:10000,muzzy_decay_ms:10000'
delete process.env.NODE_EXTRA_CA_CERTS
if (!process.env.BLOCK_ARCHIVE_TEST_DATASETS) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ba-test-datasets-'))
  process.env.BLOCK_ARCHIVE_TEST_DATASETS = dir
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }))
}
