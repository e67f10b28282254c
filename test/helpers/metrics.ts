import assert from 'node:assert/strict'
import { registry } from '../../src/metrics.js'

/**
 * Sum of a metric's samples in this process's registry whose labels include `labels` (in-process
 * workers and caches share the registry; each test gives its own a label of its own).
 */
export async function registrySum(name: string, labels: Record<string, string>): Promise<number> {
  const m = registry.getSingleMetric(name)
  assert.ok(m, `metric ${name} is registered`)
  const { values } = await m.get()
  return values.filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x)).reduce((n, v) => n + v.value, 0)
}
