"""The line views, in the manner of bertviz: the head view (several heads of a layer at once, each in
its own colour, toggled per head, a token clicked keeps its lines), the model view (every layer × head
as a small line drawing; a click opens it in the head view) and the neuron view (for one query token
and head: the query and key vectors, their products per dimension, q·k and the softmax). One
self-contained HTML page each (the data as JSON and a few lines of JavaScript, no external files).
"""
from __future__ import annotations

import html
import json
from typing import Optional, Sequence

import numpy as np

from .style import FONT, HIGHLIGHT

# one colour per head (bertviz's head view uses the same kind of categorical palette)
HEAD_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
                "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
MAX_EMBED = 200_000  # numbers embedded in a page at most (all layers when they fit, else the shown one)


class _Flat:
    """An array written into the page's JSON flat, each number as its float32 value exactly (9
    significant digits), so that the page compares the very values the engine computed."""

    def __init__(self, x):
        self.x = np.nan_to_num(np.asarray(x, dtype=np.float32)).ravel()

    def json(self) -> str:
        return "[" + ",".join(f"{v:.9g}" for v in self.x.tolist()) + "]"


def _dumps(data: dict) -> str:
    """json.dumps with the _Flat arrays written by their own json()."""
    flats = {}

    def default(o):
        if isinstance(o, _Flat):
            tag = f"@@flat{len(flats)}@@"
            flats[tag] = o.json()
            return tag
        raise TypeError(type(o))

    out = json.dumps(data, separators=(",", ":"), default=default)
    for tag, js in flats.items():
        out = out.replace(f'"{tag}"', js)
    return out


def head_colour(h: int) -> str:
    return HEAD_COLOURS[h % len(HEAD_COLOURS)]


def line_view_html(M: np.ndarray, labels: Sequence[str], title: str = "", value_name: str = "value",
                   target: Optional[int] = None, threshold: float = 0.02, width: int = 520, *,
                   heads: Optional[np.ndarray] = None, layer: int = 0, selected: Sequence[int] = (),
                   head_names: Optional[Sequence[str]] = None, font: float = 15, qk: Optional[dict] = None,
                   model_view: bool = False) -> str:
    """The head view -> a self-contained HTML page.

    M [n, n]: the map drawn when `heads` is None (one "head", the layer map). heads [L, K, n, n]: K
    maps per layer (the heads, and the layer map as the last one when head_names says so) for every
    layer, or [1, K, n, n] for the shown layer alone (`layer` then names it); `selected` the indices
    drawn at first (default the first). Receiving tokens (row i) on the right, source tokens (column j)
    on the left; a line from right token i to left token j per selected head, in the head's colour,
    opacity and width growing with the value relative to that map's largest (values under `threshold`
    of it left out). Hovering a token shows only its lines and their values; clicking it keeps them
    until it is clicked again (or another is); the head chips toggle heads, the layer picker (when every
    layer is embedded) changes layer. model_view: below, every layer × head as a thumbnail; a click
    opens that head alone above. qk: {"q": [K, n, d], "k": [K, n, d], "scale": float} for the shown
    layer adds the neuron view (one query token and head: q, k_j, q⊙k_j per dimension, q·k and the
    softmax). The drawing spans the page's width (at least 60 % of the app's content). Tokens are
    HTML-escaped text. Every line carries data-i, data-j, data-v (the value) and data-h (the head)."""
    M = np.asarray(M, dtype=np.float64)
    n = len(labels)
    if heads is None:
        if M.shape != (n, n):
            raise ValueError(f"map has shape {M.shape}, expected ({n}, {n}) for {n} labels")
        heads = M[None, None]
        head_names = head_names or [title or value_name]
        layers = [layer]
    else:
        heads = np.asarray(heads, dtype=np.float64)
        if heads.ndim != 4 or heads.shape[2:] != (n, n):
            raise ValueError(f"heads has shape {heads.shape}, expected [L, K, {n}, {n}]")
        layers = list(range(heads.shape[0])) if heads.shape[0] > 1 else [layer]
    L, K = heads.shape[:2]
    names = list(head_names or [f"head {k + 1}" for k in range(K)])
    sel = [int(s) for s in selected if 0 <= int(s) < K] or [0]
    data = dict(maps=_Flat(heads), n=n, K=int(heads.shape[1]), layers=[int(x) for x in layers], layer=int(layers.index(layer) if layer in layers else 0),
                names=names, colours=[head_colour(k) for k in range(K)], selected=sel, labels=[str(x) for x in labels],
                target=-1 if target is None else int(target), threshold=float(threshold), value=value_name,
                font=float(font), hi=HIGHLIGHT, model_view=bool(model_view),
                qk=None if qk is None else dict(q=np.asarray(qk["q"], dtype=np.float64).round(5).tolist(),
                                                k=np.asarray(qk["k"], dtype=np.float64).round(5).tolist(),
                                                scale=float(qk["scale"]),
                                                layer=int(qk.get("layer", layer)), causal=bool(qk.get("causal"))))
    ttl = f'<div class="ttl">{html.escape(title)}</div>' if title else ""
    family = ", ".join(f.strip() if f.strip() in ("sans-serif", "serif") else f"'{f.strip()}'" for f in FONT.split(","))
    return (f"<!doctype html><html><head><meta charset='utf-8'>{_STYLE % dict(font=family, size=font)}</head><body>{ttl}"
            '<div id="controls"></div><div id="info">Hover a token to see only its lines; click it to keep them.</div>'
            '<svg class="lineview" width="100%"></svg><div id="model"></div><div id="neuron"></div>'
            f'<script>const D = {_dumps(data)};</script><script>{_SCRIPT}</script></body></html>')


