import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import S3rver from 's3rver'
import { until } from './cli.js'
import { freePort } from './http.js'
import { joinKey, listObjects, putText, resetS3Client, uploadFile } from '../../src/storage/s3.js'
import { readFile } from 'node:fs/promises'

/*
 * A real S3 protocol server on loopback (s3rver, files in a temp folder), with the standard AWS
 * variables set in this process, so the archive's S3 client and child processes started with
 * `process.env` talk to it.
 */

export interface S3Server {
  endpoint: string
  /** The variables a child process needs. */
  env: Record<string, string>
  stop(): Promise<void>
}

/** Set environment variables of this process; the returned function puts back what was there. */
export function setEnv(vars: Record<string, string>): () => void {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]))
  Object.assign(process.env, vars)
  return () => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
}

export async function startS3(buckets: string[]): Promise<S3Server> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ba-s3-'))
  const server = new S3rver({ port: 0, address: '127.0.0.1', directory: dir, silent: true, configureBuckets: buckets.map((name) => ({ name })) })
  const { port } = await server.run()
  const env = {
    AWS_ENDPOINT_URL: `http://127.0.0.1:${port}`,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'S3RVER',
    AWS_SECRET_ACCESS_KEY: 'S3RVER',
  }
  const restoreEnv = setEnv(env)
  resetS3Client()
  return {
    endpoint: env.AWS_ENDPOINT_URL,
    env,
    async stop() {
      restoreEnv()
      resetS3Client()
      await server.close()
      await rm(dir, { recursive: true, force: true })
    },
  }
}

/**
 * s3rver in a process of its own, for listings of more than one page: s3rver encrypts its
 * continuation tokens with DES, which the OpenSSL 3 of Node has only in its legacy provider (in a
 * process without `--openssl-legacy-provider`, a listing past 1,000 keys answers 500 InternalError).
 */
export async function startS3Process(buckets: string[]): Promise<S3Server> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ba-s3-'))
  const port = await freePort()
  const bin = createRequire(import.meta.url).resolve('s3rver/bin/s3rver.js')
  const child = spawn(process.execPath, ['--openssl-legacy-provider', bin, '-d', dir, '-a', '127.0.0.1', '-p', String(port), '-s', ...buckets.flatMap((b) => ['--configure-bucket', b])], { stdio: 'ignore' })
  const exited = once(child, 'exit')
  const env = { AWS_ENDPOINT_URL: `http://127.0.0.1:${port}`, AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER' }
  const restoreEnv = setEnv(env)
  resetS3Client()
  const stop = async () => {
    restoreEnv()
    resetS3Client()
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    await exited
    await rm(dir, { recursive: true, force: true })
  }
  try {
    await until('s3rver to answer', async () => ((await fetch(`${env.AWS_ENDPOINT_URL}/${buckets[0] ?? ''}`).catch(() => undefined))?.status ? true : undefined), 60_000)
  } catch (e) {
    await stop()
    throw e
  }
  return { endpoint: env.AWS_ENDPOINT_URL, env, stop }
}

/**
 * Copy a local dataset folder into `bucket/prefix` the way an ingest publishes: dataset.json, then
 * per chunk every file with `blocks.parquet` last. Chunks already in the bucket are skipped.
 */
export async function uploadDataset(local: string, bucket: string, prefix: string): Promise<string[]> {
  const present = new Set((await listObjects(bucket, prefix + '/')).map((o) => o.key))
  await putText(bucket, joinKey(prefix, 'dataset.json'), await readFile(path.join(local, 'dataset.json'), 'utf8'))
  const uploaded: string[] = []
  for (const top of (await readdir(local)).filter((n) => /^\d{10}$/.test(n)).sort()) {
    for (const chunk of (await readdir(path.join(local, top))).sort()) {
      const rel = `${top}/${chunk}`
      if (present.has(joinKey(prefix, rel, 'blocks.parquet'))) continue
      const files = (await readdir(path.join(local, rel))).sort((a, b) => Number(a === 'blocks.parquet') - Number(b === 'blocks.parquet'))
      for (const f of files) await uploadFile(bucket, joinKey(prefix, rel, f), path.join(local, rel, f))
      uploaded.push(rel)
    }
  }
  return uploaded
}
