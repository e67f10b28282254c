import fc from 'fast-check'
import { rng, type Rng } from './walk.js'

/*
 * fast-check arbitraries of worker requests for the fuzz test and `bench fuzz` (helpers/fuzz.ts
 * sends them and checks the answers). Everything is drawn from a `FamilyModel`: the request lists,
 * filters, relation flags and fields of the family (the reference evaluator's names) and the values
 * the dataset holds, so valid queries select something and mutations land on real keys.
 *
 * A case is data (printable, replayable from the seed): big values are `token`s rendered only when
 * the case is sent (a 10,000-value list, a 9 MiB string, 200,000 levels of nesting).
 */

export type Family = 'evm' | 'starknet' | 'substrate'
/** How a list filter's values are written: hex (`0x…`), a felt (hex, leading zeros ignored), a string compared lower-cased or as is, an integer. */
export type Values = 'hex' | 'felt' | 'lower' | 'exact' | 'int'

export interface FilterModel {
  key: string
  kind: 'in' | 'min' | 'max' | 'nonZero'
  values?: Values
  /** Values the data has (most frequent first; nonces for min/max). */
  seen: unknown[]
}

export interface ListModel {
  name: string
  filters: FilterModel[]
  relations: string[]
}

export interface FamilyModel {
  family: Family
  /** The dataset name. */
  name?: string
  /** The `type` a query carries (EVM: none) and the spellings the dataset accepts. */
  type?: string
  typeAliases: (string | undefined)[]
  lists: ListModel[]
  /** Field selectors (`block` first) and their fields. */
  selectors: [string, readonly string[]][]
  /** Block numbers the dataset has, ascending. */
  blocks: number[]
  height: number
  /** Block → its parent's hash, where the worker can check `parentBlockHash`. */
  parents: Map<number, string>
  hashValues: 'hex' | 'felt'
}

export type Obj = Record<string, any>

// ------------------------------------------------------------------------------------ cases

/** A value rendered when the case is sent. */
export type Token =
  /** JSON text as is (`1e3`, `-0`, `[5]`). */
  | { raw: string }
  /** `[[[…]]]` or `{"a":{"a":…1}}`, `depth` levels. */
  | { deep: number; shape: 'array' | 'object' }
  /** A JSON string of `prefix` + `size` × `char`. */
  | { giant: number; char: string; prefix?: string }
  /** A list of `size` random values of a kind (seeded), `include` at seeded places, optionally a bad raw value at `bad.at`. */
  | { list: number; values: Values; include: unknown[]; seed: number; bad?: { at: number; raw: string } }
  /** A list of `size` empty request objects. */
  | { requests: number }
  /** An object with one key of `size` characters. */
  | { giantKey: number }

const TOKEN = '@@fuzz-token'
export const token = (t: Token): Obj => ({ [TOKEN]: t })

/** A request body: JSON (with tokens), text, or bytes. */
export type Body = { json: unknown; indent?: number } | { text: string } | { bytes: number[] }

export type Expect =
  /** The family's reference decides: the answer it computes, or the 400 it says (invalid, no blocks, table missing). */
  | { kind: 'answer' }
  /** The same status and body as the canonical query `as` (whose answer the reference checks). */
  | { kind: 'same'; as: Obj }
  /** This status and code; `path`: the error's path starts with it; `mentions`: the message contains these. */
  | { kind: 'refuse'; status: number; codes: string[]; path?: string; mentions?: string[] }
  /** Any 4xx. */
  | { kind: 'client-error' }
  /** Only the general properties (no 5xx, no hang, JSON errors). */
  | { kind: 'any' }

export interface FuzzCase {
  category: string
  what: string
  method?: string
  /** Path on the worker (default: the dataset's query path). */
  path?: string
  /** Default: `content-type: application/json`. */
  headers?: Record<string, string | undefined>
  body?: Body
  expect: Expect
  /** The client hangs up: after this many bytes of its body (announcing all of it), or of the answer. */
  hangUp?: { bodyBytes?: number; answerBytes?: number }
}

// ------------------------------------------------------------------------------------ rendering

/** `n` random hex digits, eight from each 32-bit draw (a huge list renders 10,000–20,000 values). */
function hexOf(r: Rng, n: number): string {
  let out = ''
  while (out.length < n) out += Math.floor(r.next() * 2 ** 32).toString(16).padStart(8, '0')
  return out.slice(0, n)
}

function randomValue(r: Rng, values: Values): unknown {
  switch (values) {
    case 'hex':
      return '0x' + hexOf(r, 40)
    case 'felt':
      return '0x' + hexOf(r, 1 + r.int(64))
    case 'lower':
      return '0x' + hexOf(r, 64)
    case 'exact':
      return `v${r.int(1e9).toString(36)}`
    case 'int':
      return r.int(2 ** 40)
  }
}

function renderToken(t: Token): string {
  if ('raw' in t) return t.raw
  if ('deep' in t) return t.shape === 'array' ? '['.repeat(t.deep) + ']'.repeat(t.deep) : '{"a":'.repeat(t.deep) + '1' + '}'.repeat(t.deep)
  if ('giant' in t) return JSON.stringify((t.prefix ?? '') + t.char.repeat(t.giant))
  if ('requests' in t) return '[' + Array(t.requests).fill('{}').join(',') + ']'
  if ('giantKey' in t) return `{${JSON.stringify('k'.repeat(t.giantKey))}:1}`
  const r = rng(t.seed)
  const items = Array.from({ length: t.list }, () => JSON.stringify(randomValue(r, t.values)))
  for (const v of t.include) items[r.int(t.list)] = JSON.stringify(v)
  if (t.bad) items[t.bad.at] = t.bad.raw
  return '[' + items.join(',') + ']'
}

/** The JSON text of a value with tokens. */
export function renderJson(value: unknown, indent?: number): string {
  const tokens: Token[] = []
  const text = JSON.stringify(value, (_k, v) => (v && typeof v === 'object' && TOKEN in v ? `@@T${tokens.push(v[TOKEN]) - 1}@@` : v), indent)
  return tokens.length ? text.replace(/"@@T(\d+)@@"/g, (_, i) => renderToken(tokens[Number(i)])) : text
}

export function renderBody(b: Body): string | Buffer {
  if ('text' in b) return b.text
  if ('bytes' in b) return Buffer.from(b.bytes)
  return renderJson(b.json, b.indent)
}

// ------------------------------------------------------------------------------------ paths

type Seg = string | number

/** `['logs', 0, 'address', 3]` → `logs[0].address[3]` (as the worker writes paths). */
export function jsonPath(segs: Seg[]): string {
  let out = ''
  for (const p of segs) out += typeof p === 'number' || /^\d+$/.test(p) ? `[${p}]` : out ? `.${p}` : p
  return out
}

