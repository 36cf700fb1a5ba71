"""Plotly figure builders and the view transforms behind them: arrays in, figures out, no Streamlit.

Conventions (DESIGN.md §2): a map is [n, n] with row i the receiving token and column j the source;
layers count from 1 in titles. Every token label carries its position ("3·the"), because plotly
merges duplicate category labels, and is HTML-escaped, because plotly interprets a small HTML subset
in labels: tokens are always shown as text.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

SEP = "·"
SEQ_COLORS = "Blues"
HIGHLIGHT = "#d62728"
MAX_CELL_TEXT = 24  # write the value inside each heatmap cell up to this many tokens
MAX_GRAPH_TOKENS = 40  # the layered graph is unreadable (and slow) beyond this
FONT = "Source Sans Pro, Source Sans 3, sans-serif"


def _style(fig: go.Figure) -> go.Figure:
    """A light, self-contained look (the app draws figures with theme=None: faster to re-render):
    white template, axes that make room for their labels."""
    fig.update_layout(template="plotly_white", font=dict(family=FONT, size=12), paper_bgcolor="white",
                      plot_bgcolor="white")
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


# ----------------------------------------------------------------------------------------- labels

# the characters GPT-2's byte-to-unicode table maps bytes to themselves (printable Latin-1)
_BYTE_CHARS = frozenset(chr(b) for b in [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)])


def readable_token(tok: str) -> str:
    """A vocabulary entry as a person reads it: byte-level BPE entries ('Ġare', 'Ċ') decoded by the
    tokenizers library's ByteLevel decoder, SentencePiece's word mark '▁' dropped, the leading space
    of a word-initial token removed, newline and tab shown as ↵ and ⇥, a bare space as ␣. WordPiece
    entries ('##s', '[CLS]') are kept as they are."""
    t = str(tok)
    if any(256 <= ord(c) <= 323 for c in t):  # GPT-2's byte-to-unicode table maps bytes there
        from tokenizers.decoders import ByteLevel
        t = ByteLevel().decode([t])
    elif any(ord(c) >= 0x80 for c in t) and all(c in _BYTE_CHARS for c in t):
        # 'Ã©' is 'é' in GPT-2's table (bytes C3 A9 map to themselves): decode it when the bytes are
        # valid UTF-8; a WordPiece entry such as 'café' (E9 alone is no UTF-8) stays as it is
        try:
            t = bytes(ord(c) for c in t).decode("utf-8")
        except UnicodeDecodeError:
            pass
    elif "▁" in t:
        t = t.replace("▁", " ")
    t = t.replace("\n", "↵").replace("\t", "⇥").strip(" ")
    return t if t else ("␣" if str(tok) else "")


def clean_token(tok: str) -> str:
    """A token as plain, escaped, readable text: plotly shows '<b>' literally, never as markup."""
    return html.escape(readable_token(tok), quote=False)


def token_labels(tokens: Sequence[str], positions: Optional[Sequence[int]] = None) -> list:
    """tokens [n] -> ["0·[CLS]", "1·the", ...] (position first, token escaped)."""
    positions = range(len(tokens)) if positions is None else positions
    return [f"{p}{SEP}{clean_token(t)}" for p, t in zip(positions, tokens)]


# ------------------------------------------------------------------------------------ word groups

_CONT_PREFIX = "##"
_START_MARKS = ("Ġ", "▁")


def word_groups(tokens: Sequence[str], special: Sequence[bool], word_ids: Optional[Sequence] = None) -> list:
    """tokens [n] -> groups of positions, one per word: [[0], [1], [2, 3], ...].

    word_ids (from a fast tokenizer, None for special tokens) decide when given and consistent;
    otherwise WordPiece continuations ("##x") join the previous token, and for byte-level /
    SentencePiece vocabularies a token without a word-start mark ("Ġ", "▁") joins the previous one.
    Special tokens are always alone.
    """
    n = len(tokens)
    special = [bool(s) for s in special]
    groups: list = []
    if word_ids is not None and len(word_ids) == n:
        last = None
        for i, w in enumerate(word_ids):
            if special[i] or w is None:
                groups.append([i])
                last = None
            elif w == last:
                groups[-1].append(i)
            else:
                groups.append([i])
                last = w
        return groups
    byte_level = any(str(t).startswith(_START_MARKS) for t in tokens)
    for i, t in enumerate(tokens):
        t = str(t)
        joins = False
        if i > 0 and not special[i] and not special[i - 1]:
            if t.startswith(_CONT_PREFIX):
                joins = True
            elif byte_level and not t.startswith(_START_MARKS):
                joins = True
        if joins:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def group_text(tokens: Sequence[str], group: Sequence[int]) -> str:
    """Pieces of one word -> the word ("cab", "##inet" -> "cabinet"; "Ġcab", "inet" -> "cabinet")."""
    out = []
    for k, i in enumerate(group):
        t = str(tokens[i])
        if k > 0 and t.startswith(_CONT_PREFIX):
            t = t[len(_CONT_PREFIX):]
        if k == 0 and t.startswith(_START_MARKS) and len(t) > 1:
            t = t[1:]
        out.append(t)
    return "".join(out)


# ------------------------------------------------------------------------------------ view transform

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


# ------------------------------------------------------------------------------------ heatmaps

def _hover(value_name: str = "value") -> str:
    return ("row (receives): %{y}<br>column (source): %{x}<br>" + value_name + ": %{z:.4g}<extra></extra>")


# The figures redrawn on every slider move (heatmaps, row bars) are written as plain dicts and
# wrapped without plotly's per-property validation, which costs ~100 ms per figure here (the app's
# layer slider must re-render in <= 0.5 s). They carry their look explicitly (the plotly_white values
# below) instead of naming a template, which plotly.js would not understand unvalidated (and which
# would add ~7 kB to every message).
_AXIS = dict(gridcolor="#EBF0F8", linecolor="#EBF0F8", zerolinecolor="#EBF0F8", zerolinewidth=2, ticks="",
             automargin=True, title=dict(standoff=15))
_LAYOUT = dict(font=dict(family=FONT, size=12, color="#2a3f5f"), paper_bgcolor="white", plot_bgcolor="white",
               hovermode="closest", hoverlabel=dict(align="left"))


# the colour scale spelled out: plotly.js's own "Blues" runs the other way (dark = low)
_SEQ_SCALE = [[k / 8, c] for k, c in enumerate(("rgb(247,251,255)", "rgb(222,235,247)", "rgb(198,219,239)",
                                               "rgb(158,202,225)", "rgb(107,174,214)", "rgb(66,146,198)",
                                               "rgb(33,113,181)", "rgb(8,81,156)", "rgb(8,48,107)"))]


# red (negative) - white (0) - blue (positive), for differences
_DIV_SCALE = [[0.0, "rgb(178,24,43)"], [0.25, "rgb(239,138,98)"], [0.5, "rgb(247,247,247)"],
              [0.75, "rgb(103,169,207)"], [1.0, "rgb(33,102,172)"]]


def _raw_figure(data: list, layout: dict) -> go.Figure:
    """Trusted dicts -> go.Figure without validation (fields as plotly.js reads them)."""
    # template {}: no template at all (left unset, plotly would fill in its default one, ~7 kB)
    return go.Figure(dict(data=data, layout={**_LAYOUT, **layout, "template": {}}), _validate=False)


def _domains(k: int, spacing: float) -> list:
    """k side-by-side (or stacked) panels with `spacing` between them -> [(start, end)] in paper units."""
    w = (1.0 - spacing * (k - 1)) / k
    return [(c * (w + spacing), c * (w + spacing) + w) for c in range(k)]


def _title(text: str, x: float, y: float, yshift: int = 0, size: int = 13) -> dict:
    return dict(text=text, x=x, y=y, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
                showarrow=False, yshift=yshift, font=dict(size=size))


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


def _text_px(s: str, per_char: float) -> float:
    import re as _re

    lines = _re.sub(r"<(?!br)[^>]*>", "", str(s)).split("<br>")
    # capitals, digits and wide marks take about 1.3 times an average letter
    return per_char * max((sum(1.3 if (ch.isupper() or ch in "[]#‖—MW%") else 1.0 for ch in html.unescape(x))
                           for x in lines), default=0)


def panel_min_px(n: int, titles: Sequence[str], cbar_titles: Sequence[str]) -> float:
    """The narrowest a map panel may be: TICK_PX per token, and room for its title and colour-bar title."""
    return max(120.0, TICK_PX * n + 8, max((_text_px(t, TITLE_CHAR_PX) for t in titles), default=0) + 8,
               max((_text_px(t, CBAR_CHAR_PX) for t in cbar_titles), default=0) + 8)


def y_label_px(labels: Sequence[str]) -> float:
    """Room the y tick labels and the y axis title take left of the first column."""
    return max((_text_px(l, LABEL_CHAR_PX) for l in labels), default=0) + 40


def auto_columns(k: int, labels: Sequence[str], titles: Sequence[str], cbar_titles: Sequence[str],
                 width: float = MIN_WIDTH, gap_px: float = 28.0) -> int:
    """How many map panels fit side by side in `width` px without labels or titles colliding."""
    need = panel_min_px(len(labels), titles, cbar_titles)
    room = width - y_label_px(labels)
    return int(max(1, min(k, (room + gap_px) // (need + gap_px))))


def dominant_column(M: np.ndarray) -> tuple:
    """(j, share): the column holding the largest part of a non-negative map's total, and that part
    (0..1); (None, 0.0) for an empty, all-zero or signed map. A share near 1 is a sink column (e.g. the
    first token of a causal LM) that washes every other cell out on a linear colour scale."""
    M = np.asarray(M, dtype=np.float64)
    finite = np.where(np.isfinite(M), M, 0.0)
    total = float(finite.sum())
    if finite.size == 0 or total <= 0 or (finite < 0).any():
        return None, 0.0
    col = finite.sum(0)
    j = int(col.argmax())
    return j, float(col[j] / total)


LONG_MAP_PX = 840  # the tallest a map gets (60 rows at TICK_PX); longer texts label every k-th row


def row_label_every(n: int) -> int:
    """1 while n rows at TICK_PX fit in LONG_MAP_PX; else the stride k of the labelled rows of a map
    LONG_MAP_PX tall."""
    return 1 if TICK_PX * n <= LONG_MAP_PX else -(-TICK_PX * n // LONG_MAP_PX)


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
    import math

    vals = list(range(math.floor(lo), math.ceil(hi) + 1))
    return vals, [f"{10.0 ** v:g}" for v in vals]


def heatmaps(mats: Sequence[np.ndarray], labels: Sequence[str], titles: Sequence[str],
             value_names: Optional[Sequence[str]] = None, target: Optional[int] = None,
             cell_text: Optional[bool] = None, height: Optional[int] = None, *, title: str = "",
             hover_titles: Optional[Sequence[str]] = None, cols: Optional[int] = None,
             zmax: Optional[Sequence[Optional[float]]] = None, log: bool = False,
             diverging: Optional[Sequence[bool]] = None) -> go.Figure:
    """k maps [n, n] with shared token labels [n] -> one figure, the maps in a grid of `cols` columns
    (default auto_columns: as many as fit at MIN_WIDTH px), wrapped onto more rows.

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
    ncol = int(cols) if cols else auto_columns(k, labels, titles, cbar_titles)
    ncol = max(1, min(k, ncol))
    nrow = -(-k // ncol)
    cell_text = (n <= MAX_CELL_TEXT) if cell_text is None else cell_text
    # ---- vertical layout in pixels
    n_title_lines = max((str(t).count("<br>") + 1 for t in titles), default=1)
    T = 8 + 18 * n_title_lines  # panel title
    # the map itself: TICK_PX a row, every row labelled, up to LONG_MAP_PX; a longer text gets a map
    # of LONG_MAP_PX with every k-th row labelled (and the target's), so it stays a picture, not a strip
    every_row = row_label_every(n)
    P = LONG_MAP_PX if every_row > 1 else int(max(TICK_PX * n, min(380, 24 * n)))
    cell_gap = 1 if n <= 64 else 0  # a 1 px gap between cells of 1-3 px would hide the map
    X = int(max((_text_px(l, LABEL_CHAR_PX) for l in labels), default=0)) + 14  # x tick labels, read downwards
    XT = 24  # x axis title
    C = 58  # colour bar: title, bar, tick labels
    G = 18  # between rows
    block = T + P + X + XT + C + G
    top = 40 if title else 8
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
                    tickfont=dict(size=9), ypad=0, xpad=0,
                    title=dict(text=cbar_titles[c], side="top", font=dict(size=10)))
        if diverging[c]:
            m = zmax[c] if zmax[c] is not None else (float(np.abs(finite).max()) if finite.size else 1.0)
            m = m if m > 0 else 1.0
            hm.update(z=M, zmin=-m, zmax=m, colorscale=_DIV_SCALE, hovertemplate=hover + ": %{z:+.4g}<extra></extra>")
            shown = M
        elif log:
            hi = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
            hi = max(hi, zmax[c] or 0.0)
            floor = hi * 1e-4
            Z = np.log10(np.clip(M, floor, None))
            tv, tt = _log_ticks(np.log10(floor), np.log10(hi))
            cbar.update(tickmode="array", tickvals=tv, ticktext=tt)
            hm.update(z=Z, customdata=M, zmin=float(np.log10(floor)), zmax=float(np.log10(hi)), colorscale=_SEQ_SCALE,
                      hovertemplate=hover + ": %{customdata:.4g}<extra></extra>")
            shown = M
        else:
            hi = zmax[c] if zmax[c] is not None else (float(finite.max()) if finite.size else 1.0)
            if not hi > 0:
                hi = 1.0
            hm.update(z=M, zmin=0.0, zmax=hi, colorscale=_SEQ_SCALE, hovertemplate=hover + ": %{z:.4g}<extra></extra>")
            shown = M
        hm["colorbar"] = cbar
        if cell_text:
            hm.update(text=[[f"{v:.2f}" for v in row] for row in shown], texttemplate="%{text}",
                      textfont=dict(size=8 if n > 16 else 10))
        data.append(hm)
        layout["xaxis" + ax] = dict(_AXIS, domain=[x0, x1], anchor="y" + ax, tickangle=-90, type="category",
                                    tickmode="linear", dtick=1, tickfont=dict(size=10), automargin=False,
                                    title=dict(text="source (column j)", font=dict(size=11), standoff=6))
        first_in_row = cc == 0
        y = dict(_AXIS, autorange="reversed", type="category", tickmode="linear", dtick=1, tickfont=dict(size=10),
                 anchor="x" + ax, domain=[y0, y1])
        if first_in_row:
            y.update(title=dict(text="receiving (row i)", font=dict(size=11), standoff=6))
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
                          yanchor="bottom", showarrow=False, yshift=4, font=dict(size=13),
                          hovertext=str(hover_titles[c]), captureevents=True, name=f"title {c}"))
    layout.update(annotations=notes, height=H, margin=dict(l=10, r=10, t=top, b=4))
    if title:
        layout["title"] = dict(text=title, x=0.0, xref="paper", xanchor="left", y=1.0, yref="container",
                               yanchor="top", pad=dict(t=8), font=dict(size=15))
    return _raw_figure(data, layout)


