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
"""
from __future__ import annotations

import importlib.util
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable, Optional

import numpy as np

from .base import Map, with_residual
from .info import MethodInfo, Option

# serial seconds per (pair x edge), measured on the development machine; used only to decide
# whether a pool is worth its start-up and to show a cost estimate before a long job
_SECONDS_PER_PAIR_EDGE = 2.5e-8
_POOL = None
_POOL_LOCK = threading.Lock()


# causal attention: pairs j > i are zero and each remaining pair is solved on positions j..i only;
# measured on SmolLM2 at 32 and 128 tokens (bench/scale_flow.py): 10-35x below the dense estimate
_CAUSAL_FACTOR = 1 / 15


def estimate_seconds(L: int, n: int, layers: Optional[Iterable[int]] = None, workers: int = 1,
                     causal: bool = False) -> float:
    """Rough cost in seconds of flow for L layers x n tokens (only `layers`, 0-based, if given), shown
    before a long run and used to decide where flow is offered at all (jobs.limit_reason).

    Compiled kernels: about c * n^3 * (layers counted), where the layers above the second count
    (layers 1-2 are closed form) but at most four of them: the bounds settle most pairs of the upper
    layers, so 30 causal layers of SmolLM2 cost what 6 of MiniLM cost. Measured (2026-11-25,
    bench/flow_estimate.py's paragraphs, two threads on a machine with one other busy process):
    MiniLM 64 / 96 / 128 / 192 / 256 / 384 / 512 tokens 0.70 / 2.34 / 5.47 / 16.8 / 37.3 / 127 / 366 s,
    SmolLM2 64 / 96 / 128 tokens 0.75 / 2.22 / 5.34 s; c is the largest of t / (4 n^3) over these
    (6.8e-7, at 512 tokens), rounded up. The built-in 6-layer model takes about a fifth of this. On
    two free cores the time is about half.
    The igraph path (no numba) keeps its per-pair-edge rate."""
    layers = list(range(L)) if layers is None else list(layers)
    if USE_COMPILED and importlib.util.find_spec("numba") is not None:
        top = max(layers) + 1 if layers else 0  # every layer below the highest asked is solved too
        counted = min(max(top - 2, 0), _LAYERS_COUNTED_COMPILED)
        return _SECONDS_PER_CUBE_COMPILED * float(n) ** 3 * counted + 1e-7 * n * n * top
    work = sum(n * n * (l + 1) * n * n for l in layers)
    return work * _SECONDS_PER_PAIR_EDGE / max(1, workers) * (_CAUSAL_FACTOR if causal else 1.0)


_SECONDS_PER_CUBE_COMPILED = 7.0e-7  # MiniLM 512 tokens: 366 s = 6.8e-7 * 512^3 * 4
_LAYERS_COUNTED_COMPILED = 4


def _is_causal(Ares: np.ndarray) -> bool:
    """True when no position attends to a later one (decoder attention): every capacity above the
    diagonal is exactly 0, so (l, i) reaches only positions <= i and (0, j) is reached only from >= j."""
    return not np.any(np.triu(Ares, 1))


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


def _layer_graph(Ares: np.ndarray, l: int):
    """Graph of layers 0..l+1 (0-based layer l = graph level l+1) -> (igraph.GraphBase, capacities list)."""
    g, cap, _ = _graph(Ares, l)
    return g, cap


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
    """Worker processes for flow: 1 unless ATTNVIZ_FLOW_WORKERS says more.

    The bounds leave few max-flow calls, so one process is fast; a pool (forkserver) re-imports
    the caller's __main__ in its workers, which surprises scripts without a main guard, so it is
    opt-in (ATTNVIZ_FLOW_WORKERS=2, or workers=2)."""
    env = os.environ.get("ATTNVIZ_FLOW_WORKERS")
    return max(1, int(env)) if env and env.strip().isdigit() else 1


def default_threads() -> int:
    """Threads for the compiled max-flow calls: ATTNVIZ_FLOW_WORKERS if set, else min(2, CPUs)."""
    env = os.environ.get("ATTNVIZ_FLOW_WORKERS")
    if env and env.strip().isdigit():
        return max(1, int(env))
    return max(1, min(2, os.cpu_count() or 1))


def _bounds(Al: np.ndarray, F_prev: np.ndarray, in_cap: np.ndarray):
    """Exact bounds on layer-l flows from layer l-1 flows -> (lower [n,n], upper [n,n]).

    Al [n,n] residual attention of layer l, F_prev [n(k), n(j)] raw flows from (l-1, k) to (0, j),
    in_cap [n] capacity into each input node, or [n(i), n(j)] the capacity into (0, j) from the
    positions (l, i) can reach (causal attention: Σ_{k<=i} A_1[k, j]).
    Upper: min(out-capacity of (l,i), in_cap, Σ_k min(Al[i,k], F_prev[k,j])) — every unit passes
    one first edge and then travels on from (l-1, k).
    Lower, the larger of: (flow side) a convex combination of feasible flows is feasible, so Σ_k y_k
    with y_k ≤ min(Al[i,k], F_prev[k,j]) and Σ_k y_k / F_prev[k,j] ≤ 1 is reachable: a fractional
    knapsack, taken greedily from the largest F_prev[k,j]; (cut side) min over θ of
    θ + Σ_{k: F_prev[k,j] > θ} Al[i,k], since a cut is a set, not a fraction (below).
    """
    cap = np.minimum(Al[:, :, None], F_prev[None, :, :])  # [i, k, j]
    upper = np.minimum(np.minimum(Al.sum(1)[:, None], in_cap), cap.sum(1))
    order = np.argsort(-F_prev, axis=0, kind="stable")  # per j: k by decreasing flow
    Fs = np.take_along_axis(F_prev, order, 0)
    caps = np.take_along_axis(cap, np.broadcast_to(order[None], cap.shape), 1)
    safe = np.where(Fs > 0, Fs, np.inf)[None]
    cost = caps / safe
    before = np.cumsum(cost, 1) - cost
    frac = np.where(cost > 0, np.clip((1.0 - before) / np.where(cost > 0, cost, 1.0), 0.0, 1.0), 0.0)
    lower = (caps * frac).sum(1)
    # the cut side: every cut of (l,i) from (0,j) puts some set K of layer l-1 nodes on the source
    # side and costs Al[i, not K] + (max-flow from K) >= Al[i, not K] + max_{k in K} F_prev[k, j]
    # (the flow from a set is at least the flow from any member). For a given largest member
    # value θ the cheapest K is every k with F_prev[k, j] <= θ: min over θ of θ + Al[i, F_prev > θ].
    Ao = np.take_along_axis(np.broadcast_to(Al[:, :, None], cap.shape), np.broadcast_to(order[None], cap.shape), 1)
    above = np.concatenate([np.zeros((Al.shape[0], 1, Fs.shape[1])), np.cumsum(Ao, 1)], 1)  # Al[i, r largest]
    theta = np.concatenate([Fs, np.zeros((1, Fs.shape[1]))], 0)  # after the r largest: the next value
    lower = np.maximum(lower, (above + theta[None]).min(1))
    return lower, upper


def _lower_two(Al: np.ndarray, Aprev: np.ndarray, F_pp: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Cut-side lower bound two layers down, for the pairs (i, j) where mask is set (else -inf).

    A cut of (l,i) from (0,j) puts sets K (layer l-1) and K' (layer l-2) on the source side and
    costs at least Al[i, not K] + Aprev[K, not K'] + max_{k' in K'} F_pp[k', j]. For a largest
    member value θ the cheapest K' is every k' with F_pp[k', j] <= θ, and then each k is cheapest
    alone: min over θ of θ + Σ_k min(Al[i, k], Aprev[k, F_pp[:, j] > θ])."""
    n = Al.shape[0]
    out = np.full((n, n), -np.inf)
    for j in np.nonzero(mask.any(0))[0]:
        rows = np.nonzero(mask[:, j])[0]
        v = F_pp[:, j]
        keep = np.nonzero(v > 0)[0]  # a k' that carries nothing is free to put on either side
        order = keep[np.argsort(-v[keep], kind="stable")]
        cols = np.nonzero(Aprev[:, keep].any(1))[0]  # k that reach some k' that carries flow
        a = np.concatenate([np.zeros((len(cols), 1)), np.cumsum(Aprev[np.ix_(cols, order)], 1)], 1)
        theta = np.concatenate([v[order], [0.0]])
        val = np.minimum(Al[np.ix_(rows, cols)][:, :, None], a[None]).sum(1) + theta[None]
        out[rows, j] = val.min(1)
    return out


CERTIFY_TOL = 1e-12
POOL_MIN_SECONDS = 0.02  # a layer whose remaining max-flow work is smaller runs in this process


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
    if _kernels() is not None:  # compiled path: workers are threads, cheap to start
        workers = default_threads() if workers is None else max(1, int(workers))
    else:
        workers = default_workers() if workers is None else max(1, int(workers))
    if rows is not None:
        return _rows(Ares, want, [int(i) for i in rows], normalize, workers, progress, stats)
    kern = _kernels()
    if kern is not None:
        return _flow_compiled(Ares, want, top, normalize, progress, stats, kern, workers)
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


def _rows(Ares, want, rows, normalize, workers, progress, stats):
    L, n, _ = Ares.shape
    for i in rows:
        if not 0 <= i < n:
            raise ValueError(f"row {i} is outside 0..{n - 1}")
    kern = _kernels()
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


_KERNELS = None
USE_COMPILED = True  # False: the igraph path (tests compare both with the plain formulation)


def _kernels():
    """The numba kernels (bounds, second-layer cut bound, Dinic max-flow), or None without numba."""
    global _KERNELS
    if not USE_COMPILED:
        return None
    if _KERNELS is None:
        try:
            import numba
        except ImportError:
            return None
        jit = numba.njit(cache=True, nogil=True)
        _KERNELS = (jit(_bounds_kernel), jit(_lower_two_kernel), jit(_maxflow_kernel))
    return _KERNELS


def _maxflow_pairs(Ares: np.ndarray, l: int, pairs, target, kern, threads: int = 1) -> np.ndarray:
    """Raw max-flow values of (i, j) pairs at 0-based layer l with the compiled Dinic kernel.
    Causal attention: j > i is 0, j = i is position i's own column, other pairs on positions j..i.
    target: per pair, a proven upper bound at which the search may stop (None: run to the end)."""
    n = Ares.shape[-1]
    causal = _is_causal(Ares[: l + 1])
    I = np.array([p[0] for p in pairs], dtype=np.int64)
    J = np.array([p[1] for p in pairs], dtype=np.int64)
    out = np.zeros(len(I))
    run = (J < I) if causal else np.ones(len(I), bool)
    if causal:
        diag = J == I
        out[diag] = Ares[: l + 1, I[diag], I[diag]].min(0)
    idx = np.nonzero(run)[0]
    if len(idx):
        tgt = np.full(len(idx), np.inf) if target is None else np.asarray(target, float)[idx]
        _maxflow_run(Ares, l, I[idx], J[idx], causal, tgt, out, idx, kern, threads)
    return out


def _maxflow_run(Ares, l, I, J, causal, target, out, idx, kern, threads: int = 1, tick=None):
    """Run the Dinic kernel on pairs (I, J) of layer l, results into out[idx]. threads > 1: the
    pairs are dealt out in turn to that many threads (the kernel releases the GIL), each with its
    own work arrays. The pairs go in rounds of ROUND_PAIRS per thread; after each round
    tick(fraction of the pairs done) is called in the calling thread (progress, and the place where
    a Cancelled raised by it stops the work: within one round, well under a second at 128 tokens)."""
    n = Ares.shape[-1]
    Ac = np.ascontiguousarray(Ares[: l + 1], dtype=np.float64)
    vals = np.empty(len(I))

    nl = l + 2
    # the order the push tries the nodes of a level: by decreasing capacity into them
    perm = np.ascontiguousarray(np.argsort(-Ac.sum(1), axis=-1, kind="stable"))

    def work_arrays():
        size = nl * n + 2
        return dict(R=Ac.copy(), dist=np.full((nl, n), -1, np.int64),
                    it=np.zeros((nl, n), np.int64), itu=np.zeros((nl, n), np.int64),
                    dg=np.zeros((nl, n), np.int64), nxs=np.zeros((nl, n), np.int64),
                    hd=np.empty((nl, size), np.int64), fin=np.empty((nl, n, n), np.int32),
                    flen=np.zeros((nl, n), np.int64), inl=np.zeros((nl, n, n), np.bool_),
                    qm=np.empty(size, np.int64), qp=np.empty(size, np.int64), pm=np.empty(size, np.int64),
                    pp=np.empty(size, np.int64), pa=np.empty(size, np.int64), lim=np.empty(size + 1),
                    used=np.empty(size + 1), ask=np.empty(size + 1), un=np.zeros((nl, n), np.int64),
                    cnt=np.zeros(nl, np.int64))

    def chunk(job):
        sel, w = job  # the kernel restores R and clears its lists after every pair: w is reused as it is
        v = np.empty(len(sel))
        st = np.zeros(6, np.int64)
        kern[2](Ac, l, I[sel], J[sel], causal, perm, target[sel], MAXFLOW_EPS, v, w["R"], w["dist"], w["it"],
                w["itu"], w["dg"], w["nxs"], w["hd"], w["fin"], w["flen"], w["inl"], w["qm"], w["qp"], w["pm"],
                w["pp"], w["pa"], w["lim"], w["used"], w["ask"], w["un"], w["cnt"], st)
        vals[sel] = v
        return st

    threads = max(1, min(int(threads), len(I) // 64 or 1))
    shares = [np.arange(c, len(I), threads) for c in range(threads)]  # pairs dealt out in turn
    total = max(1, len(I))
    if threads == 1:
        w = work_arrays()
        st = np.zeros(6, np.int64)
        for a in range(0, len(I), ROUND_PAIRS):
            st += chunk((shares[0][a:a + ROUND_PAIRS], w))
            if tick is not None:
                tick(min(a + ROUND_PAIRS, len(I)) / total)
        out[idx] = vals
        return st
    # each thread works through its share in rounds without waiting for the others; after every
    # round it posts the count, and this thread reports progress (a Cancelled raised by tick sets
    # `stop`, every thread ends its round and stops, then the Cancelled goes on up)
    import queue
    from concurrent.futures import ThreadPoolExecutor

    posts: "queue.Queue" = queue.Queue()
    stop = threading.Event()

    def share(c):
        st = np.zeros(6, np.int64)
        try:
            w = work_arrays()
            for a in range(0, len(shares[c]), ROUND_PAIRS):
                if stop.is_set():
                    break
                sel = shares[c][a:a + ROUND_PAIRS]
                st += chunk((sel, w))
                posts.put(len(sel))
        finally:
            posts.put(None)
        return st

    with ThreadPoolExecutor(threads) as ex:
        futures = [ex.submit(share, c) for c in range(threads)]
        running, done = threads, 0
        try:
            while running:
                got = posts.get()
                if got is None:
                    running -= 1
                    continue
                done += got
                if tick is not None:
                    tick(done / total)
        except BaseException:
            stop.set()
            raise
        st = sum(f.result() for f in futures)
    out[idx] = vals
    return st


ROUND_PAIRS = 1024  # pairs per thread between two progress reports of flow's compiled path


def _progress_weight(l: int) -> float:
    """A layer's share of the compiled path's progress: layers 1-2 (closed forms) next to nothing, every
    layer above one equal part. Measured per layer (two threads): MiniLM 128 tokens 0.46 / 1.11 / 1.11 /
    0.15 s for layers 3-6, SmolLM2 0.01-0.27 s for each of layers 3-30 in no order; the time grows with
    the pairs the bounds leave open, which is not known before the layer below is solved."""
    return 0.05 if l < 2 else 1.0


def _flow_compiled(Ares, want, top, normalize, progress, stats, kern, threads=1):
    """flow() with the compiled kernels: the same bounds, then Dinic for the pairs they leave open,
    stopped as soon as the flow reaches the pair's upper bound (within CERTIFY_TOL)."""
    bounds_k, lower_two_k, _ = kern
    L, n, _ = Ares.shape
    causal = _is_causal(Ares[: top + 1])
    in_cap = np.cumsum(Ares[0], 0) if causal else Ares[0].sum(0)
    in1 = np.empty(0) if causal else np.ascontiguousarray(in_cap)
    in2 = np.ascontiguousarray(in_cap) if causal else np.empty((0, 0))
    F = np.empty((top + 1, n, n))
    diag = np.arange(n)
    column = np.minimum.accumulate(Ares[:, diag, diag], axis=0)  # causal j = i: the own column
    solved = settled = 0
    total_work = sum(_progress_weight(l) for l in range(top + 1)) or 1
    done = 0
    lower = np.empty((n, n))
    upper = np.empty((n, n))
    kst = np.zeros(6, np.int64)
    for l in range(top + 1):
        if l == 0:
            F[0] = Ares[0]
        elif l == 1:
            F[1] = np.minimum(Ares[1][:, :, None], Ares[0][None, :, :]).sum(1)
        else:
            Al = np.ascontiguousarray(Ares[l])
            order = np.ascontiguousarray(np.argsort(-F[l - 1], axis=0, kind="stable"))
            bounds_k(Al, F[l - 1], in1, in2, order, lower, upper, causal)
            ok = (upper - lower) <= CERTIFY_TOL
            if causal:
                ok[diag, diag] = True
                ok[np.triu_indices(n, 1)] = True
            if not ok.all():
                I, J = np.nonzero(~ok)
                order2 = np.ascontiguousarray(np.argsort(-F[l - 2], axis=0, kind="stable"))
                count = (F[l - 2] > 0).sum(0)
                lo2 = np.empty(len(I))
                # only the pairs this bound can settle: it must reach the upper bound
                lower_two_k(Al, np.ascontiguousarray(Ares[l - 1].T), F[l - 2], order2, count,
                            I.astype(np.int64), J.astype(np.int64), upper[I, J] - CERTIFY_TOL, lo2)
                lower[I, J] = np.maximum(lower[I, J], lo2)
                ok = (upper - lower) <= CERTIFY_TOL
                if causal:
                    ok[diag, diag] = True
                    ok[np.triu_indices(n, 1)] = True
            F[l] = upper
            if causal:
                F[l, diag, diag] = column[l]
            I, J = np.nonzero(~ok)
            settled += int(ok.sum())
            solved += len(I)
            if len(I):
                up = upper[I, J]
                v = np.empty(len(I))
                tick = None
                if progress:
                    def tick(f, base=done, part=_progress_weight(l)):
                        progress((base + part * f) / total_work)
                kst += _maxflow_run(Ares, l, I.astype(np.int64), J.astype(np.int64), causal, up - CERTIFY_TOL,
                                    v, np.arange(len(I)), kern, threads, tick)
                F[l, I, J] = np.where(v >= up - CERTIFY_TOL, up, v)
        done += _progress_weight(l)
        if progress:
            progress(done / total_work)
    if stats is not None:
        stats.update(maxflow_pairs=solved, bounded_pairs=settled, maxflow_phases=int(kst[0]),
                     edge_updates=int(kst[1]), stopped_at_upper=int(kst[2]))
    out = F[want]
    if normalize:
        out = out / out.sum(-1, keepdims=True)
    return out


MAXFLOW_EPS = 1e-15  # residual capacities at or below this count as zero in the compiled Dinic


def estimate_pairs(pairs: int, l: int, n: int) -> float:
    """Serial seconds for `pairs` max-flow calls on the graph of 0-based layer l."""
    return pairs * (l + 1) * n * n * _SECONDS_PER_PAIR_EDGE


def _solve(Ares: np.ndarray, l: int, pairs: list, workers: int, graph=None) -> list:
    if workers <= 1:
        return _pairs(Ares, l, pairs, graph)
    global _POOL
    chunks = [pairs[s::workers] for s in range(workers)]
    try:
        ex = _pool(workers)
        results = [ex.submit(_pairs, Ares, l, c) for c in chunks]
        vals = {}
        for c, f in zip(chunks, results):
            vals.update(zip(c, f.result(timeout=600)))
        return [vals[p] for p in pairs]
    except Exception:  # noqa: BLE001 - a broken or unavailable pool must not lose the result
        with _POOL_LOCK:
            if _POOL is not None:
                _POOL.shutdown(wait=False, cancel_futures=True)
            _POOL = None
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
    top = L if top is None else int(top)
    if not 1 <= top <= L:
        raise ValueError(f"top layer {top} is outside 1..{L}")
    for name, p in (("output", output), ("source", source)):
        if p is not None and not 0 <= int(p) < n:
            raise ValueError(f"{name} position {p} is outside 0..{n - 1}")
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
    options=(Option(name="workers", default=None,
                    help="processes sharing the max-flow calls (None: ATTNVIZ_FLOW_WORKERS or 1)"),))


# ---- compiled kernels (numba, compiled on first use and cached on disk; see _kernels) ----------
# Plain functions here, each self-contained (no calls between them), turned into numba functions
# by _kernels(): importing numba costs ~0.5 s, paid only when flow runs.

def _bounds_kernel(Al, F_prev, in_cap, in_cap_2d, order, lower, upper, only_lower_tri):
    """The bounds of _bounds for every (i, j) (j <= i only, when only_lower_tri), in one pass per
    pair instead of [n, n, n] arrays. order[:, j]: k by decreasing F_prev[k, j] (stable)."""
    n = Al.shape[0]
    for i in range(n):
        out_cap = 0.0
        for k in range(n):
            out_cap += Al[i, k]
        for j in range(n):
            if only_lower_tri and j > i:
                lower[i, j] = 0.0
                upper[i, j] = 0.0
                continue
            c_in = in_cap_2d[i, j] if in_cap.shape[0] == 0 else in_cap[j]
            total = 0.0
            before = 0.0
            knap = 0.0
            above = 0.0
            cut = np.inf
            for r in range(n):
                k = order[r, j]
                f = F_prev[k, j]
                a = Al[i, k]
                c = a if a < f else f
                total += c
                # cut side: the r largest on the source side, the next value as the member bound
                if above + f < cut:
                    cut = above + f
                above += a
                # flow side: fractional knapsack, k by decreasing flow
                if f > 0.0 and c > 0.0:
                    cost = c / f
                    fr = (1.0 - before) / cost
                    if fr > 1.0:
                        fr = 1.0
                    elif fr < 0.0:
                        fr = 0.0
                    knap += c * fr
                    before += cost
            if above < cut:
                cut = above
            up = out_cap if out_cap < c_in else c_in
            upper[i, j] = up if up < total else total
            lower[i, j] = knap if knap > cut else cut


def _lower_two_kernel(Al, AprevT, F_pp, order, count, I, J, need, out):
    """_lower_two for the listed pairs (I[t], J[t]); AprevT = Aprev transposed (contiguous), order[:, j]
    as in _bounds_kernel over F_pp, count[j] how many k' carry flow to j (F_pp[k', j] > 0).
    need[t]: the bound is wanted only if it reaches need[t] (the pair's upper bound, to settle it):
    as soon as one θ gives less, the minimum is below need[t] and out[t] = -inf (np.-inf: never)."""
    n = Al.shape[0]
    acc = np.empty(n)
    for t in range(I.shape[0]):
        i = I[t]
        j = J[t]
        m = count[j]
        for k in range(n):
            acc[k] = 0.0
        best = np.inf
        for r in range(m + 1):
            # K' = the r largest k' (those with F_pp > θ), θ = the next value (0 after the last)
            theta = F_pp[order[r, j], j] if r < m else 0.0
            s = theta
            for k in range(n):
                a = Al[i, k]
                s += a if a < acc[k] else acc[k]
            if s < best:
                best = s
                if best < need[t]:
                    best = -np.inf
                    break
            if r < m:
                kp = order[r, j]
                for k in range(n):
                    acc[k] += AprevT[kp, k]
        out[t] = best


def _maxflow_kernel(Ares, l, I, J, causal, perm, target, eps, out, R, dist, it, itu, dg, nxs, hd, fin, flen, inl,
                    qm, qp, pm, pp, pa, lim, used, ask, un, cnt, st):
    """Max-flow value from (l+1, I[t]) to (0, J[t]) for each t: Dinic's algorithm on the layered
    graph of Ares[:l+1] (positions j..i at levels 1..l when causal, else all; the source alone at
    the top, the sink alone at level 0), stopping as soon as the value reaches target[t] (a proven
    upper bound; np.inf: to the end). R[e, p, q] = Ares[e, p, q] on entry: the residual capacity
    of edge (e+1, p) -> (e, q), whose flow is Ares - R (a saturated edge has R = 0 exactly, an
    emptied one R = Ares exactly); fin[m, p, :flen[m, p]]: the positions r whose edge
    (m+1, r) -> (m, p) this pair has changed (inl marks them), so a reverse arc scan reads that
    list, not the whole level, and restoring R after the pair touches those edges only.

    The first phase runs on the layers themselves (every edge goes one level down, so no search
    is needed, and without causal trimming every level is one class whose chain, the order perm,
    is computed once per call, not per pair); later phases search the residual graph breadth-first, each level keeping a list
    of its unlabelled nodes (un, cnt) so a node scans only those. Blocking flow: depth-first from
    the source, each frame k asking its node for up to lim[k] and pushing it on through several
    arcs in turn: first the node's own column edge (dg: not tried yet), then the nodes of the level
    below at distance d + 1 in the order perm (by decreasing column capacity), reached through a
    chain nxs of the nodes of equal distance with blocked nodes spliced out (path compression), so
    a blocked node is not looked at again; then the reverse arcs from fin. A level-1 node pushes into
    the sink's edge itself (no frame for the sink). Residuals and flows
    <= eps count as 0. st: phases, arc flow updates, pairs stopped at target, search pops, search
    arc checks, push arc checks."""
    n = Ares.shape[1]
    nl = l + 2
    nxs0 = np.empty((nl, n), np.int64)
    for m in range(nl):
        for p in range(n):
            flen[m, p] = 0
    for e in range(1, l + 1):
        for x in range(n - 1):
            nxs0[e, perm[e, x]] = perm[e, x + 1]
        nxs0[e, perm[e, n - 1]] = n
    for t in range(I.shape[0]):
        i = I[t]
        j = J[t]
        lo = j if causal else 0
        hi = i + 1 if causal else n
        val = 0.0
        tgt = target[t]
        phase = 0
        while val < tgt:
            if phase == 0:  # the levels are the layers: no reset, no search
                for p in range(lo, hi):
                    dist[0, p] = -1
                    dist[l + 1, p] = -1
                for m in range(1, l + 1):
                    for p in range(lo, hi):
                        dist[m, p] = l + 1 - m
                dist[l + 1, i] = 0
                dist[0, j] = l + 1
            else:
                for p in range(lo, hi):
                    dist[0, p] = -1
                    dist[l + 1, p] = -1
                for m in range(1, l + 1):
                    c = 0
                    for p in range(lo, hi):
                        dist[m, p] = -1
                        un[m, c] = p
                        c += 1
                    cnt[m] = c
                dist[l + 1, i] = 0
                qm[0] = l + 1
                qp[0] = i
                head = 0
                tail = 1
                dsink = -1
                while head < tail:
                    m = qm[head]
                    p = qp[head]
                    head += 1
                    st[3] += 1
                    d = dist[m, p]
                    if dsink >= 0 and d >= dsink:
                        break
                    if m >= 2:
                        e = m - 1
                        x = 0
                        while x < cnt[e]:
                            q = un[e, x]
                            st[4] += 1
                            if dist[e, q] >= 0:  # labelled through an up arc meanwhile
                                cnt[e] -= 1
                                un[e, x] = un[e, cnt[e]]
                            elif R[e, p, q] > eps:
                                dist[e, q] = d + 1
                                qm[tail] = e
                                qp[tail] = q
                                tail += 1
                                cnt[e] -= 1
                                un[e, x] = un[e, cnt[e]]
                            else:
                                x += 1
                    elif m == 1:
                        if dist[0, j] < 0 and R[0, p, j] > eps:
                            dist[0, j] = d + 1
                            dsink = d + 1
                    if 1 <= m <= l - 1:
                        e = m + 1
                        for x in range(flen[m, p]):
                            r = fin[m, p, x]
                            st[4] += 1
                            if dist[e, r] < 0 and Ares[m, r, p] - R[m, r, p] > eps:
                                dist[e, r] = d + 1
                                qm[tail] = e
                                qp[tail] = r
                                tail += 1
                if dsink < 0:
                    break
            phase += 1
            st[0] += 1
            # class chains: nxs[e, p] = next position after p at level e with the same distance
            if phase == 1 and not causal:  # the first phase: every level is one class, in perm order
                for e in range(1, l + 1):
                    for p in range(n):
                        nxs[e, p] = nxs0[e, p]
                    hd[e, l + 1 - e] = perm[e, 0]
            for e in range(1 if (phase > 1 or causal) else l + 1, l + 1):
                for p in range(lo, hi):
                    dv = dist[e, p]
                    if dv >= 0:
                        hd[e, dv] = hi
                for x in range(n - 1, -1, -1):
                    p = perm[e, x]
                    if p < lo or p >= hi:
                        continue
                    dv = dist[e, p]
                    if dv >= 0:
                        nxs[e, p] = hd[e, dv]
                        hd[e, dv] = p
            for m in range(1, l + 2):
                for p in range(lo, hi):
                    itu[m, p] = 0
                    dg[m, p] = 1
                    d = dist[m, p]
                    if m == 1:
                        it[m, p] = lo
                    elif d >= 0:
                        it[m, p] = hi
                        if d + 1 < hd.shape[1]:
                            q = hd[m - 1, d + 1]  # valid only if set this phase
                            if lo <= q < hi and dist[m - 1, q] == d + 1:
                                it[m, p] = q
                    else:
                        it[m, p] = hi
            k = 0
            pm[0] = l + 1
            pp[0] = i
            lim[0] = tgt - val
            used[0] = 0.0
            ret = -1.0
            while True:
                m = pm[k]
                p = pp[k]
                if ret >= 0.0:
                    b = pa[k]
                    x = ret
                    ret = -1.0
                    if x > 0.0:
                        if b < n:  # down: more flow on edge (m, p) -> (m-1, b)
                            e = m - 1
                            src = p
                            dst = b
                            rr = R[e, src, dst] - x
                            if rr <= eps:
                                rr = 0.0
                            if not inl[e, dst, src]:
                                inl[e, dst, src] = True
                                fin[e, dst, flen[e, dst]] = src
                                flen[e, dst] += 1
                        else:  # up: less flow on edge (m+1, b-n) -> (m, p), already listed
                            e = m
                            src = b - n
                            dst = p
                            rr = R[e, src, dst] + x
                            if Ares[e, src, dst] - rr <= eps:
                                rr = Ares[e, src, dst]
                        R[e, src, dst] = rr
                        used[k] += x
                        st[1] += 1
                    adv = False
                    if x < ask[k + 1]:
                        adv = True
                    elif b < n:
                        adv = R[m - 1, p, b] <= eps
                    else:
                        adv = Ares[m, b - n, p] - R[m, b - n, p] <= eps
                    if adv:
                        if b < n:
                            if m == 1:
                                it[m, p] = hi
                            elif dg[m, p] == 1 and b == p:
                                dg[m, p] = 0
                            else:
                                it[m, p] = nxs[m - 1, b]
                        else:
                            itu[m, p] += 1
                    if used[k] >= lim[k]:
                        if k == 0:
                            break
                        ret = used[k]
                        k -= 1
                        continue
                if m == 0:
                    ret = lim[k]
                    k -= 1
                    continue
                d = dist[m, p]
                moved = False
                # down arcs: the alive members of class d + 1 on the level below
                if m == 1:
                    if it[m, p] < hi:
                        st[5] += 1
                        if dist[0, j] == d + 1 and R[0, p, j] > eps:
                            # the sink's edge: pushed here, without a frame for the sink
                            rr = R[0, p, j]
                            c = lim[k] - used[k]
                            x = rr if rr < c else c
                            rr -= x
                            if rr <= eps:
                                rr = 0.0
                            R[0, p, j] = rr
                            if not inl[0, j, p]:
                                inl[0, j, p] = True
                                fin[0, j, flen[0, j]] = p
                                flen[0, j] += 1
                            used[k] += x
                            st[1] += 1
                            if used[k] >= lim[k]:
                                if rr <= eps:
                                    it[m, p] = hi
                                if k == 0:
                                    break
                                ret = used[k]
                                k -= 1
                                continue
                        it[m, p] = hi
                else:
                    e = m - 1
                    if dg[m, p] == 1:
                        # the own column first: the largest edge of every node
                        if lo <= p < hi and dist[e, p] == d + 1 and R[e, p, p] > eps:
                            rr = R[e, p, p]
                            c = lim[k] - used[k]
                            pa[k] = p
                            pm[k + 1] = e
                            pp[k + 1] = p
                            ask[k + 1] = rr if rr < c else c
                            lim[k + 1] = ask[k + 1]
                            used[k + 1] = 0.0
                            k += 1
                            continue
                        dg[m, p] = 0
                    q = it[m, p]
                    while q < hi:
                        # skip blocked members (path compression on the chain)
                        if dist[e, q] == -2:
                            q0 = q
                            while q < hi and dist[e, q] == -2:
                                q = nxs[e, q]
                            while q0 < hi and dist[e, q0] == -2:
                                q1 = nxs[e, q0]
                                nxs[e, q0] = q
                                q0 = q1
                            if q >= hi:
                                break
                        st[5] += 1
                        rr = R[e, p, q]
                        if rr > eps:
                            c = lim[k] - used[k]
                            pa[k] = q
                            pm[k + 1] = e
                            pp[k + 1] = q
                            ask[k + 1] = rr if rr < c else c
                            lim[k + 1] = ask[k + 1]
                            used[k + 1] = 0.0
                            moved = True
                            break
                        q = nxs[e, q]
                    it[m, p] = q
                    if moved:
                        k += 1
                        continue
                # up arcs: edges into this node that carry flow
                if 1 <= m <= l - 1:
                    e = m + 1
                    x = itu[m, p]
                    while x < flen[m, p]:
                        r = fin[m, p, x]
                        st[5] += 1
                        if dist[e, r] == d + 1:
                            rr = Ares[m, r, p] - R[m, r, p]
                            if rr > eps:
                                c = lim[k] - used[k]
                                pa[k] = n + r
                                pm[k + 1] = e
                                pp[k + 1] = r
                                ask[k + 1] = rr if rr < c else c
                                lim[k + 1] = ask[k + 1]
                                used[k + 1] = 0.0
                                moved = True
                                break
                        x += 1
                    itu[m, p] = x
                    if moved:
                        k += 1
                        continue
                dist[m, p] = -2
                if k == 0:
                    break
                ret = used[k]
                k -= 1
            val += used[0]
            if used[0] <= 0.0 and phase > 1:
                break
        out[t] = val
        if val >= tgt:
            st[2] += 1
        # restore the edges this pair changed (all listed in fin)
        for m in range(l + 1):
            for p in range(lo, hi):
                for x in range(flen[m, p]):
                    r = fin[m, p, x]
                    R[m, r, p] = Ares[m, r, p]
                    inl[m, p, r] = False
                flen[m, p] = 0
