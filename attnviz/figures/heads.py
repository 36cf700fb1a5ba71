"""The Heads page's grid: every head of every layer as a small heatmap, pooled into blocks of
tokens for long texts."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from .style import SEQ_SCALE, raw_figure


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


def grid_gap(n: int) -> int:
    """Blank cells between two maps of n x n cells in the head grid."""
    return max(1, round(n / 8))


def grid_cells(z: np.ndarray, meta: dict, layer: int, head: int) -> np.ndarray:
    """The n x n block of the head grid's one heatmap (z, its trace's meta) for layer (1-based) and head
    (1-based; 0: the layer map)."""
    L, C, n, g = meta["L"], meta["C"], meta["n"], meta["gap"]
    c = C - 1 if head == 0 else head - 1
    r0, c0 = (layer - 1) * (n + g), c * (n + g)
    return np.asarray(z, dtype=np.float64)[r0:r0 + n, c0:c0 + n]


def head_grid(heads: np.ndarray, layer_maps: Optional[np.ndarray], labels: Sequence[str], title: str = "",
              value_name: str = "value", layer_label: str = "all heads", clickable: bool = True,
              row_px: int = 0, zmin: float = 0.0, zmax: Optional[float] = None,
              colorbar_title: Optional[str] = None, column_titles: bool = True) -> go.Figure:
    """heads [L, H, n, n] (and optionally layer maps [L, n, n]) -> an L x H (+1) grid of small heatmaps,
    drawn as ONE heatmap on one pair of axes (300 subplots took plotly.js ~15 s to lay out): the maps
    side by side with `grid_gap(n)` blank (NaN) cells between them, layers as rows, heads as columns,
    the last column the layer maps.

    The heatmap's meta is {"grid": "heads", "L", "C" (columns), "n", "gap"}: grid_cells(z, meta, l, h)
    cuts one map out of it. Its axes are categories, "layer <l>, row <label>" and "head <h>, column <label>",
    so a hover names the layer, head, row and column. With clickable=True a scatter of one invisible
    square per map (name "open", customdata [layer, head], head 0 = the layer map) makes a click
    selectable (plotly cannot select heatmap cells); over its square (the middle ~40 % of the map's width)
    a hover names the map and says a click opens it (plotly shows one hover label: the square's, not the
    cell's under it); elsewhere a hover gives the cell's value. One colour scale (zmin .. zmax,
    default 0 .. the largest value). row_px: the height of a layer's row in pixels (default: about
    square cells in a ~1000 px wide page). column_titles=False leaves out the head names above the
    columns (the app writes them in a header row of its own)."""
    heads = np.asarray(heads, dtype=np.float64)
    L, H, n = heads.shape[0], heads.shape[1], heads.shape[-1]
    C = H + (1 if layer_maps is not None else 0)
    g = grid_gap(n)
    maps = [heads[:, h] for h in range(H)] + ([np.asarray(layer_maps, dtype=np.float64)] if layer_maps is not None else [])
    Z = np.full((L * (n + g) - g, C * (n + g) - g), np.nan)
    for c, M in enumerate(maps):
        for l in range(L):
            Z[l * (n + g):l * (n + g) + n, c * (n + g):c * (n + g) + n] = M[l]
    if zmax is None:
        zmax = float(np.nanmax(Z)) if np.isfinite(Z).any() else 1.0
        zmax = zmax or 1.0
    labels = [str(x) for x in labels]
    col_name = [f"head {h + 1}" for h in range(H)] + ([layer_label] if layer_maps is not None else [])
    xs, ys = [], []
    for c in range(C):
        xs += [f"{col_name[c]}, column {lab}" for lab in labels] + ([" " * (c + 1)] * g if c < C - 1 else [])
    for l in range(L):
        ys += [f"layer {l + 1}, row {lab}" for lab in labels] + (["\u2009" * (l + 1)] * g if l < L - 1 else [])
    # a gap of g cells gets g category names; they must be distinct from each other too
    xs = [x if x.strip() else x + "\u200b" * k for k, x in enumerate(xs)]
    ys = [y if y.strip() else y + "\u200b" * k for k, y in enumerate(ys)]
    hover = "%{y}<br>%{x}<br>" + value_name + ": %{z:.4g}<extra></extra>"
    data = [dict(type="heatmap", z=Z, x=xs, y=ys, zmin=zmin, zmax=zmax, colorscale=SEQ_SCALE, hoverongaps=False,
                 name="grid", hovertemplate=hover,
                 meta=dict(grid="heads", L=L, C=C, n=n, gap=g),
                 colorbar=dict(title=dict(text=colorbar_title or value_name, side="right"), len=0.3, y=1.0,
                               yanchor="top", thickness=10))]
    mid = n // 2
    if clickable:
        cx = [xs[c * (n + g) + mid] for c in range(C) for l in range(L)]
        cy = [ys[l * (n + g) + mid] for c in range(C) for l in range(L)]
        cd = [[l + 1, 0 if (layer_maps is not None and c == H) else c + 1] for c in range(C) for l in range(L)]
        data.append(dict(type="scatter", x=cx, y=cy, mode="markers", name="open", customdata=cd,
                         marker=dict(symbol="square", size=max(10, int(0.4 * (row_px or 60))), opacity=0),
                         hovertemplate=f"layer %{{customdata[0]}}, %{{text}}: click to open it on Explore<extra></extra>",
                         text=[layer_label if h == 0 else f"head {h}" for _, h in cd], showlegend=False))
    cell = min(200.0, max(60.0, 1000.0 / C))
    row_px = row_px or int(cell)
    col_titles = [f"head {h + 1}" if C <= 10 else f"h{h + 1}" for h in range(H)]
    if layer_maps is not None:
        col_titles.append(layer_label if C <= 10 else layer_label.replace(" ", "<br>", 1))
    W = Z.shape[1]
    ann = [dict(text=t, x=(c * (n + g) + (n - 1) / 2) / (W - 1) if W > 1 else 0.5, xref="paper", y=1.0, yref="paper",
                yanchor="bottom", showarrow=False, font=dict(size=11), name="column title")
           for c, t in enumerate(col_titles)] if column_titles else []
    ticks_y = [ys[l * (n + g) + mid] for l in range(L)]
    layout = dict(
        xaxis=dict(type="category", showticklabels=False, ticks="", showline=False, showgrid=False, zeroline=False, fixedrange=True,
                   range=[-0.5, W - 0.5]),
        # exact ranges: the click squares' size would otherwise pad autorange's
        yaxis=dict(type="category", range=[Z.shape[0] - 0.5, -0.5], showgrid=False, zeroline=False, fixedrange=True,
                   tickmode="array", tickvals=ticks_y, ticktext=[f"L{l + 1}" for l in range(L)], ticks="",
                   tickfont=dict(size=12)),
        annotations=ann, height=int(row_px * L + 90 + (30 if title else 0)), title=dict(text=title) if title else None,
        margin=dict(l=10, r=40, t=60 if title else 40, b=10), clickmode="event+select", dragmode=False,
        showlegend=False)
    return raw_figure(data, layout)