_STYLE = """<style>
html{overflow-y:scroll} body{margin:0;font-family:%(font)s;color:#2a3f5f;font-size:%(size)spx}
.ttl{font-weight:600;margin:2px 0 2px 4px}
#controls{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin:2px 4px}
#controls select{font-size:%(size)spx}
.chip{border:2px solid;border-radius:12px;padding:0 8px;cursor:pointer;user-select:none;background:#fff}
.chip.on{color:#fff}
#info{height:1.4em;margin:2px 0 0 4px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
text.tok{cursor:pointer} text.tok.hot{font-weight:bold;fill:#d62728} text.tok.locked{text-decoration:underline}
#model{display:grid;gap:4px;margin:8px 4px;grid-auto-rows:78px}
#model .cell{border:1px solid #ddd;cursor:pointer;text-align:center;font-size:12px}
#model .cell:hover{border-color:#d62728}
#neuron table{border-collapse:collapse;margin:6px 4px} #neuron td{padding:1px 3px;text-align:right}
#neuron .bar{display:inline-block;height:0.8em;background:#1f77b4;vertical-align:middle}
</style>"""

_SCRIPT = r"""(() => {
const NS = 'http://www.w3.org/2000/svg';
const svg = document.querySelector('svg.lineview');
const info = document.getElementById('info');
let L = D.layer, sel = new Set(D.selected), locked = null, hover = null;
const n = D.labels.length, rowH = Math.round(D.font * 1.55), topY = Math.round(D.font * 2.2);
function mapOf(l, k) { const M = [], base = (l * D.K + k) * n * n;
  for (let i = 0; i < n; i++) M.push(D.maps.slice(base + i * n, base + (i + 1) * n)); return M; }
function el(tag, attrs, parent) { const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v); if (parent) parent.appendChild(e); return e; }
function controls() {
  const c = document.getElementById('controls'); c.innerHTML = '';
  if (D.layers.length > 1) {
    const s = document.createElement('select'); s.id = 'layerpick';
    D.layers.forEach((l, k) => { const o = document.createElement('option'); o.value = k; o.textContent = 'Layer ' + (l + 1);
                                  if (k === L) o.selected = true; s.appendChild(o); });
    s.onchange = () => { L = +s.value; draw(); }; c.appendChild(s);
  } else { const t = document.createElement('span'); t.textContent = 'Layer ' + (D.layers[0] + 1); c.appendChild(t); }
  if (D.names.length > 1) D.names.forEach((nm, h) => {
    const b = document.createElement('span'); b.className = 'chip' + (sel.has(h) ? ' on' : ''); b.dataset.h = h;
    b.style.borderColor = D.colours[h]; if (sel.has(h)) b.style.background = D.colours[h];
    b.textContent = nm; b.title = 'Show or hide ' + nm;
    b.onclick = () => { if (sel.has(h)) { if (sel.size > 1) sel.delete(h); } else sel.add(h); draw(); };
    c.appendChild(b); });
}
function draw() {
  hover = null;  // the tokens are drawn afresh: none is under the mouse until it moves
  controls();
  const W = Math.max(360, svg.clientWidth || document.body.clientWidth || 600);
  const xl = Math.min(W * 0.3, 40 + D.font * 9), xr = W - xl;
  svg.setAttribute('height', topY + rowH * n + 10); svg.innerHTML = '';
  el('text', {x: xl - 8, y: D.font * 1.2, 'text-anchor': 'end', fill: '#555'}, svg).textContent = 'source (column j)';
  el('text', {x: xr + 8, y: D.font * 1.2, 'text-anchor': 'start', fill: '#555'}, svg).textContent = 'receiving (row i)';
  const g = el('g', {}, svg);
  for (const h of [...sel].sort((a, b) => a - b)) {
    const M = mapOf(L, h); let hi = 0; M.forEach(r => r.forEach(v => { if (v > hi) hi = v; })); if (!(hi > 0)) hi = 1;
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {
      const v = M[i][j]; if (!(v >= D.threshold * hi)) continue; const f = v / hi;
      const e = el('line', {class: 'edge', x1: xr, y1: topY + rowH * i, x2: xl, y2: topY + rowH * j,
                            stroke: sel.size === 1 && i === D.target ? D.hi : D.colours[h],
                            'stroke-width': (0.5 + 4.5 * f).toFixed(2), 'stroke-opacity': (0.08 + 0.8 * f).toFixed(3)}, g);
      e.dataset.i = i; e.dataset.j = j; e.dataset.v = v; e.dataset.h = h;
      el('title', {}, e).textContent = D.labels[i] + ' ← ' + D.labels[j] + ': ' + D.names[h] + ', ' + D.value + ' ' + v.toPrecision(4);
    }
  }
  for (const [side, x, anchor] of [['src', xl - 8, 'end'], ['dst', xr + 8, 'start']]) D.labels.forEach((lab, i) => {
    const t = el('text', {class: 'tok ' + side, x: x, y: topY + rowH * i + D.font * 0.35, 'text-anchor': anchor}, svg);
    t.dataset.pos = i; t.textContent = lab;
    if (side === 'dst' && i === D.target) { t.setAttribute('font-weight', 'bold'); t.setAttribute('fill', D.hi); }
    t.addEventListener('mouseenter', () => { hover = [side, '' + i]; focus(); });
    t.addEventListener('mouseleave', () => { hover = null; focus(); });
    t.addEventListener('click', () => { locked = locked && locked[0] === side && locked[1] === '' + i ? null : [side, '' + i]; focus(); });
  });
  focus(); model(); neuron();
}
function focus() {
  const on = hover || locked, edges = [...svg.querySelectorAll('line.edge')];
  svg.querySelectorAll('text.tok').forEach(t => { t.classList.remove('hot'); t.classList.remove('locked'); });
  if (!on) { edges.forEach(e => e.style.display = '');
             info.textContent = 'Hover a token to see only its lines; click it to keep them.'; return; }
  const [side, pos] = on, shown = [];
  for (const e of edges) { const hit = side === 'dst' ? e.dataset.i === pos : e.dataset.j === pos;
                           e.style.display = hit ? '' : 'none'; if (hit) shown.push(e); }
  const me = svg.querySelector('text.tok.' + side + '[data-pos="' + pos + '"]'); me.classList.add('hot');
  if (locked && locked[0] === side && locked[1] === pos) me.classList.add('locked');
  const other = side === 'dst' ? 'src' : 'dst';
  info.textContent = (locked && on === locked ? '🔒 ' : '') + me.textContent + (side === 'dst' ? ' draws from: ' : ' feeds: ') +
    shown.sort((a, b) => b.dataset.v - a.dataset.v).slice(0, 5).map(e =>
      svg.querySelector('text.tok.' + other + '[data-pos="' + (side === 'dst' ? e.dataset.j : e.dataset.i) + '"]').textContent +
      ' ' + Number(e.dataset.v).toPrecision(3) + (sel.size > 1 ? ' (' + D.names[e.dataset.h] + ')' : '')).join(', ');
}
function model() {
  const box = document.getElementById('model'); if (!D.model_view) return; box.innerHTML = '';
  const K = D.names.length; box.style.gridTemplateColumns = 'repeat(' + K + ', 64px)';
  const head = document.createElement('div'); head.style.gridColumn = '1 / -1'; head.style.alignSelf = 'end';
  head.innerHTML = '<b>Model view</b>: every layer (rows) and head (columns); click one to open it above.'; box.appendChild(head);
  const w = 60, h = 60;
  D.layers.forEach((l, li) => { for (let k = 0; k < K; k++) {
    const cell = document.createElement('div'); cell.className = 'cell'; cell.dataset.layer = li; cell.dataset.head = k;
    cell.title = 'Layer ' + (l + 1) + ', ' + D.names[k] + ': click to open it above';
    const s = document.createElementNS(NS, 'svg'); s.setAttribute('viewBox', '0 0 ' + w + ' ' + h); s.setAttribute('width', '58'); s.setAttribute('height', '58');
    const M = mapOf(li, k); let hi = 0; M.forEach(r => r.forEach(v => { if (v > hi) hi = v; })); if (!(hi > 0)) hi = 1;
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) { const f = M[i][j] / hi; if (!(f >= 0.05)) continue;
      el('line', {x1: w - 8, y1: 4 + (h - 8) * i / Math.max(1, n - 1), x2: 8, y2: 4 + (h - 8) * j / Math.max(1, n - 1),
                  stroke: D.colours[k], 'stroke-opacity': (0.1 + 0.8 * f).toFixed(2), 'stroke-width': (0.3 + 1.5 * f).toFixed(2)}, s); }
    cell.appendChild(s); const cap = document.createElement('div'); cap.textContent = 'L' + (l + 1) + ' ' + D.names[k].replace('head ', 'h');
    cell.appendChild(cap);
    cell.onclick = () => { L = li; sel = new Set([k]); locked = null; draw(); window.scrollTo(0, 0); };
    box.appendChild(cell); } });
}
let nq = D.target >= 0 ? D.target : 0, nh = null;
function neuron() {
  const box = document.getElementById('neuron'); if (!D.qk) return;
  if (D.layers[L] !== D.qk.layer) { box.innerHTML = '<div style="margin:10px 4px 0"><b>Neuron view</b>: for layer ' +
      (D.qk.layer + 1) + ' (the layer picked in the app); pick it above to see it.</div>'; return; }
  const hs = [...sel].filter(h => h < D.qk.q.length); if (!hs.length) { box.innerHTML = ''; return; }
  if (nh === null || !hs.includes(nh)) nh = hs[0];
  const q = D.qk.q[nh][nq], d = q.length;
  const scores = D.qk.k[nh].map((k, j) => D.qk.causal && j > nq ? -Infinity : k.reduce((s, x, t) => s + x * q[t], 0) * D.qk.scale);
  const m = Math.max(...scores), ex = scores.map(s => Math.exp(s - m)), Z = ex.reduce((a, b) => a + b, 0);
  const cellc = v => { const a = Math.min(1, Math.abs(v) / 2); return v >= 0 ? 'rgba(31,119,180,' + a + ')' : 'rgba(214,39,40,' + a + ')'; };
  const strip = v => v.map(x => '<span title="' + x.toFixed(3) + '" style="display:inline-block;width:' + Math.max(2, 240 / d) +
                                 'px;height:1em;background:' + cellc(x) + '"></span>').join('');
  let rows = '<tr><td></td><td>query q (' + d + ' dims)</td><td></td><td></td></tr>' +
             '<tr><td>' + D.labels[nq] + '</td><td>' + strip(q) + '</td><td></td><td></td></tr>' +
             '<tr><td>key</td><td>q ⊙ k (per dimension)</td><td>q·k/√d</td><td>softmax</td></tr>';
  D.labels.forEach((lab, j) => { const prod = D.qk.k[nh][j].map((x, t) => x * q[t]);
    rows += '<tr class="nrow" data-j="' + j + '"><td>' + lab + '</td><td>' + strip(prod) + '</td><td>' + (isFinite(scores[j]) ? scores[j].toFixed(2) : 'masked') +
            '</td><td><span class="bar" style="width:' + (60 * ex[j] / Z).toFixed(1) + 'px"></span> ' + (ex[j] / Z).toFixed(3) + '</td></tr>'; });
  const qs = D.labels.map((lab, i) => '<option value="' + i + '"' + (i === nq ? ' selected' : '') + '>' + lab + '</option>').join('');
  const hsel = hs.map(h => '<option value="' + h + '"' + (h === nh ? ' selected' : '') + '>' + D.names[h] + '</option>').join('');
  box.innerHTML = '<div style="margin:10px 4px 0"><b>Neuron view</b> (layer ' + (D.layers[L] + 1) + '): query token <select id="nq">' + qs +
                  '</select> head <select id="nh">' + hsel + '</select> — blue positive, red negative; the softmax of q·k/√d is the head\'s attention row.</div><table>' + rows + '</table>';
  document.getElementById('nq').onchange = e => { nq = +e.target.value; neuron(); };
  document.getElementById('nh').onchange = e => { nh = +e.target.value; neuron(); };
}
draw();
let drawnW = svg.clientWidth;  // redraw on a real change of width only (a redraw under the mouse eats a click)
window.addEventListener('resize', () => { if (Math.abs(svg.clientWidth - drawnW) > 30) { drawnW = svg.clientWidth; draw(); } });
})();
"""


def line_view_height(n: int, layers: int = 1, model_view: bool = False, neuron: bool = False, font: float = 15,
                     title: bool = True) -> int:
    """The height (px) line_view_html's page needs: controls, the head view, the model view's rows, the
    neuron view's table."""
    row = round(font * 1.55)
    h = (24 if title else 0) + 40 + 26 + round(font * 2.2) + row * n + 16
    if model_view:
        h += 30 + 82 * layers
    if neuron:
        h += 50 + (n + 3) * round(font * 1.45)
    return int(h)
