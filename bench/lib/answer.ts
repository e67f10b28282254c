import { answerSent, piecesSent } from '../../src/fast-path.js'
import { prepareQuery } from '../../src/query/engine.js'
import type { DatasetView, QueryBudgets } from '../../src/query/types.js'

/** Budgets high enough that no answer is cut: the benchmarks compare whole answers. */
export const UNCUT: QueryBudgets = { sizeBytes: 2 ** 40, timeMs: 10 * 60_000 }

/**
 * The engine's whole answer to `query`, read as a socket reads it: each piece is let go once read,
 * so the answer's row slabs serve its later slices and, once it is read, the next answer.
 * `onPiece` sees each piece before it is let go (copy it to keep it). Returns the answer's bytes.
 */
export async function readAnswer(view: DatasetView, query: unknown, budgets: QueryBudgets = UNCUT, onPiece?: (piece: Uint8Array) => void): Promise<number> {
  const s = await prepareQuery(view, query, budgets)
  let n = 0
  let pieces = 0
  for await (const piece of s.body) {
    onPiece?.(piece)
    n += piece.length
    piecesSent(s, ++pieces)
  }
  answerSent(s)
  return n
}