def heatmap(M: np.ndarray, labels: Sequence[str], title: str = "", value_name: str = "value",
            target: Optional[int] = None) -> go.Figure:
    """One map [n, n] -> a heatmap (see heatmaps)."""
    return heatmaps([M], labels, [title], [value_name], target=target)


def row_bars(rows: Sequence[np.ndarray], labels: Sequence[str], titles: Sequence[str],
             value_names: Optional[Sequence[str]] = None, target: Optional[int] = None,
             title: str = "") -> go.Figure:
    """k rows [n] (one per method) -> stacked bar charts sharing the token axis."""
    k = len(rows)
    labels = list(labels)
    value_names = list(value_names or ["value"] * k)
    data, layout, notes = [], {}, []
    doms = _domains(k, 0.06 if k > 1 else 0.0)[::-1]  # the first row on top
    for r, ((y0, y1), row, vname) in enumerate(zip(doms, rows, value_names)):
        row = np.asarray(row, dtype=np.float64)
        ax = "" if r == 0 else str(r + 1)
        colors = [HIGHLIGHT if j == target else "#1f77b4" for j in range(len(labels))]
        data.append(dict(type="bar", x=labels, y=row, marker=dict(color=colors), name=titles[r],
                         text=[f"{v:.3f}" for v in row], textposition="outside", cliponaxis=False,
                         hovertemplate="source: %{x}<br>" + vname + ": %{y:.4g}<extra></extra>",
                         xaxis="x" + ax, yaxis="y" + ax))
        # shared x axis: every panel matches the bottom one; tick labels only at the bottom
        layout["xaxis" + ax] = dict(_AXIS, anchor="y" + ax, type="category", tickangle=-60, domain=[0.0, 1.0],
                                    **({} if r == k - 1 else dict(matches="x" + ("" if k == 1 else str(k)),
                                                                  showticklabels=False)))
        layout["yaxis" + ax] = dict(_AXIS, anchor="x" + ax, domain=[y0, y1],
                                    title=dict(text=vname, font=dict(size=10), standoff=15),
                                    range=[0, max(1e-12, float(row.max()) if row.size else 1.0) * 1.25])
        notes.append(_title(titles[r], 0.5, y1, size=16))
    layout.update(annotations=notes, height=170 * k + 140, showlegend=False,
                  margin=dict(l=10, r=10, t=60 if title else 30, b=10))
    if title:
        layout["title"] = dict(text=title, x=0.05)
    return _raw_figure(data, layout)


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
    return _style(fig)


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
    return _style(fig)


