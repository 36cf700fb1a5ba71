"""The line view: one map as lines between two columns of tokens, in the manner of bertviz's head
view (a self-contained HTML page, no plotly)."""
from __future__ import annotations

import html
from typing import Optional, Sequence

import numpy as np

from .style import FONT, HIGHLIGHT


def line_view_html(M: np.ndarray, labels: Sequence[str], title: str = "", value_name: str = "value",
                   target: Optional[int] = None, threshold: float = 0.02, width: int = 520) -> str:
    """One map [n, n] in the manner of bertviz's head view -> a self-contained HTML page (SVG + a few
    lines of JavaScript, no external files): the receiving tokens on the right, the source tokens on
    the left, a line from right token i to left token j with opacity and width growing with M[i, j]
    (relative to the map's maximum; lines under `threshold` of it left out). Hovering a token (either
    side) shows only its lines and their values; the target row is drawn in red. Every token is
    HTML-escaped text. Each line carries data-i, data-j and data-v (the value) for tests."""
    M = np.asarray(M, dtype=np.float64)
    n = len(labels)
    if M.shape != (n, n):
        raise ValueError(f"map has shape {M.shape}, expected ({n}, {n}) for {n} labels")
    finite = M[np.isfinite(M)]
    hi = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    row_h = 22
    top = 46
    h = top + row_h * n + 16
    xl, xr = 150, width - 150
    lines, texts = [], []
    for i in range(n):
        for j in range(n):
            v = float(M[i, j])
            if not np.isfinite(v) or v < threshold * hi:
                continue
            f = v / hi
            col = HIGHLIGHT if i == target else "#1f77b4"
            lines.append(f'<line class="edge" data-i="{i}" data-j="{j}" data-v="{v:.6g}" x1="{xr}" '
                         f'y1="{top + row_h * i}" x2="{xl}" y2="{top + row_h * j}" stroke="{col}" '
                         f'stroke-width="{0.5 + 4.5 * f:.2f}" stroke-opacity="{0.08 + 0.8 * f:.3f}">'
                         f'<title>{labels[i]} ← {labels[j]}: {html.escape(value_name)} {v:.4g}</title></line>')
    for side, x, anchor in (("src", xl - 8, "end"), ("dst", xr + 8, "start")):
        for i, lab in enumerate(labels):
            bold = ' font-weight="bold" fill="#d62728"' if side == "dst" and i == target else ""
            texts.append(f'<text class="tok {side}" data-pos="{i}" x="{x}" y="{top + row_h * i + 4}" '
                         f'text-anchor="{anchor}" font-size="13"{bold}>{lab}</text>')
    head = (f'<text x="{xl - 8}" y="24" text-anchor="end" font-size="12" fill="#555">source (column j)</text>'
            f'<text x="{xr + 8}" y="24" text-anchor="start" font-size="12" fill="#555">receiving (row i)</text>')
    script = """
<script>
const svg = document.querySelector('svg.lineview');
const edges = [...svg.querySelectorAll('line.edge')];
const info = document.getElementById('info');
function show(side, pos) {
  let shown = [];
  for (const e of edges) {
    const hit = side === 'dst' ? e.dataset.i === pos : e.dataset.j === pos;
    e.style.display = hit ? '' : 'none';
    if (hit) shown.push(e);
  }
  svg.querySelectorAll('text.tok').forEach(t => t.classList.toggle('hot', t.dataset.pos === pos && t.classList.contains(side)));
  const lab = svg.querySelector('text.tok.' + side + '[data-pos="' + pos + '"]').textContent;
  info.textContent = lab + (side === 'dst' ? ' draws from: ' : ' feeds: ') +
    shown.sort((a, b) => b.dataset.v - a.dataset.v).slice(0, 5).map(e => {
      const o = svg.querySelector('text.tok.' + (side === 'dst' ? 'src' : 'dst') + '[data-pos="' +
                                  (side === 'dst' ? e.dataset.j : e.dataset.i) + '"]').textContent;
      return o + ' ' + Number(e.dataset.v).toPrecision(3); }).join(', ');
}
function reset() { edges.forEach(e => e.style.display = ''); svg.querySelectorAll('text.tok').forEach(t => t.classList.remove('hot'));
                   info.textContent = 'Hover a token to see only its lines.'; }
svg.querySelectorAll('text.tok').forEach(t => {
  t.addEventListener('mouseenter', () => show(t.classList.contains('dst') ? 'dst' : 'src', t.dataset.pos));
  t.addEventListener('mouseleave', reset);
});
</script>"""
    style = ("<style>body{margin:0;font-family:" + FONT + ";color:#2a3f5f} text.tok{cursor:pointer}"
             " text.tok.hot{font-weight:bold;fill:#d62728} #info{font-size:13px;min-height:18px;margin:2px 0 0 4px}</style>")
    ttl = f'<div style="font-size:14px;font-weight:600;margin:2px 0 0 4px">{html.escape(title)}</div>' if title else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'>{style}</head><body>{ttl}"
            f'<div id="info">Hover a token to see only its lines.</div>'
            f'<svg class="lineview" width="100%" style="max-width:{width}px" viewBox="0 0 {width} {h}">{head}{"".join(lines)}'
            f'{"".join(texts)}</svg>{script}</body></html>')
