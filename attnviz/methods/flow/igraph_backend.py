"""flow's igraph path (without numba): the layered graph built for igraph, one max-flow per open pair
(per-sink subgraphs cut out in C for causal attention), an opt-in process pool; and edge_flows, one
maximum flow edge by edge (what the flow graph figure draws)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..base import graph_top, with_residual
from .bounds import CERTIFY_TOL, _bounds, _is_causal, _lower_two
from .estimate import estimate_pairs
from .pool import POOL_MIN_SECONDS, _drop, _pool


def _graph(Ares: np.ndarray, l: int, lo: int = 0, hi: Optional[int] = None):
    """Graph of levels 0..l+1 (0-based layer l = graph level l+1) on positions lo..hi-1, edges with
    capacity > 0 only -> (igraph.GraphBase, capacities list, width). Node (level m, position p) has
    id m * width + (p - lo). Exact: a zero-capacity edge carries no flow. A plain GraphBase built
    from lists: igraph.Graph's constructor is slower, above all from numpy arrays."""
    import igraph as ig

    n = Ares.shape[-1]
    hi = n if hi is None else hi
    w = hi - lo
    B = Ares[: l + 1, lo:hi, lo:hi]
    lev, a, b = np.nonzero(B)
    edges = np.empty((len(lev), 2), dtype=np.int64)
    edges[:, 0] = (lev + 1) * w + a
    edges[:, 1] = lev * w + b
    g = ig.GraphBase((l + 2) * w, edges.tolist(), True)
    return g, B[lev, a, b].tolist(), w


def _flow_igraph(Ares, want, top, normalize, progress, stats, workers):
    """flow() without numba: the numpy bounds, then one igraph max-flow per open pair (a process pool
    when a layer's remaining work pays for it)."""
    n = Ares.shape[-1]
    # the cut around each input node; causal: only positions >= j reach it, <= i are reachable
    in_cap = np.cumsum(Ares[0], 0) if _is_causal(Ares) else Ares[0].sum(0)
    F = np.empty((top + 1, n, n))
    stack = None  # causal: one graph of every level, pairs cut out of it
    solved = settled = 0
    total_work = sum(l + 1 for l in range(top + 1)) or 1
    done = 0
    for l in range(top + 1):
        if l == 0:
            F[0] = Ares[0]
        elif l == 1:
            F[1] = np.minimum(Ares[1][:, :, None], Ares[0][None, :, :]).sum(1)
        else:
            lower, upper = _bounds(Ares[l], F[l - 1], in_cap)
            ok = (upper - lower) <= CERTIFY_TOL
            if not ok.all():
                lower = np.where(ok, lower, np.maximum(lower, _lower_two(Ares[l], Ares[l - 1], F[l - 2], ~ok)))
                ok = (upper - lower) <= CERTIFY_TOL
            F[l] = upper
            todo = [(i, j) for i, j in zip(*np.nonzero(~ok))]
            settled += int(ok.sum())
            solved += len(todo)
            if todo:
                w = workers if estimate_pairs(len(todo), l, n) >= POOL_MIN_SECONDS else 1
                if w == 1 and stack is None and _is_causal(Ares[: top + 1]):
                    stack = _stack_graph(Ares, top)
                for (i, j), v in zip(todo, _solve(Ares, l, todo, w, stack if w == 1 else None)):
                    F[l, i, j] = v
        done += l + 1
        if progress:
            progress(done / total_work)
    if stats is not None:
        stats.update(maxflow_pairs=solved, bounded_pairs=settled)
    out = F[want]
    if normalize:
        out = out / out.sum(-1, keepdims=True)
    return out


def _solve(Ares: np.ndarray, l: int, pairs: list, workers: int, graph=None) -> list:
    if workers <= 1:
        return _pairs(Ares, l, pairs, graph)
    chunks = [pairs[s::workers] for s in range(workers)]
    try:
        ex = _pool(workers)
        results = [ex.submit(_pairs, Ares, l, c) for c in chunks]
        vals = {}
        for c, f in zip(chunks, results):
            vals.update(zip(c, f.result(timeout=600)))
        return [vals[p] for p in pairs]
    except Exception:  # noqa: BLE001 - a broken or unavailable pool must not lose the result
        _drop()
        return _pairs(Ares, l, pairs)


