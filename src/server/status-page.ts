import type { Range } from './ranges.js'

/*
 * The router's status page for operators (`GET /` from a browser): datasets, workers, and per worker
 * and dataset a bar showing which blocks the worker holds. Server-rendered, self-contained (no
 * external assets), so it works offline and behind any proxy. Everything that comes from the
 * network (worker ids and URLs, dataset names, problems) is escaped.
 */

export interface DatasetStatus {
  name: string
  family: string
  height: number
  chunks: number
  lastChunkBlock: number
  problems: string[]
  /** Behind the node, from the ingest's head.json (absent or null without one). */
  lag?: { nodeHead: number; blocks: number; seconds: number } | null
  /** The block ranges the chunks cover (a sparse dataset's are far apart); absent: [0, lastChunkBlock]. */
  spans?: Range[]
  /** Gaps between served chunks that ingests are still filling (a backfill in parallel). */
  gaps?: Range[]
}

export interface WorkerStatus {
  id: string
  url: string
  alive: boolean
  lastPingMsAgo: number
  /** null while unknown (fewer than two pings with a query count). */
  queriesPerSecond: number | null
  assignedChunks: number
  /** dataset name → ranges held */
  state: Record<string, Range[]>
}

export interface RouterStatus {
  datasets: DatasetStatus[]
  workers: WorkerStatus[]
}

export interface PageOptions {
  /** Reload the page this often; 0 = never. */
  refreshSeconds: number
  /** Printed as "updated at"; omitted when absent. */
  generatedAt?: Date
}

/** Segment colours, one per worker (in the order they are listed). */
const PALETTE = ['#2f7ed8', '#e4572e', '#29a36a', '#9b5de5', '#f2a541', '#00a6a6', '#d64f9a', '#6c757d']

