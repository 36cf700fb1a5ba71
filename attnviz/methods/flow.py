"""Attention flow (Abnar & Zuidema 2020), exact, with igraph's C max-flow.

Graph: nodes (layer 0..L, position); an edge from (l, i) down to (l-1, j) with capacity A_l[i, j]
(A = 0.5 ᾱ + 0.5 I, as rollout). flow_l[i, j] = max-flow value from (l, i) to the input node (0, j),
computed per pair with float capacities, then each row normalised to sum 1.

Per layer l the graph holds only layers 0..l (nothing above is reachable from (l, i)). Pairs are
independent, so large jobs are split across worker processes (a forkserver pool, safe beside a
threaded server); small jobs run in this process.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable, Optional

import numpy as np

from .base import Map, with_residual

# serial seconds per (pair x edge), measured on the development machine; used only to decide
# whether a pool is worth its start-up and to show a cost estimate before a long job
_SECONDS_PER_PAIR_EDGE = 2.5e-8
_POOL = None
_POOL_LOCK = threading.Lock()


def estimate_seconds(L: int, n: int, layers: Optional[Iterable[int]] = None, workers: int = 1) -> float:
    """Rough serial cost of flow for L layers x n tokens (only `layers`, 0-based, if given)."""
    layers = range(L) if layers is None else layers
    work = sum(n * n * (l + 1) * n * n for l in layers)
    return work * _SECONDS_PER_PAIR_EDGE / max(1, workers)


def _layer_graph(Ares: np.ndarray, l: int):
    """Graph of layers 0..l+1 (0-based layer l = graph level l+1) -> (igraph.Graph, capacities list)."""
    import igraph as ig

    n = Ares.shape[-1]
    src, dst, cap = [], [], []
    grid_i, grid_j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    for k in range(1, l + 2):  # edges from level k to level k-1, capacities A_k (array index k-1)
        src.append((k * n + grid_i).ravel())
        dst.append(((k - 1) * n + grid_j).ravel())
        cap.append(Ares[k - 1].ravel())
    edges = np.stack([np.concatenate(src), np.concatenate(dst)], 1)
    g = ig.Graph(n=(l + 2) * n, edges=edges, directed=True)
    return g, np.concatenate(cap).tolist()


def _rows(Ares: np.ndarray, l: int, rows: list) -> np.ndarray:
    """Raw max-flow values for 0-based layer l and receiving positions `rows` -> [len(rows), n]."""
    n = Ares.shape[-1]
    g, cap = _layer_graph(Ares, l)
    top = (l + 1) * n
    out = np.empty((len(rows), n))
    for r, i in enumerate(rows):
        for j in range(n):
            out[r, j] = g.maxflow_value(top + i, j, cap)
    return out


def _pool(workers: int):
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers != workers:  # noqa: SLF001
            import multiprocessing as mp

            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(["numpy", "igraph", "attnviz.methods.flow"])
            _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
        return _POOL


def default_workers() -> int:
    env = os.environ.get("ATTNVIZ_FLOW_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def flow(A: np.ndarray, normalize: bool = True, layers: Optional[Iterable[int]] = None,
         workers: Optional[int] = None, progress: Optional[Callable[[float], None]] = None) -> np.ndarray:
    """A [L, n, n] head-averaged attention (rows sum to 1; residual added inside) -> flow [L, n, n].

    layers: 0-based layers to compute (default all); the result then has len(layers) entries in that
    order. normalize=False returns raw max-flow values. workers: processes (default: up to the
    cores, used only when the job is big enough to pay for them). progress(fraction) is called as
    layers finish.
    """
    Ares = with_residual(A)
    L, n, _ = Ares.shape
    layers = list(range(L)) if layers is None else [int(l) for l in layers]
    for l in layers:
        if not 0 <= l < L:
            raise ValueError(f"layer {l} is outside 0..{L - 1}")
    workers = default_workers() if workers is None else max(1, int(workers))
    if workers > 1 and estimate_seconds(L, n, layers) < 0.15:
        workers = 1
    out = np.empty((len(layers), n, n))
    total = sum(l + 1 for l in layers)
    done = 0
    if workers == 1:
        for k, l in enumerate(layers):
            if l == 0:
                out[k] = Ares[0]  # one edge per pair: the flow is the capacity itself
            else:
                out[k] = _rows(Ares, l, list(range(n)))
            done += l + 1
            if progress:
                progress(done / total)
    else:
        ex = _pool(workers)
        futs = []
        for k, l in enumerate(layers):
            if l == 0:
                out[k] = Ares[0]
                continue
            chunks = [list(range(s, n, workers)) for s in range(workers)]
            for rows in chunks:
                futs.append((k, l, rows, ex.submit(_rows, Ares, l, rows)))
        per_layer_left = {}
        for k, l, rows, _ in futs:
            per_layer_left[k] = per_layer_left.get(k, 0) + 1
        for k, l, rows, f in futs:
            out[k][rows] = f.result()
            per_layer_left[k] -= 1
            if per_layer_left[k] == 0:
                done += l + 1
                if progress:
                    progress(done / total)
    if normalize:
        out = out / out.sum(-1, keepdims=True)
    return out


def compute(trace, workers: Optional[int] = None, progress=None) -> Map:
    A = trace.attention().mean(1)
    return Map("flow", flow(A, workers=workers, progress=progress), None, {"rows_sum_to_one": True})
