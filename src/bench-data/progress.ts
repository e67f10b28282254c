import cliProgress from 'cli-progress'

/** A progress display: a bar on a TTY, a line every few seconds otherwise (CI logs). */
export function progress(label: string, total: number): { update(done: number): void; stop(): void } {
  if (process.stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      { format: `${label} [{bar}] {value}/{total} blocks | {rate} blocks/s | eta {eta_formatted}`, stream: process.stderr, etaBuffer: 200 },
      cliProgress.Presets.shades_classic,
    )
    const t0 = performance.now()
    bar.start(total, 0, { rate: '0' })
    return {
      update: (done) => bar.update(done, { rate: (done / ((performance.now() - t0) / 1000)).toFixed(0) }),
      stop: () => bar.stop(),
    }
  }
  const t0 = performance.now()
  let last = t0
  return {
    update(done) {
      const now = performance.now()
      if (now - last < 5000 && done < total) return
      last = now
      process.stderr.write(`${label}: ${done}/${total} blocks, ${(done / ((now - t0) / 1000)).toFixed(0)} blocks/s\n`)
    },
    stop() {},
  }
}
