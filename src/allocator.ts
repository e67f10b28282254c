/*
 * DuckDB's bundled jemalloc keeps freed pages for a while before returning them to the system, so a
 * busy worker's RSS sits far above what DuckDB uses. Returning them after 250 ms cut the worker's
 * peak RSS under 16 heavy clients from 515–583 MB to 454–513 MB, for about 10 % fewer answers/s
 * (immediately: 340–370 MB but a third fewer answers; docs/benchmark-history.md, step 19). jemalloc
 * reads this when DuckDB's library first allocates, so the CLI imports this module before anything
 * that loads DuckDB. A value set by the user wins.
 */
process.env.DUCKDB_JE_MALLOC_CONF ??= 'dirty_decay_ms:250,muzzy_decay_ms:0'
