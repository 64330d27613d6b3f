"""The trace viewer: one self-contained HTML page that draws a run's workflow.

`trace_page(trace)` turns a trace (`RunResult.to_json()`, as `podium ask --trace`,
`podium eval --traces` and `podium serve` write them) into a page that needs nothing else — no
network, no server: the trace is embedded as JSON and a small script draws it.

* the question, the answer (and the round that produced it), status, failures, usage and cost
  (every call's, then the Conductor's and the workers' apart: the figures `podium ask` prints;
  where a called model has no price, the priced calls' sum "at least", naming the models
  without one); the budget's verdict, where the run had a budget;
* the workflow as a graph, one panel per round (round 0, then each recursion round): steps are
  nodes in layers by dependency depth, an edge from every step a node may see (its access
  list; `"all"` = every earlier step of the round), each node naming its worker and showing
  status, tokens (that step's call alone), cost and latency;
* under the graph, every step in full: the subtask the Conductor wrote, the worker's response
  or error, and the Conductor's own turn (its completion, parse errors, fallback).

`index_page(rows)` lists traces (id, time, question, answer) linking to their pages.
`podium trace view FILE` writes the page next to the trace and opens it in a browser;
`podium serve` serves it at `/traces/{id}` and the list at `/traces`.
"""

from __future__ import annotations

