import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { mapLimit } from '../src/semaphore.js'
import { deleteObjects, getText, listFolders, listObjects, putText, s3Client } from '../src/storage/s3.js'
import { startS3Process, type S3Server } from './helpers/s3.js'

/*
 * Listings of object storage go on past the first page (S3 answers at most 1,000 keys a page and a
 * continuation token): against s3rver in a process of its own (helpers/s3.ts says why). And an
 * empty object put without the SDK's console warning (it sends no length for an empty body unless told).
 */

describe('s3 listings of more than one page', { timeout: 600_000 }, () => {
  let s3: S3Server
  const keys = Array.from({ length: 1003 }, (_, i) => `pages/${i % 2 ? 'b' : 'a'}/${String(i).padStart(5, '0')}`)

  before(async () => {
    s3 = await startS3Process(['archive'])
    assert.deepEqual(await listObjects('archive', 'pages/'), [], 'a listing as the first request of the process')
    await mapLimit(keys, 16, (k) => putText('archive', k, k))
  })

  after(async () => {
    await s3?.stop()
  })

  it('every key once and in order, over two pages; with startAfter only the keys after it; folders', async () => {
    const commands: string[] = []
    ;(await s3Client()).middlewareStack.add((next, context) => (args) => {
      commands.push(context.commandName ?? '?')
      return next(args)
    }, { step: 'initialize', name: 'recordCommands' })
    let all, later
    try {
      all = await listObjects('archive', 'pages/')
      assert.deepEqual(commands, ['ListObjectsV2Command', 'ListObjectsV2Command'], 'two pages')
      later = await listObjects('archive', 'pages/', 'pages/a/00500')
    } finally {
      ;(await s3Client()).middlewareStack.remove('recordCommands')
    }
    const sorted = [...keys].sort()
    assert.deepEqual(all.map((o) => o.key), sorted)
    assert.ok(all.every((o) => o.size === o.key.length))
    assert.deepEqual(later.map((o) => o.key), sorted.filter((k) => k > 'pages/a/00500'))
    assert.deepEqual(await listFolders('archive', 'pages/'), ['a', 'b'])
  })

  it('an empty text is put with its length: the SDK prints no warning about streams, and it reads back empty', async () => {
    const warned: unknown[] = []
    const warn = console.warn
    console.warn = (...a: unknown[]) => void warned.push(a)
    try {
      await putText('archive', 'empty/text', '')
      await putText('archive', 'empty/other', 'x')
    } finally {
      console.warn = warn
    }
    assert.deepEqual(warned, [])
    assert.equal(await getText('archive', 'empty/text'), '')
    assert.equal(await getText('archive', 'empty/other'), 'x')
    await deleteObjects('archive', ['empty/text', 'empty/other'])
  })

  it('deleting more than 1,000 keys (batches of 1,000) leaves none listed', async () => {
    await deleteObjects('archive', keys)
    assert.deepEqual(await listObjects('archive', 'pages/'), [])
  })
})
