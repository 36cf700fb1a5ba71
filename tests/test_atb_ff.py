"""ATBFFRESLN (Kobayashi et al. 2024): completeness against the model's real layer outputs on every
family and MiniLM, integrated gradients against closed forms and against an autograd Jacobian of the
Hugging Face MLP module, maps and ratios against plain loops."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers.activations import ACT2FN

import attnviz
from attnviz.methods import METHODS, atb_ff, attn_res_ln
from attnviz.models.load import wrap
from attnviz.trace import encode, trace

from conftest import FAMILIES, SENTENCE, tiny_configs

POST = ["bert", "bert-cls", "bert-base", "roberta", "electra", "distilbert"]
PRE = ["gpt2", "llama", "mistral", "qwen2"]
LONG = ("the old farmer who lives near the river sold three of his cows to the baker , "
        "and the children watched them walk slowly down the dusty road .")


def _mlp_modules(model, family):
    """-> list of (first-linear modules to amplify, mlp function x -> FFN output incl. b2) per layer."""
    base = model.base_model
    out = []
    if family in ("bert", "roberta", "electra"):
        for lay in base.encoder.layer:
            out.append(([lay.intermediate.dense], (lambda lay: lambda x: lay.output.dense(lay.intermediate(x)))(lay)))
    elif family == "distilbert":
        for lay in base.transformer.layer:
            f = lay.ffn
            out.append(([f.lin1], (lambda f: lambda x: f.lin2(f.activation(f.lin1(x))))(f)))
    elif family == "gpt2":
        for b in base.h:
            out.append(([b.mlp.c_fc], b.mlp))
    else:
        for lay in base.layers:
            out.append(([lay.mlp.up_proj, lay.mlp.gate_proj], lay.mlp))
    return out


def _model(tokenizer, name, scale=1.0, double=True, act=None, seed=0):
    """A tiny random model (float64), its FFN first layers multiplied by `scale` so that the
    pre-activations reach the activation's curved region."""
    cls, cfg = tiny_configs(tokenizer.vocab_size)[name]
    if act is not None:
        key = "activation" if name == "distilbert" else ("activation_function" if name == "gpt2" else "hidden_act")
        setattr(cfg, key, act)
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation="eager")
    if double:
        model = model.double()
    with torch.no_grad():
        for firsts, _ in _mlp_modules(model, cfg.model_type):
            for m in firsts:
                m.weight.mul_(scale)
    return wrap(model, tokenizer, spec=f"tiny:{name}:x{scale}")


def _real_outputs(lm, text):
    """The model's own hidden states [L+1] (batch removed)."""
    enc = encode(lm, text)
    with torch.no_grad():
        out = lm.model(input_ids=enc.ids, output_hidden_states=True)
    return [h[0].double() for h in out.hidden_states]


def _final_norm(lm, x):
    fn = lm.arch.final_norm
    if fn.kind == "layernorm":
        return torch.nn.functional.layer_norm(x, x.shape[-1:], fn.weight.double(), fn.bias.double(), fn.eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + fn.eps) * fn.weight.double()


# ------------------------------------------------------------------ completeness on every family
@pytest.mark.parametrize("family", FAMILIES)
def test_completeness_against_model_output(tokenizer, family):
    """Σ_j parts_ij + remainder_i of ATBFFRESLN reproduces the model's own layer output (float64
    model, pre-activations amplified ×20 so integrated gradients has real work to do)."""
    lm = _model(tokenizer, family, scale=20.0)
    assert lm.check.ok, lm.check.reason
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    hs = _real_outputs(lm, SENTENCE)
    L = tr.n_layers
    pre_act_max = max(float(r.ffn_pre.abs().max()) for r in tr.layers)
    assert pre_act_max > 3.0  # the non-linearity is exercised
    for l in range(L):
        sc = atb_ff.layer_parts(tr, l)
        P, rem, _ = sc["atb_ff_res_ln"]
        total = P.sum(1) + rem
        if l == L - 1 and lm.arch.final_norm is not None:
            total = _final_norm(lm, total)
        real = hs[l + 1]
        err = float(((total - real).norm(dim=-1) / real.norm(dim=-1)).max())
        assert err < 1e-6, (family, l, err)
        # the FFN scope alone against the real FFN output: model's pre-norm stream difference
        F, rF, _ = sc["atb_ff"]
        ffn_real = tr.layers[l].ffn_out.double()
        assert float(((F.sum(1) + rF - ffn_real).norm(dim=-1) / ffn_real.norm(dim=-1)).max()) < 1e-6
    m = METHODS["atb_ff_res_ln"].compute(tr)
    assert m.layer.shape == (L, len(tr.tokens), len(tr.tokens))
    assert m.completeness.worst < 1e-6


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_completeness_error_is_the_ig_error(tokenizer, family):
    """The error falls with the number of steps (one node is far off for a curved activation)."""
    lm = _model(tokenizer, family, scale=20.0)
    tr = trace(lm, LONG, dtype=torch.float64)
    errs = [atb_ff.analyse(tr, s)["maps"]["atb_ff"].completeness.worst for s in (1, 4, 32)]
    assert errs[0] > 1e-2 and errs[2] < 1e-6 and errs[0] > errs[1] > errs[2], errs


