/** Whether process `pid` still runs (EPERM: it runs under another user). Not a pid (0, NaN): false. */
export function alive(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false
  try {
    process.kill(pid, 0)
    return true
  } catch (e: any) {
    return e?.code === 'EPERM'
  }
}