const clone = <T>(v: T): T => structuredClone(v)

/** A copy of `q` with `value` at `segs` (containers created on the way: arrays for numeric segments). */
function setAt(q: Obj, segs: Seg[], value: unknown): Obj {
  const out = clone(q)
  let at: any = out
  for (let i = 0; i < segs.length - 1; i++) {
    const s = segs[i]
    if (at[s] === null || typeof at[s] !== 'object') at[s] = typeof segs[i + 1] === 'number' ? [] : {}
    at = at[s]
  }
  at[segs[segs.length - 1]] = value
  return out
}

// ------------------------------------------------------------------------------------ values

const hexDigits = (min: number, max: number) => fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEF'), minLength: min, maxLength: max })

/*
 * Arbitraries used inside `chain` are made once, not at each generated value: fast-check builds a
 * lookup table of every character of a string arbitrary's unit (all of Unicode for 'grapheme' and
 * 'binary') for each new instance, which cost most of the time of drawing a case. The values drawn
 * from a seed are the same.
 */
const RANDOM_LOWER = fc.oneof(hexDigits(64, 64).map((d) => '0x' + d), fc.string({ maxLength: 8 }))
const RANDOM_EXACT = fc.oneof(fc.string({ maxLength: 12 }), fc.string({ unit: 'grapheme', maxLength: 6 }))

/** `make(key)`, made once per key (keys are the model's objects, which live as long as their model). */
function once<K extends object, V>(make: (key: K) => V): (key: K) => V {
  const made = new WeakMap<K, V>()
  return (key) => {
    if (!made.has(key)) made.set(key, make(key))
    return made.get(key)!
  }
}

/** The same hex value written another way: upper-case digits, `0X`, mixed case (felts: leading zeros too). */
function respell(v: string, how: number, felt: boolean): string {
  const body = v.slice(2)
  switch (how % (felt ? 6 : 5)) {
    case 0:
      return v
    case 1:
      return '0x' + body.toUpperCase()
    case 2:
      return '0X' + body
    case 3:
      return '0X' + body.toUpperCase()
    case 4:
      return '0x' + [...body].map((c, i) => (i % 2 ? c.toUpperCase() : c)).join('')
    default:
      return '0x' + '0'.repeat(1 + (how % 7)) + body
  }
}

function valueArb(f: FilterModel): fc.Arbitrary<unknown> {
  const seen = f.seen.slice(0, 64)
  let random: fc.Arbitrary<unknown>
  let spelled: (v: unknown) => fc.Arbitrary<unknown> = (v) => fc.constant(v)
  switch (f.values) {
    case 'hex':
      // Any number of digits is valid (odd lengths and `0x` alone too); they just match nothing.
      random = fc.oneof(hexDigits(40, 40), hexDigits(64, 64), hexDigits(0, 9)).map((d) => '0x' + d)
      spelled = (v) => fc.nat(4).map((how) => respell(v as string, how, false))
      break
    case 'felt':
      random = hexDigits(1, 64).map((d) => '0x' + d)
      spelled = (v) => fc.nat(5).map((how) => respell(v as string, how, true))
      break
    case 'lower':
      random = RANDOM_LOWER
      spelled = (v) => fc.constantFrom(v, (v as string).toUpperCase())
      break
    case 'int':
      random = fc.oneof(fc.integer({ min: 0, max: 300 }), fc.constant(Number.MAX_SAFE_INTEGER))
      break
    default:
      random = RANDOM_EXACT
      // Exact strings in another case match nothing.
      spelled = (v) => fc.constantFrom(v, v, v, String(v).toLowerCase(), String(v).toUpperCase())
  }
  if (seen.length === 0) return random
  return fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...seen).chain(spelled) }, { weight: 1, arbitrary: random })
}

/** A 10,000-value list of valid values with some the data has. */
const hugeList = (f: FilterModel, size = 10_000) =>
  fc.record({ seed: fc.integer(), include: fc.subarray(f.seen.slice(0, 20), { maxLength: Math.min(5, f.seen.slice(0, 20).length) }) }).map(({ seed, include }) => token({ list: size, values: f.values!, include, seed }))

const filterValueArbs = [once((f: FilterModel) => makeFilterValueArb(f, false)), once((f: FilterModel) => makeFilterValueArb(f, true))]
const filterValueArb = (f: FilterModel, huge: boolean) => filterValueArbs[huge ? 1 : 0](f)

function makeFilterValueArb(f: FilterModel, huge: boolean): fc.Arbitrary<unknown> {
  switch (f.kind) {
    case 'in':
      return fc.oneof(
        { weight: 1, arbitrary: fc.constant(null) },
        { weight: 1, arbitrary: fc.constant([]) },
        { weight: 12, arbitrary: fc.array(valueArb(f), { minLength: 1, maxLength: 4 }) },
        ...(huge ? [{ weight: 1, arbitrary: hugeList(f) }] : []),
      )
    case 'nonZero':
      return fc.constantFrom(true, true, false, null)
    default: {
      const near = f.seen.length
        ? fc.constantFrom(...(f.seen.slice(0, 64) as number[])).chain((v) => fc.integer({ min: Math.max(0, v - 3), max: v + 3 }))
        : fc.integer({ min: 0, max: 20 })
      return fc.oneof({ weight: 1, arbitrary: fc.constant(null) }, { weight: 5, arbitrary: near }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 1000 }) })
    }
  }
}

const requestArbs = [once((l: ListModel) => makeRequestArb(l, false)), once((l: ListModel) => makeRequestArb(l, true))]
const requestArb = (l: ListModel, huge: boolean) => requestArbs[huge ? 1 : 0](l)

function makeRequestArb(l: ListModel, huge: boolean): fc.Arbitrary<Obj> {
  const filters = fc.subarray(l.filters, { maxLength: Math.min(3, l.filters.length) }).chain((fs) =>
    fc.tuple(...fs.map((f) => filterValueArb(f, huge))).map((vals) => Object.fromEntries(fs.map((f, i) => [f.key, vals[i]]))),
  )
  const relations = fc.subarray(l.relations).chain((rs) =>
    fc.tuple(...rs.map(() => fc.constantFrom(true, true, true, false, null))).map((vs) => Object.fromEntries(rs.map((r, i) => [r, vs[i]]))),
  )
  return fc.tuple(filters, relations).map(([a, b]) => ({ ...a, ...b }))
}