export function renderStatusPage(status: RouterStatus, opts: PageOptions): string {
  const workers = [...status.workers].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
  const alive = workers.filter((w) => w.alive).length
  const generated = opts.generatedAt ? `Updated ${escapeHtml(opts.generatedAt.toISOString().replace('T', ' ').slice(0, 19))} UTC` : ''
  const refresh = opts.refreshSeconds > 0 ? `reloads every ${opts.refreshSeconds} s` : 'no automatic reload'
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>block-archive router</title>
<style>${STYLE}</style>
</head>
<body>
<header class="page">
<h1>block-archive router</h1>
<p class="generated">${[generated, refresh].filter(Boolean).join(' · ')} · JSON at <a href="status">/status</a>, metrics at <a href="metrics">/metrics</a></p>
</header>
<section>
<h2>Datasets <span class="count">${status.datasets.length}</span></h2>
${datasetsTable(status.datasets)}
</section>
<section>
<h2>Workers <span class="count">${alive} alive of ${workers.length}</span></h2>
${workers.length ? workers.map((w, i) => workerCard(w, PALETTE[i % PALETTE.length], status.datasets)).join('\n') : '<p class="empty">No worker has registered yet.</p>'}
</section>
${opts.refreshSeconds > 0 ? reloadScript(opts.refreshSeconds) : ''}
</body>
</html>
`
}

function datasetsTable(datasets: DatasetStatus[]): string {
  if (!datasets.length) return '<p class="empty">No dataset in storage.</p>'
  const rows = datasets.map(
    (d) => `<tr class="dataset" data-dataset="${escapeHtml(d.name)}">
<td class="name">${escapeHtml(d.name)}</td>
<td class="family">${escapeHtml(d.family)}</td>
<td class="height num" data-height="${d.height}">${d.height >= 0 ? formatInt(d.height) : '—'}</td>
<td class="chunks num">${formatInt(d.chunks)}</td>
<td class="last-chunk-block num">${d.lastChunkBlock >= 0 ? formatInt(d.lastChunkBlock) : '—'}</td>
${lagCell(d)}
<td class="problems">${d.problems.length || d.gaps?.length ? `<ul>${d.problems.map((p) => `<li class="problem">${escapeHtml(p)}</li>`).join('')}${(d.gaps ?? []).map(([a, b]) => `<li class="gap">blocks ${formatInt(a)}–${formatInt(b)} still being written (backfill)</li>`).join('')}</ul>` : '<span class="ok">none</span>'}</td>
</tr>`,
  )
  return `<table class="datasets">
<thead><tr><th>Dataset</th><th>Family</th><th class="num">Height</th><th class="num">Chunks</th><th class="num">Last chunk block</th><th class="num" title="node head minus height, and how long ago the node reported the oldest block not served yet (from the ingest's head.json)">Behind node</th><th>Problems</th></tr></thead>
<tbody>
${rows.join('\n')}
</tbody>
</table>`
}

/** The dataset's lag behind its node: blocks and seconds (— without a head file). */
function lagCell(d: DatasetStatus): string {
  const lag = d.lag
  if (!lag) return '<td class="lag num">—</td>'
  const late = lag.seconds >= 30 ? ' late' : ''
  return `<td class="lag num${late}" data-lag-blocks="${lag.blocks}" data-lag-seconds="${lag.seconds.toFixed(1)}" title="node head ${formatInt(lag.nodeHead)}">${formatInt(lag.blocks)} blocks, ${formatSeconds(lag.seconds)}</td>`
}

function formatSeconds(s: number): string {
  if (!Number.isFinite(s)) return '?'
  if (s < 10) return `${s.toFixed(1)} s`
  if (s < 120) return `${Math.round(s)} s`
  if (s < 7200) return `${Math.round(s / 60)} min`
  return `${Math.round(s / 3600)} h`
}

function workerCard(w: WorkerStatus, colour: string, datasets: DatasetStatus[]): string {
  const health = w.alive ? 'alive' : 'dead'
  // The URL links to the worker's own status; only http(s) URLs become links.
  const link = (text: string) => (/^https?:\/\//i.test(w.url) ? `<a href="${escapeHtml(w.url)}/status">${escapeHtml(text)}</a>` : escapeHtml(text))
  return `<article class="worker ${health}" data-worker="${escapeHtml(w.id)}">
<header>
<span class="health ${health}">${health}</span>
<span class="id">${w.id === w.url ? link(w.id) : escapeHtml(w.id)}</span>
${w.id === w.url ? '' : `<span class="url">${link(w.url)}</span>`}
</header>
<dl class="facts">
<div><dt>last ping</dt><dd class="last-ping">${formatAgo(w.lastPingMsAgo)}</dd></div>
<div><dt>queries/s</dt><dd class="qps">${w.queriesPerSecond === null ? '–' : formatRate(w.queriesPerSecond)}</dd></div>
<div><dt>assigned chunks</dt><dd class="assigned">${formatInt(w.assignedChunks)}</dd></div>
</dl>
${datasets.map((d) => coverageRow(w, d, w.alive ? colour : '#b0b0b0')).join('\n')}
</article>`
}

/** The blocks [0, last chunk block] as a bar; the worker's ranges as segments placed in percent of it. */
function coverageRow(w: WorkerStatus, d: DatasetStatus, colour: string): string {
  const last = d.lastChunkBlock
  const ranges = (w.state[d.name] ?? [])
    .map(([from, to]): Range => [Math.max(0, from), Math.min(last, to)])
    .filter(([from, to]) => from <= to)
  const span = last + 1
  const segments = ranges.map(
    ([from, to]) =>
      `<div class="segment" data-from="${from}" data-to="${to}" title="${formatInt(from)}–${formatInt(to)}" style="left:${percent(from / span)};width:${percent((to - from + 1) / span)};background:${colour}"></div>`,
  )
  // The share of the blocks the chunks cover, not of the numbers up to the last one (a sparse
  // dataset of four blocks spread over 18 million numbers is all held by one worker: 100 %).
  const spans = d.spans ?? (last >= 0 ? [[0, last] as Range] : [])
  const covered = spans.reduce((n, [from, to]) => n + to - from + 1, 0)
  const held = ranges.reduce((n, [from, to]) => n + spans.reduce((m, [a, b]) => m + Math.max(0, Math.min(to, b) - Math.max(from, a) + 1), 0), 0)
  const summary = last < 0 ? 'no chunks' : ranges.length ? ranges.map(([from, to]) => `${formatInt(from)}–${formatInt(to)}`).join(', ') : 'nothing held'
  return `<div class="coverage-row">
<span class="coverage-label">${escapeHtml(d.name)}</span>
<div class="coverage${last < 0 ? ' empty' : ''}" data-worker="${escapeHtml(w.id)}" data-dataset="${escapeHtml(d.name)}" data-last="${last}" title="${escapeHtml(d.name)}: blocks 0–${last < 0 ? '?' : formatInt(last)}">${segments.join('')}</div>
<span class="coverage-text">${summary}${last >= 0 && held && covered ? ` <span class="share">(${formatShare(held / covered)})</span>` : ''}</span>
</div>`
}

function reloadScript(seconds: number): string {
  // Not while the tab is hidden: a background tab need not poll the router.
  return `<script>setInterval(function(){if(!document.hidden)location.reload()},${seconds * 1000})</script>`
}

function escapeHtml(s: string): string {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
}

const percent = (x: number) => `${(Math.min(1, Math.max(0, x)) * 100).toFixed(4)}%`

const formatInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '?')

function formatShare(x: number): string {
  const p = x * 100
  return `${p >= 10 || p === 0 ? p.toFixed(0) : p.toFixed(1)} %`
}

function formatRate(qps: number): string {
  if (!Number.isFinite(qps) || qps <= 0) return '0'
  return qps >= 100 ? qps.toFixed(0) : qps >= 10 ? qps.toFixed(1) : qps.toFixed(2)
}

function formatAgo(ms: number): string {
  if (!Number.isFinite(ms)) return '?'
  const s = Math.max(0, ms) / 1000
  if (s < 10) return `${s.toFixed(1)} s ago`
  if (s < 120) return `${Math.round(s)} s ago`
  if (s < 7200) return `${Math.round(s / 60)} min ago`
  return `${Math.round(s / 3600)} h ago`
}

const STYLE = `
:root { color-scheme: light; font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 14px; color: #1d2329; background: #f5f6f8; }
body { margin: 0 auto; padding: 16px 24px 40px; max-width: 1200px; }
h1 { font-size: 20px; margin: 8px 0 2px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
h2 .count { font-weight: normal; color: #5f6b76; font-size: 13px; margin-left: 6px; }
a { color: #1f5fa8; }
.generated { color: #5f6b76; margin: 0; font-size: 12px; }
.empty { color: #5f6b76; font-style: italic; }
table.datasets { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid #dde1e6; }
table.datasets th, table.datasets td { text-align: left; padding: 6px 10px; border-bottom: 1px solid #eceff2; vertical-align: top; }
table.datasets th { background: #eef1f4; font-weight: 600; font-size: 12px; text-transform: uppercase; letter-spacing: .03em; color: #48535e; }
.num { text-align: right !important; font-variant-numeric: tabular-nums; }
td.problems ul { margin: 0; padding-left: 16px; color: #b3261e; }
td.problems .ok { color: #2e7d32; }
td.problems li.gap { color: #8a6d00; }
td.lag.late { color: #b3261e; font-weight: 600; }
article.worker { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 10px 14px; margin-bottom: 12px; }
article.worker.dead { background: #fbf3f3; border-color: #e7c4c4; }
article.worker header { display: flex; gap: 10px; align-items: baseline; flex-wrap: wrap; }
article.worker .id { font-weight: 600; word-break: break-all; }
article.worker .url { color: #48535e; font-size: 12px; word-break: break-all; }
.health { font-size: 11px; font-weight: 600; text-transform: uppercase; padding: 1px 7px; border-radius: 9px; color: #fff; }
.health.alive { background: #2e7d32; }
.health.dead { background: #b3261e; }
dl.facts { display: flex; gap: 28px; margin: 8px 0 10px; }
dl.facts div { display: flex; flex-direction: column; }
dl.facts dt { font-size: 11px; color: #5f6b76; text-transform: uppercase; letter-spacing: .03em; }
dl.facts dd { margin: 0; font-variant-numeric: tabular-nums; font-weight: 600; }
.coverage-row { display: grid; grid-template-columns: minmax(80px, 160px) 1fr minmax(120px, 260px); gap: 10px; align-items: center; margin: 4px 0; }
.coverage-label { font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.coverage { position: relative; height: 14px; background: #e6e9ed; border-radius: 3px; overflow: hidden; }
.coverage.empty { background: repeating-linear-gradient(45deg, #eceff2, #eceff2 4px, #f7f8f9 4px, #f7f8f9 8px); }
.coverage .segment { position: absolute; top: 0; bottom: 0; min-width: 1px; }
.coverage-text { font-size: 12px; color: #48535e; font-variant-numeric: tabular-nums; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.coverage-text .share { color: #7a858f; }
`