import html
import json
from typing import Any

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fafbfc}
h1{font-size:20px;margin:0 0 12px} h2{font-size:16px;margin:24px 0 8px}
.box{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:12px 16px;margin:8px 0}
.k{color:#57606a} pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;
padding:8px;border-radius:6px;margin:4px 0;max-height:360px;overflow:auto}
.ok{color:#1a7f37} .error{color:#cf222e} .skipped{color:#9a6700}
svg .node rect{fill:#fff;stroke:#57606a;rx:8} svg .node.error rect{stroke:#cf222e}
svg .node.final rect{stroke:#1a7f37;stroke-width:2.5} svg text{font:12px system-ui}
svg .edge{stroke:#8c959f;fill:none;marker-end:url(#arrow)} svg .round{fill:#f6f8fa;stroke:#d0d7de}
table{border-collapse:collapse} td,th{padding:4px 10px;border-bottom:1px solid #d0d7de;
text-align:left;vertical-align:top}
"""

SCRIPT = r"""
const T = JSON.parse(document.getElementById('trace').textContent);
const $ = (tag, attrs = {}, text) => { const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text; return e; };
const S = (tag, attrs = {}, text) => { const e = document.createElementNS(
  'http://www.w3.org/2000/svg', tag); for (const [k, v] of Object.entries(attrs))
  e.setAttribute(k, v); if (text !== undefined) e.textContent = text; return e; };
const fmt = (x, d = 2) => (x === null || x === undefined) ? '-' : Number(x).toFixed(d);
const money = x => (x === null || x === undefined) ? null : `$${fmt(x, 6)}`;
const cost = u => { const whole = money(u.cost_usd ?? u.cost);
  if (whole !== null || money(u.known_cost_usd) === null) return whole ?? '$-';
  const none = Object.entries(u.unpriced || {});
  const names = none.map(([m, n]) =>
    `${m === 'conductor' ? 'the Conductor' : m} (${n} call${n === 1 ? '' : 's'})`).join(', ');
  const all = none.reduce((sum, [, n]) => sum + n, 0) >= u.calls;
  return (all ? 'unknown' : `at least ${money(u.known_cost_usd)}`) +
    (names ? ` (no price in the pool file: ${names})` : ''); };
const usage = u => u ? `${u.calls} calls · ${u.total_tokens} tokens · ${cost(u)}` : '-';
const split = b => b ? `Conductor ${b.conductor.calls} calls · ${b.conductor.total_tokens} tokens; ` +
  `workers ${b.workers.calls} calls · ${b.workers.total_tokens} tokens` : '-';

function header() {
  const box = document.getElementById('summary');
  const rows = [['question', T.question], ['answer', T.answer ?? '(none)'],
    ['answered by', T.answer_round === null || T.answer_round === undefined ? '-' :
      `round ${T.answer_round}`], ['status', T.status ?? '-'],
    ['used', usage(T.used)], ['of which', split(T.used_by)], ['paid', usage(T.paid)],
    ['wall', `${fmt(T.wall_s)} s`]];
  if (T.budget && T.budget.verdict) rows.push(['budget', T.budget.verdict]);
  if (T.cause) rows.push(['cause', `${T.cause.cls}: ${T.cause.reason} ${T.cause.detail || ''}`]);
  for (const n of T.notes || []) rows.push(['note', n]);
  const table = $('table');
  for (const [k, v] of rows) { const tr = $('tr'); tr.append($('td', {class: 'k'}, k));
    const td = $('td'); td.append($('pre', {}, String(v))); tr.append(td); table.append(tr); }
  box.append(table);
}

function deps(step, steps) {
  const same = steps.filter(s => s.round === step.round && s.index < step.index);
  if (step.access === 'all') return same;
  return same.filter(s => (step.access || []).includes(s.index));
}

function graph() {
  const steps = T.steps || [];
  const rounds = [...new Set(steps.map(s => s.round))].sort((a, b) => a - b);
  const W = 230, H = 64, GX = 60, GY = 26, PAD = 28;
  const svg = S('svg', {id: 'graph'}); const defs = S('defs');
  const marker = S('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: 'auto'});
  marker.append(S('path', {d: 'M0,0 L10,5 L0,10 z', fill: '#8c959f'})); defs.append(marker);
  svg.append(defs);
  let top = 0, width = 0;
  for (const r of rounds) {
    const mine = steps.filter(s => s.round === r);
    const depth = {};
    for (const s of mine) depth[s.index] = Math.max(0, ...deps(s, mine).map(d => depth[d.index] + 1));
    const layers = {};
    for (const s of mine) (layers[depth[s.index]] ||= []).push(s);
    const nl = Object.keys(layers).length, tallest = Math.max(...Object.values(layers).map(l => l.length));
    const rw = PAD * 2 + nl * W + (nl - 1) * GX, rh = PAD * 2 + 18 + tallest * H + (tallest - 1) * GY;
    svg.append(S('rect', {class: 'round', x: 0, y: top, width: rw, height: rh, rx: 10}));
    svg.append(S('text', {x: 12, y: top + 20}, r === 0 ? 'round 0' : `recursion round ${r}`));
    const pos = {};
    for (const [d, layer] of Object.entries(layers)) layer.forEach((s, i) => {
      pos[s.index] = {x: PAD + d * (W + GX), y: top + PAD + 18 + i * (H + GY)}; });
    for (const s of mine) for (const d of deps(s, mine)) {
      const a = pos[d.index], b = pos[s.index];
      svg.append(S('path', {class: 'edge', d: `M${a.x + W},${a.y + H / 2} C${a.x + W + GX / 2},` +
        `${a.y + H / 2} ${b.x - GX / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}`}));
    }
    const final = T.answer_round === r ? mine[mine.length - 1] : null;
    for (const s of mine) {
      const p = pos[s.index];
      const g = S('g', {class: `node ${s.status}${s === final ? ' final' : ''}`,
        'data-step': `${r}:${s.index}`, transform: `translate(${p.x},${p.y})`});
      g.append(S('rect', {width: W, height: H}));
      g.append(S('text', {x: 10, y: 20}, `step ${s.index} · ${s.worker_name} (id ${s.worker})`));
      g.append(S('text', {x: 10, y: 38, class: s.status}, `${s.status} · ` +
        `${(s.prompt_tokens || 0) + (s.completion_tokens || 0)} tok · ${fmt(s.latency_s)} s`));
      g.append(S('text', {x: 10, y: 55}, (s.subtask || '').slice(0, 30) +
        ((s.subtask || '').length > 30 ? '…' : '')));
      const link = S('a', {href: `#step-${r}-${s.index}`}); link.append(g); svg.append(link);
    }
    top += rh + 20; width = Math.max(width, rw);
  }
  svg.setAttribute('width', width + 2); svg.setAttribute('height', Math.max(top, 40));
  if (!steps.length) svg.append(S('text', {x: 10, y: 24}, 'No step ran.'));
  document.getElementById('workflow').append(svg);
}

function details() {
  const box = document.getElementById('steps');
  for (const c of T.conductor || []) {
    const d = $('div', {class: 'box'});
    d.append($('b', {}, `Conductor · round ${c.round}`));
    const bits = [`${(c.prompt_tokens || 0) + (c.completion_tokens || 0)} tokens`,
      `${fmt(c.latency_s)} s`, c.constrained ? 'grammar-held' : null,
      c.fallback ? 'fallback' : null, c.kept ? 'kept the answer' : null].filter(Boolean);
    d.append($('div', {class: 'k'}, bits.join(' · ')));
    if (c.parse_error) d.append($('div', {class: 'error'}, `not a workflow: ${JSON.stringify(c.parse_error)}`));
    if (c.error) d.append($('div', {class: 'error'}, c.error));
    if (c.completion) d.append($('pre', {}, c.completion));
    box.append(d);
  }
  for (const s of T.steps || []) {
    const d = $('div', {class: 'box', id: `step-${s.round}-${s.index}`});
    d.append($('b', {}, `Round ${s.round} · step ${s.index} · ${s.worker_name} (id ${s.worker})`));
    d.append($('div', {class: 'k'}, `sees: ${s.access === 'all' ? 'all' :
      (s.access || []).join(', ') || 'none'} · ${s.prompt_tokens} in / ${s.completion_tokens} out` +
      ` · ${s.cost === null && ['ok', 'error'].includes(s.status) ? 'no price' :
        '$' + fmt(s.cost, 6)}` +
      ` · ${fmt(s.latency_s)} s${s.cache_hit ? ' · cache' : ''}`));
    d.append($('div', {class: 'k'}, 'subtask')); d.append($('pre', {}, s.subtask || ''));
    d.append($('div', {class: 'k'}, s.status === 'ok' ? 'response' : s.status));
    d.append($('pre', {class: s.status === 'ok' ? '' : 'error'},
      s.status === 'ok' ? (s.response ?? '') : (s.error || s.error_kind || '')));
    box.append(d);
  }
}

header(); graph(); details();
document.body.setAttribute('data-drawn', String((T.steps || []).length));
"""


def _embed(data: Any) -> str:
    """JSON safe inside a <script> element (no `</script>` can end it early)."""
    return (json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
            .replace(">", "\\u003e").replace("&", "\\u0026"))


def trace_page(trace: dict, title: str | None = None) -> str:
    """The viewer page for one trace (see the module docstring)."""
    name = html.escape(title or str(trace.get("id") or "podium trace"))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{name}</title>"
            f"<style>{STYLE}</style></head><body><h1>{name}</h1>"
            f"<div id='summary' class='box'></div><h2>Workflow</h2><div id='workflow'></div>"
            f"<h2>Steps</h2><div id='steps'></div>"
            f"<script type='application/json' id='trace'>{_embed(trace)}</script>"
            f"<script>{SCRIPT}</script></body></html>")


def index_page(rows: list[dict]) -> str:
    """A list of traces: each row has `id`, `created`, `question`, `answer`."""
    import time

    body = "".join(
        f"<tr><td><a href='/traces/{html.escape(r['id'])}'>{html.escape(r['id'])}</a></td>"
        f"<td>{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r.get('created') or 0))}</td>"
        f"<td>{html.escape(str(r.get('question') or ''))[:160]}</td>"
        f"<td>{html.escape(str(r.get('answer') or '(none)'))[:80]}</td></tr>" for r in rows)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>podium traces</title>"
            f"<style>{STYLE}</style></head><body><h1>Recent traces</h1><table>"
            f"<tr><th>id</th><th>time</th><th>question</th><th>answer</th></tr>{body}"
            f"</table></body></html>")
