import { setFlagsFromString } from 'node:v8'

/*
 * Loaded into every Node process of `npm test` (NODE_OPTIONS, set by helpers/suite-env.ts): V8
 * optimises a function with TurboFan after 16 times its default interrupt budget (67,584 in
 * Node 20), so the many short processes of the suite spend less CPU compiling code they drop at
 * exit. Nothing else: the module must not change what a command does.
 */
setFlagsFromString(`--interrupt-budget=${16 * 67_584}`)
