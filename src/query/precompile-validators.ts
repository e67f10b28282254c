import { mkdirSync, renameSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { Ajv } from 'ajv'
import standalone from 'ajv/dist/standalone/index.js'
import { FAMILY_NAMES, familyByName } from '../families/index.js'
import { AJV_OPTIONS, precompiledFile, querySchema, schemaHash } from './validate.js'

/*
 * Run by `npm run build` after tsc: writes each family's query validator as code next to
 * validate.js (`validators/<family>.cjs`, ajv's standalone code), with the hash of the schema it was
 * generated from. A process then loads it in a few milliseconds instead of compiling the schema at
 * its first query; validate.ts ignores a file whose hash differs from the declaration's schema.
 */

// ajv's CommonJS module: its function is also its `default`
const code = standalone.default

for (const name of FAMILY_NAMES) {
  const schema = querySchema(familyByName(name))
  const ajv = new Ajv({ ...AJV_OPTIONS, code: { source: true } })
  const text = `${code(ajv, ajv.compile(schema))}\nmodule.exports.schemaHash = ${JSON.stringify(schemaHash(schema))};\n`
  const file = precompiledFile(name)
  mkdirSync(path.dirname(file), { recursive: true })
  writeFileSync(`${file}.tmp`, text)
  renameSync(`${file}.tmp`, file)
}
