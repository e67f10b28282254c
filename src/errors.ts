/**
 * An error answered to an HTTP client: JSON `{error, message, path?}` with `status` (docs/protocol.md §4).
 * Anything else that escapes a handler is a bug and becomes a 500.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly path?: string,
    /** Seconds, for 503/429 answers. */
    readonly retryAfter?: number,
    /** Extra JSON members of the body (e.g. `previousBlocks` of a fork answer). */
    readonly extra?: Record<string, unknown>,
  ) {
    super(message)
  }

  /** Messages and paths may quote the request (an unknown key of megabytes): answers quote at most this much of each. */
  body(): Record<string, unknown> {
    const path = this.path && clip(this.path, 1000)
    // The message names the path as the answer's `path` does; other long words it quotes (a huge key) are cut at 1,000 characters.
    const shorten = (text: string) => text.replace(/[^\s"]{1001,}/g, (w) => clip(w, 1000))
    const message = path ? this.message.split(this.path!).map(shorten).join(path) : shorten(this.message)
    return { error: this.code, message: clip(message, 4000), ...(path ? { path } : {}), ...this.extra }
  }
}

export const badRequest = (code: string, message: string, path?: string) => new ApiError(400, code, message, path)

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length - max} more characters)`
}