# ------------------------------------------------------------------------------------ flow graph

def attention_graph(A: np.ndarray, tokens: Sequence[str], method: str = "rollout", output: Optional[int] = None,
                    source: Optional[int] = None, top: Optional[int] = None):
    """A [L, n, n] head-mean attention -> networkx DiGraph of the layered attention graph.

    Nodes (l, i) for l = 0..top (top = L by default), attribute `label`; an edge (l, i) -> (l-1, j)
    per pair with `weight` = Â_l[i, j], Â = (ᾱ + I) row-renormalised (the graph rollout and flow
    use). With an `output` position, every edge also gets `through`: the amount of the output
    node's (top, output) mass that goes through it, either to all inputs (source None) or to input
    `source` only:
      rollout: the rollout path mass U[output, i] Â_l[i, j] D[j, source] (U: product of the layers
        above, D: rollout below; summed over one level it equals rollout[top][output, source], or 1),
      flow: the edge flows of one maximum flow from (top, output) to (0, source) (to a super sink
        joined to all inputs when source is None); summed over one level it is the max-flow value.
    """
    import networkx as nx

    from .methods.base import with_residual

    Ah = with_residual(np.asarray(A, dtype=np.float64))
    L, n, _ = Ah.shape
    top = L if top is None else int(top)
    if not 1 <= top <= L:
        raise ValueError(f"top layer {top} is outside 1..{L}")
    G = nx.DiGraph(method=method, top=top, n=n, output=output, source=source)
    for l in range(top + 1):
        for i in range(n):
            G.add_node((l, i), label=f"{i}{SEP}{clean_token(tokens[i])}", layer=l, pos=i)
    for l in range(1, top + 1):
        for i in range(n):
            for j in range(n):
                G.add_edge((l, i), (l - 1, j), weight=float(Ah[l - 1, i, j]), through=0.0)
    if output is None:
        return G
    if method == "rollout":
        # U_l[output, i]: mass arriving at (l, i) from the output node; D_l[j, source]: rollout below
        U = np.zeros((top + 1, n))
        U[top, output] = 1.0
        for l in range(top, 0, -1):
            U[l - 1] = U[l] @ Ah[l - 1]
        D = np.zeros((top + 1, n))  # D[l][j] = rollout of layer l from node (l, j) to the source (or 1)
        D[0] = 1.0 if source is None else np.eye(n)[source]
        for l in range(1, top + 1):
            D[l] = Ah[l - 1] @ D[l - 1]
        for l in range(1, top + 1):
            mass = U[l][:, None] * Ah[l - 1] * D[l - 1][None, :]
            for i in range(n):
                for j in range(n):
                    G.edges[(l, i), (l - 1, j)]["through"] = float(mass[i, j])
        G.graph["total"] = float(U[0] @ D[0])
    elif method == "flow":
        H = nx.DiGraph()
        for u, v, d in G.edges(data=True):
            H.add_edge(u, v, capacity=d["weight"])
        sink = "sink"
        if source is None:
            for j in range(n):
                H.add_edge((0, j), sink, capacity=float("inf"))
        else:
            sink = (0, source)
        value, fd = nx.maximum_flow(H, (top, output), sink)
        for u, v in G.edges():
            G.edges[u, v]["through"] = float(fd[u].get(v, 0.0))
        G.graph["total"] = float(value)
    else:
        raise ValueError(f"method must be 'rollout' or 'flow', got {method!r}")
    return G


