"""Faithfulness figures: importance bars beside the maps' target rows, and the corpus study's
correlations per layer. Arrays in, figures out (no Streamlit)."""
from __future__ import annotations

import html
import math
import textwrap
from typing import Optional

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..faithfulness.importance import BASELINES
from ..text import token_labels
from .style import layer_axis


def importance_figure(imp, rows: Optional[dict] = None, layer: Optional[int] = None):
    """Bars of each importance baseline [n] and of the maps' target rows at `layer` (0-based) -> Figure.

    rows: {method: [L, n]} target rows (correlation.target_rows). Only attributed positions are shown;
    each panel is scaled to its own maximum (ranks are what the correlations compare).
    """
    pos = list(imp.positions)
    labels = [token_labels(imp.tokens)[j] for j in pos]
    panels = [(BASELINES[b].label, v[pos]) for b, v in imp.values.items()]
    if rows:
        for m, r in rows.items():
            panels.append((f"{m} (layer {layer + 1})", np.asarray(r)[layer, pos]))
    # every panel names its tokens (a reader scrolling the stack never has to count bars), with room
    # between panels so each title sits on its own panel rather than under the previous one's axis
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=min(0.1, 0.55 / len(panels)),
                        subplot_titles=[p[0] for p in panels])
    for k, (name, v) in enumerate(panels):
        v = np.asarray(v, dtype=np.float64)
        fig.add_trace(go.Bar(x=labels, y=v, name=name, showlegend=False,
                             marker_color="#d62728" if k < len(imp.values) else "#1f77b4",
                             hovertemplate="%{x}: %{y:.4g}<extra>" + name + "</extra>"), row=k + 1, col=1)
    fig.update_xaxes(showticklabels=True, tickfont=dict(size=11), automargin=True)
    # a long target ("cosine of the final hidden state at position 34 ([MASK]) to its unperturbed
    # value") ran off a 1024 px screen on one line: wrapped, escaped (plotly reads a little HTML)
    lines = textwrap.wrap(f"importance for {imp.target.label}", 64) or [""]
    fig.update_layout(height=160 * len(panels) + 100 + 18 * (len(lines) - 1),
                      margin=dict(l=40, r=10, t=70 + 18 * (len(lines) - 1), b=40),
                      title=dict(text="<br>".join(html.escape(x, quote=False) for x in lines), y=1, yanchor="top",
                                 pad=dict(t=10)))  # the first line clear of the top edge
    return fig


def study_figure(res, stat: str = "spearman"):
    """Mean ± std of `stat` per layer, one line per method, one panel per baseline -> Figure."""
    summ = res.summary()[stat]
    B = len(res.baselines)
    cols = min(3, B)
    nrows = (B + cols - 1) // cols
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=[BASELINES[b].label for b in res.baselines],
                        shared_yaxes=True)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    layers = list(range(1, res.n_layers + 1))
    for bi, b in enumerate(res.baselines):
        r, c = bi // cols + 1, bi % cols + 1
        for mi, m in enumerate(res.methods):
            mean = [None if not math.isfinite(v) else float(v) for v in summ["mean"][mi, :, bi]]
            std = [0.0 if not math.isfinite(v) else float(v) for v in summ["std"][mi, :, bi]]
            fig.add_trace(go.Scatter(x=layers, y=mean, error_y=dict(type="data", array=std, thickness=1),
                                     mode="lines+markers", name=m, legendgroup=m, showlegend=bi == 0,
                                     line=dict(color=colors[mi % len(colors)])), row=r, col=c)
    fig.update_yaxes(range=[-1, 1])
    layer_axis(fig, res.n_layers)
    # the legend in a row above the panels, not in a column beside them: at 1024 px a column legend left
    # each of the three panels about 100 px wide
    fig.update_layout(title=dict(text=f"mean {stat} (± std) of the target row vs importance, {res.n_sentences} sentences",
                                 y=1, yanchor="top", pad=dict(t=10)),
                      height=380 * nrows + 130, margin=dict(t=130, r=30),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1 - 48 / (380 * nrows + 130), yanchor="top",
                                  yref="container", font=dict(size=12)))
    return fig
