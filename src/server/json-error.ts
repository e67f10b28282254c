/*
 * Where a request body stops being JSON, for the `invalid-json` answer: V8's reason with the
 * position (line, column) and a short excerpt around it.
 */

/** Characters of context either side of the position in the excerpt. */
const CONTEXT = 24

/**
 * Why `text` is not JSON, e.g. `Expected double-quoted property name at position 17 (line 1,
 * column 18) near `{"fromBlock":0,}``. `text` must be invalid JSON: for valid JSON (refused for
 * another reason, a `__proto__` key) the answer says so.
 */
export function describeJsonError(text: string): string {
  let reason: string
  try {
    JSON.parse(text)
    return 'it has a "__proto__" or "constructor.prototype" key, which is not allowed'
  } catch (e) {
    reason = (e as Error).message
  }
  const v8 = /\bat position (\d+)/.exec(reason)
  const pos = v8 ? Number(v8[1]) : /end of JSON input/.test(reason) ? text.length : Math.max(0, jsonErrorPosition(text))
  // V8 says "… in JSON at position N" or "Unexpected token 'x', "…" is not valid JSON": keep its
  // words, not its copy of the body.
  reason = reason
    .replace(/\s*(in JSON )?at position \d+.*$/s, '')
    .replace(/,? ?(\.\.\.)?".*"(\.\.\.)? is not valid JSON$/s, '')
    .replace(/ JSON input$/, ' input') || 'Unexpected character'
  let line = 1
  let lineStart = 0
  for (let i = text.indexOf('\n'); i !== -1 && i < pos; i = text.indexOf('\n', i + 1)) {
    line++
    lineStart = i + 1
  }
  const from = Math.max(0, pos - CONTEXT)
  const to = Math.min(text.length, pos + CONTEXT)
  // Control characters (a line break…) as JSON escapes, so the excerpt stays on one line.
  const shown = text.slice(from, to).replace(/[\u0000-\u001f]/g, (c) => JSON.stringify(c).slice(1, -1))
  const excerpt = (from > 0 ? '…' : '') + shown + (to < text.length ? '…' : '')
  return `${reason} at position ${pos} (line ${line}, column ${pos - lineStart + 1}) near \`${excerpt}\``
}

const WS = new Set([' ', '\t', '\n', '\r'])
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y
const HEX4 = /^[0-9a-fA-F]{4}$/

/**
 * Index of the first character at which `text` stops being JSON (`text.length`: it ends too early),
 * or -1 if it is JSON. Iterative: nesting depth costs no stack.
 */
export function jsonErrorPosition(text: string): number {
  const n = text.length
  let i = 0
  /** Open containers: '{' or '['. */
  const open: string[] = []
  const skip = () => {
    while (i < n && WS.has(text[i])) i++
  }
  /** At a '"': past the string, or false with `i` at the fault. */
  const string = (): boolean => {
    i++
    while (i < n) {
      const c = text[i]
      if (c === '"') {
        i++
        return true
      }
      if (c < ' ') return false
      if (c === '\\') {
        const e = text[i + 1]
        if (e === 'u') {
          if (!HEX4.test(text.slice(i + 2, i + 6))) {
            i += 2
            return false
          }
          i += 6
        } else if (e !== undefined && '"\\/bfnrt'.includes(e)) i += 2
        else {
          i++
          return false
        }
      } else i++
    }
    return false
  }
  let expect: 'value' | 'key' | 'next' = 'value'
  for (;;) {
    skip()
    if (expect === 'value') {
      if (i >= n) return n
      const c = text[i]
      if (c === '{' || c === '[') {
        open.push(c)
        i++
        skip()
        if (text[i] === (c === '{' ? '}' : ']')) {
          open.pop()
          i++
          expect = 'next'
        } else expect = c === '{' ? 'key' : 'value'
      } else if (c === '"') {
        if (!string()) return i
        expect = 'next'
      } else if (c === '-' || (c >= '0' && c <= '9')) {
        NUMBER.lastIndex = i
        const m = NUMBER.exec(text)
        if (!m) return i + 1 >= n ? n : i + 1
        i += m[0].length
        expect = 'next'
      } else {
        const word = c === 't' ? 'true' : c === 'f' ? 'false' : c === 'n' ? 'null' : undefined
        if (!word) return i
        for (const ch of word) {
          if (i >= n) return n
          if (text[i] !== ch) return i
          i++
        }
        expect = 'next'
      }
    } else if (expect === 'key') {
      if (i >= n) return n
      if (text[i] !== '"' || !string()) return i
      skip()
      if (i >= n) return n
      if (text[i] !== ':') return i
      i++
      expect = 'value'
    } else {
      const top = open.at(-1)
      if (top === undefined) return i < n ? i : -1
      if (i >= n) return n
      if (text[i] === ',') {
        i++
        expect = top === '{' ? 'key' : 'value'
      } else if (text[i] === (top === '{' ? '}' : ']')) {
        open.pop()
        i++
      } else return i
    }
  }
}
