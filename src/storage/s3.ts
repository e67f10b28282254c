import { createRequire } from 'node:module'
import { createHash } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { open } from 'node:fs/promises'
import { Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { S3Client } from '@aws-sdk/client-s3'
import { log } from '../log.js'
import { exponential, retry } from '../retry.js'
import { storageRequests } from './metrics.js'

/*
 * The object-storage half of the storage layer: `s3://bucket/prefix` URLs, one S3 client per
 * process configured by the standard AWS variables (AWS_ENDPOINT_URL, AWS_REGION,
 * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), path-style addressing when a custom endpoint is given
 * (MinIO, R2, s3rver), and the few operations the archive needs: list, read, upload, delete.
 */

export { isS3Url, joinKey, parseS3Url, s3Url, type S3Location } from './s3-url.js'

let shared: S3Client | undefined
/**
 * The SDK, loaded on first use: it is 4.8 MB of a worker's 21 MB live JS heap, which the garbage
 * collector marks again after every few answers (docs/benchmark-history.md, step 36), in processes that
 * mostly never touch object storage.
 */
let sdk: typeof import('@aws-sdk/client-s3') | undefined
// `require`, not `import()`: as an ES module import Node scans its CommonJS files for their exports (304 against 166 ms of CPU)
const loadSdk = async () => (sdk ??= createRequire(import.meta.url)('@aws-sdk/client-s3') as typeof import('@aws-sdk/client-s3'))
/** The SDK's command classes, once `s3Client()` loaded them (a request's client is awaited before its command is built). */
function cmd(): typeof import('@aws-sdk/client-s3') {
  if (!sdk) throw new Error('the S3 SDK is not loaded yet: await s3Client() first')
  return sdk
}

/**
 * Time limits and tries of S3 requests. Without time limits a server that stops answering (or
 * stops sending a body half-way) hangs a worker's download, the router's listing or an ingest's
 * upload forever. Environment: BLOCK_ARCHIVE_S3_CONNECT_TIMEOUT_MS, BLOCK_ARCHIVE_S3_SOCKET_TIMEOUT_MS,
 * BLOCK_ARCHIVE_S3_ATTEMPTS.
 */
export interface S3Settings {
  /** Connecting (default 10 s). */
  connectTimeoutMs: number
  /** Longest silence of a connection with a request under way, waiting for the answer or within its body (default 60 s). */
  socketTimeoutMs: number
  /** Tries per request (the SDK's retries on 5xx, throttling, timeouts and resets; body downloads cut short are tried again as often). Default 5. */
  attempts: number
}

export function s3Settings(): S3Settings {
  const env = (name: string, dflt: number, min: number) => {
    const v = Number(process.env[name])
    return process.env[name] && Number.isFinite(v) ? Math.max(min, Math.floor(v)) : dflt
  }
  return {
    connectTimeoutMs: env('BLOCK_ARCHIVE_S3_CONNECT_TIMEOUT_MS', 10_000, 1),
    socketTimeoutMs: env('BLOCK_ARCHIVE_S3_SOCKET_TIMEOUT_MS', 60_000, 1),
    attempts: env('BLOCK_ARCHIVE_S3_ATTEMPTS', 5, 1),
  }
}

/** The process's S3 client (created on first use, so that tests can set the variables first). */
export async function s3Client(): Promise<S3Client> {
  if (shared) return shared
  const { S3Client } = await loadSdk()
  if (shared) return shared
  // The SDK version the lock file pins runs on Node 20; its notice about later versions is not for our users.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
  const endpoint = process.env.AWS_ENDPOINT_URL || process.env.AWS_ENDPOINT_URL_S3 || undefined
  const settings = s3Settings()
  shared = new S3Client({
    region: process.env.AWS_REGION || process.env.AWS_DEFAULT_REGION || 'us-east-1',
    ...(endpoint ? { endpoint, forcePathStyle: true } : {}),
    // Custom endpoints (s3rver, older MinIO) do not all accept the newer default checksums.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: settings.attempts,
    requestHandler: { connectionTimeout: settings.connectTimeoutMs, socketTimeout: settings.socketTimeoutMs },
  })
  // One count per call (the SDK's own retries are not counted again).
  shared.middlewareStack.add(
    (next, context) => (args) => {
      storageRequests.inc({ storage: 's3', op: String(context.commandName ?? 'unknown').replace(/Command$/, '') })
      return next(args)
    },
    { step: 'initialize', name: 'countRequests' },
  )
  return shared
}

/** Forget the shared client (tests that start a new S3 server on another port). */
export function resetS3Client(): void {
  shared?.destroy()
  shared = undefined
}

export interface ObjectInfo {
  key: string
  size: number
}

/** Every object under `prefix` (recursively), in key order; with `startAfter`, only keys after it. */
export async function listObjects(bucket: string, prefix: string, startAfter?: string): Promise<ObjectInfo[]> {
  const out: ObjectInfo[] = []
  const client = await s3Client()
  for await (const page of cmd().paginateListObjectsV2({ client }, { Bucket: bucket, Prefix: prefix, StartAfter: startAfter })) {
    for (const o of page.Contents ?? []) if (o.Key) out.push({ key: o.Key, size: Number(o.Size ?? 0) })
  }
  return out
}

/** The "folders" directly under `prefix` (which should end with '/'), without the prefix and slash. */
export async function listFolders(bucket: string, prefix: string): Promise<string[]> {
  const out: string[] = []
  const client = await s3Client()
  for await (const page of cmd().paginateListObjectsV2({ client }, { Bucket: bucket, Prefix: prefix, Delimiter: '/' })) {
    for (const p of page.CommonPrefixes ?? []) if (p.Prefix) out.push(p.Prefix.slice(prefix.length).replace(/\/$/, ''))
  }
  return out.sort()
}

function isMissing(e: any): boolean {
  return e?.name === 'NoSuchKey' || e?.name === 'NotFound' || e?.$metadata?.httpStatusCode === 404
}

/**
 * GET an object and read its body with `read`. The SDK retries a request that fails before its
 * answer arrives; a body that breaks off (connection closed or silent for the socket timeout, fewer
 * bytes than announced) is asked for again here, up to the same number of tries.
 */
async function getObject<T>(bucket: string, key: string, signal: AbortSignal | undefined, read: (body: Readable, length: number | undefined) => Promise<T>): Promise<T> {
  /** Errors of a body that broke off (a failed request is the SDK's to retry, a failed `read` is not retried). */
  const broke = new WeakSet<object>()
  return retry(async () => {
    const r = await (await s3Client()).send(new (cmd().GetObjectCommand)({ Bucket: bucket, Key: key }), { abortSignal: signal })
    const body = r.Body as Readable
    let broken: unknown
    body.once('error', (e) => (broken ??= e))
    try {
      return await read(body, r.ContentLength)
    } catch (e) {
      if (e instanceof BodyCut) broken ??= e
      if (broken !== undefined && !localErrors.has(e as object) && typeof e === 'object' && e) broke.add(e)
      throw e
    }
  }, {
    attempts: s3Settings().attempts,
    signal,
    retryable: (e) => typeof e === 'object' && e !== null && broke.has(e),
    pauseMs: exponential(200, 2000),
    onRetry: (e, attempt) => log.warn({ bucket, key, attempt, err: (e as Error)?.message }, 's3: the object body broke off; asking again'),
  })
}

/** The body ended before the announced length. */
class BodyCut extends Error {}

/** Errors of writing the local copy (a full disk): not a reason to download again. */
const localErrors = new WeakSet<object>()

function checkLength(key: string, got: number, want: number | undefined): void {
  if (want !== undefined && got !== want) throw new BodyCut(`${key}: the body had ${got} bytes, ${want} were announced`)
}

/** The object's text, or undefined when it does not exist. */
export async function getText(bucket: string, key: string, signal?: AbortSignal): Promise<string | undefined> {
  try {
    return await getObject(bucket, key, signal, async (body, length) => {
      const chunks: Buffer[] = []
      for await (const c of body) chunks.push(c as Buffer)
      const buf = Buffer.concat(chunks)
      checkLength(key, buf.length, length)
      return buf.toString('utf8')
    })
  } catch (e) {
    if (isMissing(e)) return undefined
    throw e
  }
}

/**
 * A small object's text unless its ETag is still `etag` (a conditional GET: `If-None-Match`, no body
 * when unchanged). `undefined` when it does not exist.
 */
export async function getTextIfChanged(bucket: string, key: string, etag: string | undefined, signal?: AbortSignal): Promise<{ text: string; etag?: string } | 'unchanged' | undefined> {
  try {
    const r = await (await s3Client()).send(new (cmd().GetObjectCommand)({ Bucket: bucket, Key: key, IfNoneMatch: etag }), { abortSignal: signal })
    return { text: await (r.Body as any).transformToString('utf8'), etag: r.ETag }
  } catch (e: any) {
    if (e?.$metadata?.httpStatusCode === 304 || e?.name === 'NotModified') return 'unchanged'
    if (isMissing(e)) return undefined
    throw e
  }
}

export interface DownloadResult {
  bytes: number
  sha256: string
}

/** Stream an object into a local file, hashing it on the way (a body that breaks off is downloaded again). */
export async function downloadObject(bucket: string, key: string, dest: string, signal?: AbortSignal): Promise<DownloadResult> {
  return getObject(bucket, key, signal, async (body, length) => {
    const hash = createHash('sha256')
    let bytes = 0
    const tap = new Transform({
      transform(chunk: Buffer, _enc, done) {
        hash.update(chunk)
        bytes += chunk.length
        done(null, chunk)
      },
    })
    const out = createWriteStream(dest)
    out.once('error', (e) => localErrors.add(e))
    await pipeline(body, tap, out, { signal })
    checkLength(key, bytes, length)
    return { bytes, sha256: hash.digest('hex') }
  })
}

export async function putText(bucket: string, key: string, text: string, signal?: AbortSignal): Promise<void> {
  // The length stated: for an empty text the SDK sends none and prints a warning about streams to the console.
  const params = { Bucket: bucket, Key: key, Body: text, ContentLength: Buffer.byteLength(text), ContentType: 'application/json' }
  await (await s3Client()).send(new (cmd().PutObjectCommand)(params), { abortSignal: signal })
}

/** Files above this size are uploaded in parts (env BLOCK_ARCHIVE_S3_PART_MB sets the part size). */
export function partBytes(): number {
  const mb = Number(process.env.BLOCK_ARCHIVE_S3_PART_MB ?? 16)
  return Math.max(5, Number.isFinite(mb) ? mb : 16) * 1024 * 1024
}

/**
 * Upload a local file through the SDK's `Upload` (@aws-sdk/lib-storage): one PUT when it fits in a
 * part, else a multipart upload of `partBytes()` parts sent one at a time (memory stays at about one
 * part). The parts reach the client as buffers, which it retries like any request (it does not retry
 * a streamed body). A multipart upload that fails is aborted here rather than by `Upload`, whose
 * abort failing (servers without AbortMultipartUpload) would replace the upload's own error; one
 * cut short by a killed process is aborted by the next ingest (`abortMultipartUploads`).
 */
export async function uploadFile(bucket: string, key: string, file: string, part = partBytes()): Promise<number> {
  // Opened here, not by the stream: a missing file is this call's error, not an unhandled stream event.
  const fh = await open(file, 'r').catch((e) => {
    throw uploadError(bucket, key, file, e)
  })
  const body = fh.createReadStream({ autoClose: false, highWaterMark: READ_BYTES })
  let upload: import('@aws-sdk/lib-storage').Upload | undefined
  try {
    const { size } = await fh.stat()
    const { Upload } = await (libStorage ??= import('@aws-sdk/lib-storage'))
    upload = new Upload({ client: await s3Client(), params: { Bucket: bucket, Key: key, Body: body, ContentLength: size }, partSize: part, queueSize: 1, leavePartsOnError: true })
    await upload.done()
    return size
  } catch (e) {
    if (upload?.uploadId) await abortUpload(bucket, key, upload.uploadId)
    throw uploadError(bucket, key, file, e)
  } finally {
    body.destroy()
    await fh.close()
  }
}

async function abortUpload(bucket: string, key: string, uploadId: string): Promise<void> {
  try {
    await (await s3Client()).send(new (cmd().AbortMultipartUploadCommand)({ Bucket: bucket, Key: key, UploadId: uploadId }))
  } catch (e) {
    log.warn({ bucket, key, uploadId, err: (e as Error)?.message }, 's3: cannot abort the failed multipart upload (the next ingest aborts what is left under its prefix)')
  }
}

/** Reads of a file being uploaded (a part is put together from them). */
const READ_BYTES = 1024 * 1024

/** The multipart-upload half of the SDK, loaded by the first upload (servers never upload). */
let libStorage: Promise<typeof import('@aws-sdk/lib-storage')> | undefined

function uploadError(bucket: string, key: string, file: string, e: any): Error {
  const tries = e?.$metadata?.attempts
  return new Error(`uploading ${file} to s3://${bucket}/${key} failed${tries ? ` (${tries} tries)` : ''}: ${e?.name && e.name !== 'Error' ? `${e.name}: ` : ''}${e?.message ?? e}`, { cause: e })
}

export async function deleteObjects(bucket: string, keys: string[]): Promise<void> {
  for (let i = 0; i < keys.length; i += 1000) {
    const batch = keys.slice(i, i + 1000)
    await (await s3Client()).send(new (cmd().DeleteObjectsCommand)({ Bucket: bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } }))
  }
}

