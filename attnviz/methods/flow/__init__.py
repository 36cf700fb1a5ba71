"""Attention flow (Abnar & Zuidema 2020), exact.

Graph: nodes (layer 0..L, position); an edge from (l, i) down to (l-1, j) with capacity A_l[i, j]
(A = 0.5 ᾱ + 0.5 I, as rollout). flow_l[i, j] = max-flow value from (l, i) to the input node (0, j),
computed per pair with float capacities, then each row normalised to sum 1.

Exact and as fast as the structure allows: layers are solved bottom-up. Layer 1 is its capacities;
layer 2 consists of edge-disjoint two-edge paths (Σ_k min). Above that each pair gets bounds from
the exact flows of the layers below: upper, min(reachable out-capacity, reachable in-capacity of
(0, j), Σ_k min(A_l[i,k], F_{l-1}[k,j])); lower, the larger of a convex combination of the
layer-below flows (flow side) and two cut-side bounds — a cut is a set of nodes, and the flow from
a set is at least that of its best member, so min over θ of θ + A_l[i, {k: F_{l-1}[k,j] > θ}], and
the same one layer further down. Where lower and upper meet (within 1e-12) the pair is settled;
every other pair is one max-flow. Causal (decoder) attention, detected from its zeros, is
lower-triangular: pairs j > i are 0, j = i is the minimum of position i's own column, and a pair is
solved on positions j..i only.

With numba (the default) the bounds and the max-flow are compiled kernels: Dinic's algorithm on the
layered graph read in place from the attention (no graph is built), stopped as soon as the flow
reaches the pair's upper bound (then the value is that proven bound, within 1e-12), the pairs of a
layer shared by threads. Without numba, one igraph max-flow per open pair (per-sink subgraphs cut
out in C; an opt-in process pool, ATTNVIZ_FLOW_WORKERS).

What the bounds cannot do: every pair's value needs its own certificate. The upper bound is exact
for most pairs of real attention (95-99% of SmolLM2's upper layers), but a proof that it is reached
is a flow from that one source to that one sink; flows of other pairs cannot be combined into it
without knowing where they overlap, and a super-source or super-sink shares one sink's (or one
source's) capacity among all pairs. So the remaining pairs cost one max-flow each, and on real
attention that flow is spread over thousands of edges (6 600 arc updates per pair on SmolLM2 at
128 tokens), which is what the compiled kernel still spends its time on.

The package: bounds.py (the bounds, numpy), kernels.py (the numba kernels; USE_COMPILED), compiled.py
(the compiled path's driver and threads), igraph_backend.py (the igraph path, edge_flows), pool.py (the
igraph path's process pool, worker counts), estimate.py (the cost model); here flow() and the
registry's INFO / compute / estimate.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import numpy as np

from ..base import Map, with_residual
from ..info import GraphView, MethodInfo, Option
from . import kernels
from .compiled import _flow_compiled, _maxflow_pairs
from .estimate import estimate_pairs, estimate_seconds
from .igraph_backend import _flow_igraph, _solve, edge_flows
from .pool import POOL_MIN_SECONDS, default_threads, default_workers
# the parts' names, as `from attnviz.methods.flow import ...` has found them (the tests use the private ones)
from .bounds import CERTIFY_TOL, _bounds, _is_causal, _lower_two  # noqa: F401,E402
from .compiled import MAXFLOW_EPS, _maxflow_run  # noqa: F401,E402
from .igraph_backend import _graph, _pairs, _stack_graph  # noqa: F401,E402
from .kernels import _kernels  # noqa: F401,E402

__all__ = ["flow", "edge_flows", "compute", "estimate", "INFO", "estimate_seconds", "estimate_pairs",
           "default_workers", "default_threads", "CERTIFY_TOL", "POOL_MIN_SECONDS", "MAXFLOW_EPS"]


def flow(A: np.ndarray, normalize: bool = True, layers: Optional[Iterable[int]] = None,
         workers: Optional[int] = None, progress: Optional[Callable[[float], None]] = None,
         stats: Optional[dict] = None, rows: Optional[Iterable[int]] = None) -> np.ndarray:
    """A [L, n, n] head-averaged attention (rows sum to 1; residual added inside) -> flow [L, n, n].

    layers: 0-based layers to return (default all); the result then has len(layers) entries in that
    order. normalize=False returns raw max-flow values. workers: processes for the max-flow calls
    (igraph path: processes, default ATTNVIZ_FLOW_WORKERS, else 1, a pool only when a layer's
    remaining work pays for it; compiled path: threads, default ATTNVIZ_FLOW_WORKERS, else
    min(2, CPUs)). progress(fraction) is called as layers finish. stats, if a dict, receives how many
    pairs were solved by max-flow and how many were settled exactly by bounds (compiled path also:
    Dinic phases, arc flow updates, pairs stopped at their upper bound). rows: only these
    receiving positions (e.g. the target token), result [len(layers), len(rows), n]; each pair of
    layers >= 3 is then one max-flow (the bounds need every row of the layer below).

    Layers are solved bottom-up: layer 1 is its capacities, layer 2 has edge-disjoint two-edge paths
    (Σ_k min), and above that a pair whose lower and upper bounds from the layers below meet (within
    1e-12) needs no max-flow; every other pair is one max-flow, compiled Dinic or igraph (see the
    module docstring).
    """
    Ares = with_residual(A)
    L, n, _ = Ares.shape
    want = list(range(L)) if layers is None else [int(l) for l in layers]
    for l in want:
        if not 0 <= l < L:
            raise ValueError(f"layer {l} is outside 0..{L - 1}")
    top = max(want) if want else -1
    if kernels._kernels() is not None:  # compiled path: workers are threads, cheap to start
        workers = default_threads() if workers is None else max(1, int(workers))
    else:
        workers = default_workers() if workers is None else max(1, int(workers))
    if rows is not None:
        return _rows(Ares, want, [int(i) for i in rows], normalize, workers, progress, stats)
    kern = kernels._kernels()
    if kern is not None:
        return _flow_compiled(Ares, want, top, normalize, progress, stats, kern, workers)
    return _flow_igraph(Ares, want, top, normalize, progress, stats, workers)


def _rows(Ares, want, rows, normalize, workers, progress, stats):
    L, n, _ = Ares.shape
    for i in rows:
        if not 0 <= i < n:
            raise ValueError(f"row {i} is outside 0..{n - 1}")
    kern = kernels._kernels()
    out = np.empty((len(want), len(rows), n))
    solved = 0
    for k, l in enumerate(want):
        if l == 0:
            out[k] = Ares[0][rows]
        elif l == 1:
            out[k] = np.minimum(Ares[1][rows][:, :, None], Ares[0][None, :, :]).sum(1)
        else:
            pairs = [(i, j) for i in rows for j in range(n)]
            solved += len(pairs)
            w = workers if estimate_pairs(len(pairs), l, n) >= POOL_MIN_SECONDS else 1
            if kern is not None:
                out[k] = _maxflow_pairs(Ares, l, pairs, None, kern, workers).reshape(len(rows), n)
            else:
                out[k] = np.array(_solve(Ares, l, pairs, w)).reshape(len(rows), n)
        if progress:
            progress((k + 1) / len(want))
    if stats is not None:
        stats.update(maxflow_pairs=solved, bounded_pairs=0)
    if normalize:
        out = out / out.sum(-1, keepdims=True)
    return out


def compute(trace, *, progress=None, workers: Optional[int] = None) -> Map:
    A = trace.attention().mean(1)
    return Map("flow", flow(A, workers=workers, progress=progress), None, {"rows_sum_to_one": True})


def estimate(lm, n_tokens: int) -> float:
    """Seconds flow will take for this model and length (the app asks before a long run)."""
    return estimate_seconds(lm.n_layers, n_tokens, workers=default_workers(),
                            causal=bool(lm.arch is not None and lm.arch.causal))


INFO = MethodInfo(
    name="flow", label="Attention flow", unit="flow share (of 1)",
    summary="max-flow through the layered attention graph (Abnar & Zuidema 2020)",
    explain=("Flow: the maximum flow from token i at this layer to each input token through the layered "
             "attention graph (same graph as rollout); at layer 1 it equals rollout."),
    what=("**What it shows.** The layers as a network of pipes: each edge's capacity is the (half attention, "
          "half identity) weight. The value for row *i*, column *j* is the largest amount that can flow from "
          "position *i* at this layer down to input token *j*, then each row is scaled to sum to 1."),
    caveats=("**Caveats.** Same assumptions as rollout. Flow is expensive: one maximum-flow problem per pair of "
             "tokens per layer, so long texts ask before running. In upper layers with spread-out attention the "
             "bottleneck is often the input token's own capacity, so all rows become identical: this is a property "
             "of the method, shown as it is."),
    reference="Abnar & Zuidema 2020",
    rows_sum_to_one=True, decomposition=False, cost="flow", core=True, estimate=estimate,
    graph=GraphView(label="Flow (one max flow)",
                    help="Flow: the edge flows of one maximum flow (capacities = edge weights).",
                    caption="Maximum flow from {output} at layer {top} to {source}: {total:.4f}. A maximum flow is "
                            "not unique: this is one of them. Attention flow divides each such value by the row's "
                            "sum over all inputs.",
                    edges=edge_flows),
    options=(Option(name="workers", default=None,
                    help="processes sharing the max-flow calls (None: ATTNVIZ_FLOW_WORKERS or 1)"),))
