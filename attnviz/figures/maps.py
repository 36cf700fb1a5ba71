"""Maps as heatmaps: the view transform (hidden special tokens, merged word pieces), the grid of maps
with its pixel layout, and the context-mixing ratio map. Arrays in, figures out, no Streamlit.

Conventions (docs/design.md): a map is [n, n] with row i the receiving token and column j the
source; layers count from 1 in titles. Labels come from attnviz.text (position first, escaped).
"""
from __future__ import annotations

import dataclasses
import html
import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from ..text import SEP, clean_token, group_text, word_groups
from .style import AXIS, DIV_SCALE, HIGHLIGHT, LAYOUT, SEQ_SCALE, raw_figure

MAX_CELL_TEXT = 24  # write the value inside each heatmap cell up to this many tokens


@dataclass
class View:
    """What is drawn: the kept positions grouped into display units, and the labels."""

    groups: list  # [[positions]] per displayed row/column, in order
    labels: list  # "pos·token" per group (escaped)
    target: Optional[int]  # index into groups of the group holding the target, None if hidden

    def apply(self, M: np.ndarray, rows_sum_to_one: bool) -> np.ndarray:
        """M [n, n] -> [k, k]: rows of a word averaged over its pieces, columns summed over them;
        rows renormalised to 1 when the method's rows sum to 1 (after hiding positions)."""
        M = np.asarray(M, dtype=np.float64)
        k = len(self.groups)
        out = np.empty((k, k))
        for a, ga in enumerate(self.groups):
            rows = M[ga]
            for b, gb in enumerate(self.groups):
                out[a, b] = rows[:, gb].sum(1).mean()
        if rows_sum_to_one:
            s = out.sum(1, keepdims=True)
            out = np.divide(out, s, out=np.zeros_like(out), where=s > 0)
        return out

    def apply_row(self, M: np.ndarray, rows_sum_to_one: bool) -> np.ndarray:
        """The target group's row of apply(M) -> [k] (empty when the target is hidden)."""
        if self.target is None:
            return np.zeros(0)
        return self.apply(M, rows_sum_to_one)[self.target]


def make_view(tokens: Sequence[str], special: Sequence[bool], target: Optional[int] = None,
              hide_special: bool = False, merge_words: bool = False, word_ids: Optional[Sequence] = None) -> View:
    """tokens [n] -> View. Hidden: special tokens (CLS/SEP/PAD) except the target position itself.
    Merged: the pieces of a word become one row/column labelled with the first piece's position."""
    special = np.asarray(special, dtype=bool)
    if merge_words:
        groups = word_groups(tokens, special, word_ids)
    else:
        groups = [[i] for i in range(len(tokens))]
    if hide_special:
        groups = [g for g in groups if not (len(g) == 1 and special[g[0]] and g[0] != target)]
    labels = [f"{g[0]}{SEP}{clean_token(group_text(tokens, g) if len(g) > 1 else tokens[g[0]])}" for g in groups]
    tgt = next((k for k, g in enumerate(groups) if target is not None and target in g), None)
    return View(groups=groups, labels=labels, target=tgt)


# Layout of the map grid. The chart's width is only known in the browser, so columns are chosen for
# the narrowest main area the app supports (a 1024 px window with the sidebar open, MIN_WIDTH px of
# chart) and everything vertical is laid out in pixels (the height is ours): panel titles above,
# x tick labels read top to bottom (-90°: a label's box is one line high, so labels never overlap
# while a cell is at least TICK_PX wide), the axis title, then a horizontal colour bar that names
# its quantity and unit.
MIN_WIDTH = 560
TICK_PX = 14  # x / y tick spacing that keeps 10 px labels apart
TITLE_CHAR_PX = 7.6  # 13 px bold title
CBAR_CHAR_PX = 5.8  # 10 px colour-bar title
LABEL_CHAR_PX = 5.9  # 10 px tick label
# presentation mode: every text at least PRESENT_FONT px, laid out for a 1024 px window with the
# sidebar collapsed (PRESENT_WIDTH px of chart)
PRESENT_FONT = 18
PRESENT_WIDTH = 860


