"""Every sped-up path against a slow, plain formulation on tiny float64 models of several families.

The fast paths: norms from per-source head Gram matrices (value norm, AttnRes-N, ATTNRESLN, GlobEnc),
the linear-decomposition module (norms distributed over parts, quadrature, mixing ratio), and the
fused, chunked, causally-trimmed ATBFF pass. The references below build every [i, j] vector
explicitly with Python loops over receivers, sources and heads, apply the norms as written in the
papers (torch.nn.functional.layer_norm statistics, the RMSNorm formula), and integrate the FFN's
gradients one quadrature node and one pair at a time with autograd.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnviz import linear
from attnviz.analysis import mixing_ratios
from attnviz.methods import atb_ff, attn_res, attn_res_ln, globenc, value_norm
from attnviz.models.families import Norm
from attnviz.trace import trace

from test_new_measures import _model  # tiny float64 models with random biases and norm parameters, FFN ×scale

FAMS = ["bert", "distilbert", "gpt2", "llama", "qwen2"]
TEXT = "the old farmer who lives near the river sold three cows to the baker ."


@pytest.fixture(scope="module")
def tr64(tokenizer):
    cache = {}

    def get(name):
        if name not in cache:
            lm = _model(tokenizer, name, scale=6.0)
            assert lm.check.ok, lm.check.reason
            cache[name] = trace(lm, TEXT, dtype=torch.float64)
        return cache[name]

    return get


# ------------------------------------------------------------------ plain references
def _f_plain(tr, l):
    """f^h(x_j) [H][n] list of vectors: (v^h_j) W_O^h, head by head, from the value vectors."""
    w = tr.weights[l]
    v = tr.layers[l].v.double()  # [Hkv, n, dh]
    H, dh = w.n_heads, w.head_dim
    rep = H // w.n_kv_heads
    wo = w.wo.double()
    return [[v[h // rep, j] @ wo[h * dh:(h + 1) * dh] for j in range(v.shape[1])] for h in range(H)]


def _z_plain(tr, l):
    """z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i as an explicit [n, n, d] tensor, loops over i, j, h."""
    r = tr.layers[l]
    a = r.probs.double()
    f = _f_plain(tr, l)
    H, n, _ = a.shape
    x = r.resid_in.double()
    z = torch.zeros(n, n, x.shape[1], dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            for h in range(H):
                z[i, j] += a[h, i, j] * f[h][j]
        z[i, i] += x[i]
    return z


def _ln_plain(v, nrm, real):
    """The norm applied to v [..., d] with the statistics of `real` [d] (written out, no β)."""
    gamma = nrm.weight.double()
    if nrm.kind == "layernorm":
        mu = real.mean()
        s = torch.sqrt(((real - mu) ** 2).mean() + nrm.eps)
        return (v - v.mean(-1, keepdim=True)) / s * gamma
    return v / torch.sqrt((real ** 2).mean() + nrm.eps) * gamma


def _norms(V):
    n = V.shape[0]
    return np.array([[math.sqrt(float((V[i, j] ** 2).sum())) for j in range(n)] for i in range(n)])


def _ratio_plain(V):
    n = V.shape[0]
    out = []
    for i in range(n):
        pres = V[i, i]
        mix = sum(V[i, j] for j in range(n) if j != i)
        m, p = float(mix.norm()), float(pres.norm())
        out.append(m / (m + p))
    return np.array(out)


# ------------------------------------------------------------------ linear module
def test_summed_norms_against_explicit_vectors():
    g = torch.Generator().manual_seed(0)
    H, n, d = 3, 7, 5
    a = torch.rand(H, n, n, generator=g, dtype=torch.float64)
    vecs = torch.randn(H, n, d, generator=g, dtype=torch.float64)
    add = torch.randn(n, d, generator=g, dtype=torch.float64)
    scale = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    got = linear.summed_norms(a, vecs, diag_add=add, row_scale=scale)
    for i in range(n):
        for j in range(n):
            v = sum(a[h, i, j] * vecs[h, j] for h in range(H)) + (add[i] if i == j else 0)
            assert abs(got[i, j] - float(v.norm()) / float(scale[i])) < 1e-12


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_distribute_norm_sums_to_the_real_norm(kind):
    g = torch.Generator().manual_seed(1)
    n, d = 4, 6
    parts = torch.randn(n, n, d, generator=g, dtype=torch.float64)
    rem = torch.randn(n, d, generator=g, dtype=torch.float64)
    nrm = Norm(kind, torch.randn(d, generator=g, dtype=torch.float64),
               torch.randn(d, generator=g, dtype=torch.float64) if kind == "layernorm" else None, 1e-5)
    real = parts.sum(1) + rem
    p, r = linear.distribute_norm(parts, rem, nrm, real)
    if kind == "layernorm":
        ref = torch.nn.functional.layer_norm(real, (d,), nrm.weight, nrm.bias, nrm.eps)
    else:
        ref = real * torch.rsqrt(real.pow(2).mean(-1, keepdim=True) + nrm.eps) * nrm.weight
    assert torch.allclose(p.sum(1) + r, ref, atol=1e-12)
    for i in range(n):
        for j in range(n):
            assert torch.allclose(p[i, j], _ln_plain(parts[i, j], nrm, real[i]), atol=1e-12)
    # packed rows: the same values
    rows = torch.arange(n).repeat_interleave(n)
    packed = linear.distribute(parts.reshape(n * n, d), nrm, linear.norm_scale(real, nrm), rows=rows)
    assert torch.allclose(packed.reshape(n, n, d), p, atol=1e-14)


@pytest.mark.parametrize("steps", [1, 3, 8])
def test_quadrature_exact_for_polynomials(steps):
    t, w = linear.quadrature(steps, "gauss")
    assert abs(float(w.sum()) - 1) < 1e-14
    for k in range(2 * steps):  # Gauss-Legendre: exact up to degree 2·steps - 1
        assert abs(float((w * t ** k).sum()) - 1 / (k + 1)) < 1e-13
    t, w = linear.quadrature(steps, "midpoint")
    assert np.allclose(t.numpy(), (np.arange(steps) + 0.5) / steps) and np.allclose(w.numpy(), 1 / steps)
    with pytest.raises(ValueError):
        linear.quadrature(0)
    with pytest.raises(ValueError):
        linear.quadrature(4, "simpson")


def test_mixing_ratio_of_against_loops():
    g = torch.Generator().manual_seed(2)
    V = torch.randn(5, 5, 3, generator=g, dtype=torch.float64)
    np.testing.assert_allclose(linear.mixing_ratio_of(V), _ratio_plain(V), atol=1e-14)


# ------------------------------------------------------------------ the norm-based maps
@pytest.mark.parametrize("family", FAMS)
def test_norm_maps_against_explicit_vectors(tr64, family):
    tr = tr64(family)
    vn = value_norm.compute(tr)
    ar = attn_res.compute(tr)
    arl = attn_res_ln.compute(tr)
    ge = globenc.compute(tr)
    mx = mixing_ratios(tr)
    post = tr.placement == "post"
    for l in range(tr.n_layers):
        r = tr.layers[l]
        w = tr.weights[l]
        a = r.probs.double()
        f = _f_plain(tr, l)
        H, n, _ = a.shape
        # value norm: per head ||α f||, per layer ||Σ_h α f||
        for i in range(n):
            for j in range(n):
                vs = [a[h, i, j] * f[h][j] for h in range(H)]
                for h in range(H):
                    assert abs(vn.heads[l, h, i, j] - float(vs[h].norm())) < 1e-10
                assert abs(vn.layer[l, i, j] - float(sum(vs).norm())) < 1e-10
        z = _z_plain(tr, l)
        np.testing.assert_allclose(ar.layer[l], _norms(z), atol=1e-10)
        if post:
            g1 = torch.stack([_ln_plain(z[i], w.norm1, r.resid_attn[i].double()) for i in range(n)])
            np.testing.assert_allclose(arl.layer[l], _norms(g1), atol=1e-10)
            g2 = torch.stack([_ln_plain(g1[i], w.norm2, r.resid_ffn[i].double()) for i in range(n)])
            np.testing.assert_allclose(ge.meta["per_layer"][l], _norms(g2), atol=1e-10)
        else:
            np.testing.assert_allclose(arl.layer[l], _norms(z), atol=1e-10)
            np.testing.assert_allclose(ge.meta["per_layer"][l], _norms(z), atol=1e-10)
        # mixing ratios written out from the explicit vectors (attention part: z without x on the diagonal)
        za = z.clone()
        for i in range(n):
            za[i, i] -= r.resid_in[i].double()
        np.testing.assert_allclose(mx["Attn-N"][l], _ratio_plain(za), atol=1e-10)
        np.testing.assert_allclose(mx["AttnRes-N"][l], _ratio_plain(z), atol=1e-10)
        if post:
            np.testing.assert_allclose(mx["AttnResLn-N"][l], _ratio_plain(g1), atol=1e-10)


# ------------------------------------------------------------------ ATBFF: fused pass against pair-by-pair IG
def _ffn_parts_plain(tr, l, steps):
    """F_ij for every pair, one pair and one quadrature node at a time: the FFN as a function of
    the inputs x_j = t·u_ij (j = 1..n) plus the fixed remainder, its gradient by autograd at each node,
    the path integral of ∂FFN/∂(input) · u_ij (integrated gradients, zero baseline)."""
    w = tr.weights[l].to(torch.float64)
    r = tr.layers[l]
    n = len(tr.tokens)
    post = w.placement == "post"
    nrm = w.norm1 if post else w.norm2
    z = _z_plain(tr, l)
    real = r.resid_attn.double()
    u = torch.stack([_ln_plain(z[i], nrm, real[i]) for i in range(n)])  # [n, n, d]
    bo = torch.zeros(z.shape[-1], dtype=torch.float64) if w.bo is None else w.bo
    ur = torch.stack([_ln_plain(bo, nrm, real[i]) for i in range(n)])
    if nrm.bias is not None:
        ur = ur + nrm.bias
    act = w.activation()

    def hidden(x):  # FFN hidden layer (before W2) of one input vector
        pre = x @ w.w1 + (0 if w.b1 is None else w.b1)
        return act(x @ w.w_gate) * pre if w.w_gate is not None else act(pre)

    x_nodes, wts = np.polynomial.legendre.leggauss(steps)
    t_nodes, wts = (x_nodes + 1) / 2, wts / 2
    F = torch.zeros(n, n, w.w2.shape[1], dtype=torch.float64)
    for i in range(n):
        usum = u[i].sum(0)
        for t, wk in zip(t_nodes, wts):
            with torch.enable_grad():
                x = (ur[i] + float(t) * usum).detach().requires_grad_(True)
                Jt = torch.autograd.functional.jacobian(hidden, x, vectorize=True)  # [I, d]
            for j in range(n):
                F[i, j] += float(wk) * (Jt @ u[i, j]) @ w.w2
    return F, u, ur


@pytest.mark.parametrize("factor", [True, False])  # the first products from v_j K_h, or from f^h(x_j)
@pytest.mark.parametrize("family", ["bert", "distilbert", "gpt2", "llama"])
def test_atb_ff_fused_against_pair_by_pair(tr64, family, factor, monkeypatch):
    tr = tr64(family)
    tr.forget("atb_ff")
    steps = 4
    monkeypatch.setattr(atb_ff, "_CHUNK_BYTES", 1)  # one receiver a chunk: exercises the chunks and causal trimming
    monkeypatch.setattr(atb_ff, "_FACTOR_VALUES", factor)
    res = atb_ff.analyse(tr, steps)
    for l in range(tr.n_layers):
        w = tr.weights[l]
        r = tr.layers[l]
        n = len(tr.tokens)
        F, u, _ = _ffn_parts_plain(tr, l, steps)
        np.testing.assert_allclose(res["maps"]["atb_ff"].layer[l], _norms(F), atol=1e-9, rtol=1e-9)
        np.testing.assert_allclose(res["ratios"]["AtbFf-N"][l], _ratio_plain(F), atol=1e-9)
        if w.placement == "post":
            A = u  # the LN1 parts
            R = A + F
            P = torch.stack([_ln_plain(R[i], w.norm2, r.resid_ffn[i].double()) for i in range(n)])
            np.testing.assert_allclose(res["maps"]["atb_ff_res_ln"].layer[l], _norms(P), atol=1e-9, rtol=1e-9)
            np.testing.assert_allclose(res["ratios"]["AtbFfResLn-N"][l], _ratio_plain(P), atol=1e-9)
        else:
            R = _z_plain(tr, l) + F
        np.testing.assert_allclose(res["maps"]["atb_ff_res"].layer[l], _norms(R), atol=1e-9, rtol=1e-9)
        np.testing.assert_allclose(res["ratios"]["AtbFfRes-N"][l], _ratio_plain(R), atol=1e-9)
        if w.causal:  # the skipped sources are exactly zero
            assert not res["maps"]["atb_ff"].layer[l][np.triu_indices(n, 1)].any()


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_atb_ff_fused_equals_explicit_parts(tr64, family, monkeypatch):
    """The fused pass (several chunk sizes) gives the maps, ratios and completeness that the explicit
    [n, n, d] parts give."""
    tr = tr64(family)
    ref = {}
    for l in range(tr.n_layers):
        for k, (P, rem, real) in atb_ff.layer_parts(tr, l, 8).items():
            ref.setdefault(k, []).append((P, rem, real))
    tr.forget("atb_ff")
    for chunk in (1, 3000, 10 ** 9):
        monkeypatch.setattr(atb_ff, "_CHUNK_BYTES", chunk)
        tr.forget("atb_ff")
        res = atb_ff.analyse(tr, 8)
        for k in atb_ff.NAMES:
            for l, (P, rem, real) in enumerate(ref[k]):
                np.testing.assert_allclose(res["maps"][k].layer[l], P.norm(dim=-1).numpy(), atol=1e-12)
                np.testing.assert_allclose(res["ratios"][atb_ff.RATIO_NAMES[k]][l], _ratio_plain(P), atol=1e-12)
                err = float(((P.sum(1) + rem - real).norm(dim=-1) / real.norm(dim=-1)).max())
                assert abs(res["maps"][k].completeness.errors[l] - err) < 1e-12


# ------------------------------------------------------------------ ALTI: chunked scores against the full vectors
@pytest.mark.parametrize("family", FAMS)
def test_alti_chunked_against_full_vectors(tr64, family, monkeypatch):
    from attnviz.methods import alti

    tr = tr64(family)
    n = len(tr.tokens)
    for chunk in (1, 10 ** 9):
        monkeypatch.setattr(alti, "_CHUNK_BYTES", chunk)
        for l in range(tr.n_layers):
            C, err = alti.layer_scores(tr, l)
            # plain: every T_i(x_j) written out, the L1 distances and the clipping as in the paper
            z = _z_plain(tr, l)
            r, w = tr.layers[l], tr.weights[l]
            bo = torch.zeros(z.shape[-1], dtype=torch.float64) if w.bo is None else w.bo.double()
            if tr.placement == "post":
                T = torch.stack([_ln_plain(z[i], w.norm1, r.resid_attn[i].double()) for i in range(n)])
                rem = torch.stack([_ln_plain(bo, w.norm1, r.resid_attn[i].double()) for i in range(n)])
                rem = rem + w.norm1.bias.double()
            else:
                T, rem = z, bo.expand(n, -1)
            y = T.sum(1) + rem
            ref = np.zeros((n, n))
            for i in range(n):
                for j in range(n):
                    if T[i, j].abs().sum() > 0:
                        ref[i, j] = max(0.0, float(y[i].abs().sum() - (y[i] - T[i, j]).abs().sum()))
                if ref[i].sum() > 0:  # a row with no positive contribution stays zero
                    ref[i] /= ref[i].sum()
            np.testing.assert_allclose(C, ref, atol=1e-12)
            assert abs(err - alti.layer_contributions(tr, l)[1]) < 1e-12


# ------------------------------------------------------------------ per-head vectors of a long text
@pytest.mark.parametrize("family", ["bert", "llama"])
def test_head_vectors_recomputed_above_the_memory_limit(tokenizer, family, monkeypatch):
    """Above ATTNVIZ_FX_KEEP_MB a trace keeps no per-head vectors f^h(x_j) and computes a layer's when
    asked: they equal the plain formula (v^h_j W_O^h head by head), and every map and ratio that
    reads them equals the one from a trace that keeps them."""
    import attnviz.trace as T
    from attnviz.methods import alti, decompx

    lm = _model(tokenizer, family, scale=6.0)
    kept = trace(lm, TEXT, dtype=torch.float64)
    monkeypatch.setattr(T, "FX_KEEP_BYTES", 0)
    lazy = trace(lm, TEXT, dtype=torch.float64)
    assert kept.fx.kept and not lazy.fx.kept and len(lazy.fx) == len(kept.fx) == lm.n_layers
    for l in range(lm.n_layers):
        ref = torch.stack([torch.stack(row) for row in _f_plain(lazy, l)])
        torch.testing.assert_close(lazy.fx[l].double(), ref, rtol=1e-12, atol=1e-12)
    assert len(lazy.fx[1:]) == lm.n_layers - 1
    for m in (value_norm, attn_res, attn_res_ln, globenc, alti, decompx):
        a, b = m.compute(kept), m.compute(lazy)
        np.testing.assert_array_equal(a.layer, b.layer)
    ra, rb = mixing_ratios(kept), mixing_ratios(lazy)
    for k in ra:
        np.testing.assert_array_equal(ra[k], rb[k])


def test_chain_and_chunk_budget_on_the_cpu():
    """chain (numpy, or a CPU tensor) is the product C_l ... C_1 written as a loop; on the CPU a chunk's
    byte budget is each method's own figure."""
    from attnviz.methods.base import chain
    rng = np.random.default_rng(0)
    C = rng.random((4, 5, 5))
    ref, R = [], np.eye(5)
    for l in range(4):
        R = C[l] @ R
        ref.append(R)
    np.testing.assert_allclose(chain(C), np.stack(ref), rtol=1e-13)
    np.testing.assert_allclose(chain(torch.from_numpy(C)), np.stack(ref), rtol=1e-13)
    assert linear.chunk_bytes("cpu", 12345) == 12345
