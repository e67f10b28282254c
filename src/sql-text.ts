/* SQL text helpers, without DuckDB (modules of the fetch workers use them and should not load it). */

/** Quote a SQL identifier (column names such as `from`, `to`, `key` are keywords). */
export const ident = (name: string) => `"${name.replace(/"/g, '""')}"`

/** Quote a SQL string literal. */
export const lit = (value: string) => `'${value.replace(/'/g, "''")}'`