def _pairs(Ares: np.ndarray, l: int, pairs: list, graph=None) -> list:
    """Raw max-flow values for 0-based layer l and (receiving i, input j) pairs.

    Causal attention: each pair is solved on the subgraph induced by the nodes that can carry its
    flow, cut out in C (igraph's induced_subgraph) from `graph` (from _stack_graph, levels 0..l+1
    or more; built here if not given): (0, j) alone at level 0, positions j..i at levels 1..l, the
    source alone at the top. (l, i) reaches only positions <= i and only positions >= j reach
    (0, j); nodes the source cannot reach, or that cannot reach the sink, only slow push-relabel
    down. Otherwise every pair on the graph of levels 0..l+1 (cutting out costs more than it saves).
    """
    if not pairs:
        return []
    n = Ares.shape[-1]
    if not _is_causal(Ares[: l + 1]):  # nothing to cut out: every node is on some path
        g, cap, _ = _graph(Ares, l)
        top = (l + 1) * n
        return [g.maxflow_value(top + int(i), int(j), cap) for i, j in pairs]
    g = _stack_graph(Ares, l) if graph is None else graph
    levels = np.arange(1, l + 1)[:, None] * n  # levels 1..l; of the top level only the source
    out = []
    for i, j in pairs:
        i, j = int(i), int(j)
        if i < j:
            out.append(0.0)
            continue
        if i == j:
            out.append(_column(Ares[: l + 1], i))
            continue
        w = i - j + 1
        vids = [j] + (levels + np.arange(j, i + 1)[None, :]).ravel().tolist() + [(l + 1) * n + i]
        src = 1 + l * w  # ids in the subgraph follow the sorted ids: (0, j), level by level, the source
        sub = g.induced_subgraph(vids, "create_from_scratch")
        out.append(sub.maxflow_value(src, 0, "capacity"))
    return out


def _stack_graph(Ares: np.ndarray, l: int):
    """Graph of levels 0..l+1 with the capacities as the edge attribute "capacity", for _pairs."""
    import igraph as ig

    g, cap, _ = _graph(Ares, l)
    ig.EdgeSeq(g)["capacity"] = cap
    return g


def _column(Ares: np.ndarray, i: int) -> float:
    """Causal flow from (top, i) to (0, i): the only path is position i's own column."""
    return float(Ares[:, i, i].min())


def edge_flows(A: np.ndarray, output: int, source: Optional[int] = None, top: Optional[int] = None) -> tuple:
    """One maximum flow through the layered graph, edge by edge (what the flow graph figure draws).

    A [L, n, n] head-averaged attention (residual added inside, as flow()); the flow goes from
    (top, output) (top = L by default, 1..L) down to the input node (0, source), or, with source None,
    to a super sink joined to every input node. -> (value, F) with F [top, n, n], F[l - 1][i, j] the
    flow on the edge (l, i) -> (l - 1, j). A maximum flow is not unique; this is igraph's (push-relabel
    in C, the same solver as flow()'s igraph path), and its value is flow()'s raw value for the pair."""
    import igraph as ig

    Ares = with_residual(A)
    L, n, _ = Ares.shape
    top = graph_top(L, n, output, source, top)
    g, cap, _ = _graph(Ares, top - 1)  # node (level m, position p) is m * n + p
    m = g.ecount()
    if source is None:  # a super sink after the last node, fed by every input node; never the bottleneck
        sink = (top + 1) * n
        g = ig.GraphBase(sink + 1, g.get_edgelist() + [(j, sink) for j in range(n)], True)
        cap = cap + [float(sum(cap)) + 1.0] * n
    else:
        sink = int(source)
    value, flows, _, _ = g.maxflow(top * n + int(output), sink, cap)
    F = np.zeros((top, n, n))
    for (u, v), f in zip(g.get_edgelist()[:m], flows[:m]):
        F[u // n - 1, u % n, v % n] = f
    return float(value), F