/** A block range: mostly starting at or just before a block of the data, sometimes anywhere, sometimes above the height. */
function rangeArb(m: FamilyModel): fc.Arbitrary<{ fromBlock: number; toBlock?: number | null }> {
  const block = fc.constantFrom(...m.blocks)
  const from = fc.oneof(
    { weight: 6, arbitrary: block },
    { weight: 2, arbitrary: fc.tuple(block, fc.integer({ min: 1, max: 20 })).map(([b, d]) => Math.max(0, b - d)) },
    { weight: 1, arbitrary: fc.constant(0) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: m.height }) },
    { weight: 1, arbitrary: fc.integer({ min: m.height + 1, max: m.height + 1000 }) },
  )
  return from.chain((f) => {
    // Mostly a few blocks (answers of the whole dataset are big and slow), sometimes to the end.
    const later = m.blocks.filter((b) => b >= f).slice(0, 8)
    const to = fc.oneof(
      { weight: 2, arbitrary: fc.constant(undefined) },
      { weight: 1, arbitrary: fc.constant(null) },
      { weight: 10, arbitrary: later.length ? fc.constantFrom(...later) : fc.constant(f) },
      { weight: 4, arbitrary: fc.integer({ min: f, max: f + 30 }) },
      { weight: 1, arbitrary: fc.constant(Number.MAX_SAFE_INTEGER) },
    )
    return to.map((t) => (t === undefined ? { fromBlock: f } : { fromBlock: f, toBlock: t }))
  })
}

function fieldsArb(m: FamilyModel): fc.Arbitrary<Obj | null | undefined> {
  const selection = fc.tuple(...m.selectors.map(([, names]) => fc.option(fc.dictionary(fc.constantFrom(...names), fc.boolean(), { maxKeys: 8 }), { nil: undefined, freq: 2 })))
  const fields = selection.map((sels) => Object.fromEntries(m.selectors.map(([sel], i) => [sel, sels[i]]).filter(([, v]) => v !== undefined)))
  return fc.oneof({ weight: 6, arbitrary: fields }, { weight: 2, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constant(null) })
}

/**
 * A valid query of the family: a range, 0–4 requests of any lists (filters from the data's values
 * and random ones, relation flags), a field selection, includeAllBlocks; with `huge`, sometimes a
 * 10,000-value list; `parentBlockHash` (right) where the worker can check it.
 */
export function validQuery(m: FamilyModel, huge = false): fc.Arbitrary<Obj> {
  const withData = m.lists.filter((l) => l.filters.length === 0 || l.filters.some((f) => f.seen.length > 0))
  const list = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...(withData.length ? withData : m.lists)) }, { weight: 1, arbitrary: fc.constantFrom(...m.lists) })
  return fc
    .record({
      range: rangeArb(m),
      requests: fc.array(list.chain((l) => requestArb(l, huge).map((r) => [l.name, r] as const)), { maxLength: 4 }),
      fields: fieldsArb(m),
      includeAllBlocks: fc.constantFrom(undefined, undefined, undefined, true, false, null),
      type: fc.constantFrom(...m.typeAliases),
      parent: fc.nat(9),
    })
    .map(({ range, requests, fields, includeAllBlocks, type, parent }) => {
      const q: Obj = { ...(type === undefined ? {} : { type }), ...range }
      for (const [name, r] of requests) (q[name] ??= []).push(r)
      if (fields !== undefined) q.fields = fields
      if (includeAllBlocks !== undefined) q.includeAllBlocks = includeAllBlocks
      const hash = m.parents.get(range.fromBlock)
      if (hash && parent < 3) q.parentBlockHash = respell(hash, parent, false)
      return q
    })
}

// ------------------------------------------------------------------------------------ locations in a query

type Slot =
  | 'uint'
  | 'uint?'
  | 'bool'
  | 'bool?'
  | 'hex?'
  | 'object?'
  | 'object'
  | 'requests?'
  | `values?:${Values}`
  | `value:${Values}`

interface Location {
  segs: Seg[]
  slot: Slot
}

const ROOT_KEYS = ['type', 'fromBlock', 'toBlock', 'includeAllBlocks', 'parentBlockHash', 'fields']

/** Where a value of a known type goes in `q` (present or not). */
function locations(m: FamilyModel, q: Obj): Location[] {
  const out: Location[] = [
    { segs: ['fromBlock'], slot: 'uint' },
    { segs: ['toBlock'], slot: 'uint?' },
    { segs: ['includeAllBlocks'], slot: 'bool?' },
    { segs: ['parentBlockHash'], slot: 'hex?' },
    { segs: ['fields'], slot: 'object?' },
  ]
  for (const [sel, names] of m.selectors) {
    out.push({ segs: ['fields', sel], slot: 'object?' })
    const present = Object.keys(q.fields?.[sel] ?? {})
    for (const f of present.length ? present : names.slice(0, 2)) out.push({ segs: ['fields', sel, f], slot: 'bool' })
  }
  for (const l of m.lists) {
    out.push({ segs: [l.name], slot: 'requests?' })
    const requests: Obj[] = q[l.name] ?? [{}]
    requests.forEach((r, i) => {
      out.push({ segs: [l.name, i], slot: 'object' })
      for (const f of l.filters) {
        const slot: Slot = f.kind === 'in' ? `values?:${f.values!}` : f.kind === 'nonZero' ? 'bool?' : 'uint?'
        out.push({ segs: [l.name, i, f.key], slot })
        const v = r[f.key]
        if (f.kind === 'in' && Array.isArray(v)) v.forEach((_, j) => out.push({ segs: [l.name, i, f.key, j], slot: `value:${f.values!}` }))
      }
      for (const rel of l.relations) out.push({ segs: [l.name, i, rel], slot: 'bool?' })
    })
  }
  return out
}

/** Object locations and the keys known there. */
function objects(m: FamilyModel, q: Obj): { segs: Seg[]; known: string[] }[] {
  const out = [
    { segs: [] as Seg[], known: [...ROOT_KEYS, ...m.lists.map((l) => l.name)] },
    { segs: ['fields'] as Seg[], known: m.selectors.map(([s]) => s) },
    ...m.selectors.map(([sel, names]) => ({ segs: ['fields', sel] as Seg[], known: [...names] })),
  ]
  for (const l of m.lists) {
    const n = Math.max(1, (q[l.name] ?? []).length)
    for (let i = 0; i < n; i++) out.push({ segs: [l.name, i], known: [...l.filters.map((f) => f.key), ...l.relations] })
  }
  return out
}

