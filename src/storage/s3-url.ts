/*
 * `s3://bucket/prefix` URLs, without the S3 client: the CLI's commands check their flags with these
 * before they load anything that talks to storage (src/storage/s3.ts re-exports them).
 */

export interface S3Location {
  bucket: string
  /** Key prefix without leading or trailing slash ('' for the bucket root). */
  prefix: string
}

export function isS3Url(url: string): boolean {
  return /^s3:\/\//i.test(url)
}

export function parseS3Url(url: string): S3Location {
  const m = /^s3:\/\/([^/]+)\/?(.*)$/i.exec(url)
  if (!m || !m[1]) throw new Error(`not an s3://bucket/prefix URL: ${url}`)
  return { bucket: m[1], prefix: m[2].replace(/\/+$/, '').replace(/^\/+/, '') }
}

export function s3Url(loc: S3Location): string {
  return `s3://${loc.bucket}${loc.prefix ? '/' + loc.prefix : ''}`
}

/** `prefix/key` without doubled slashes. */
export function joinKey(...parts: string[]): string {
  return parts.filter(Boolean).map((p) => p.replace(/^\/+|\/+$/g, '')).filter(Boolean).join('/')
}