def test_minilm_completeness(minilm):
    tr = trace(minilm, LONG)
    assert 28 <= len(tr.tokens) <= 40
    hs = _real_outputs(minilm, LONG)
    res = atb_ff.analyse(tr)
    assert res["maps"]["atb_ff_res_ln"].completeness.worst < 1e-3
    for l in range(tr.n_layers):
        P, rem, _ = atb_ff.layer_parts(tr, l)["atb_ff_res_ln"]
        real = hs[l + 1]
        assert float(((P.sum(1) + rem - real).norm(dim=-1) / real.norm(dim=-1)).max()) < 1e-3
    assert atb_ff.analyse(tr, 1)["maps"]["atb_ff_res_ln"].completeness.worst > 1e-2


def test_builtin_completeness():
    from attnviz.models.load import builtin_names
    if "agreement" not in builtin_names():
        pytest.skip("builtin:agreement is not trained yet")
    lm = attnviz.load_model("builtin:agreement")
    tr = trace(lm, "the keys to the cabinet [MASK] on the table .")
    hs = _real_outputs(lm, "the keys to the cabinet [MASK] on the table .")
    for l in range(tr.n_layers):
        P, rem, _ = atb_ff.layer_parts(tr, l)["atb_ff_res_ln"]
        assert float(((P.sum(1) + rem - hs[l + 1]).norm(dim=-1) / hs[l + 1].norm(dim=-1)).max()) < 1e-3


# ------------------------------------------------------------------ integrated gradients
@pytest.mark.parametrize("act_name", ["gelu", "gelu_new", "silu", "relu", "tanh"])
def test_ig_average_closed_form(act_name):
    """∫ g'(c + tS) dt = (g(c+S) - g(c)) / S for an elementwise activation."""
    g = ACT2FN[act_name]
    rng = np.random.default_rng(0)
    c = torch.tensor(rng.normal(0, 2, 500))
    S = torch.tensor(rng.normal(0, 6, 500))
    ref = (g(c + S) - g(c)) / S
    # a kink is not smooth: Gauss-Legendre converges only like 1/steps there
    steps, tol = (400, 5e-3) if act_name == "relu" else (64, 1e-10)
    got = atb_ff.ig_average(g, c, S, steps)
    assert float((got - ref).abs().max()) < tol
    mid = atb_ff.ig_average(g, c, S, 2000, "midpoint")
    assert float((mid - ref).abs().max()) < (1e-3 if act_name == "relu" else 1e-6)
    assert float((atb_ff.ig_average(g, c, S, 1) - ref).abs().max()) > 1e-2


def test_ig_gated_closed_form():
    """Σ of both integrals weighted by the inputs = F(1) - F(0) for F = act(a) ⊙ b; bilinear case
    (identity activation) in closed form with one node."""
    rng = np.random.default_rng(1)
    cg, Sg, c, S = (torch.tensor(rng.normal(0, 3, 300)) for _ in range(4))
    act = ACT2FN["silu"]
    A, B = atb_ff.ig_gated(act, cg, Sg, c, S, 48)
    total = Sg * A + S * B
    ref = act(cg + Sg) * (c + S) - act(cg) * c
    assert float((total - ref).abs().max()) < 1e-8
    ident = ACT2FN["linear"]
    A1, B1 = atb_ff.ig_gated(ident, cg, Sg, c, S, 1)
    assert torch.allclose(A1, c + 0.5 * S) and torch.allclose(B1, cg + 0.5 * Sg)


def _ffn_inputs_plain(tr, l):
    """u [n,n,d], u_rem [n,d]: the FFN input per source written plainly (norm2 for pre-LN)."""
    w = tr.weights[l]
    A, rA = attn_res_ln.parts(tr, l)
    if w.placement == "post":
        return A, rA
    resid = tr.layers[l].resid_attn.double()
    gamma = w.norm2.weight.double()
    n = A.shape[0]
    u = torch.zeros_like(A)
    ur = torch.zeros_like(rA)
    for i in range(n):
        if w.norm2.kind == "layernorm":
            s = math.sqrt(float(((resid[i] - resid[i].mean()) ** 2).mean()) + w.norm2.eps)
            for j in range(n):
                u[i, j] = gamma * (A[i, j] - A[i, j].mean()) / s
            ur[i] = gamma * (rA[i] - rA[i].mean()) / s + w.norm2.bias.double()
        else:
            s = math.sqrt(float((resid[i] ** 2).mean()) + w.norm2.eps)
            for j in range(n):
                u[i, j] = gamma * A[i, j] / s
            ur[i] = gamma * rA[i] / s
    return u, ur


