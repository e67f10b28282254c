import { InvalidArgumentError, Option } from 'commander'

/* Option helpers shared by every command: each flag also reads an environment variable (shown in --help). */

/** Parser of an integer flag ≥ `min`. */
export function int(min: number) {
  return (value: string): number => {
    const n = Number(value)
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min) {
      throw new InvalidArgumentError(`expected an integer ≥ ${min}, got "${value}"`)
    }
    return n
  }
}

export const opt = (flags: string, description: string, env: string, parse?: (v: string, previous: any) => unknown, def?: unknown) => {
  const o = new Option(flags, description).env(env)
  if (parse) o.argParser(parse)
  if (def !== undefined) o.default(def)
  return o
}

export const choice = (flags: string, description: string, env: string, choices: string[], def: string) =>
  new Option(flags, description).env(env).choices(choices).default(def)

/** Block numbers and ranges: `100,200-210`. */
export function numberList(value: string): number[] {
  const out: number[] = []
  for (const part of value.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part)
    if (!m) throw new InvalidArgumentError(`expected numbers and ranges such as "100,200-210", got "${part}"`)
    const a = Number(m[1])
    const b = m[2] != null ? Number(m[2]) : a
    if (b < a) throw new InvalidArgumentError(`range ${part} goes down`)
    for (let n = a; n <= b; n++) out.push(n)
  }
  if (!out.length) throw new InvalidArgumentError('empty block list')
  return out
}