@dataclass(frozen=True)
class Sizes:
    """Font sizes (px) of a map grid's texts and the layout numbers that follow from them."""

    tick: float = 10  # tick labels
    axis: float = 11  # axis titles
    cbar_tick: float = 9  # colour-bar numbers
    cbar_title: float = 10
    panel: float = 13  # panel titles
    title: float = 15  # the figure's title
    cell: float = 10  # numbers written in cells
    min_cell: float = 0  # the narrowest a cell may be (room for its number)

    @property
    def tick_px(self) -> float:  # spacing of ticks that keeps labels apart
        return max(TICK_PX, 1.4 * self.tick, self.min_cell)

    @property
    def label_char_px(self) -> float:
        return LABEL_CHAR_PX * self.tick / 10

    @property
    def title_char_px(self) -> float:
        return TITLE_CHAR_PX * self.panel / 13

    @property
    def cbar_char_px(self) -> float:
        return CBAR_CHAR_PX * self.cbar_title / 10


def sizes(font: Optional[float] = None) -> Sizes:
    """The regular sizes (font None), or every text at least `font` px (presentation mode)."""
    if not font:
        return Sizes()
    f = float(font)
    return Sizes(tick=f, axis=f, cbar_tick=f, cbar_title=f, panel=f + 2, title=f + 4, cell=f)


def _text_px(s: str, per_char: float) -> float:
    lines = re.sub(r"<(?!br)[^>]*>", "", str(s)).split("<br>")
    # capitals, digits and wide marks take about 1.3 times an average letter
    return per_char * max((sum(1.3 if (ch.isupper() or ch in "[]#‖—MW%") else 1.0 for ch in html.unescape(x))
                           for x in lines), default=0)


def panel_min_px(n: int, titles: Sequence[str], cbar_titles: Sequence[str], sz: Sizes = Sizes(),
                 wrap: bool = False) -> float:
    """The narrowest a map panel may be: sz.tick_px per token, and room for its title and colour-bar
    title (wrap: the colour-bar title may go on two lines, before its parenthesis, see wrap_title)."""
    if wrap:
        cbar_titles = [wrap_title(t, sz.cbar_char_px, 0) for t in cbar_titles]
    return max(120.0, sz.tick_px * n + 8, max((_text_px(t, sz.title_char_px) for t in titles), default=0) + 8,
               max((_text_px(t, sz.cbar_char_px) for t in cbar_titles), default=0) + 8)


def y_label_px(labels: Sequence[str], sz: Sizes = Sizes()) -> float:
    """Room the y tick labels and the y axis title take left of the first column."""
    return max((_text_px(l, sz.label_char_px) for l in labels), default=0) + 29 + sz.axis


