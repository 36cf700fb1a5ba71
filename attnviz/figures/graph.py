"""The layered attention graph (tokens x layers, as rollout and flow read the attention): the graph
with the mass an output token sends down each edge, and its figure."""
from __future__ import annotations

import html
from typing import Optional, Sequence

import networkx as nx
import numpy as np
import plotly.graph_objects as go

from ..methods import METHODS
from ..methods.base import with_residual
from ..text import SEP, clean_token
from .style import HIGHLIGHT, style

MAX_GRAPH_TOKENS = 40  # the layered graph is unreadable (and slow) beyond this


def graph_methods() -> dict:
    """{method: GraphView} for the registered methods that read the layered attention graph, in registry order."""
    return {m: i.graph for m, i in METHODS.items() if i.graph is not None}


def attention_graph(A: np.ndarray, tokens: Sequence[str], method: Optional[str] = None, output: Optional[int] = None,
                    source: Optional[int] = None, top: Optional[int] = None):
    """A [L, n, n] head-mean attention -> networkx DiGraph of the layered attention graph.

    Nodes (l, i) for l = 0..top (top = L by default), attribute `label`; an edge (l, i) -> (l-1, j)
    per pair with `weight` = Â_l[i, j], Â = (ᾱ + I) row-renormalised (the graph rollout and flow
    use). With an `output` position, every edge also gets `through`: the amount of the output
    node's (top, output) mass that goes through it, either to all inputs (source None) or to input
    `source` only, as the method (one of graph_methods(); default the first) reads the graph: its
    MethodInfo.graph.edges, e.g. rollout's path mass (methods.rollout.edge_mass; summed over one level
    it equals rollout[top][output, source], or 1) or the edge flows of one maximum flow
    (methods.flow.edge_flows; summed over one level it is the flow method's raw value for the pair).
    """
    views = graph_methods()
    method = next(iter(views)) if method is None else method
    if method not in views:
        raise ValueError(f"method must be one of {list(views)}, got {method!r}")
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
    value, F = views[method].edges(A, output, source, top)  # from the method's own module
    for l in range(1, top + 1):
        for i in range(n):
            for j in range(n):
                G.edges[(l, i), (l - 1, j)]["through"] = float(F[l - 1, i, j])
    G.graph["total"] = value
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
    return style(fig)


def graph_marks(G, threshold: float, method_label: str) -> list:
    """What the marks of graph_figure(G, threshold) mean, in plain lines (for an exported figure's caption)."""
    lines = ["Dots: the tokens at each layer (input at the bottom). Grey lines: an edge from a token to a token one "
             "layer below, width ∝ its weight ½·attention + ½·identity (the residual); edges under "
             f"{threshold:g} are not drawn."]
    if G.graph.get("output") is not None:
        lines.append(f"Red lines: the share of the red output token's {method_label} mass "
                     f"({G.graph.get('total', 0):.4f} in all) that travels along each edge, width ∝ share; "
                     f"shares under {threshold:g} of the total are not drawn.")
    return lines


def graph_to_dict(G, about: Optional[dict] = None) -> dict:
    """DiGraph from attention_graph -> a JSON-ready dict: {"about": about, "method", "top", "output",
    "source", "total", "nodes": [{"layer", "position", "label"}], "edges": [{"layer" (of the upper
    token), "from" (its position), "to" (the position one layer below), "weight", "through"}]}."""
    g = G.graph
    return {"about": dict(about or {}), "method": g.get("method"), "top": g.get("top"), "output": g.get("output"),
            "source": g.get("source"), "total": g.get("total"),
            "nodes": [{"layer": l, "position": i, "label": d["label"]} for (l, i), d in G.nodes(data=True)],
            "edges": [{"layer": l, "from": i, "to": j, "weight": d["weight"], "through": d["through"]}
                      for (l, i), (_, j), d in G.edges(data=True)]}
