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

def readable_token(tok: str) -> str:
    """A vocabulary entry as a person reads it: byte-level BPE entries ('Ġare', 'Ċ') decoded by the
    tokenizers library's ByteLevel decoder, SentencePiece's word mark '▁' dropped, the leading space
    of a word-initial token removed, newline and tab shown as ↵ and ⇥, a bare space as ␣. WordPiece
    entries ('##s', '[CLS]') are kept as they are."""
    t = str(tok)
    if any(256 <= ord(c) <= 323 for c in t):  # GPT-2's byte-to-unicode table maps bytes there
        from tokenizers.decoders import ByteLevel
        t = ByteLevel().decode([t])
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


def heatmaps(mats: Sequence[np.ndarray], labels: Sequence[str], titles: Sequence[str],
             value_names: Optional[Sequence[str]] = None, target: Optional[int] = None,
             cell_text: Optional[bool] = None, height: Optional[int] = None) -> go.Figure:
    """k maps [n, n] with shared token labels [n] -> one figure, k heatmaps side by side.

    Each panel has its own colour scale from 0 to its maximum (methods have different units); the
    target row's label is drawn in bold red on the y axis. Values are written in the cells when
    they are wide enough to read (n <= MAX_CELL_TEXT and about 18 px per cell), or cell_text=True.
    """
    k = len(mats)
    n = len(labels)
    labels = list(labels)
    value_names = list(value_names or ["value"] * k)
    # about square cells in a ~1000 px wide page: panel width / n, between 14 and 40 px
    cell = min(40.0, max(14.0, (1000.0 / k - 60.0) / max(n, 1)))
    cell_text = (n <= MAX_CELL_TEXT and cell >= 18) if cell_text is None else cell_text
    data, layout, notes = [], {}, []
    yaxis = dict(_AXIS, autorange="reversed", type="category", tickmode="linear", dtick=1,
                 tickfont=dict(size=10))
    for c, ((x0, x1), M, vname) in enumerate(zip(_domains(k, 0.02 if k > 1 else 0.0), mats, value_names)):
        M = np.asarray(M, dtype=np.float64)
        if M.shape != (n, n):
            raise ValueError(f"map {c} has shape {M.shape}, expected ({n}, {n}) for {n} labels")
        zmax = float(np.nanmax(M)) if M.size and np.isfinite(M).any() else 1.0
        if not zmax > 0:
            zmax = 1.0
        ax = "" if c == 0 else str(c + 1)
        hm = dict(type="heatmap", z=M, x=labels, y=labels, zmin=0.0, zmax=zmax, colorscale=_SEQ_SCALE,
                  hovertemplate=_hover(vname), name=titles[c], xaxis="x" + ax, yaxis="y" + ax,
                  colorbar=dict(orientation="h", x=(x0 + x1) / 2, xanchor="center", y=1.0, yanchor="bottom",
                                yref="paper", len=(x1 - x0) * 0.9, thickness=8, tickfont=dict(size=9)),
                  xgap=1, ygap=1)
        if cell_text:
            hm.update(texttemplate="%{z:.2f}", textfont=dict(size=8 if cell < 26 else 10))
        data.append(hm)
        layout["xaxis" + ax] = dict(_AXIS, domain=[x0, x1], anchor="y" + ax, tickangle=-60, type="category",
                                    tickmode="linear", dtick=1, tickfont=dict(size=10),
                                    title=dict(text="source (column j)", font=dict(size=11), standoff=15))
        if c == 0:
            y = dict(yaxis, anchor="x", domain=[0.0, 1.0],
                     title=dict(text="receiving (row i)", font=dict(size=11), standoff=15))
            if target is not None and 0 <= target < n:  # the target row's label in bold red (same text)
                y.update(tickmode="array", tickvals=labels,
                         ticktext=[f'<span style="color:{HIGHLIGHT}"><b>{lab}</b></span>' if i == target else lab
                                   for i, lab in enumerate(labels)])
        else:  # shared y axis: same categories, labels only on the first panel
            y = dict(yaxis, anchor="x" + ax, domain=[0.0, 1.0], matches="y", showticklabels=False)
        layout["yaxis" + ax] = y
        notes.append(_title(titles[c], (x0 + x1) / 2, 1.0, yshift=34))  # above the colour bar
    layout.update(annotations=notes, height=height or int(cell * n + 230),
                  margin=dict(l=10, r=10, t=90, b=10))
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
    col_titles = [f"head {h + 1}" for h in range(H)] + ([layer_label] if layer_maps is not None else [])
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
    fig.add_trace(go.Scatter(x=nx_, y=ny_, mode="markers+text", marker=dict(size=10, color=colors, line=dict(width=1, color="white")),
                             text=[t if l == top else "" for l, t in zip(ny_, nt)], textposition="top center",
                             textfont=dict(size=10),
                             hovertext=[f"layer {l}: {t}" for l, t in zip(ny_, nt)], hoverinfo="text",
                             name="tokens", showlegend=False))
    labels = [G.nodes[(0, i)]["label"] for i in range(n)]
    fig.update_xaxes(tickvals=list(range(n)), ticktext=labels, tickangle=-60, showgrid=False, zeroline=False,
                     range=[-0.6, n - 0.4])
    fig.update_yaxes(tickvals=list(range(top + 1)), ticktext=["input"] + [f"layer {l}" for l in range(1, top + 1)],
                     showgrid=False, zeroline=False, range=[-0.4, top + 0.6])
    fig.update_layout(height=110 * top + 220, title=title or None, plot_bgcolor="white",
                      margin=dict(l=10, r=10, t=50 if title else 10, b=10), hovermode="closest")
    return _style(fig)
