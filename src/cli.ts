#!/usr/bin/env node
// First: sets DuckDB's allocator options before its library is loaded.
import './allocator.js'
import { startServingThread } from './commands/serving-thread.js'

// A serving command runs in its own thread (src/commands/serving-thread.ts); this thread then loads
// nothing else, so the process does not hold the commands' modules twice.
if (!startServingThread(new URL(import.meta.url), process.argv)) await import('./cli-commands.js')