/** JSON texts of the wrong type (or out of range) for each slot. */
const UINT_WRONG = ['-1', '1.5', '"5"', '"0x10"', 'true', '[]', '{}', '[1]', '9007199254740992', '1e400', '-1e-7', '0.000001', '18446744073709551616', '"1e3"', '-9007199254740991']
const STR_VALUE_WRONG = ['5', 'null', 'true', '[]', '{}', '1.5', '["0x00"]']
const HEX_VALUE_WRONG = [...STR_VALUE_WRONG, '"zz"', '"0xzz"', '"abcd"', '""', '" 0x1"', '"0x1 "', '"0x-1"', '"x0"', '"0xg"', '"0x\\u0000"', '"0x\uff11"', '"00x1"', '"0xx1"', '"0x1\\n"', '"0x12\u0301"', '"\u0660x1"']
const INT_VALUE_WRONG = ['-1', '1.5', '"1"', 'null', 'true', '9007199254740992', '[]', '{}', '1e400']

function wrongFor(slot: Slot): string[] {
  switch (slot) {
    case 'uint':
      return [...UINT_WRONG, 'null']
    case 'uint?':
      return UINT_WRONG
    case 'bool':
      return ['1', '0', '"true"', '"false"', 'null', '[]', '{}', '[true]', '"1"']
    case 'bool?':
      return ['1', '0', '"true"', '"false"', '[]', '{}', '[true]', '"null"']
    case 'hex?':
      return ['5', 'true', '[]', '{}', '["0x00"]', '"zz"', '"0xzz"', '"abc"', '""', '" 0x1"', '"0x1\\n"', '"0x\uff11"']
    case 'object?':
      return ['5', '"x"', 'true', '[]', '[{}]', '"{}"', '0']
    case 'object':
      return ['5', '"x"', 'true', 'null', '[]', '[{}]', '"{}"']
    case 'requests?':
      return ['5', '"x"', 'true', '{}', '{"0":{}}', '[5]', '["x"]', '[null]', '[[]]', '[true]']
    default: {
      const [kind, values] = slot.split(':') as [string, Values]
      if (kind === 'value') return values === 'int' ? INT_VALUE_WRONG : values === 'hex' || values === 'felt' ? HEX_VALUE_WRONG : STR_VALUE_WRONG
      const element = values === 'int' ? ['["1"]', '[-1]', '[1.5]', '[null]', '[9007199254740992]'] : values === 'hex' || values === 'felt' ? ['["zz"]', '["0xzz"]', '[5]', '[null]', '["abc"]'] : ['[5]', '[null]', '[true]', '[[]]', '[{}]']
      return ['5', 'true', '{}', '"x"', '"0x1"', '{"0":"0x1"}', ...element]
    }
  }
}

// ------------------------------------------------------------------------------------ case arbitraries

const refuse = (status: number, codes: string[], path?: string, mentions?: string[]): Expect => ({ kind: 'refuse', status, codes, path, mentions })
const invalidQuery = (path: string, mentions?: string[]) => refuse(400, ['invalid-query'], path, mentions)
const short = (v: unknown) => {
  const s = typeof v === 'string' ? v : JSON.stringify(v)
  return s.length > 80 ? s.slice(0, 80) + '…' : s
}

/** A valid query; the reference says what the answer is. */
const validCase = (m: FamilyModel) =>
  validQuery(m, true).map((q): FuzzCase => ({ category: 'valid', what: 'a valid query', body: { json: q }, expect: { kind: 'answer' } }))

const NUMBER_SPELLINGS = (n: number): string[] => [
  `${n}.0`, `${n}e0`, `${n}E+0`, `${n}.000`, `${n === 0 ? '' : n}0e-1`, ...(n === 0 ? ['-0', '0e5', '-0.0'] : []), ...(n % 10 === 0 && n > 0 ? [`${n / 10}e1`, `${n / 10}E1`] : []),
]
const VALID_TYPES = ['application/json', 'application/json; charset=utf-8', 'Application/JSON', 'application/json;charset=UTF-8', 'application/json ; charset=utf-8']

/**
 * A valid query written another way — hex in other cases, felts with leading zeros, repeated
 * values, explicit nulls and falses, keys and requests reordered, numbers as `5.0`/`5e0`, a type
 * alias, pretty-printed, a BOM, escaped keys, an earlier duplicate key, another spelling of the
 * content type, a query string — must get exactly the answer of the canonical form.
 */
const spellingCase = (m: FamilyModel) =>
  fc
    .record({
      q: validQuery(m),
      seed: fc.integer(),
      text: fc.constantFrom('plain', 'plain', 'pretty', 'bom', 'escaped-keys', 'duplicate-key', 'crlf'),
      contentType: fc.constantFrom(...VALID_TYPES),
      queryString: fc.nat(9),
    })
    .map(({ q, seed, text, contentType, queryString }): FuzzCase => {
      const r = rng(seed)
      const a: Obj = clone(q)
      const did: string[] = []
      for (const l of m.lists) {
        const requests: Obj[] | undefined = a[l.name]
        if (!requests) continue
        for (const req of requests) {
          for (const f of l.filters) {
            const v = req[f.key]
            if (v === undefined && r.chance(0.2)) {
              req[f.key] = null
              did.push('null filter')
            }
            if (!Array.isArray(v) || f.kind !== 'in') continue
            if (f.values === 'hex' || f.values === 'felt') {
              req[f.key] = v.map((x: string) => respell(x, r.int(8), f.values === 'felt'))
              did.push('hex respelled')
            }
            if (r.chance(0.3) && v.length) {
              req[f.key] = [...req[f.key], req[f.key][0]]
              did.push('repeated value')
            }
            if (r.chance(0.3)) req[f.key] = [...req[f.key]].reverse()
          }
          for (const rel of l.relations) {
            if (req[rel] === undefined && r.chance(0.2)) {
              req[rel] = r.pick([false, null])
              did.push('false flag')
            }
          }
        }
        if (r.chance(0.3)) {
          a[l.name] = [...requests].reverse()
          did.push('requests reversed')
        }
      }
      if (a.toBlock === undefined && r.chance(0.2)) a.toBlock = null
      if (a.includeAllBlocks == null && r.chance(0.2)) a.includeAllBlocks = r.pick([false, null])
      if (a.fields === undefined && r.chance(0.2)) a.fields = r.pick([null, {}])
      if (a.fields && r.chance(0.3)) {
        const [sel, names] = r.pick(m.selectors)
        if (a.fields[sel] === undefined) a.fields[sel] = r.chance(0.5) ? null : { [r.pick(names)]: false }
        did.push('empty selection')
      }
      const alias = r.pick(m.typeAliases)
      if (alias !== a.type) {
        if (alias === undefined) delete a.type
        else a.type = alias
        did.push(`type ${alias}`)
      }
      if (r.chance(0.3)) {
        a.fromBlock = token({ raw: r.pick(NUMBER_SPELLINGS(q.fromBlock)) })
        did.push('fromBlock spelled')
      }
      if (typeof q.toBlock === 'number' && q.toBlock < 1e15 && r.chance(0.3)) a.toBlock = token({ raw: r.pick(NUMBER_SPELLINGS(q.toBlock)) })
      // Keys in another order.
      const keys = Object.keys(a).sort(() => r.next() - 0.5)
      const shuffled = Object.fromEntries(keys.map((k) => [k, a[k]]))
      let body = renderJson(shuffled, text === 'pretty' || text === 'crlf' ? 2 : undefined)
      if (text === 'crlf') body = body.replace(/\n/g, '\r\n')
      if (text === 'bom') body = '\ufeff' + body
      if (text === 'escaped-keys') body = body.replace(/"fromBlock"/g, '"\\u0066romBlock"').replace(/"fields"/g, '"fi\\u0065lds"')
      // An earlier duplicate of a key: the last one counts.
      if (text === 'duplicate-key') body = `{"fromBlock":"no",` + body.slice(1)
      did.push(text)
      const name = encodeURIComponent(m.name ?? '')
      return {
        category: 'spelling',
        what: `the same query written another way (${[...new Set(did)].join(', ')}; ${contentType})`,
        headers: { 'content-type': contentType },
        ...(queryString < 2 && m.name ? { path: `/datasets/${name}/query?x=1&fromBlock=5` } : {}),
        body: { text: body },
        expect: { kind: 'same', as: q },
      }
    })

