import { spawn } from 'node:child_process'
import http from 'node:http'
import { fileURLToPath } from 'node:url'

/*
 * An open-loop load at a fixed rate, requests evenly spaced (about one per millisecond at 1,000/s),
 * as many independent clients would send them, each timed from its send to the end of its body.
 * It runs in its own process (`pacedLoad`), so that what the benchmark process does meanwhile (the
 * fake workers' pings) does not delay the timing. autocannon's `overallRate` sends each
 * connection's share in bursts: 8 connections at 1,000/s against a server answering a constant
 * took 5.9 ms at p99 (0.2 ms with 1 connection), which is the client's queue, not the server.
 */

export interface PacedLoadOptions {
  /** Origin, e.g. http://127.0.0.1:8080. */
  origin: string
  /** Paths asked in turn. */
  paths: string[]
  rate: number
  seconds: number
  /** Most requests in flight (keep-alive sockets). */
  sockets?: number
  /** Seconds of the same load first, not counted (sockets opened, both sides' code compiled). */
  warmSeconds?: number
}

export interface PacedLoadFigures {
  sent: number
  answered: number
  statuses: Record<string, number>
  /** Answers per second over the run. */
  rps: number
  p50: number
  p99: number
  max: number
}

async function load(o: PacedLoadOptions): Promise<PacedLoadFigures> {
  const url = new URL(o.origin)
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.sockets ?? 32 })
  const latencies: number[] = []
  const statuses: Record<string, number> = {}
  let sent = 0
  let pending = 0
  let counting = false
  const one = (p: string) => {
    const t0 = performance.now()
    const counted = counting
    pending++
    const done = (status: string) => {
      pending--
      if (!counted) return
      statuses[status] = (statuses[status] ?? 0) + 1
      if (status === '200') latencies.push(performance.now() - t0)
    }
    http.get({ host: url.hostname, port: url.port, path: p, agent }, (res) => {
      res.resume()
      res.once('end', () => done(String(res.statusCode)))
      res.once('error', () => done('error'))
    }).once('error', () => done('error'))
  }
  const paced = (seconds: number) => {
    const total = Math.round(o.rate * seconds)
    const start = performance.now()
    let n = 0
    return new Promise<void>((resolve) => {
      const tick = () => {
        const due = Math.min(total, Math.floor(((performance.now() - start) * o.rate) / 1000))
        while (n < due) one(o.paths[n++ % o.paths.length])
        if (n < total) setTimeout(tick, 1)
        else resolve()
      }
      tick()
    })
  }
  await paced(o.warmSeconds ?? 1)
  counting = true
  const start = performance.now()
  sent = Math.round(o.rate * o.seconds)
  await paced(o.seconds)
  const until = performance.now() + 10_000
  while (pending > 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 5))
  const elapsed = (performance.now() - start) / 1000
  agent.destroy()
  const v = latencies.sort((a, b) => a - b)
  const at = (q: number) => (v.length ? v[Math.min(v.length - 1, Math.floor(q * v.length))] : NaN)
  return { sent, answered: v.length, statuses, rps: v.length / elapsed, p50: at(0.5), p99: at(0.99), max: v.at(-1) ?? NaN }
}

/** Run the load in a child process and return its figures. */
export function pacedLoad(o: PacedLoadOptions): Promise<PacedLoadFigures> {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), JSON.stringify(o)], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout!.on('data', (d) => (out += d))
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`paced load exited with ${code}`))
      resolve(JSON.parse(out) as PacedLoadFigures)
    })
  })
}

/**
 * The floor of the measurement: a fastify server in its own process answering every path with a
 * constant, under the same load. What a server adds to it is its own cost.
 */
export async function floorServer(): Promise<{ origin: string; stop(): void }> {
  const script = `
    const app = (await import('fastify')).default()
    app.get('/*', async () => 'http://127.0.0.1:1/worker')
    await app.listen({ host: '127.0.0.1', port: 0 })
    console.log('floor: http://127.0.0.1:' + app.server.address().port)`
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'], cwd: fileURLToPath(new URL('../../..', import.meta.url)) })
  const origin = await new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (d) => {
      out += d
      const m = /floor: (\S+)/.exec(out)
      if (m) resolve(m[1])
    })
    child.once('exit', (code) => reject(new Error(`the floor server exited with ${code}`)))
  })
  return { origin, stop: () => child.kill('SIGTERM') }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  load(JSON.parse(process.argv[2]) as PacedLoadOptions).then((f) => process.stdout.write(JSON.stringify(f)))
}
