import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { ApiError, badRequest } from '../errors.js'
import { normalizeHex, type FamilyDecl, type FilterDecl, type ItemDecl, type RequestDecl } from '../families/declaration.js'
import { FAMILY_OF_QUERY_TYPE } from '../families/index.js'

/*
 * Query validation (docs/protocol.md §2, §3.2): each family's declaration gives a JSON schema, checked
 * by ajv. `npm run build` writes each family's validator as code (src/query/precompile-validators.ts);
 * a process uses that file when it was generated from the same schema, and compiles the schema
 * itself otherwise (100–250 ms of CPU per family). Errors name the JSON path of the offending value
 * (`logs[0].adress`).
 */

export const MAX_ITEM_REQUESTS = 100

/** A request object after validation: filter values normalised, relation flags as booleans. */
export interface ValidRequest {
  request: RequestDecl
  filters: Record<string, unknown>
  relations: string[]
}

export interface ValidQuery {
  fromBlock: number
  toBlock?: number
  includeAllBlocks: boolean
  parentBlockHash?: string
  /** selector → selected field names (only `true` flags). */
  fields: Record<string, string[]>
  /** item selector → its requests, in query order. */
  requests: Map<string, ValidRequest[]>
}

/** `0x` or `0X` + hex digits (docs/protocol.md §3.2: the prefix is case-insensitive too). */
const HEX = '^0[xX][0-9a-fA-F]*$'

function filterSchema(f: FilterDecl): object {
  switch (f.kind) {
    case 'in':
      switch (f.values) {
        case 'hex':
        case 'felt':
          return { type: ['array', 'null'], items: { type: 'string', pattern: HEX } }
        case 'integer':
          return { type: ['array', 'null'], items: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER } }
        default:
          return { type: ['array', 'null'], items: { type: 'string' } }
      }
    case 'min':
    case 'max':
      return { type: ['integer', 'null'], minimum: 0, maximum: Number.MAX_SAFE_INTEGER }
    case 'nonZero':
      return { type: ['boolean', 'null'] }
  }
}

function requestSchema(request: RequestDecl): object {
  const properties: Record<string, object> = {}
  for (const [name, f] of Object.entries(request.filters)) properties[name] = filterSchema(f)
  for (const name of Object.keys(request.relations)) properties[name] = { type: ['boolean', 'null'] }
  return { type: 'object', additionalProperties: false, properties }
}

function selectorSchema(item: ItemDecl): object {
  const properties = Object.fromEntries(Object.keys(item.fields).map((f) => [f, { type: 'boolean' }]))
  return { type: ['object', 'null'], additionalProperties: false, properties }
}