/** A value of the wrong type (or out of range) at a place of the query. */
const wrongTypeCase = (m: FamilyModel) =>
  validQuery(m).chain((q) => {
    const locs = locations(m, q)
    return fc.constantFrom(...locs).chain((loc) =>
      fc.constantFrom(...wrongFor(loc.slot)).map((raw): FuzzCase => {
        const path = jsonPath(loc.segs)
        return { category: 'wrong-type', what: `${raw} at ${path} (${loc.slot})`, body: { json: setAt(q, loc.segs, token({ raw })) }, expect: invalidQuery(path) }
      }),
    )
  })

const KEY_POOL = [
  'toString', 'hasOwnProperty', 'constructor', 'valueOf', '__defineGetter__', 'isPrototypeOf', '', '0', '1', 'null', 'undefined', ' ',
  'from_block', 'FromBlock', 'fromblock', 'toblock', 'adress', 'topics', 'topic4', 'fields', 'type', 'transaction', 'logs', 'events', 'calls',
  'address', 'a.b', 'a[0]', '$ref', 'é', '🙂', 'key with space', '\u0000', 'fromBlock ', 'x'.repeat(300),
]

const UNKNOWN_KEY = fc.oneof(fc.constantFrom(...KEY_POOL), fc.string({ minLength: 1, maxLength: 12 }), fc.string({ unit: 'binary', minLength: 1, maxLength: 6 }))

/** A key the query does not know (typos, other families' keys, prototype names, random strings), somewhere. */
const unknownKeyCase = (m: FamilyModel) =>
  validQuery(m).chain((q) => {
    const objs = objects(m, q)
    return fc
      .record({
        at: fc.constantFrom(...objs),
        key: UNKNOWN_KEY,
        typo: fc.nat(),
        value: fc.constantFrom<unknown>(1, 'x', true, null, [], {}, { a: 1 }, [1, 2]),
      })
      .filter(({ at, key }) => !at.known.includes(key) && key !== '__proto__')
      .map(({ at, key, typo, value }): FuzzCase => {
        // Sometimes a typo of a known key there: one character dropped or its case changed.
        let k = key
        if (typo % 3 === 0 && at.known.length) {
          const base = at.known[typo % at.known.length]
          const i = typo % Math.max(1, base.length)
          const t = typo % 2 ? base.slice(0, i) + base.slice(i + 1) : base.slice(0, i) + base[i].toUpperCase() + base.slice(i + 1)
          if (t && !at.known.includes(t) && t !== '__proto__') k = t
        }
        const segs = [...at.segs, k]
        const path = jsonPath(segs)
        return { category: 'unknown-key', what: `unknown key ${JSON.stringify(k).slice(0, 60)} at ${jsonPath(at.segs) || '(query)'}`, body: { json: setAt(q, segs, value) }, expect: invalidQuery(path, [k]) }
      })
  })

/** A bad hex value in a hex or felt filter list (non-hex, no prefix, spaces, wrong types), or in parentBlockHash. */
const badHexCase = (m: FamilyModel) => {
  const targets = m.lists.flatMap((l) => l.filters.filter((f) => f.values === 'hex' || f.values === 'felt').map((f) => ({ l, f })))
  return validQuery(m).chain((q) =>
    fc
      .record({
        t: targets.length ? fc.constantFrom(...targets) : fc.constant(undefined),
        good: fc.nat(4),
        at: fc.nat(),
        bad: fc.constantFrom(...HEX_VALUE_WRONG),
        fresh: fc.boolean(),
        parent: fc.nat(9),
      })
      .map(({ t, good, at, bad, fresh, parent }): FuzzCase => {
        if (!t || parent === 0) {
          // (null is no hash: the same as none)
          const raw = bad === 'null' ? '"null"' : bad
          return { category: 'bad-hex', what: `parentBlockHash ${raw}`, body: { json: { ...q, parentBlockHash: token({ raw }) } }, expect: invalidQuery('parentBlockHash') }
        }
        const requests: Obj[] = q[t.l.name] ?? []
        const i = fresh || requests.length === 0 ? requests.length : at % requests.length
        const values: unknown[] = [...t.f.seen.slice(0, good)]
        const j = at % (values.length + 1)
        values.splice(j, 0, token({ raw: bad }))
        const segs = [t.l.name, i, t.f.key]
        const path = jsonPath([...segs, j])
        return { category: 'bad-hex', what: `${bad} in ${path}`, body: { json: setAt(q, segs, values) }, expect: invalidQuery(path) }
      }),
  )
}

