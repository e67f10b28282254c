#!/usr/bin/env node
// First: the speed tricks' switch, which sets DuckDB's allocator options before its library is loaded.
import { startServingThread } from './fast-path.js'

// A serving command runs in its own thread (src/commands/serving-thread.ts, unless on the plain path); this thread then loads
// nothing else, so the process does not hold the commands' modules twice.
if (!startServingThread(new URL(import.meta.url), process.argv)) await import('./cli-commands.js')