@pytest.mark.parametrize("family", ["bert", "distilbert", "gpt2", "llama"])
def test_ffn_parts_against_autograd_jacobian(tokenizer, family):
    """F_ij = (∫ J_MLP(u^r_i + t Σ_j u_ij) dt) u_ij with the Jacobian of the Hugging Face MLP module
    by autograd (midpoint rule, 400 nodes); remainder = MLP(u^r_i)."""
    lm = _model(tokenizer, family, scale=20.0)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    mlps = _mlp_modules(lm.model, lm.model.config.model_type)
    K = 400
    for l in range(tr.n_layers):
        mlp = mlps[l][1]
        u, ur = _ffn_inputs_plain(tr, l)
        n, _, d = u.shape
        ts = (torch.arange(K, dtype=torch.float64) + 0.5) / K
        pts = (ur[:, None, :] + ts[None, :, None] * u.sum(1)[:, None, :]).reshape(-1, d)
        pts.requires_grad_(True)
        with torch.enable_grad():
            y = mlp(pts)
            J = torch.stack([torch.autograd.grad(y[:, k].sum(), pts, retain_graph=True)[0] for k in range(d)], 1)
        Jbar = J.reshape(n, K, d, d).mean(1)  # [n, d_out, d_in]
        ref = torch.einsum("iod,ijd->ijo", Jbar, u)
        F, rF, _ = atb_ff.layer_parts(tr, l, steps=48)["atb_ff"]
        scale = float(ref.norm(dim=-1).max())
        assert float((F - ref).norm(dim=-1).max()) < 1e-4 * scale, (family, l)
        with torch.no_grad():
            assert torch.allclose(rF, mlp(ur), rtol=0, atol=1e-10 * float(rF.abs().max()))


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_linear_activation_exact_with_one_step(tokenizer, family):
    """Affine activation: one node gives the exact parts. Non-gated: F_ij = u_ij W1 W2 (weights
    read from the HF modules); gated bilinear: the exact integral of the product."""
    lm = _model(tokenizer, family, act="linear", scale=3.0)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    for l in range(tr.n_layers):
        u, ur = _ffn_inputs_plain(tr, l)
        F, _, _ = atb_ff.layer_parts(tr, l, steps=1)["atb_ff"]
        if family == "bert":
            lay = lm.model.bert.encoder.layer[l]
            ref = u @ lay.intermediate.dense.weight.T @ lay.output.dense.weight.T
        elif family == "gpt2":
            b = lm.model.transformer.h[l]
            ref = u @ b.mlp.c_fc.weight @ b.mlp.c_proj.weight
        else:
            m = lm.model.model.layers[l].mlp
            Wg, Wu, Wd = m.gate_proj.weight.T, m.up_proj.weight.T, m.down_proj.weight.T
            Sg, Su = u.sum(1) @ Wg, u.sum(1) @ Wu
            cg, cu = ur @ Wg, ur @ Wu
            # ∫_0^1 [(u_j Wg) ⊙ (cu + t Su) + (u_j Wu) ⊙ (cg + t Sg)] dt
            ref = ((u @ Wg) * (cu + 0.5 * Su)[:, None] + (u @ Wu) * (cg + 0.5 * Sg)[:, None]) @ Wd
        assert torch.allclose(F, ref.detach(), rtol=0, atol=1e-10 * float(ref.abs().max())), (family, l)
        # against the model's own output (float64 Llama carries ~1e-7 of rotary rounding)
        assert atb_ff.analyse(tr, 1)["maps"]["atb_ff_res_ln"].completeness.worst < 1e-6


# ------------------------------------------------------------------ maps and ratios from the parts
@pytest.mark.parametrize("family", ["bert", "llama"])
def test_maps_and_ratios_plain(tokenizer, family):
    lm = _model(tokenizer, family, scale=20.0)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    res = atb_ff.analyse(tr)
    for l in range(tr.n_layers):
        sc = atb_ff.layer_parts(tr, l)
        for name, ratio_name in atb_ff.RATIO_NAMES.items():
            P = sc[name][0].numpy()
            n = P.shape[0]
            for i in range(n):
                for j in range(n):
                    assert abs(res["maps"][name].layer[l, i, j] - math.sqrt(sum(v * v for v in P[i, j]))) < 1e-9
                pres = P[i, i]
                mix = sum(P[i, j] for j in range(n) if j != i)
                m, p = np.linalg.norm(mix), np.linalg.norm(pres)
                assert abs(res["ratios"][ratio_name][l, i] - m / (m + p)) < 1e-12
        # the residual scope: attention-block parts plus FFN parts
        A, _ = attn_res_ln.parts(tr, l)
        assert torch.allclose(sc["atb_ff_res"][0], A + sc["atb_ff"][0])
    if family == "llama":  # pre-LN: no norm after the second residual
        assert np.array_equal(res["maps"]["atb_ff_res_ln"].layer, res["maps"]["atb_ff_res"].layer)


