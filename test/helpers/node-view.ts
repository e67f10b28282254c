import assert from 'node:assert/strict'
import { ApiPromise, WsProvider } from '@polkadot/api'

/*
 * Reading a node's own view with @polkadot/api, the independent decoder the Substrate tests check
 * our blocks against: the connection, names as the metadata spells them, call trees as squid
 * addresses them.
 */

/** @polkadot/api connected to `url` (ws://), failing rather than retrying when the node is not there. */
export function connectApi(url: string): Promise<ApiPromise> {
  return ApiPromise.create({ provider: new WsProvider(url, 1000, {}, 30_000), noInitWarn: true, throwOnConnect: true })
}

/** A call address as a map key ('' for the root, '1.0' for [1,0]). */
export const key = (a: number[]) => a.join('.')

/**
 * `Pallet.call_name` / `Pallet.EventName` as the metadata of `api()` spells them, and 0x account ids
 * (`api` is read at each call, so a test can connect in its `before`).
 */
export function nodeNames(api: () => ApiPromise) {
  const palletName = (index: number): string => {
    const p = api().registry.metadata.pallets.find((x) => x.index.toNumber() === index)
    assert.ok(p, `pallet ${index}`)
    return p.name.toString()
  }
  return {
    palletName,
    /** Name of an event record's event. */
    eventName: (r: any) => `${palletName(r.event.index[0])}.${r.event.method}`,
    callName: (call: any) => `${palletName(call.callIndex[0])}.${api().registry.findMetaCall(call.callIndex).meta.name.toString()}`,
    /** 0x account id of an Address / MultiAddress::Id / AccountId, through its ss58 form. */
    accountHex: (address: any): string => api().createType('AccountId', address.toString()).toHex(),
  }
}

/** The call tree the way squid addresses it: Vec<Call> args give [i], a Call arg gives [0]; by `key` of the address. */
export function callTree(call: any, address: number[] = [], out = new Map<string, any>()): Map<string, any> {
  out.set(key(address), call)
  for (const arg of call.args) {
    if (arg?.callIndex && arg.method) callTree(arg, [...address, 0], out)
    else if (Array.isArray(arg) && arg.length && arg[0]?.callIndex) arg.forEach((sub: any, i: number) => callTree(sub, [...address, i], out))
    else if (arg?.isSome && arg.unwrap().callIndex) callTree(arg.unwrap(), [...address, 0], out)
  }
  return out
}