/**
 * Abort the multipart uploads under `prefix` that were started and never completed (their parts are
 * stored, and billed, until aborted). Returns how many, or undefined when the server cannot list
 * them (s3rver answers NotImplemented). The SDK has no paginator for ListMultipartUploads (its pages
 * continue by two markers), hence the loop.
 */
export async function abortMultipartUploads(bucket: string, prefix: string): Promise<number | undefined> {
  let aborted = 0
  let keyMarker: string | undefined
  let uploadIdMarker: string | undefined
  for (;;) {
    let r
    try {
      r = await (await s3Client()).send(new (cmd().ListMultipartUploadsCommand)({ Bucket: bucket, Prefix: prefix, KeyMarker: keyMarker, UploadIdMarker: uploadIdMarker }))
    } catch (e: any) {
      if (e?.name === 'NotImplemented' || e?.$metadata?.httpStatusCode === 501) return undefined
      throw e
    }
    for (const u of r.Uploads ?? []) {
      if (!u.Key || !u.UploadId) continue
      await (await s3Client()).send(new (cmd().AbortMultipartUploadCommand)({ Bucket: bucket, Key: u.Key, UploadId: u.UploadId }))
      aborted++
    }
    if (!r.IsTruncated) return aborted
    keyMarker = r.NextKeyMarker
    uploadIdMarker = r.NextUploadIdMarker
  }
}
