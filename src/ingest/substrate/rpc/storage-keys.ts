import { getNameHash } from '@subsquid/substrate-runtime/lib/runtime/storage.js'

/*
 * Storage keys the Substrate source reads, in a module of their own: the replay node answers by them
 * without loading the source and its decoders.
 */

/** `System.Events` (the twox128 hashes of both names): a block's events. */
export const SYSTEM_EVENTS_KEY = getNameHash('System') + getNameHash('Events').slice(2)
