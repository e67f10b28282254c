import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { lowerBoundLast } from '../src/chunks/search.js'

/* The chunk lookup shared by the router and the worker's query engine. */
describe('lowerBoundLast', () => {
  // Chunks [0,99], [100,199], a gap, [300,399].
  const chunks = [{ first: 0, last: 99 }, { first: 100, last: 199 }, { first: 300, last: 399 }]

  it('finds the chunk holding a block, at its first, middle and last block', () => {
    assert.equal(lowerBoundLast(chunks, 0), 0)
    assert.equal(lowerBoundLast(chunks, 99), 0)
    assert.equal(lowerBoundLast(chunks, 100), 1)
    assert.equal(lowerBoundLast(chunks, 150), 1)
    assert.equal(lowerBoundLast(chunks, 399), 2)
  })

  it('sends a block in a gap to the first chunk after the gap', () => {
    assert.equal(lowerBoundLast(chunks, 200), 2)
    assert.equal(lowerBoundLast(chunks, 299), 2)
  })

  it('answers chunks.length past the last chunk and for no chunks', () => {
    assert.equal(lowerBoundLast(chunks, 400), 3)
    assert.equal(lowerBoundLast([], 5), 0)
  })

  it('agrees with a linear scan over many chunks', () => {
    const many = Array.from({ length: 1000 }, (_, i) => ({ last: i * 10 + 9 }))
    for (const block of [0, 9, 10, 4_567, 9_999, 10_000]) {
      const linear = many.findIndex((c) => c.last >= block)
      assert.equal(lowerBoundLast(many, block), linear === -1 ? many.length : linear)
    }
  })
})
