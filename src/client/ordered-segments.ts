/*
 * The answers of a range fetched by several request loops at once and handed out in range order.
 *
 * The range is cut into short segments (by default twice the blocks one answer covers, learned as
 * answers come in), taken in order by `parallel` runners, each running the range loop over its
 * segment. Short segments keep every runner busy on a long range: a runner that finishes a segment
 * takes the next one, up to `2 × parallel` segments ahead of the reader. Memory stays bounded: the
 * segment the reader is on buffers at most 2 answers, the others together at most `3 × parallel`.
 * A failed segment ends the range with its error once the answers before it are read.
 */

export interface SegmentAnswer {
  /** `fromBlock` of the request. */
  from: number
  /** Last block of the answer (known when the answer is handed on). */
  last?: number
}

export interface OrderedSegmentsOptions<A extends SegmentAnswer> {
  from: number
  /** Inclusive. */
  end: number
  parallel: number
  /** Fixed segment size in blocks; absent → twice `span`, adapted as answers come. */
  segmentBlocks?: number
  /** Blocks one answer is expected to cover (a first answer's). */
  span: number
  /** The range loop over `[from, to]`: its answers in order (may end early, e.g. in a gap). */
  run: (from: number, to: number) => AsyncIterable<A>
}

interface Segment<A> {
  seq: number
  from: number
  to: number
  items: A[]
  done: boolean
  error?: unknown
}

/** Answers the segment the reader is on may hold unread. */
const HEAD_BUFFER = 2

export async function* orderedSegments<A extends SegmentAnswer>(o: OrderedSegmentsOptions<A>): AsyncGenerator<A> {
  if (o.end < o.from) return
  const window = 2 * o.parallel
  const budget = 3 * o.parallel
  /** Segments from the one the reader is on to the newest one taken. */
  const live: Segment<A>[] = []
  let nextFrom = o.from
  let seq = 0
  let span = Math.max(1, o.span)
  /** Answers buffered in `live`, unread. */
  let buffered = 0
  let failedSeq = Infinity
  let stopped = false
  let waiters: (() => void)[] = []
  const changed = () => new Promise<void>((resolve) => waiters.push(resolve))
  const notify = () => {
    const w = waiters
    waiters = []
    for (const f of w) f()
  }
  const nextSize = () => o.segmentBlocks ?? Math.max(1, Math.round(2 * span))

  /** What an answer tells about the blocks one answer covers. */
  const learn = (seg: Segment<A>, a: A, first: boolean) => {
    const last = a.last!
    if (last < seg.to) span = (span + (last - a.from + 1)) / 2
    else if (first) span = Math.max(span, seg.to - seg.from + 1)
  }

  const runner = async (): Promise<void> => {
    while (!stopped && seq < failedSeq) {
      while (live.length >= window && !stopped && seq < failedSeq) await changed()
      if (stopped || seq >= failedSeq || nextFrom > o.end) return
      const size = nextSize()
      const seg: Segment<A> = { seq: seq++, from: nextFrom, to: Math.min(o.end, nextFrom + size - 1), items: [], done: false }
      nextFrom = seg.to + 1
      live.push(seg)
      const dropped = () => stopped || seg.seq > failedSeq
      try {
        let first = true
        for await (const a of o.run(seg.from, seg.to)) {
          learn(seg, a, first)
          first = false
          while (!dropped() && (live[0] === seg ? seg.items.length >= HEAD_BUFFER : buffered >= budget)) await changed()
          if (dropped()) return
          seg.items.push(a)
          buffered++
          notify()
        }
        if (first) span = Math.max(span, seg.to - seg.from + 1)
      } catch (e) {
        if (!dropped()) {
          seg.error = e
          failedSeq = Math.min(failedSeq, seg.seq)
        }
      } finally {
        seg.done = true
        notify()
      }
    }
  }

  const runners = Array.from({ length: o.parallel }, runner)
  try {
    for (;;) {
      const head = live[0]
      if (!head) {
        if (nextFrom > o.end || seq >= failedSeq) return
        await changed()
        continue
      }
      if (head.items.length) {
        const a = head.items.shift()!
        buffered--
        notify()
        yield a
        continue
      }
      if (head.done) {
        if (head.error !== undefined) throw head.error
        live.shift()
        notify()
        continue
      }
      await changed()
    }
  } finally {
    stopped = true
    notify()
    await Promise.allSettled(runners)
  }
}
