/** A FIFO lock. */
export class Mutex {
  private tail: Promise<void> = Promise.resolve()

  /** Resolves with the unlock function once every earlier holder has unlocked. */
  lock(): Promise<() => void> {
    let unlock!: () => void
    const held = new Promise<void>((resolve) => (unlock = resolve))
    const before = this.tail
    this.tail = before.then(() => held)
    return before.then(() => unlock)
  }
}
