"""Bar charts: the target rows of several maps over the tokens, and the model's top-k prediction."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from ..text import SEP, clean_token
from .style import AXIS, HIGHLIGHT, LAYOUT, domains, note, raw_figure, style


def row_bars(rows: Sequence[np.ndarray], labels: Sequence[str], titles: Sequence[str],
             value_names: Optional[Sequence[str]] = None, target: Optional[int] = None,
             title: str = "", font: Optional[float] = None) -> go.Figure:
    """k rows [n] (one per method) -> stacked bar charts sharing the token axis. font: every text at
    least this many px (presentation mode)."""
    f = float(font or 0)
    k = len(rows)
    labels = list(labels)
    value_names = list(value_names or ["value"] * k)
    data, layout, notes = [], {}, []
    doms = domains(k, 0.06 if k > 1 else 0.0)[::-1]  # the first row on top
    for r, ((y0, y1), row, vname) in enumerate(zip(doms, rows, value_names)):
        row = np.asarray(row, dtype=np.float64)
        ax = "" if r == 0 else str(r + 1)
        colors = [HIGHLIGHT if j == target else "#1f77b4" for j in range(len(labels))]
        data.append(dict(type="bar", x=labels, y=row, marker=dict(color=colors), name=titles[r],
                         text=[f"{v:.3f}" for v in row], textposition="outside", cliponaxis=False,
                         textfont=dict(size=max(12, f)), constraintext="none",
                         hovertemplate="source: %{x}<br>" + vname + ": %{y:.4g}<extra></extra>",
                         xaxis="x" + ax, yaxis="y" + ax))
        # shared x axis: every panel matches the bottom one; tick labels only at the bottom
        layout["xaxis" + ax] = dict(AXIS, anchor="y" + ax, type="category", tickangle=-60, domain=[0.0, 1.0],
                                    tickfont=dict(size=max(12, f)),
                                    **({} if r == k - 1 else dict(matches="x" + ("" if k == 1 else str(k)),
                                                                  showticklabels=False)))
        layout["yaxis" + ax] = dict(AXIS, anchor="x" + ax, domain=[y0, y1],
                                    title=dict(text=vname if not f else vname.split(" (")[0], font=dict(size=max(10, f)),
                                               standoff=15), tickfont=dict(size=max(12, f)),
                                    range=[0, max(1e-12, float(row.max()) if row.size else 1.0) * 1.25])
        notes.append(note(titles[r], 0.5, y1, size=max(16, f + 2)))
    layout.update(annotations=notes, height=(170 + 3 * f) * k + 140 + 4 * f, showlegend=False,
                  margin=dict(l=10, r=10, t=60 if title else 30, b=10))
    if title:
        layout["title"] = dict(text=title, x=0.05, font=dict(size=max(17, f + 2)))
    if f:
        layout["font"] = dict(LAYOUT["font"], size=f)
    return raw_figure(data, layout)


def prediction_bars(prediction: Sequence, title: str = "", extra: Sequence = (), font: Optional[float] = None) -> go.Figure:
    """[(label, probability)] top-k -> horizontal bars, best on top, probabilities as text. extra:
    more (label, probability) pairs drawn below the top-k in orange, each labelled by the word alone
    (e.g. the agreement words the top-k leaves out). font: every text at least this many px."""
    labels = [f"{k + 1}{SEP}{clean_token(t)}" for k, (t, _) in enumerate(prediction)]
    probs = [float(p) for _, p in prediction]
    colors = ["#2ca02c"] * len(labels)
    for t, p in extra:
        labels.append(f"…{SEP}{clean_token(t)}")
        probs.append(float(p))
        colors.append("#ff7f0e")
    fig = go.Figure(go.Bar(x=probs, y=labels, orientation="h", marker_color=colors,
                           text=[f"{p:.3f}" if p >= 0.001 else f"{p:.1e}" for p in probs],
                           textposition="outside", cliponaxis=False,
                           hovertemplate="%{y}: p = %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(range=[0, 1.15], title_text="probability")
    f = float(font or 0)
    fig.update_layout(height=(60 + 30 * max(1, len(labels))) if not f else int(30 + 2.4 * f + 1.7 * f * len(labels)),
                      title=title or None,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10), plot_bgcolor="white")
    style(fig)
    if f:
        fig.update_layout(font=dict(size=f))
        fig.update_traces(textfont=dict(size=f))
    return fig