/** Block numbers: wrong types and ranges, toBlock below fromBlock, missing fromBlock, other spellings of the same number, above the height. */
const blockNumberCase = (m: FamilyModel) =>
  validQuery(m).chain((q) =>
    fc
      .record({ which: fc.constantFrom('fromBlock', 'toBlock'), how: fc.nat(5), raw: fc.constantFrom(...UINT_WRONG), spelling: fc.nat(), below: fc.integer({ min: 1, max: 50 }) })
      .map(({ which, how, raw, spelling, below }): FuzzCase => {
        switch (how) {
          case 0:
            return { category: 'block-number', what: `${which} ${raw}`, body: { json: { ...q, [which]: token({ raw }) } }, expect: invalidQuery(which) }
          case 1: {
            const from = Math.max(q.fromBlock, 1)
            return { category: 'block-number', what: `toBlock ${from - below} below fromBlock ${from}`, body: { json: { ...q, fromBlock: from, toBlock: Math.max(0, from - below) } }, expect: refuse(400, ['invalid-range'], 'toBlock', ['toBlock']) }
          }
          case 2: {
            const { fromBlock: _, ...rest } = q
            return { category: 'block-number', what: 'no fromBlock', body: { json: rest }, expect: invalidQuery('fromBlock', ['fromBlock']) }
          }
          case 3: {
            const n = which === 'toBlock' && typeof q.toBlock === 'number' && q.toBlock < 1e15 ? q.toBlock : q.fromBlock
            const key = n === q.toBlock ? 'toBlock' : 'fromBlock'
            const spellings = NUMBER_SPELLINGS(n)
            const s = spellings[spelling % spellings.length]
            return { category: 'block-number', what: `${key} written ${s}`, body: { json: { ...q, [key]: token({ raw: s }) } }, expect: { kind: 'same', as: q } }
          }
          default:
            return {
              category: 'block-number',
              what: which === 'fromBlock' ? 'fromBlock far above the height' : 'toBlock = 2^53 − 1',
              body: { json: which === 'fromBlock' ? { ...q, fromBlock: Number.MAX_SAFE_INTEGER - (spelling % 1000), toBlock: undefined } : { ...q, toBlock: Number.MAX_SAFE_INTEGER } },
              expect: { kind: 'answer' },
            }
        }
      }),
  )

/** Deeply nested arrays or objects in place of a value (up to 200,000 levels), or as the whole body. */
const deepNestingCase = (m: FamilyModel) =>
  validQuery(m).chain((q) =>
    fc
      .record({
        loc: fc.constantFrom(...locations(m, q)),
        depth: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 2, max: 64 }) }, { weight: 2, arbitrary: fc.constantFrom(1000, 10_000) }, { weight: 1, arbitrary: fc.constant(200_000) }),
        shape: fc.constantFrom<'array' | 'object'>('array', 'object'),
        whole: fc.nat(9),
      })
      .map(({ loc, depth, shape, whole }): FuzzCase => {
        if (whole === 0) return { category: 'deep-nesting', what: `a body of ${depth} nested ${shape}s`, body: { json: token({ deep: depth, shape }) }, expect: { kind: 'client-error' } }
        const path = jsonPath(loc.segs)
        return { category: 'deep-nesting', what: `${depth} nested ${shape}s at ${path}`, body: { json: setAt(q, loc.segs, token({ deep: depth, shape })) }, expect: invalidQuery(path) }
      }),
  )

/** 10,000–20,000-value lists (valid: the reference answer; one bad value: its path), too many request objects, exactly 100. */
const hugeListCase = (m: FamilyModel) => {
  const lists = m.lists.flatMap((l) => l.filters.filter((f) => f.kind === 'in').map((f) => ({ l, f })))
  return validQuery(m).chain((q) =>
    fc
      .record({ t: fc.constantFrom(...lists), size: fc.constantFrom(10_000, 10_000, 20_000), how: fc.nat(4), seed: fc.integer(), at: fc.nat(), n: fc.integer({ min: 101, max: 10_000 }) })
      .map(({ t, size, how, seed, at, n }): FuzzCase => {
        const i = (q[t.l.name] ?? []).length
        const segs = [t.l.name, i, t.f.key]
        const include = t.f.seen.slice(0, 3)
        switch (how) {
          case 0:
          case 1:
            return { category: 'huge-list', what: `${size} values in ${jsonPath(segs)}`, body: { json: setAt(q, segs, token({ list: size, values: t.f.values!, include, seed })) }, expect: { kind: 'answer' } }
          case 2: {
            const k = at % size
            const bad = t.f.values === 'int' ? '"1"' : t.f.values === 'hex' || t.f.values === 'felt' ? '"0xnothex"' : '5'
            return {
              category: 'huge-list',
              what: `${size} values in ${jsonPath(segs)}, #${k} bad`,
              body: { json: setAt(q, segs, token({ list: size, values: t.f.values!, include, seed, bad: { at: k, raw: bad } })) },
              expect: invalidQuery(jsonPath([...segs, k])),
            }
          }
          case 3: {
            const { [t.l.name]: _, ...rest } = q
            const total = n + m.lists.reduce((sum, l) => sum + (l.name === t.l.name ? 0 : (q[l.name]?.length ?? 0)), 0)
            return { category: 'huge-list', what: `${n} request objects in ${t.l.name}`, body: { json: { ...rest, [t.l.name]: token({ requests: n }) } }, expect: refuse(400, ['too-many-requests'], undefined, [String(total)]) }
          }
          default: {
            // Exactly the limit: 100 requests in all (the other lists emptied).
            const rest = Object.fromEntries(Object.entries(q).filter(([k]) => !m.lists.some((l) => l.name === k)))
            return { category: 'huge-list', what: `100 request objects in ${t.l.name}`, body: { json: { ...rest, [t.l.name]: Array.from({ length: 100 }, (_, j) => (j === 0 ? { [t.f.key]: include } : {})) } }, expect: { kind: 'answer' } }
          }
        }
      }),
  )
}