def graph_figure(G, threshold: float = 0.05, title: str = "") -> go.Figure:
    """DiGraph from attention_graph -> plotly figure: tokens x layers as nodes, edge width = weight,
    edges with weight < threshold hidden; with an output chosen, edges carrying its mass are drawn
    on top in red with width = mass (those under threshold x total hidden too).

    Traces: grey edges grouped by width (name "edges w≈..."), red highlighted edges ("paths ..."),
    then "edge values" (invisible midpoints with hover text, customdata [l, i, j, weight, through]),
    and "tokens" (the nodes)."""
    n, top = G.graph["n"], G.graph["top"]
    highlight = G.graph.get("output") is not None
    total = G.graph.get("total", 1.0) or 1.0
    bins: dict = {}
    red: dict = {}
    mids_x, mids_y, mids_c, mids_t = [], [], [], []
    for (l, i), (l2, j), d in G.edges(data=True):
        w, t = d["weight"], d["through"]
        shown = w >= threshold
        hot = highlight and t / total >= threshold and t > 0
        if not (shown or hot):
            continue
        seg = ([i, j, None], [l, l2, None])
        if shown:
            b = round(min(w, 1.0) * 8) / 8
            xs, ys = bins.setdefault(b, ([], []))
            xs.extend(seg[0]); ys.extend(seg[1])
        if hot:
            b = round(min(t / total, 1.0) * 8) / 8
            xs, ys = red.setdefault(b, ([], []))
            xs.extend(seg[0]); ys.extend(seg[1])
        mids_x.append((i + j) / 2)
        mids_y.append((l + l2) / 2)
        mids_c.append([l, i, j, w, t])
        mids_t.append(f"layer {l}: {G.nodes[(l, i)]['label']} ← {G.nodes[(l2, j)]['label']}<br>weight {w:.4f}"
                      + (f"<br>carries {t:.4f} of the output's {total:.4f}" if highlight else ""))
    fig = go.Figure()
    for b in sorted(bins):
        xs, ys = bins[b]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(width=0.5 + 6 * b, color="rgba(90,90,90,0.45)"),
                                 hoverinfo="skip", name=f"edges w≈{b:.2f}", showlegend=False))
    for b in sorted(red):
        xs, ys = red[b]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(width=1 + 8 * b, color=HIGHLIGHT),
                                 hoverinfo="skip", name=f"paths ≈{b:.2f}", showlegend=False, opacity=0.8))
    fig.add_trace(go.Scatter(x=mids_x, y=mids_y, mode="markers", marker=dict(size=6, opacity=0),
                             customdata=mids_c, hovertext=mids_t, hoverinfo="text", name="edge values",
                             showlegend=False))
    nx_, ny_, nt = [], [], []
    for (l, i), d in G.nodes(data=True):
        nx_.append(i); ny_.append(l); nt.append(d["label"])
    out = G.graph.get("output")
    colors = [HIGHLIGHT if (highlight and l == top and i == out) else "#1f77b4" for (l, i) in G.nodes()]
    fig.add_trace(go.Scatter(x=nx_, y=ny_, mode="markers", marker=dict(size=10, color=colors, line=dict(width=1, color="white")),
                             hovertext=[f"layer {l}: {t}" for l, t in zip(ny_, nt)], hoverinfo="text",
                             name="tokens", showlegend=False))
    labels = [G.nodes[(0, i)]["label"] for i in range(n)]
    # the top row's tokens, slanted like the bottom axis's (upright ones ran into each other:
    # "5·cabinet6·[MASK]" at 12 tokens on a 1024 px screen)
    for i in range(n):
        fig.add_annotation(x=i, y=top, text=G.nodes[(top, i)]["label"], textangle=-60,
                           showarrow=False, xanchor="left", yanchor="bottom", yshift=8, xshift=-4,
                           font=dict(size=10, color=HIGHLIGHT if (highlight and i == out) else "#31333f"))
    top_margin = 14 + int(5.2 * max((len(html.unescape(t)) for t in labels), default=4))
    fig.update_xaxes(tickvals=list(range(n)), ticktext=labels, tickangle=-60, showgrid=False, zeroline=False,
                     range=[-0.6, n - 0.4])
    fig.update_yaxes(tickvals=list(range(top + 1)), ticktext=["input"] + [f"layer {l}" for l in range(1, top + 1)],
                     showgrid=False, zeroline=False, range=[-0.4, top + 0.6])
    fig.update_layout(height=110 * top + 220, title=title or None, plot_bgcolor="white",
                      margin=dict(l=10, r=10, t=top_margin + (40 if title else 0), b=10), hovermode="closest")
    return _style(fig)


# ------------------------------------------------------------------------------------ line view

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


def layer_axis(fig, L: int) -> None:
    """The x axis of a figure over layers 1..L: exactly that range (autorange's padding showed a layer 0
    and a layer L + 1), every layer ticked up to 20 layers, beyond that 1 and every fifth (30 rotated
    labels at 1024 px were a blur)."""
    ticks = list(range(1, L + 1)) if L <= 20 else [1] + list(range(5, L + 1, 5))
    fig.update_xaxes(title_text="layer", range=[0.5, L + 0.5], tickmode="array", tickvals=ticks)
