"""Causal mediation figures: effect maps (heads L x H, layer x token) on a diverging scale."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from .style import AXIS, DIV_SCALE, LAYOUT, SEQ_SCALE


def _fonts(font: Optional[int]) -> tuple:
    """(tick, title, cell) sizes: the regular ones, or all at least `font` (presentation mode)."""
    if font is None:
        return 12, 14, 11
    return font, font + 2, font


def effect_map(values: np.ndarray, x_labels: Sequence[str], y_labels: Sequence[str], title: str, *,
               units: str = "share of the change, %", x_title: str = "", y_title: str = "",
               cells: bool = True, skipped: Optional[np.ndarray] = None, font: Optional[int] = None,
               height: Optional[int] = None) -> go.Figure:
    """A heatmap of effects (values as fractions: 0.41 is 41 %) on a red-white-blue scale
    centred on 0 and symmetric (blue: the patch moves y up, towards what the other sentence gives; red:
    down). Cells the computation skipped (exactly 0 by construction) are written "·". The numbers in
    the cells are percents, rounded."""
    v = np.asarray(values, dtype=np.float64) * 100.0
    finite = v[np.isfinite(v)]
    zmax = float(np.max(np.abs(finite))) if finite.size else 1.0
    zmax = zmax if zmax > 0 else 1.0
    tick, title_px, cell_px = _fonts(font)
    text = None
    if cells and v.size <= 600:
        digits = 1 if zmax < 10 else 0  # small effects keep one decimal

        def cell(x: float) -> str:
            r = round(x, digits)
            return "0" if r == 0 or not np.isfinite(x) else f"{r:.{digits}f}"
        text = [[("·" if skipped is not None and skipped[i, j] else cell(v[i, j])) for j in range(v.shape[1])]
                for i in range(v.shape[0])]
    trace = dict(type="heatmap", z=v.tolist(), x=list(range(v.shape[1])), y=list(range(v.shape[0])),
                 colorscale=DIV_SCALE, zmin=-zmax, zmax=zmax, zmid=0,
                 colorbar=dict(title=dict(text=units, side="right", font=dict(size=tick)), tickfont=dict(size=tick),
                               thickness=14),
                 customdata=[[[y_labels[i], x_labels[j]] for j in range(v.shape[1])] for i in range(v.shape[0])],
                 hovertemplate="%{customdata[0]} · %{customdata[1]}<br>%{z:.1f} %<extra></extra>")
    if text is not None:
        trace.update(text=text, texttemplate="%{text}", textfont=dict(size=cell_px))
    n_rows = v.shape[0]
    h = height or int(min(900, max(260, 26 * n_rows + 140)) * (1.25 if font else 1.0))
    layout = dict(LAYOUT, title=dict(text=title, font=dict(size=title_px), x=0, xanchor="left"), height=h,
                  margin=dict(l=10, r=10, t=60, b=10),
                  xaxis=dict(AXIS, tickmode="array", tickvals=list(range(len(x_labels))), ticktext=list(x_labels),
                             tickfont=dict(size=tick), title=dict(text=x_title, font=dict(size=tick)), side="bottom"),
                  yaxis=dict(AXIS, tickmode="array", tickvals=list(range(len(y_labels))), ticktext=list(y_labels),
                             tickfont=dict(size=tick), title=dict(text=y_title, font=dict(size=tick)),
                             autorange="reversed"))
    layout["font"] = dict(LAYOUT["font"], size=tick)
    return go.Figure(dict(data=[trace], layout=layout), skip_invalid=True)


def row_map(values: np.ndarray, x_labels: Sequence[str], y_labels: Sequence[str], title: str, *, units: str,
            font: Optional[int] = None, height: Optional[int] = None) -> go.Figure:
    """A layer x token map of shares in [0, 1] (a map's target row at every layer) on the maps'
    sequential scale, on the same axes as the patching map beside it."""
    v = np.asarray(values, dtype=np.float64)
    tick, title_px, _ = _fonts(font)
    n_rows = v.shape[0]
    h = height or int(min(900, max(260, 26 * n_rows + 140)) * (1.25 if font else 1.0))
    trace = dict(type="heatmap", z=v.tolist(), x=list(range(v.shape[1])), y=list(range(n_rows)),
                 colorscale=SEQ_SCALE, zmin=0.0, zmax=float(max(v.max(), 1e-12)),
                 colorbar=dict(title=dict(text=units, side="right", font=dict(size=tick)), tickfont=dict(size=tick),
                               thickness=14),
                 customdata=[[[y_labels[i], x_labels[j]] for j in range(v.shape[1])] for i in range(n_rows)],
                 hovertemplate="%{customdata[0]} · %{customdata[1]}<br>%{z:.3f}<extra></extra>")
    layout = dict(LAYOUT, title=dict(text=title, font=dict(size=title_px), x=0, xanchor="left"), height=h,
                  margin=dict(l=10, r=10, t=60, b=10),
                  xaxis=dict(AXIS, tickmode="array", tickvals=list(range(len(x_labels))), ticktext=list(x_labels),
                             tickfont=dict(size=tick)),
                  yaxis=dict(AXIS, tickmode="array", tickvals=list(range(len(y_labels))), ticktext=list(y_labels),
                             tickfont=dict(size=tick), autorange="reversed"))
    layout["font"] = dict(LAYOUT["font"], size=tick)
    return go.Figure(dict(data=[trace], layout=layout), skip_invalid=True)
