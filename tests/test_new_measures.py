"""ALTI, value zeroing, GlobEnc and DecompX: each against a plain written-out formula (loops over
tokens and heads, weights read from the Hugging Face modules) on tiny float64 models, and against the
model's own outputs where the decomposition is exact (ALTI's transformed vectors sum to the attention
block's output, value zeroing equals the model rerun with token j's values zeroed, DecompX's parts sum
to every layer's output). The comparison with the authors' released code is scripts/compare_authors.py
(it needs their repositories, so it is not a test)."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import math

import numpy as np
import pytest
import torch

from attnviz.methods import METHODS, alti, decompx, globenc, value_zeroing
from attnviz.models.forward import layer_forward, rope_for
from attnviz.models.load import wrap
from attnviz.trace import encode, trace

from conftest import FAMILIES, SENTENCE, tiny_configs

NEW = ("alti", "value_zeroing", "globenc", "decompx")


def _tol(lm, exact=1e-10, rotary=1e-6):
    """Float64 models with rotary embeddings carry ~1e-7 (relative) of rounding in the model's own
    forward (its cos/sin are computed in float32); the others agree to float64 precision."""
    return rotary if lm.arch.rotary is not None else exact


def _model(tokenizer, name, seed=0, scale=8.0):
    """A tiny random float64 model with random biases and norm parameters (so every bias and β is
    exercised) and its FFN first layers ×scale (so the activations are far from linear)."""
    cls, cfg = tiny_configs(tokenizer.vocab_size)[name]
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation="eager").double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1 and "embed" not in pname.lower():
                p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            if any(k in pname for k in ("intermediate.dense.weight", "lin1.weight", "c_fc.weight",
                                        "up_proj.weight", "gate_proj.weight")):
                p.mul_(scale)
    return wrap(model, tokenizer, spec=f"tiny64:{name}")


@pytest.fixture(scope="module")
def tiny64(tokenizer):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _model(tokenizer, name)
        return cache[name]

    return get


def _hf(lm, text=SENTENCE, hooks=()):
    """The model's own forward: (hidden states [L+1] of [n,d], attentions [L] of [H,n,n]) in float64."""
    enc = encode(lm, text)
    handles = [m.register_forward_hook(f) for m, f in hooks]
    try:
        with torch.no_grad():
            out = lm.model(input_ids=enc.ids, output_hidden_states=True, output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    return [h[0].double() for h in out.hidden_states], [a[0].double() for a in out.attentions]


def _setup(lm):
    """-> (the model's hidden states, attentions, query heads, KV heads, post-LN?)."""
    hs, att = _hf(lm)
    cfg = lm.model.config
    H = cfg.num_attention_heads
    return hs, att, H, getattr(cfg, "num_key_value_heads", None) or H, lm.arch.placement == "post"


def _layers(lm):
    base = lm.model.base_model
    if hasattr(base, "encoder"):
        return list(base.encoder.layer)
    if hasattr(base, "transformer"):
        return list(base.transformer.layer)
    if hasattr(base, "h"):
        return list(base.h)
    return list(base.layers)


def _W(lin):
    return lin.weight.detach().double().t().numpy(), (None if lin.bias is None else lin.bias.detach().double().numpy())


def _bert_parts(lay):
    a = lay.attention
    return dict(v=_W(a.self.value), o=_W(a.output.dense), ln1=a.output.LayerNorm, ln2=lay.output.LayerNorm,
                w1=_W(lay.intermediate.dense), w2=_W(lay.output.dense))


def _llama_parts(lay):
    return dict(v=_W(lay.self_attn.v_proj), o=_W(lay.self_attn.o_proj), n1=lay.input_layernorm,
                n2=lay.post_attention_layernorm, wg=_W(lay.mlp.gate_proj), w1=_W(lay.mlp.up_proj),
                w2=_W(lay.mlp.down_proj))


def _ln(mod, v, stats_of):
    """LayerNorm `mod` applied to v [d] with the statistics of stats_of [d]: (γ (v - mean v) / s, β)."""
    s = math.sqrt(np.var(stats_of) + mod.eps)
    g = mod.weight.detach().double().numpy()
    b = mod.bias.detach().double().numpy()
    return g * (v - v.mean()) / s, b


def _rms(mod, v, stats_of):
    s = math.sqrt(np.mean(stats_of ** 2) + mod.variance_epsilon)
    return mod.weight.detach().double().numpy() * v / s


def _gelu(x):
    from scipy.special import erf
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _silu(x):
    return x / (1 + np.exp(-x))


def _per_head_f(v, o, x_j, H, Hkv):
    """[H] list of f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h (value heads repeated for GQA)."""
    (Wv, bv), (Wo, _) = v, o
    dh = Wo.shape[0] // H
    val = x_j @ Wv + (0 if bv is None else bv)
    out = []
    for h in range(H):
        kv = h // (H // Hkv)
        out.append(val[kv * dh:(kv + 1) * dh] @ Wo[h * dh:(h + 1) * dh])
    return out


# ------------------------------------------------------------------------------------------ ALTI
def _alti_plain(lm):
    hs, att, H, Hkv, post = _setup(lm)
    per = []
    for l, lay in enumerate(_layers(lm)):
        x = hs[l].numpy()
        a = att[l].numpy()
        n, d = x.shape
        p = _bert_parts(lay) if post else _llama_parts(lay)
        src = x if post else np.stack([_rms(p["n1"], x[j], x[j]) for j in range(n)])
        f = [_per_head_f(p["v"], p["o"], src[j], H, Hkv) for j in range(n)]
        bo = p["o"][1] if p["o"][1] is not None else np.zeros(d)
        z = np.zeros((n, n, d))
        for i in range(n):
            for j in range(n):
                z[i, j] = sum(a[h, i, j] * f[j][h] for h in range(H)) + (x[i] if i == j else 0)
        C = np.zeros((n, n))
        for i in range(n):
            pre = z[i].sum(0) + bo
            if post:
                T = [_ln(p["ln1"], z[i, j], pre)[0] for j in range(n)]
                gb, beta = _ln(p["ln1"], bo, pre)
                y = sum(T) + gb + beta
            else:
                T = list(z[i])
                y = pre
            for j in range(n):
                C[i, j] = max(0.0, np.abs(y).sum() - np.abs(y - T[j]).sum())
            C[i] /= C[i].sum()
        per.append(C)
    R = [per[0]]
    for C in per[1:]:
        R.append(C @ R[-1])
    return np.stack(per), np.stack(R)


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_alti_plain_formula(tiny64, family):
    lm = tiny64(family)
    m = alti.compute(trace(lm, SENTENCE, dtype=torch.float64))
    per, R = _alti_plain(lm)
    tol = _tol(lm, 1e-10, 1e-7)
    np.testing.assert_allclose(m.meta["per_layer"], per, atol=tol)
    np.testing.assert_allclose(m.layer, R, atol=tol)
    np.testing.assert_allclose(m.layer.sum(-1), 1.0, atol=1e-12)


@pytest.mark.parametrize("family", ["bert", "distilbert", "gpt2", "llama", "qwen2"])
def test_alti_transformed_vectors_sum_to_attention_block_output(tiny64, family):
    """Σ_j T_i(x_j) + bias_i = the model's own attention-block output: the LN1 output (post-LN),
    the residual stream after attention (pre-LN), captured from the Hugging Face modules."""
    lm = tiny64(family)
    lays = _layers(lm)
    got = {}

    def keep(l, pre):
        def hook(mod, inp, out):
            o = out[0] if isinstance(out, tuple) else out
            got[l] = o[0].double()
        return hook

    if family == "bert":
        hooks = [(lay.attention.output, keep(l, False)) for l, lay in enumerate(lays)]
    elif family == "distilbert":
        hooks = [(lay.sa_layer_norm, keep(l, False)) for l, lay in enumerate(lays)]
    elif family == "gpt2":
        hooks = [(lay.attn, keep(l, True)) for l, lay in enumerate(lays)]
    else:
        hooks = [(lay.self_attn, keep(l, True)) for l, lay in enumerate(lays)]
    hs, _ = _hf(lm, hooks=hooks)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    for l in range(tr.n_layers):
        C, err, T, y = alti.layer_contributions(tr, l)
        real = got[l] if lm.arch.placement == "post" else hs[l] + got[l]
        assert float((y - real).abs().max() / real.abs().max()) < _tol(lm)
        assert err < 1e-10  # against the engine's recomputed layer


# --------------------------------------------------------------------------------- value zeroing
def _value_module(lm, lay):
    base = lay.attention.self.value if hasattr(lay, "attention") else lay.self_attn.v_proj
    return base


@pytest.mark.parametrize("family", ["bert", "llama", "qwen2"])
def test_value_zeroing_against_model_rerun(tiny64, family):
    """The model's own forward with token j's value vectors zeroed at layer l (a hook on its value
    projection, as the authors' modified BertSelfAttention does): 1 - cos of hidden_states[l+1]."""
    lm = tiny64(family)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    hs, _ = _hf(lm)
    lays = _layers(lm)
    n = len(tr.tokens)
    # pre-LN: hidden_states[L] has the final norm applied, so only the layers before the last
    L = tr.n_layers if lm.arch.placement == "post" else tr.n_layers - 1
    for l in range(L):
        ours = value_zeroing.layer_scores(tr, l)
        ref = np.zeros((n, n))
        for j in range(n):
            def zero(mod, inp, out, j=j):
                out = out.clone()
                out[:, j] = 0
                return out
            h2, _ = _hf(lm, hooks=[(_value_module(lm, lays[l]), zero)])
            a, b = h2[l + 1].numpy(), hs[l + 1].numpy()
            ref[:, j] = 1 - (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
        np.testing.assert_allclose(ours, ref, atol=_tol(lm, 1e-10, 1e-7))
        if lm.arch.causal:
            assert np.all(np.triu(ours, 1) == 0)


@pytest.mark.parametrize("family", ["gpt2", "distilbert"])
def test_value_zeroing_against_layer_forward_with_column_zeroed(tiny64, family):
    """The same scores from the engine's own layer_forward rerun with attention column j set to 0
    (that is what zeroing v_j in every head does to the attention output)."""
    lm = tiny64(family)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    n = len(tr.tokens)
    for l in range(tr.n_layers):
        w, r = tr.weights[l], tr.layers[l]
        x = r.resid_in.unsqueeze(0).expand(n, -1, -1)
        keep = 1 - torch.eye(n, dtype=torch.float64)  # batch b zeroes column b
        out = layer_forward(w, x, rope=rope_for(lm.arch, x), attn_override=lambda p: p * keep[:, None, None, :]).resid_out
        orig = r.resid_out
        ref = 1 - torch.nn.functional.cosine_similarity(out, orig.unsqueeze(0), dim=-1)  # [j, i]
        np.testing.assert_allclose(value_zeroing.layer_scores(tr, l), ref.t().numpy(), atol=1e-10)


def test_value_zeroing_rows_and_rollout(tiny64):
    tr = trace(tiny64("bert"), SENTENCE, dtype=torch.float64)
    m = value_zeroing.compute(tr)
    per = m.meta["per_layer"]
    np.testing.assert_allclose(per.sum(-1), 1.0, atol=1e-12)
    S = [value_zeroing.layer_scores(tr, l) for l in range(tr.n_layers)]
    np.testing.assert_allclose(per, np.stack([s / s.sum(-1, keepdims=True) for s in S]), atol=1e-12)
    np.testing.assert_allclose(m.layer[1], per[1] @ per[0], atol=1e-12)


# --------------------------------------------------------------------------------------- GlobEnc
@pytest.mark.parametrize("family", ["bert", "llama"])
def test_globenc_plain_formula(tiny64, family):
    lm = tiny64(family)
    hs, att, H, Hkv, post = _setup(lm)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    per = []
    for l, lay in enumerate(_layers(lm)):
        x, a = hs[l].numpy(), att[l].numpy()
        n, d = x.shape
        p = _bert_parts(lay) if post else _llama_parts(lay)
        src = x if post else np.stack([_rms(p["n1"], x[j], x[j]) for j in range(n)])
        f = [_per_head_f(p["v"], p["o"], src[j], H, Hkv) for j in range(n)]
        N = np.zeros((n, n))
        pre2 = tr.layers[l].resid_ffn.numpy()
        for i in range(n):
            z = [sum(a[h, i, j] * f[j][h] for h in range(H)) + (x[i] if i == j else 0) for j in range(n)]
            if post:
                pre1 = sum(z) + p["o"][1]
                for j in range(n):
                    t = _ln(p["ln1"], z[j], pre1)[0]
                    N[i, j] = np.linalg.norm(_ln(p["ln2"], t, pre2[i])[0])
            else:
                N[i] = [np.linalg.norm(v) for v in z]
        per.append(N)
    m = globenc.compute(tr)
    np.testing.assert_allclose(m.meta["per_layer"], np.stack(per), rtol=_tol(lm, 1e-10, 1e-6), atol=1e-12)
    raw = per[0]
    for l in range(len(per)):
        raw = per[0] if l == 0 else per[l] @ raw
        np.testing.assert_allclose(np.exp(m.meta["log_row_sum"][l])[:, None] * m.layer[l], raw, rtol=_tol(lm, 1e-9, 1e-6))
        np.testing.assert_allclose(m.layer[l], raw / raw.sum(-1, keepdims=True), atol=_tol(lm, 1e-12, 1e-7))


# --------------------------------------------------------------------------------------- DecompX
def _absdot(parts, b):
    w = np.array([abs(p @ b) for p in parts])
    w = w / (w.sum() + 1e-12)
    return [p + wk * b for p, wk in zip(parts, w)]


def _decompx_plain(lm):
    """DecompX written out per receiver i and input token k (lists of vectors), from the HF modules."""
    hs, att, H, Hkv, post = _setup(lm)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    E = None
    norms = []
    for l, lay in enumerate(_layers(lm)):
        x, a = hs[l].numpy(), att[l].numpy()
        n, d = x.shape
        st = tr.layers[l]
        r = SimpleNamespace(**{f.name: (None if getattr(st, f.name) is None else getattr(st, f.name).numpy())
                               for f in dataclasses.fields(st)})
        p = _bert_parts(lay) if post else _llama_parts(lay)
        (Wv, bv), (Wo, bo) = p["v"], p["o"]
        dh = Wo.shape[0] // H
        bo = np.zeros(d) if bo is None else bo
        new = []
        for i in range(n):
            if E is None:
                src = x if post else np.stack([_rms(p["n1"], x[j], x[j]) for j in range(n)])
                f = [_per_head_f(p["v"], p["o"], src[k], H, Hkv) for k in range(n)]
                A = [sum(a[h, i, k] * f[k][h] for h in range(H)) + (x[i] if i == k else 0) for k in range(n)]
                bias = bo
            else:
                A = []
                for k in range(n):
                    v = np.zeros(d)
                    for j in range(n):
                        e = E[j][k] if post else _rms(p["n1"], E[j][k], x[j])
                        val = e @ Wv
                        for h in range(H):
                            kv = h // (H // Hkv)
                            v += a[h, i, j] * (val[kv * dh:(kv + 1) * dh] @ Wo[h * dh:(h + 1) * dh])
                    A.append(v + E[i][k])
                bv_full = np.zeros(H * dh) if bv is None else np.concatenate([bv[(h // (H // Hkv)) * dh:(h // (H // Hkv) + 1) * dh] for h in range(H)])
                bias = bv_full @ Wo + bo
            A = _absdot(A, bias)
            if post:
                P = []
                for k in range(n):
                    t, beta = _ln(p["ln1"], A[k], r.resid_attn[i])
                    P.append(t)
                P = _absdot(P, beta)
                (W1, b1), (W2, b2) = p["w1"], p["w2"]
                z = r.ffn_in[i] @ W1 + b1
                F1 = _absdot([q @ W1 for q in P], b1)
                F2 = _absdot([(q * _gelu(z) / (z + 1e-12)) @ W2 for q in F1], b2)
                R2 = [q + f2 for q, f2 in zip(P, F2)]
                out = []
                for k in range(n):
                    t, beta = _ln(p["ln2"], R2[k], r.resid_ffn[i])
                    out.append(t)
                out = _absdot(out, beta)
            else:
                U = [_rms(p["n2"], q, r.resid_attn[i]) for q in A]
                (Wg, _), (W1, _), (W2, _) = p["wg"], p["w1"], p["w2"]
                g, u = r.ffn_in[i] @ Wg, r.ffn_in[i] @ W1
                out = [q + (0.5 * (_silu(g) * (uk @ W1) + _silu(g) / (g + 1e-12) * u * (uk @ Wg))) @ W2
                       for q, uk in zip(A, U)]
            new.append(out)
        E = new
        norms.append(np.array([[np.linalg.norm(E[i][k]) for k in range(n)] for i in range(n)]))
    return np.stack(norms)


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_decompx_plain_formula(tiny64, family):
    lm = tiny64(family)
    m = decompx.compute(trace(lm, SENTENCE, dtype=torch.float64))
    np.testing.assert_allclose(m.layer, _decompx_plain(lm), rtol=_tol(lm, 1e-9, 1e-6), atol=1e-10)


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_decompx_ffn_in_receiver_chunks_equals_plain_formula(tiny64, family, monkeypatch):
    """The FFN's [pairs, I] products in chunks of one receiver each (the chunking large inputs and GPUs
    use) give the plain formula's maps; the chunks cover every pair once, in order."""
    lm = tiny64(family)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    n = len(tr.tokens)
    pairs = decompx.Pairs(n, lm.arch.causal)
    blocks = pairs.blocks(1)
    assert len(blocks) == n and blocks[0][2] == 0 and blocks[-1][3] == len(pairs.rows)
    assert all(a[3] == b[2] and a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert len(pairs.blocks(3 * n)) < n  # several receivers per chunk when they fit
    monkeypatch.setattr(decompx, "_CHUNK_BYTES", 1)
    m = decompx.compute(tr)
    np.testing.assert_allclose(m.layer, _decompx_plain(lm), rtol=_tol(lm, 1e-9, 1e-6), atol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
def test_decompx_parts_sum_to_model_output(tiny64, family):
    """Σ_k E^l_ik = the model's own hidden_states[l+1] at every layer (pre-LN last layer: its output
    before the final norm, checked through the final norm against the model's last hidden state)."""
    lm = tiny64(family)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    hs, _ = _hf(lm)
    n = len(tr.tokens)
    pairs = decompx.Pairs(n, lm.arch.causal)
    full = decompx.Pairs(n, False)
    E = E_full = None
    for l in range(tr.n_layers):
        E = decompx.layer_step(tr, l, E, pairs)
        tot = pairs.sum_rows(E)
        if lm.arch.placement == "pre" and l == tr.n_layers - 1:
            from attnviz.models.forward import apply_norm
            tot = apply_norm(tot, lm.arch.final_norm.__class__(lm.arch.final_norm.kind,
                             lm.arch.final_norm.weight.double(),
                             None if lm.arch.final_norm.bias is None else lm.arch.final_norm.bias.double(),
                             lm.arch.final_norm.eps))
        assert float((tot - hs[l + 1]).abs().max() / hs[l + 1].abs().max()) < _tol(lm, 1e-9, 1e-6), (family, l)
        if lm.arch.causal:  # the packed causal pairs equal the full computation, whose k > i parts are 0
            E_full = decompx.layer_step(tr, l, E_full, full)
            D = full.dense(E_full)
            assert float(D[torch.triu(torch.ones(n, n), 1).bool()].abs().max()) == 0
            np.testing.assert_allclose(pairs.dense(E).numpy(), D.numpy(), atol=1e-12)
    assert decompx.compute(tr).completeness.worst < _tol(lm, 1e-9, 1e-6)


def test_absdot_splits_the_whole_bias():
    g = torch.Generator().manual_seed(0)
    parts = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    b = torch.randn(7, generator=g, dtype=torch.float64)
    out = decompx.absdot(parts, b)
    np.testing.assert_allclose((out - parts).sum(1).numpy(), np.tile(b.numpy(), (3, 1)), atol=1e-10)
    w = (out - parts)[..., 0] / b[0]
    ref = torch.einsum("ikd,d->ik", parts, b).abs()
    np.testing.assert_allclose(w.numpy(), (ref / ref.sum(-1, keepdim=True)).numpy(), atol=1e-10)


# ------------------------------------------------------------------------------ real models, registry
def test_real_models_exact_parts(minilm):
    """MiniLM (float32 trace): ALTI's vectors and DecompX's parts reproduce the real outputs."""
    tr = trace(minilm, SENTENCE)
    assert alti.compute(tr).completeness.worst < 1e-5
    assert decompx.compute(tr).completeness.worst < 1e-4


@pytest.mark.parametrize("family", ["bert", "gpt2", "mistral"])
def test_registry_and_analyze(make_tiny, family):
    from attnviz.analysis import analyze

    lm = make_tiny(family)
    res = analyze(lm, SENTENCE, methods=list(NEW), mixing=False)
    n = len(encode(lm, SENTENCE).tokens)
    for name in NEW:
        info = METHODS[name]
        assert info.name == name and info.decomposition and not info.per_head
        m = res.maps[name]
        assert m.name == name and m.layer.shape == (lm.arch and len(lm.arch.layers), n, n)
        assert np.isfinite(m.layer).all() and (m.layer >= 0).all()
        if info.rows_sum_to_one:
            np.testing.assert_allclose(m.layer.sum(-1), 1.0, atol=1e-9)
        if lm.arch.causal:
            assert np.all(np.triu(m.layer, 1) == 0)
        if lm.arch.placement == "pre":
            assert "pre-LN" in m.meta.get("note", "")