/** Bodies that are not a JSON object: truncated queries, junk text and bytes, other JSON values, whitespace, JSON5-isms. */
const rawBodyCase = (m: FamilyModel) =>
  validQuery(m).chain((q) => {
    const text = JSON.stringify(q)
    return fc.oneof(
      fc.nat(text.length - 1).map((at): FuzzCase => ({
        category: 'raw-body',
        what: `the query cut after ${at} of ${text.length} characters`,
        body: { text: text.slice(0, at) },
        expect: refuse(400, ['invalid-json'], undefined, at === 0 ? ['empty'] : ['position']),
      })),
      fc.oneof(fc.string({ minLength: 1, maxLength: 40 }), fc.string({ unit: 'binary', minLength: 1, maxLength: 40 })).map((junk): FuzzCase => ({
        category: 'raw-body', what: `junk text ${short(junk)}`, body: { text: junk }, expect: { kind: 'client-error' },
      })),
      fc.uint8Array({ minLength: 1, maxLength: 64 }).map((bytes): FuzzCase => ({ category: 'raw-body', what: `${bytes.length} random bytes`, body: { bytes: [...bytes] }, expect: { kind: 'client-error' } })),
      fc.constantFrom('[]', '5', '"x"', 'null', 'true', 'false', '0', '[{"fromBlock":0}]', JSON.stringify(text), '-1', '1e400', '""').map((v): FuzzCase => ({
        category: 'raw-body', what: `the JSON value ${short(v)}`, body: { text: v }, expect: invalidQuery('', ['object']),
      })),
      fc.constantFrom(' ', '\n', '\t \r\n', '\ufeff').map((v): FuzzCase => ({ category: 'raw-body', what: `whitespace only ${JSON.stringify(v)}`, body: { text: v }, expect: refuse(400, ['invalid-json']) })),
      fc.constantFrom(
        (t: string) => t.slice(0, -1) + ',}',
        (t: string) => t.replace(/"/g, "'"),
        (t: string) => '// a comment\n' + t,
        (t: string) => t.replace(/"fromBlock":\d+/, '"fromBlock":NaN'),
        (t: string) => t.replace(/"fromBlock":\d+/, '"fromBlock":Infinity'),
        (t: string) => t.replace(/"fromBlock":(\d+)/, '"fromBlock":0x$1'),
        (t: string) => t.replace(/"fromBlock":(\d+)/, '"fromBlock":+$1'),
        (t: string) => t.replace(/"fromBlock":(\d+)/, '"fromBlock":0$1'),
        (t: string) => t.replace(/"fromBlock"/, 'fromBlock'),
        (t: string) => t + t,
        (t: string) => t + 'x',
        (t: string) => t.slice(1),
        (t: string) => t.replace('{', '{\u0000'),
        (t: string) => t.replace(/"fromBlock"/, '"from\tBlock"'),
      ).map((f): FuzzCase => {
        const broken = f(text)
        return { category: 'raw-body', what: `not JSON: ${short(broken)}`, body: { text: broken }, expect: refuse(400, ['invalid-json'], undefined, ['position']) }
      }),
    )
  })

const WRONG_TYPES = ['text/plain', 'application/xml', 'multipart/form-data; boundary=x', 'application/x-www-form-urlencoded', 'application/octet-stream', 'application/jsonx', 'text/json', 'application/json-patch+json', 'application/ld+json', 'json', '*/*', 'application/*', 'text/plain; charset=utf-8']

/** Content types other than JSON (415), none at all, and other spellings of JSON (the same answer). */
const contentTypeCase = (m: FamilyModel) =>
  validQuery(m).chain((q) =>
    fc.oneof(
      fc.constantFrom(...WRONG_TYPES).map((ct): FuzzCase => ({ category: 'content-type', what: `content-type ${ct}`, headers: { 'content-type': ct }, body: { json: q }, expect: refuse(415, ['unsupported-media-type']) })),
      fc.constantFrom<string | undefined>(undefined, '').map((ct): FuzzCase => ({ category: 'content-type', what: `content-type ${JSON.stringify(ct)}`, headers: { 'content-type': ct }, body: { json: q }, expect: { kind: 'client-error' } })),
      fc.constantFrom(...VALID_TYPES).map((ct): FuzzCase => ({ category: 'content-type', what: `content-type ${ct}`, headers: { 'content-type': ct }, body: { json: q }, expect: { kind: 'same', as: q } })),
      fc.constant<FuzzCase>({ category: 'content-type', what: 'no body, no content-type', headers: {}, expect: { kind: 'client-error' } }),
      fc.constant<FuzzCase>({ category: 'content-type', what: 'empty JSON body', body: { text: '' }, expect: refuse(400, ['invalid-json'], undefined, ['empty']) }),
    ),
  )

/** Strings of 64 KiB to 9 MiB (above the 8 MiB body limit: 413) as type, filter values, a key, an unknown key's value. */
const giantStringCase = (m: FamilyModel) => {
  const hexLists = m.lists.flatMap((l) => l.filters.filter((f) => f.values === 'hex' || f.values === 'felt').map((f) => ({ l, f })))
  const strLists = m.lists.flatMap((l) => l.filters.filter((f) => f.values === 'exact' || f.values === 'lower').map((f) => ({ l, f })))
  return validQuery(m).chain((q) =>
    fc
      .record({
        size: fc.oneof({ weight: 6, arbitrary: fc.constantFrom(64 * 1024, 1024 * 1024) }, { weight: 2, arbitrary: fc.constant(4 * 1024 * 1024) }, { weight: 1, arbitrary: fc.constant(9 * 1024 * 1024) }),
        where: fc.nat(5),
        pick: fc.nat(),
      })
      .map(({ size, where, pick }): FuzzCase => {
        const what = (w: string) => `a ${Math.round(size / 1024)} KiB string ${w}`
        const hex = hexLists[pick % Math.max(1, hexLists.length)]
        const str = strLists[pick % Math.max(1, strLists.length)]
        const fresh = (l: ListModel) => (q[l.name] ?? []).length
        if (where === 1 && hex) {
          const segs = [hex.l.name, fresh(hex.l), hex.f.key]
          return { category: 'giant-string', what: what(`of hex digits in ${jsonPath(segs)}`), body: { json: setAt(q, segs, [token({ giant: size, char: 'f', prefix: '0x' })]) }, expect: { kind: 'answer' } }
        }
        if (where === 2 && hex) {
          const segs = [hex.l.name, fresh(hex.l), hex.f.key]
          return { category: 'giant-string', what: what(`(not hex) in ${jsonPath(segs)}`), body: { json: setAt(q, segs, [token({ giant: size, char: 'z' })]) }, expect: invalidQuery(jsonPath([...segs, 0])) }
        }
        if (where === 3 && str) {
          const segs = [str.l.name, fresh(str.l), str.f.key]
          return { category: 'giant-string', what: what(`in ${jsonPath(segs)}`), body: { json: setAt(q, segs, [token({ giant: size, char: 'n' })]) }, expect: { kind: 'answer' } }
        }
        if (where === 4) {
          const l = m.lists[pick % m.lists.length]
          return { category: 'giant-string', what: what(`as a key in ${l.name}[0]`), body: { json: { ...q, [l.name]: [token({ giantKey: size })] } }, expect: invalidQuery(`${l.name}[0].k`) }
        }
        if (where === 5) return { category: 'giant-string', what: what('as an unknown key\'s value'), body: { json: { ...q, note: token({ giant: size, char: 'x' }) } }, expect: invalidQuery('note', ['note']) }
        return { category: 'giant-string', what: what('as the type'), body: { json: { ...q, type: token({ giant: size, char: 't' }) } }, expect: refuse(400, ['unknown-type'], 'type') }
      }),
  )
}

const RAW_PATHS = [
  '/datasets/%ff/query', '/datasets/%/query', '/datasets/a%2fb/query', '/datasets/../query', '/datasets/%2e%2e/query', '/datasets//query',
  '/DATASETS/x/query', '//datasets/x/query', '/datasets/x/query/', '/datasets/x/query/extra', '/datasets/x', '/datasets', '/', '/status', '/metrics',
  '/datasets/x/query;x', '/datasets/x/query?%ff', '/datasets/x/query?a[b]=1', '/datasets/x%00/query', `/datasets/${'y'.repeat(5000)}/query`,
]

/** Other methods on the query route, unknown datasets, odd paths. */
const routeCase = (m: FamilyModel) =>
  validQuery(m).chain((q) =>
    fc.oneof(
      fc.constantFrom('GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS').map((method): FuzzCase => ({ category: 'route', what: `${method} on the query route`, method, body: { json: q }, expect: refuse(404, ['not-found']) })),
      fc.oneof(fc.string({ maxLength: 20 }), fc.string({ unit: 'binary', maxLength: 12 }), fc.constantFrom('EVM', 'evm ', 'starknet-mainnet', 'x'.repeat(99), 'x'.repeat(101)))
        .filter((name) => name !== m.name && name !== '.' && name !== '..')
        .map((name): FuzzCase => ({ category: 'route', what: `unknown dataset ${short(name)}`, path: `/datasets/${encodeURIComponent(name)}/query`, body: { json: q }, expect: { kind: 'client-error' } })),
      fc.constantFrom(...RAW_PATHS).map((p): FuzzCase => {
        const path = m.name ? p.replace('/x/', `/${encodeURIComponent(m.name)}/`).replace('/x%00/', `/${encodeURIComponent(m.name)}%00/`) : p
        return { category: 'route', what: `POST ${short(path)}`, path, body: { json: q }, expect: { kind: 'any' } }
      }),
    ),
  )

const FAMILIES = ['evm', 'eth', 'starknet', 'substrate']

/** The query type: another family's (wrong-family), unknown spellings (unknown-type), missing, wrong type. */
const typeCase = (m: FamilyModel) =>
  validQuery(m).chain((q) =>
    fc.oneof(fc.constantFrom(...FAMILIES, 'EVM', 'Starknet', ' evm', 'evm\u0000', '', 'solana', 'ethereum', 'toString', 'constructor', '__proto__', 'hasOwnProperty', 'valueOf'), fc.string({ maxLength: 10 }), fc.constant(undefined)).map((type): FuzzCase => {
      const body = { ...q, type }
      if (type === undefined) delete body.type
      const accepted = m.typeAliases.includes(type)
      const expect: Expect = accepted
        ? { kind: 'same', as: q }
        : type === undefined || FAMILIES.includes(type)
          ? refuse(400, ['wrong-family'], 'type', type === undefined ? ['type'] : [type])
          : refuse(400, ['unknown-type'], 'type')
      return { category: 'type', what: `type ${JSON.stringify(type)}`, body: { json: body }, expect }
    }),
  )

/** `parentBlockHash`: a wrong one (409 fork with previousBlocks) or the right one in other spellings (same answer). */
const forkCase = (m: FamilyModel) => {
  const checkable = [...m.parents.keys()]
  return validQuery(m).chain((q) =>
    fc.record({ from: fc.constantFrom(...checkable), wrong: fc.oneof(hexDigits(64, 64).map((d) => '0x' + d), fc.constantFrom('0x', '0x0', '0x00')), right: fc.nat(4), how: fc.boolean() }).map(({ from, wrong, right, how }): FuzzCase => {
      const base: Obj = { ...q, fromBlock: from }
      delete base.parentBlockHash
      if (base.toBlock != null && base.toBlock < from) delete base.toBlock
      if (how) return { category: 'fork', what: `parentBlockHash ${wrong.slice(0, 12)}… at ${from}`, body: { json: { ...base, parentBlockHash: wrong } }, expect: refuse(409, ['fork'], undefined, [String(from - 1)]) }
      return { category: 'fork', what: `the right parentBlockHash at ${from}`, body: { json: { ...base, parentBlockHash: respell(m.parents.get(from)!, right, false) } }, expect: { kind: 'same', as: base } }
    }),
  )
}

/** The client goes away: half-way through sending its query, or after the first bytes of the answer. */
const hangUpCase = (m: FamilyModel) =>
  fc.record({ q: validQuery(m), how: fc.boolean(), at: fc.nat(), answerBytes: fc.constantFrom(1, 100, 1000, 64 * 1024) }).map(({ q, how, at, answerBytes }): FuzzCase => {
    const text = JSON.stringify(q)
    if (how) return { category: 'hang-up', what: `hang up after ${at % text.length} of ${text.length} bytes of the query`, body: { text }, expect: { kind: 'any' }, hangUp: { bodyBytes: at % text.length } }
    return { category: 'hang-up', what: `hang up after ${answerBytes} bytes of the answer`, body: { text }, expect: { kind: 'any' }, hangUp: { answerBytes } }
  })

/** Weights of the case categories (their share of the cases). */
export const CATEGORY_WEIGHTS: Record<string, number> = {
  valid: 28,
  spelling: 10,
  'wrong-type': 14,
  'unknown-key': 8,
  'bad-hex': 7,
  'block-number': 7,
  'deep-nesting': 4,
  'huge-list': 3,
  'raw-body': 7,
  'content-type': 4,
  'giant-string': 2,
  route: 3,
  type: 2,
  fork: 1,
  'hang-up': 2,
}

/** Every kind of case for one dataset, weighted by CATEGORY_WEIGHTS (`giant`: false leaves out the giant strings). */
export function fuzzCase(m: FamilyModel, opts: { giant?: boolean } = {}): fc.Arbitrary<FuzzCase> {
  const all: [string, fc.Arbitrary<FuzzCase>][] = [
    ['valid', validCase(m)],
    ['spelling', spellingCase(m)],
    ['wrong-type', wrongTypeCase(m)],
    ['unknown-key', unknownKeyCase(m)],
    ['bad-hex', badHexCase(m)],
    ['block-number', blockNumberCase(m)],
    ['deep-nesting', deepNestingCase(m)],
    ['huge-list', hugeListCase(m)],
    ['raw-body', rawBodyCase(m)],
    ['content-type', contentTypeCase(m)],
    ['giant-string', giantStringCase(m)],
    ['route', routeCase(m)],
    ['type', typeCase(m)],
    ['hang-up', hangUpCase(m)],
    ...(m.parents.size ? [['fork', forkCase(m)] as [string, fc.Arbitrary<FuzzCase>]] : []),
  ]
  return fc.oneof(...all.filter(([c]) => opts.giant !== false || c !== 'giant-string').map(([c, arbitrary]) => ({ weight: CATEGORY_WEIGHTS[c], arbitrary })))
}
