/*
 * Loaded into every test file's process by `npm test` (`node --import`), and inherited by the
 * commands the tests start. Two test files run at once on a 2-core machine; with DuckDB's default
 * of a thread per core, each statement's calling thread polls for work while another thread runs
 * its last task (docs/serving.md, `--db-threads`), which on a subset of the heaviest files cost
 * about a fifth more CPU than one thread for the same tests. A test that checks the defaults
 * removes the variable from its own process (test/duckdb-resources.test.ts).
 */
process.env.BLOCK_ARCHIVE_DB_THREADS ??= '1'