export function querySchema(family: FamilyDecl): object {
  const all = [family.header, ...family.items]
  const properties: Record<string, object> = {
    type: { type: 'string' },
    fromBlock: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
    toBlock: { type: ['integer', 'null'], minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
    includeAllBlocks: { type: ['boolean', 'null'] },
    parentBlockHash: { type: ['string', 'null'], pattern: HEX },
    fields: {
      type: ['object', 'null'],
      additionalProperties: false,
      properties: Object.fromEntries(all.map((i) => [i.selector, selectorSchema(i)])),
    },
  }
  for (const item of family.items) {
    for (const r of item.requests) properties[r.name] = { type: ['array', 'null'], items: requestSchema(r) }
  }
  return { type: 'object', additionalProperties: false, required: ['fromBlock'], properties }
}

/** `/logs/0/address/3` → `logs[0].address[3]` */
function jsonPath(pointer: string, extra?: string): string {
  let out = ''
  const parts = pointer.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
  if (extra !== undefined) parts.push(extra)
  for (const p of parts) out += /^\d+$/.test(p) ? `[${p}]` : out ? `.${p}` : p
  return out
}

function describe(e: ErrorObject): ApiError {
  switch (e.keyword) {
    case 'additionalProperty':
    case 'additionalProperties': {
      const key = (e.params as { additionalProperty: string }).additionalProperty
      const path = jsonPath(e.instancePath, key)
      return badRequest('invalid-query', `unknown key "${key}" at ${path}`, path)
    }
    case 'required': {
      const key = (e.params as { missingProperty: string }).missingProperty
      return badRequest('invalid-query', `"${key}" is required`, jsonPath(e.instancePath, key))
    }
    case 'type': {
      const path = jsonPath(e.instancePath) || '(query)'
      const expected = ([] as string[]).concat((e.params as { type: string | string[] }).type).filter((t) => t !== 'null')
      return badRequest('invalid-query', `${path}: expected ${expected.join(' or ')}`, path)
    }
    case 'pattern': {
      const path = jsonPath(e.instancePath)
      return badRequest('invalid-query', `${path}: expected a 0x-prefixed hex string`, path)
    }
    case 'minimum':
    case 'maximum': {
      const path = jsonPath(e.instancePath)
      return badRequest('invalid-query', `${path}: ${e.message}`, path)
    }
    default: {
      const path = jsonPath(e.instancePath)
      return badRequest('invalid-query', `${path || 'query'}: ${e.message}`, path || undefined)
    }
  }
}

/** Ajv's options for the query schemas, for the validators compiled here and the ones the build writes. */
export const AJV_OPTIONS = { allErrors: false, strict: true } as const

/** The file the build writes a family's validator to. */
export const precompiledFile = (family: string) => fileURLToPath(new URL(`./validators/${family}.cjs`, import.meta.url))

/** What a precompiled validator was generated from. */
export const schemaHash = (schema: object) => createHash('sha256').update(JSON.stringify(schema)).digest('hex')

const compiled = new WeakMap<FamilyDecl, ValidateFunction>()

/** The validator in `file` as the build wrote it, if there is one and it was generated from `schema`. */
export function loadPrecompiled(file: string, schema: object): ValidateFunction | undefined {
  if (!existsSync(file)) return undefined
  const v = createRequire(import.meta.url)(file) as ValidateFunction & { schemaHash?: string }
  return v.schemaHash === schemaHash(schema) ? v : undefined
}

/**
 * Have the family's validator ready now (loading the precompiled one, or compiling the schema: once
 * per family and process), so that the first query of a worker's dataset does not wait for it.
 */
export function prepareQueryValidator(family: FamilyDecl): void {
  validator(family)
}

function validator(family: FamilyDecl): ValidateFunction {
  let v = compiled.get(family)
  if (!v) {
    const schema = querySchema(family)
    v = loadPrecompiled(precompiledFile(family.name), schema) ?? new Ajv(AJV_OPTIONS).compile(schema)
    compiled.set(family, v)
  }
  return v
}

function normalizeValues(f: FilterDecl, value: unknown): unknown {
  if (value == null || f.kind !== 'in') return value
  const list = value as unknown[]
  switch (f.values) {
    case 'hex':
    case 'lowercase':
      return list.map((v) => (v as string).toLowerCase())
    case 'felt':
      return list.map((v) => normalizeHex(v as string, 'felt'))
    default:
      return list
  }
}

/** Check a query body against the family; throws ApiError(400) naming the problem. */
export function validateQuery(family: FamilyDecl, body: unknown): ValidQuery {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw badRequest('invalid-query', 'the query must be a JSON object')
  }
  const q = body as Record<string, any>
  if (q.type !== undefined) {
    if (typeof q.type !== 'string') throw badRequest('invalid-query', 'type: expected string', 'type')
    // Own keys only: `toString`, `constructor`, `__proto__` are no query types.
    if (!FAMILY_OF_QUERY_TYPE.has(q.type)) throw badRequest('unknown-type', `unknown query type "${q.type}" (known: ${[...FAMILY_OF_QUERY_TYPE.keys()].join(', ')})`, 'type')
    if (!family.queryTypes.includes(q.type)) {
      throw badRequest('wrong-family', `this dataset holds ${family.name} data; a query of type "${q.type}" does not apply to it`, 'type')
    }
  } else if (!family.queryTypes.includes(undefined)) {
    // docs/protocol.md §2: a query without `type` is an EVM query.
    throw badRequest('wrong-family', `a query without "type" is an EVM query; this dataset holds ${family.name} data: add "type": "${family.queryTypes[0]}"`, 'type')
  }
  const validate = validator(family)
  if (!validate(q)) throw describe(validate.errors![0])

  if (q.toBlock != null && q.toBlock < q.fromBlock) {
    throw badRequest('invalid-range', `toBlock ${q.toBlock} is below fromBlock ${q.fromBlock}`, 'toBlock')
  }
  let count = 0
  const requests = new Map<string, ValidRequest[]>()
  for (const item of family.items) {
    const valid: ValidRequest[] = []
    for (const request of item.requests) {
      const list: Record<string, unknown>[] | null | undefined = q[request.name]
      if (!list?.length) continue
      count += list.length
      for (const r of list) {
        const filters: Record<string, unknown> = {}
        const relations: string[] = []
        for (const [key, value] of Object.entries(r)) {
          const f = request.filters[key]
          if (f) {
            if (value != null) filters[key] = normalizeValues(f, value)
          } else if (value === true) relations.push(key)
        }
        valid.push({ request, filters, relations })
      }
    }
    if (valid.length) requests.set(item.selector, valid)
  }
  if (count > MAX_ITEM_REQUESTS) {
    throw badRequest('too-many-requests', `the query has ${count} item requests; at most ${MAX_ITEM_REQUESTS} are allowed`)
  }
  const fields: Record<string, string[]> = {}
  for (const [selector, flags] of Object.entries<Record<string, boolean> | null>(q.fields ?? {})) {
    fields[selector] = Object.entries(flags ?? {}).filter(([, on]) => on).map(([name]) => name)
  }
  return {
    fromBlock: q.fromBlock,
    toBlock: q.toBlock ?? undefined,
    includeAllBlocks: q.includeAllBlocks === true,
    parentBlockHash: q.parentBlockHash == null ? undefined : normalizeHex(q.parentBlockHash, family.hashValues),
    fields,
    requests,
  }
}
