/** A bounded async queue: `push` waits while `capacity` items are buffered; iteration ends at `close`. */
export class Channel<T> implements AsyncIterable<T> {
  private readonly items: T[] = []
  private closed = false
  private error: unknown
  private readerWake?: () => void
  private writerWake?: () => void

  constructor(private readonly capacity: number) {}

  async push(item: T): Promise<void> {
    while (this.items.length >= this.capacity && !this.closed) {
      await new Promise<void>((resolve) => (this.writerWake = resolve))
    }
    if (this.closed) throw new Error('channel closed')
    this.items.push(item)
    this.wakeReader()
  }

  /** No more items; pending and later reads end (or throw `error`). */
  close(error?: unknown): void {
    if (this.closed) return
    this.closed = true
    this.error = error
    this.wakeReader()
    this.wakeWriter()
  }

  get isClosed(): boolean {
    return this.closed
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    try {
      while (true) {
        if (this.items.length) {
          yield this.items.shift()!
          this.wakeWriter()
          continue
        }
        if (this.closed) {
          if (this.error !== undefined) throw this.error
          return
        }
        await new Promise<void>((resolve) => (this.readerWake = resolve))
      }
    } finally {
      // The reader stopped early: let a waiting writer fail instead of hanging.
      this.close()
    }
  }

  private wakeReader(): void {
    const w = this.readerWake
    this.readerWake = undefined
    w?.()
  }

  private wakeWriter(): void {
    const w = this.writerWake
    this.writerWake = undefined
    w?.()
  }
}