def auto_columns(k: int, labels: Sequence[str], titles: Sequence[str], cbar_titles: Sequence[str],
                 width: float = MIN_WIDTH, gap_px: float = 28.0, sz: Sizes = Sizes()) -> int:
    """How many map panels fit side by side in `width` px without labels or titles colliding."""
    need = panel_min_px(len(labels), titles, cbar_titles, sz, wrap=sz != Sizes())
    room = width - y_label_px(labels, sz)
    return int(max(1, min(k, (room + gap_px) // (need + gap_px))))


def wrap_title(s: str, per_char: float, width: float) -> str:
    """A colour-bar title too wide for `width` px split before its parenthesis (one <br>)."""
    if _text_px(s, per_char) + 8 <= width or " (" not in s:
        return s
    head, tail = s.split(" (", 1)
    return f"{head}<br>({tail}"


LONG_MAP_PX = 840  # the tallest a map gets (60 rows at TICK_PX); longer texts label every k-th row


def row_label_every(n: int, tick_px: float = TICK_PX) -> int:
    """1 while n rows at tick_px fit in LONG_MAP_PX; else the stride k of the labelled rows of a map
    LONG_MAP_PX tall."""
    return 1 if tick_px * n <= LONG_MAP_PX else int(-(-tick_px * n // LONG_MAP_PX))


def row_ticks(n: int, every: int, target: Optional[int] = None) -> list:
    """The rows (or columns) to label on a long map: every `every`-th from 0 and the target's, leaving
    out the regular ones closer than `every` to the target so that no two labels overlap."""
    keep = set(range(0, n, every))
    if target is not None and 0 <= target < n:
        keep = {i for i in keep if abs(i - target) >= every} | {target}
    return sorted(keep)


def ratio_heatmap(R: np.ndarray, labels: Sequence[str], name: str) -> go.Figure:
    """R [L, n] context-mixing ratios -> heatmap token (rows) × layer (columns), percent. Up to
    LONG_MAP_PX of 22 px rows every row is named (numbers in the cells up to 40 rows); a longer text
    gets a map LONG_MAP_PX tall with every k-th row named (row_label_every) and the token on hover (at
    160 tokens the rows of 22 px made a 3,600 px strip whose colour bar and layer names were screens
    apart)."""
    L, n = R.shape[0], len(labels)
    z = 100 * np.asarray(R, dtype=np.float64).T
    x = [f"layer {l}" for l in range(1, L + 1)]
    bar = dict(title="%")
    if 22 * n <= LONG_MAP_PX:
        fig = go.Figure(go.Heatmap(z=z, x=x, y=list(labels), zmin=0, zmax=100, colorscale="Blues", xgap=1, ygap=1,
                                   texttemplate="%{z:.0f}" if n <= 40 else None,
                                   hovertemplate="%{y}, %{x}: %{z:.1f} %<extra></extra>", colorbar=bar))
        fig.update_yaxes(autorange="reversed", type="category")
        height = max(300, 22 * n + 120)
    else:
        every = row_label_every(n)
        ticks = row_ticks(n, every)
        text = [[labels[i]] * L for i in range(n)]
        fig = go.Figure(go.Heatmap(z=z, x=x, y=list(range(n)), zmin=0, zmax=100, colorscale="Blues", xgap=1,
                                   text=text, hovertemplate="%{text}, %{x}: %{z:.1f} %<extra></extra>",
                                   colorbar=bar))
        fig.update_yaxes(autorange="reversed", tickvals=ticks, ticktext=[labels[i] for i in ticks],
                         title_text=f"token (one name in {every}; hover for each)", title_font=dict(size=11))
        height = LONG_MAP_PX + 120
    fig.update_xaxes(type="category")
    fig.update_layout(title=f"{name}: context-mixing ratio per token", height=height,
                      margin=dict(l=10, r=10, t=50, b=10), plot_bgcolor="white", meta="token_heatmap")
    return fig


def _log_ticks(lo: float, hi: float):
    """Decade ticks between log10 values lo and hi -> (tickvals, ticktext)."""
    vals = list(range(math.floor(lo), math.ceil(hi) + 1))
    return vals, [f"{10.0 ** v:g}" for v in vals]


def heatmaps(mats: Sequence[np.ndarray], labels: Sequence[str], titles: Sequence[str],
             value_names: Optional[Sequence[str]] = None, target: Optional[int] = None,
             cell_text: Optional[bool] = None, height: Optional[int] = None, *, title: str = "",
             hover_titles: Optional[Sequence[str]] = None, cols: Optional[int] = None,
             zmax: Optional[Sequence[Optional[float]]] = None, log: bool = False,
             diverging: Optional[Sequence[bool]] = None, font: Optional[float] = None,
             width: Optional[float] = None, max_cols: Optional[int] = None) -> go.Figure:
    """k maps [n, n] with shared token labels [n] -> one figure, the maps in a grid of `cols` columns
    (default auto_columns: as many as fit at `width` px, MIN_WIDTH unless given, at most max_cols),
    wrapped onto more rows. font: every text at least this many px (presentation mode; the layout
    grows with it), else the regular sizes (sizes()).

    titles: short panel titles (may hold one <br>); hover_titles: the long form, shown when hovering
    the title or a cell. value_names: the colour bars' titles (quantity and unit). Each panel has its
    own colour scale from 0 to its maximum unless zmax[c] is given (e.g. one maximum for all maps in
    shares of 1). log: colours on a log10 scale (z holds log10 of the values, customdata the values;
    for maps dominated by one cell, e.g. an attention sink). diverging[c]: a red-blue scale symmetric
    around 0 (differences). The target row's label is drawn in bold red on the y axis. Values are
    written in the cells when n <= MAX_CELL_TEXT or cell_text=True.
    """
    k = len(mats)
    n = len(labels)
    labels = list(labels)
    value_names = list(value_names or ["value"] * k)
    hover_titles = list(hover_titles or [str(t).replace("<br>", " · ") for t in titles])
    zmax = list(zmax) if zmax is not None else [None] * k
    diverging = list(diverging) if diverging is not None else [False] * k
    cbar_titles = [v + (" (log scale)" if log and not d else "") for v, d in zip(value_names, diverging)]
    cell_text = (n <= MAX_CELL_TEXT) if cell_text is None else cell_text
    sz = sizes(font)
    if font and cell_text:  # "0.12" in each cell at the large size: wider cells
        sz = dataclasses.replace(sz, min_cell=2.4 * sz.cell)
    room = float(width or MIN_WIDTH)
    ncol = int(cols) if cols else auto_columns(k, labels, titles, cbar_titles, room, sz=sz)
    ncol = max(1, min(k, ncol, max_cols or k))
    if font:  # a colour-bar title wider than its panel goes on two lines
        panel = (room - y_label_px(labels, sz)) / ncol - 28
        cbar_titles = [wrap_title(t, sz.cbar_char_px, panel) for t in cbar_titles]
    nrow = -(-k // ncol)
    # ---- vertical layout in pixels
    n_title_lines = max((str(t).count("<br>") + 1 for t in titles), default=1)
    T = 8 + (sz.panel + 5) * n_title_lines  # panel title
    # the map itself: TICK_PX a row, every row labelled, up to LONG_MAP_PX; a longer text gets a map
    # of LONG_MAP_PX with every k-th row labelled (and the target's), so it stays a picture, not a strip
    every_row = row_label_every(n, sz.tick_px)
    P = LONG_MAP_PX if every_row > 1 else int(max(sz.tick_px * n, min(380, 24 * n)))
    cell_gap = 1 if n <= 64 else 0  # a 1 px gap between cells of 1-3 px would hide the map
    X = int(max((_text_px(l, sz.label_char_px) for l in labels), default=0)) + 14  # x tick labels, read downwards
    XT = int(sz.axis + 13)  # x axis title
    cb_lines = max((t.count("<br>") + 1 for t in cbar_titles), default=1)
    C = int(cb_lines * (sz.cbar_title + 4) + 10 + sz.cbar_tick + 25)  # colour bar: title, bar, tick labels
    G = 18  # between rows
    block = T + P + X + XT + C + G
    top = int(sz.title + 25) if title else 8
    H = height or int(top + nrow * block + 4)
    paper_h = H - top - 4

    def py(px_from_top: float) -> float:  # pixels below the paper's top -> paper y
        return 1.0 - px_from_top / paper_h

    gap = 0.05 if ncol > 1 else 0.0
    w = (1.0 - gap * (ncol - 1)) / ncol
    data, layout, notes = [], {}, []
    ticktext = None
    if target is not None and 0 <= target < n:  # the target row's label in bold red (same text)
        ticktext = [f'<span style="color:{HIGHLIGHT}"><b>{lab}</b></span>' if i == target else lab
                    for i, lab in enumerate(labels)]
    for c, M in enumerate(mats):
        M = np.asarray(M, dtype=np.float64)
        if M.shape != (n, n):
            raise ValueError(f"map {c} has shape {M.shape}, expected ({n}, {n}) for {n} labels")
        r, cc = divmod(c, ncol)
        x0 = cc * (w + gap)
        x1 = x0 + w
        y_top = r * block + T
        y1, y0 = py(y_top), py(y_top + P)
        ax = "" if c == 0 else str(c + 1)
        finite = M[np.isfinite(M)]
        hover = hover_titles[c] + "<br>row (receives): %{y}<br>column (source): %{x}<br>" + value_names[c]
        hm = dict(type="heatmap", x=labels, y=labels, name=str(hover_titles[c]), xaxis="x" + ax, yaxis="y" + ax,
                  xgap=cell_gap, ygap=cell_gap)
        cbar = dict(orientation="h", x=(x0 + x1) / 2, xanchor="center", y=py(y_top + P + X + XT + 2),
                    yanchor="top", yref="paper", len=w * 0.96, lenmode="fraction", thickness=10,
                    tickfont=dict(size=sz.cbar_tick), ypad=0, xpad=0,
                    title=dict(text=cbar_titles[c], side="top", font=dict(size=sz.cbar_title)))
        if diverging[c]:
            m = zmax[c] if zmax[c] is not None else (float(np.abs(finite).max()) if finite.size else 1.0)
            m = m if m > 0 else 1.0
            hm.update(z=M, zmin=-m, zmax=m, colorscale=DIV_SCALE, hovertemplate=hover + ": %{z:+.4g}<extra></extra>")
            shown = M
        elif log:
            hi = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
            hi = max(hi, zmax[c] or 0.0)
            floor = hi * 1e-4
            Z = np.log10(np.clip(M, floor, None))
            tv, tt = _log_ticks(np.log10(floor), np.log10(hi))
            cbar.update(tickmode="array", tickvals=tv, ticktext=tt)
            hm.update(z=Z, customdata=M, zmin=float(np.log10(floor)), zmax=float(np.log10(hi)), colorscale=SEQ_SCALE,
                      hovertemplate=hover + ": %{customdata:.4g}<extra></extra>")
            shown = M
        else:
            hi = zmax[c] if zmax[c] is not None else (float(finite.max()) if finite.size else 1.0)
            if not hi > 0:
                hi = 1.0
            hm.update(z=M, zmin=0.0, zmax=hi, colorscale=SEQ_SCALE, hovertemplate=hover + ": %{z:.4g}<extra></extra>")
            shown = M
        hm["colorbar"] = cbar
        if cell_text:
            hm.update(text=[[f"{v:.2f}" for v in row] for row in shown], texttemplate="%{text}",
                      textfont=dict(size=max(8 if n > 16 else 10, sz.cell)))
        data.append(hm)
        layout["xaxis" + ax] = dict(AXIS, domain=[x0, x1], anchor="y" + ax, tickangle=-90, type="category",
                                    tickmode="linear", dtick=1, tickfont=dict(size=sz.tick), automargin=False,
                                    title=dict(text="source (column j)", font=dict(size=sz.axis),
                                               standoff=6 if sz == Sizes() else 10))
        first_in_row = cc == 0
        y = dict(AXIS, autorange="reversed", type="category", tickmode="linear", dtick=1, tickfont=dict(size=sz.tick),
                 anchor="x" + ax, domain=[y0, y1])
        if first_in_row:
            y.update(title=dict(text="receiving (row i)", font=dict(size=sz.axis), standoff=6 if sz == Sizes() else 16))
            if every_row > 1:
                rows = row_ticks(n, every_row, target)
                y.update(tickmode="array", tickvals=[labels[i] for i in rows],
                         ticktext=[(ticktext or labels)[i] for i in rows])
            elif ticktext is not None:
                y.update(tickmode="array", tickvals=labels, ticktext=ticktext)
        else:  # the row's first panel carries the labels
            y.update(matches="y" + ("" if r * ncol == 0 else str(r * ncol + 1)), showticklabels=False)
        layout["yaxis" + ax] = y
        notes.append(dict(text=str(titles[c]), x=(x0 + x1) / 2, y=y1, xref="paper", yref="paper", xanchor="center",
                          yanchor="bottom", showarrow=False, yshift=4, font=dict(size=sz.panel),
                          hovertext=str(hover_titles[c]), captureevents=True, name=f"title {c}"))
    layout.update(annotations=notes, height=H, margin=dict(l=10, r=10, t=top, b=4))
    if font:
        layout["font"] = dict(LAYOUT["font"], size=sz.tick)
    if title:
        layout["title"] = dict(text=title, x=0.0, xref="paper", xanchor="left", y=1.0, yref="container",
                               yanchor="top", pad=dict(t=8), font=dict(size=sz.title))
    return raw_figure(data, layout)


def heatmap(M: np.ndarray, labels: Sequence[str], title: str = "", value_name: str = "value",
            target: Optional[int] = None) -> go.Figure:
    """One map [n, n] -> a heatmap (see heatmaps)."""
    return heatmaps([M], labels, [title], [value_name], target=target)
