// s3rver ships no types; the tests use its constructor, run() and close().
declare module 's3rver' {
  export default class S3rver {
    constructor(options: { port?: number; address?: string; directory: string; silent?: boolean; configureBuckets?: { name: string }[] })
    run(): Promise<{ address: string; port: number }>
    close(): Promise<void>
  }
}