def test_post_ln_second_norm_distributed(tokenizer):
    """Post-LN: ATBFFRESLN parts = γ2 ⊙ (R_ij - mean R_ij) / sqrt(var(resid2_i) + eps), with the
    model's own LayerNorm parameters."""
    lm = _model(tokenizer, "bert", scale=20.0)
    tr = trace(lm, SENTENCE, dtype=torch.float64)
    for l in range(tr.n_layers):
        sc = atb_ff.layer_parts(tr, l)
        R = sc["atb_ff_res"][0]
        ln = lm.model.bert.encoder.layer[l].output.LayerNorm
        y = tr.layers[l].resid_ffn.double()
        s = torch.sqrt(y.var(-1, unbiased=False) + ln.eps)
        ref = (R - R.mean(-1, keepdim=True)) * ln.weight.double() / s[:, None, None]
        assert torch.allclose(sc["atb_ff_res_ln"][0], ref.detach(), atol=1e-12)


def test_registry_and_analyze(make_tiny):
    for k in ("atb_ff", "atb_ff_res", "atb_ff_res_ln"):
        info = METHODS[k]
        assert info.decomposition and not info.per_head and not info.rows_sum_to_one
    lm = make_tiny("bert")
    an = attnviz.analyze(lm, SENTENCE, methods=["attn_res_ln", "atb_ff", "atb_ff_res", "atb_ff_res_ln"])
    n = len(an.tokens)
    assert an.maps["atb_ff_res_ln"].layer.shape == (2, n, n)
    assert an.maps["atb_ff_res_ln"].completeness.worst < 1e-3
    with pytest.raises(ValueError):
        atb_ff.ig_nodes(0)
    with pytest.raises(ValueError):
        atb_ff.ig_nodes(4, "simpson")


# ------------------------------------------------------------------ work shared through the trace's cache
def test_trace_cache_api(make_tiny):
    """Trace.cached computes once per key and returns what it stored; forget drops one owner's keys or
    all; a key must be a tuple led by its owner's name."""
    tr = trace(make_tiny("bert"), SENTENCE)
    calls = []

    def make(v):
        def fn():
            calls.append(v)
            return [v]
        return fn

    a = tr.cached(("test", 1), make(1))
    assert tr.cached(("test", 1), make(99)) is a and a == [1] and calls == [1]
    assert tr.cached(("test", 2), make(2)) == [2] and tr.cached(("other",), make(3)) == [3]
    assert calls == [1, 2, 3]
    tr.forget("test")
    assert tr.cached(("other",), make(4)) == [3]  # another owner's entry stays
    assert tr.cached(("test", 1), make(5)) == [5] and calls == [1, 2, 3, 5]
    tr.forget()
    assert tr.cached(("other",), make(6)) == [6]
    for bad in ("test", ("",)[1:], (1, 2), ["test"]):
        with pytest.raises(ValueError, match="cache key"):
            tr.cached(bad, make(0))
    # the head mean is kept there too, and a caller changing its copy does not change it
    hm = tr.head_mean()
    ref = np.stack([a.double().mean(0).numpy() for a in tr.attentions])
    np.testing.assert_array_equal(hm, ref)
    hm[:] = 0
    np.testing.assert_array_equal(tr.head_mean(), ref)


def test_ffn_scopes_share_one_pass(make_tiny, monkeypatch):
    """The three FFN scopes read one pass over the layers per (steps, rule), kept with the trace; a
    forgotten pass is computed again, and gives the same numbers."""
    lm = make_tiny("bert")
    tr = trace(lm, SENTENCE)
    calls = []
    real = atb_ff.layer_summary

    def counting(trace_, l, steps, rule):
        calls.append((l, steps, rule))
        return real(trace_, l, steps, rule)

    monkeypatch.setattr(atb_ff, "layer_summary", counting)
    maps = {k: METHODS[k].compute(tr, steps=4) for k in atb_ff.NAMES}
    assert calls == [(l, 4, "gauss") for l in range(tr.n_layers)]
    METHODS["atb_ff_res"].compute(tr, steps=4, rule="midpoint")
    assert len(calls) == 2 * tr.n_layers
    tr.forget("atb_ff")
    again = METHODS["atb_ff_res_ln"].compute(tr, steps=4)
    assert len(calls) == 3 * tr.n_layers
    np.testing.assert_array_equal(again.layer, maps["atb_ff_res_ln"].layer)
