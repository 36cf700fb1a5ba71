"""The Heads page's grid: every head of every layer as a small heatmap, pooled into blocks of
tokens for long texts."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .style import SEQ_COLORS, style


GRID_MAX_TOKENS = 48  # the Heads grid's cells are ~50-90 px: past this many tokens they show blocks


def block_pool(M: np.ndarray, k: int) -> np.ndarray:
    """[..., n, n] -> [..., b, b] with b = ceil(n / k): blocks of k tokens (the last one shorter),
    rows of a block averaged and columns summed, so rows that sum to 1 still do (the share an average
    receiver of the block draws from each block of sources)."""
    M = np.asarray(M, dtype=np.float64)
    n = M.shape[-1]
    b = -(-n // k)
    pad = b * k - n
    P = np.pad(M, [(0, 0)] * (M.ndim - 2) + [(0, pad), (0, pad)])
    P = P.reshape(M.shape[:-2] + (b, k, b, k)).sum(axis=(-3, -1))
    rows = np.minimum(k, n - k * np.arange(b))  # real rows in each block
    return P / rows[:, None]


def block_labels(labels: Sequence[str], k: int) -> list:
    """Labels of blocks of k tokens: "first … last" (one label alone for a block of one)."""
    labels = list(labels)
    out = []
    for s in range(0, len(labels), k):
        e = min(s + k, len(labels)) - 1
        out.append(labels[s] if e == s else f"{labels[s]} … {labels[e]}")
    return out


def head_grid(heads: np.ndarray, layer_maps: Optional[np.ndarray], labels: Sequence[str], title: str = "",
              value_name: str = "value", layer_label: str = "all heads", clickable: bool = True) -> go.Figure:
    """heads [L, H, n, n] (and optionally layer maps [L, n, n]) -> an L x H (+1) grid of small heatmaps.

    One colour scale for the whole grid (0 .. max). Cells are added row by row (layer), column by
    column (head; the last column holds the layer maps); every trace's `meta` is [layer (1-based),
    head (1-based) or 0 for the layer map]. Heatmap traces are named "layer l, head h"; with
    clickable=True each cell also gets an invisible scatter ("click ...") over its cells, which
    carries the hover text and makes a click selectable (plotly cannot select heatmap cells).
    """
    heads = np.asarray(heads, dtype=np.float64)
    L, H = heads.shape[:2]
    C = H + (1 if layer_maps is not None else 0)
    zmax = float(max(heads.max(), 0 if layer_maps is None else np.asarray(layer_maps).max())) or 1.0
    if C <= 10:
        col_titles = [f"head {h + 1}" for h in range(H)] + ([layer_label] if layer_maps is not None else [])
    else:  # ~40 px columns at 1024 px: "head 11 head 12 head mean" would run into each other
        col_titles = [f"h{h + 1}" for h in range(H)] + ([layer_label.replace(" ", "<br>", 1)] if layer_maps is not None
                                                        else [])
    fig = make_subplots(rows=L, cols=C, horizontal_spacing=0.006, vertical_spacing=0.012,
                        column_titles=col_titles, row_titles=[f"layer {l + 1}" for l in range(L)])
    for l in range(L):
        for c in range(C):
            is_layer = c == H
            M = layer_maps[l] if is_layer else heads[l, c]
            who = f"layer {l + 1}, {layer_label if is_layer else f'head {c + 1}'}"
            hover = who + "<br>row: %{y}<br>column: %{x}<br>" + value_name
            meta = [l + 1, 0 if is_layer else c + 1]
            fig.add_trace(go.Heatmap(z=M, x=list(labels), y=list(labels), zmin=0, zmax=zmax,
                                     colorscale=SEQ_COLORS, showscale=(l == 0 and c == 0), meta=meta, name=who,
                                     hovertemplate=hover + ": %{z:.4g}<extra></extra>",
                                     hoverinfo="skip" if clickable else None,
                                     colorbar=dict(title=dict(text=value_name, side="right"), len=0.3, y=1.0,
                                                   yanchor="top", thickness=10)),
                          row=l + 1, col=c + 1)
            if clickable:
                n = len(labels)
                ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
                fig.add_trace(go.Scatter(x=[labels[j] for j in jj.ravel()], y=[labels[i] for i in ii.ravel()],
                                         mode="markers", marker=dict(size=max(4, 60 // max(n, 1)), opacity=0),
                                         customdata=np.asarray(M).ravel(), meta=meta, name="click " + who,
                                         showlegend=False,
                                         hovertemplate=hover + ": %{customdata:.4g}<extra></extra>"),
                              row=l + 1, col=c + 1)
    fig.update_xaxes(showticklabels=False, type="category", showgrid=False)
    fig.update_yaxes(showticklabels=False, type="category", autorange="reversed", showgrid=False)
    cell = min(200.0, max(60.0, 1000.0 / C))  # about square cells in a ~1000 px wide page
    fig.update_layout(height=int(cell * L + 80), title=title or None, margin=dict(l=10, r=40, t=70 if title else 40, b=10),
                      clickmode="event+select")
    fig.update_annotations(font_size=10)
    return style(fig)
