"""Bar charts: the target rows of several maps over the tokens, and the model's top-k prediction."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from ..text import SEP, clean_token
from .style import AXIS, HIGHLIGHT, domains, note, raw_figure, style


def row_bars(rows: Sequence[np.ndarray], labels: Sequence[str], titles: Sequence[str],
             value_names: Optional[Sequence[str]] = None, target: Optional[int] = None,
             title: str = "") -> go.Figure:
    """k rows [n] (one per method) -> stacked bar charts sharing the token axis."""
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
                         hovertemplate="source: %{x}<br>" + vname + ": %{y:.4g}<extra></extra>",
                         xaxis="x" + ax, yaxis="y" + ax))
        # shared x axis: every panel matches the bottom one; tick labels only at the bottom
        layout["xaxis" + ax] = dict(AXIS, anchor="y" + ax, type="category", tickangle=-60, domain=[0.0, 1.0],
                                    **({} if r == k - 1 else dict(matches="x" + ("" if k == 1 else str(k)),
                                                                  showticklabels=False)))
        layout["yaxis" + ax] = dict(AXIS, anchor="x" + ax, domain=[y0, y1],
                                    title=dict(text=vname, font=dict(size=10), standoff=15),
                                    range=[0, max(1e-12, float(row.max()) if row.size else 1.0) * 1.25])
        notes.append(note(titles[r], 0.5, y1, size=16))
    layout.update(annotations=notes, height=170 * k + 140, showlegend=False,
                  margin=dict(l=10, r=10, t=60 if title else 30, b=10))
    if title:
        layout["title"] = dict(text=title, x=0.05)
    return raw_figure(data, layout)


def prediction_bars(prediction: Sequence, title: str = "") -> go.Figure:
    """[(label, probability)] top-k -> horizontal bars, best on top, probabilities as text."""
    labels = [f"{k + 1}{SEP}{clean_token(t)}" for k, (t, _) in enumerate(prediction)]
    probs = [float(p) for _, p in prediction]
    fig = go.Figure(go.Bar(x=probs, y=labels, orientation="h", marker_color="#2ca02c",
                           text=[f"{p:.3f}" if p >= 0.001 else f"{p:.1e}" for p in probs],
                           textposition="outside", cliponaxis=False,
                           hovertemplate="%{y}: p = %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(range=[0, 1.15], title_text="probability")
    fig.update_layout(height=60 + 30 * max(1, len(labels)), title=title or None,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10), plot_bgcolor="white")
    return style(fig)
