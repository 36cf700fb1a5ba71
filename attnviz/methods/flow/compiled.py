"""flow's compiled path: the bounds as kernels, then Dinic for the pairs they leave open, stopped at
the pair's upper bound; the pairs of a layer dealt out to threads, in rounds that report progress."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .bounds import CERTIFY_TOL, _is_causal

MAXFLOW_EPS = 1e-15  # residual capacities at or below this count as zero in the compiled Dinic
ROUND_PAIRS = 1024  # pairs per thread between two progress reports of flow's compiled path


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
