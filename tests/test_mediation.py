"""Causal mediation (attnviz.mediation) against forward hooks on the Hugging Face model itself.

The reference runs the model's own forward on x with one module's output (or input) replaced by the
value the same module had on x', recorded by hooks on a run of x'; attention weights are replaced by
wrapping the family's eager attention function (the weights it computes, then weights @ values with
one head's row taken from x'). y = p(c1)/p(c2) = exp(logit c1 - logit c2) from the model's logits.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import tiny_configs

import attnviz
from attnviz.errors import InputError
from attnviz.mediation import KINDS, heads_for_share, mediate, nominal_layer_passes
from attnviz.models.load import wrap

A = "the key to the cabinets [MASK] on the table ."
B = "the keys to the cabinets [MASK] on the table ."
CONTRAST = ("are", "is")
FAMS = ("bert", "gpt2", "llama")
# float64 tolerance on y: HF's eager Llama attention takes its softmax in float32 even in a float64
# model (softmax(..., dtype=torch.float32)), so the Llama reference itself is good to ~1e-7 only
RTOL64 = {"bert": 1e-9, "gpt2": 1e-9, "llama": 1e-6}


def _tiny(tokenizer, fam: str, dtype=torch.float64, layers: int = 3, seed: int = 0):
    cls, cfg = tiny_configs(tokenizer.vocab_size)[fam]
    if fam == "gpt2":
        cfg.n_layer = layers
    else:
        cfg.num_hidden_layers = layers
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation="eager")
    # larger weights than the initialiser's 0.02 so that every intervention moves y visibly
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8.0)
    return wrap(model.to(dtype), tokenizer, spec=f"tiny:{fam}")


@pytest.fixture(scope="module")
def tiny64(tokenizer):
    cache = {}

    def get(fam):
        if fam not in cache:
            cache[fam] = _tiny(tokenizer, fam)
        return cache[fam]

    return get


# ------------------------------------------------------------------ the reference: hooks on the HF model

def _parts(model, fam):
    """Per family: layers, the module whose input is the heads' concatenated output (its output is the
    attention block's output), the FFN's output module, the embeddings' output module, the eager module."""
    import transformers.models.bert.modeling_bert as mb
    import transformers.models.gpt2.modeling_gpt2 as mg
    import transformers.models.llama.modeling_llama as ml

    if fam == "bert":
        layers = model.bert.encoder.layer
        return dict(layers=layers, o=[l.attention.output.dense for l in layers], ffn=[l.output.dense for l in layers],
                    emb=model.bert.embeddings, attn=[l.attention.self for l in layers], mod=mb)
    if fam == "gpt2":
        layers = model.transformer.h
        return dict(layers=layers, o=[l.attn.c_proj for l in layers], ffn=[l.mlp.c_proj for l in layers],
                    emb=model.transformer.drop, attn=[l.attn for l in layers], mod=mg)
    layers = model.model.layers
    return dict(layers=layers, o=[l.self_attn.o_proj for l in layers], ffn=[l.mlp.down_proj for l in layers],
                emb=model.model.embed_tokens, attn=[l.self_attn for l in layers], mod=ml)


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _keep(rec, i, o):
    rec["o_in"].append(i.clone())
    rec["o_out"].append(o.clone())


def _record(lm, fam, ids):
    """A run of the HF model on ids with hooks recording every mediator's value."""
    model = lm.model
    P = _parts(model, fam)
    rec = {"o_in": [], "o_out": [], "ffn": [], "layer": [], "emb": None}
    hs = []
    hs.append(P["emb"].register_forward_hook(lambda m, i, o: rec.update(emb=_first(o).clone())))
    for l in range(len(P["layers"])):
        hs.append(P["o"][l].register_forward_hook(lambda m, i, o: _keep(rec, i[0], o)))
        hs.append(P["ffn"][l].register_forward_hook(lambda m, i, o: rec["ffn"].append(o.clone())))
        hs.append(P["layers"][l].register_forward_hook(lambda m, i, o: rec["layer"].append(_first(o).clone())))
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True)
    finally:
        for h in hs:
            h.remove()
    rec["probs"] = [a.clone() for a in out.attentions]
    return rec


def _z(lm, ids, target, cids):
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0, target].double()
    return float(logits[cids[0]] - logits[cids[1]])


def _patched_z(lm, fam, ids, target, cids, kind, l, j, src, monkeypatch):
    """z on ids with one mediator (kind, layer or row l, head or token j) set to its value in `src`."""
    model = lm.model
    P = _parts(model, fam)
    hooks = []
    if kind == "attention":
        mod = P["mod"]
        orig = mod.eager_attention_forward
        target_module = P["attn"][l]

        def wrapped(module, query, key, value, attention_mask, *args, **kw):
            out, w = orig(module, query, key, value, attention_mask, *args, **kw)
            if module is not target_module:
                return out, w
            w2 = w.clone()
            w2[:, j] = src["probs"][l][:, j]
            rep = w.shape[1] // value.shape[1]
            v = value.repeat_interleave(rep, dim=1) if rep > 1 else value
            return torch.matmul(w2, v).transpose(1, 2).contiguous(), w2

        monkeypatch.setattr(mod, "eager_attention_forward", wrapped)
    elif kind == "head_output":
        dh = src["o_in"][l].shape[-1] // len(src["probs"][l][0])

        def pre(m, args):
            x = args[0].clone()
            x[..., j * dh:(j + 1) * dh] = src["o_in"][l][..., j * dh:(j + 1) * dh]
            return (x,) + tuple(args[1:])

        hooks.append(P["o"][l].register_forward_pre_hook(pre))
    else:
        if kind == "residual":
            mod_ = P["emb"] if l == 0 else P["layers"][l - 1]
            val = src["emb"] if l == 0 else src["layer"][l - 1]
        elif kind == "attn_block":
            mod_, val = P["o"][l], src["o_out"][l]
        else:
            mod_, val = P["ffn"][l], src["ffn"][l]

        def post(m, i, o):
            x = _first(o).clone()
            x[:, j] = val[:, j]
            return (x,) + tuple(o[1:]) if isinstance(o, tuple) else x

        hooks.append(mod_.register_forward_hook(post))
    try:
        return _z(lm, ids, target, cids)
    finally:
        for h in hooks:
            h.remove()
        monkeypatch.undo()


def _setup(lm, a=A, b=B):
    from attnviz.trace import encode, single_token_id

    ea, eb = encode(lm, a), encode(lm, b)
    cids = tuple(single_token_id(lm.tokenizer, c) for c in CONTRAST)
    return ea, eb, cids


# ------------------------------------------------------------------ against the reference

@pytest.mark.parametrize("fam", FAMS)
def test_every_mediator_matches_hf_hooks(fam, tiny64, monkeypatch):
    """float64: every NIE of every kind, and the TE, against the hooked HF model (1e-9 relative on y;
    Llama 1e-6, see RTOL64)."""
    lm = tiny64(fam)
    m = mediate(lm, A, B, CONTRAST, dtype=torch.float64)
    ea, eb, cids = _setup(lm)
    t = ea.target
    z_a, z_b = _z(lm, ea.ids, t, cids), _z(lm, eb.ids, t, cids)
    tol = RTOL64[fam]
    assert 1 + m.total_effect == pytest.approx(math.exp(z_b - z_a), rel=tol)
    assert m.y_base == pytest.approx(math.exp(z_a), rel=tol)
    assert abs(m.total_effect) > 1e-3  # the pair moves y
    src = _record(lm, fam, eb.ids)
    L, H, n = m.n_layers, m.n_heads, len(ea.tokens)
    checked = moved = 0
    for kind in KINDS:
        rows = {"attention": L, "head_output": L, "residual": L + 1}.get(kind, L)
        cols = H if kind in ("attention", "head_output") else n
        assert m.nie[kind].shape == (rows, cols)
        for l in range(rows):
            for j in range(cols):
                ref = math.exp(_patched_z(lm, fam, ea.ids, t, cids, kind, l, j, src, monkeypatch) - z_a)
                got = 1.0 + m.nie[kind][l, j]
                assert got == pytest.approx(ref, rel=tol), (kind, l, j)
                checked += 1
                moved += abs(ref - 1) > 1e-6
    assert checked == 2 * L * H + (L + 1) * n + 2 * L * n
    assert moved > checked // 3  # most interventions change y: the comparison is not of zeros


@pytest.mark.parametrize("fam", FAMS)
def test_float32_matches_hf_to_1e5(fam, tokenizer, monkeypatch):
    """The default float32 computation on a float32 model: heads and residual NIEs against the hooked
    model to 1e-5 relative on y."""
    lm = _tiny(tokenizer, fam, dtype=torch.float32, seed=1)
    m = mediate(lm, A, B, CONTRAST, kinds=("attention", "residual"))
    ea, eb, cids = _setup(lm)
    t = ea.target
    z_a = _z(lm, ea.ids, t, cids)
    src = _record(lm, fam, eb.ids)
    for kind, rows, cols in (("attention", m.n_layers, m.n_heads), ("residual", m.n_layers + 1, len(ea.tokens))):
        for l in range(rows):
            for j in range(cols):
                ref = math.exp(_patched_z(lm, fam, ea.ids, t, cids, kind, l, j, src, monkeypatch) - z_a)
                assert 1.0 + m.nie[kind][l, j] == pytest.approx(ref, rel=1e-5), (kind, l, j)


@pytest.mark.parametrize("fam", FAMS)
def test_direct_effects_match_hf_hooks(fam, tiny64, monkeypatch):
    """NDE: the run of x' with the mediator held at its value on x, relative to y(x)."""
    lm = tiny64(fam)
    m = mediate(lm, A, B, CONTRAST, kinds=("attention", "head_output", "ffn"), direct=("attention", "head_output", "ffn"),
                dtype=torch.float64)
    ea, eb, cids = _setup(lm)
    t = ea.target
    z_a = _z(lm, ea.ids, t, cids)
    src = _record(lm, fam, ea.ids)
    for kind, cols in (("attention", m.n_heads), ("head_output", m.n_heads), ("ffn", len(ea.tokens))):
        for l in range(m.n_layers):
            for j in range(cols):
                ref = math.exp(_patched_z(lm, fam, eb.ids, t, cids, kind, l, j, src, monkeypatch) - z_a)
                assert 1 + m.nde[kind][l, j] == pytest.approx(ref, rel=RTOL64[fam]), (kind, l, j)


# ------------------------------------------------------------------ identities

@pytest.mark.parametrize("fam", FAMS)
def test_self_patch_is_zero_exactly(fam, tokenizer):
    lm = _tiny(tokenizer, fam, dtype=torch.float32)
    m = mediate(lm, A, A, CONTRAST, direct=KINDS)
    assert m.total_effect == 0.0
    for kind in KINDS:
        assert not np.any(m.nie[kind]) and not np.any(m.nde[kind])


@pytest.mark.parametrize("fam", FAMS)
def test_embedding_at_the_changed_token_and_last_state_give_the_te(fam, tokenizer):
    lm = _tiny(tokenizer, fam, dtype=torch.float32, seed=2)
    m = mediate(lm, A, B, CONTRAST, kinds=("residual",))
    assert len(m.changed) == 1
    c, t, L = m.changed[0], m.target, m.n_layers
    assert m.residual[0, c] == pytest.approx(m.total_effect, rel=1e-5)
    assert m.residual[L, t] == pytest.approx(m.total_effect, rel=1e-5)
    # the other tokens' embeddings are the same on both texts, and the last layer's other tokens never
    # reach the output: 0 exactly, not computed
    others = [j for j in range(len(m.tokens_base)) if j != c]
    assert not np.any(m.residual[0, others]) and m.skipped["residual"][0, others].all()
    assert not np.any(np.delete(m.residual[L], t))


def test_causal_prefix_before_the_change_is_zero(tokenizer):
    """In a causal model nothing before the first changed token differs between the texts."""
    lm = _tiny(tokenizer, "gpt2", dtype=torch.float32)
    a, b = "the old key to the cabinets [MASK]", "the old keys to the cabinets [MASK]"
    m = mediate(lm, a, b, CONTRAST)
    c = m.changed[0]
    assert m.tokens_base[c] == "key" and c >= 2
    for kind in ("residual", "attn_block", "ffn"):
        assert m.skipped[kind][:, :c].all() and not np.any(m.nie[kind][:, :c])
    assert np.abs(m.residual[1:m.n_layers, c:]).max() > 0


# ------------------------------------------------------------------ inputs, result helpers

def test_refusals(tokenizer):
    lm = _tiny(tokenizer, "bert", dtype=torch.float32)
    with pytest.raises(InputError, match="same number of tokens"):
        mediate(lm, A, "the keys to the big cabinets [MASK] on the table .", CONTRAST)
    # the total effect alone needs no alignment
    m = mediate(lm, A, "the keys to the big cabinets [MASK] on the table .", CONTRAST, kinds=())
    assert m.nie == {} and math.isfinite(m.total_effect)
    with pytest.raises(InputError, match="same token"):
        mediate(lm, A, B, ("is", "is"))
    with pytest.raises(InputError, match="unknown mediator"):
        mediate(lm, A, B, CONTRAST, kinds=("neurons",))
    enc = attnviz.wrap(lm.model.bert, tokenizer, spec="tiny:bert-base")
    with pytest.raises(InputError, match="language model"):
        mediate(enc, A, B, CONTRAST)


def test_heads_for_share_and_work():
    # TE 1.0; heads 0.5, 0.3, 0.2, -0.1: 50 % needs 1 head, 80 % needs 2, 110 % is never reached
    v = np.array([0.3, -0.1, 0.5, 0.2])
    assert heads_for_share(v, 1.0, 0.5) == 1
    assert heads_for_share(v, 1.0, 0.8) == 2
    assert heads_for_share(v, 1.0, 1.1) is None
    assert heads_for_share(-v, -1.0, 0.8) == 2
    # the (L*H + (L+1)*n) * L/2 layer passes, counted exactly: sum over start layers
    L, H, n = 30, 9, 16
    # (row L, the last layer's output, needs no layer: rows 0..L cost L..0 passes)
    assert nominal_layer_passes(L, H, n) == H * L * (L + 1) / 2 + n * L * (L + 1) / 2


def test_progress_streams_the_head_map_first(tokenizer):
    lm = _tiny(tokenizer, "llama", dtype=torch.float32)
    seen = []
    mediate(lm, A, B, CONTRAST, progress=lambda kind, done, total, res: seen.append((kind, done, total, sorted(res.nie))))
    assert seen[0] == (None, 0, 5, [])
    assert seen[1] == ("attention", 1, 5, ["attention"])
    assert seen[-1][1:3] == (5, 5) and len(seen[-1][3]) == 5


def test_small_batches_give_the_same_effects(tiny64):
    """Chunked passes (a few token rows per batch) against one pass per kind."""
    lm = tiny64("llama")
    m1 = mediate(lm, A, B, CONTRAST, dtype=torch.float64)
    m2 = mediate(lm, A, B, CONTRAST, dtype=torch.float64, max_batch_tokens=1)
    for k in KINDS:
        np.testing.assert_allclose(m2.nie[k], m1.nie[k], rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ real models

@pytest.mark.real_model
def test_builtin_agreement_against_hf_hooks(monkeypatch):
    lm = attnviz.load_model("builtin:agreement")
    a, b = "the key to the cabinets [MASK] on the table .", "the keys to the cabinets [MASK] on the table ."
    m = mediate(lm, a, b, CONTRAST, kinds=("attention", "residual"))
    ea, eb, cids = _setup(lm, a, b)
    t = ea.target
    z_a = _z(lm, ea.ids, t, cids)
    assert m.total_effect > 10  # the plural subject makes "are" far more likely than "is"
    src = _record(lm, "bert", eb.ids)
    for l in range(m.n_layers):
        for h in range(m.n_heads):
            ref = math.exp(_patched_z(lm, "bert", ea.ids, t, cids, "attention", l, h, src, monkeypatch) - z_a)
            assert 1 + m.nie_attention[l, h] == pytest.approx(ref, rel=1e-5)
    for j in range(len(ea.tokens)):
        ref = math.exp(_patched_z(lm, "bert", ea.ids, t, cids, "residual", 3, j, src, monkeypatch) - z_a)
        assert 1 + m.residual[3, j] == pytest.approx(ref, rel=1e-5)


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm2_heads_against_hf_hooks(monkeypatch):
    """The 30-layer SmolLM2 in float64 (HF's eager Llama still takes its softmax in float32): heads
    against the hooked model to 1e-5 relative on y; the default float32 run is within 1e-4 of it
    (float32 rounding through 30 layers: the logit difference moves by ~2e-5)."""
    lm32 = attnviz.load_model("pkg:smollm2")
    a, b = "the key to the cabinets [MASK]", "the keys to the cabinets [MASK]"
    m32 = mediate(lm32, a, b, CONTRAST, kinds=("attention",))
    lm = wrap(lm32.model.double(), lm32.tokenizer, spec="pkg:smollm2 (float64)")
    m = mediate(lm, a, b, CONTRAST, kinds=("attention", "head_output"), dtype=torch.float64)
    ea, eb, cids = _setup(lm, a, b)
    t = ea.target
    z_a = _z(lm, ea.ids, t, cids)
    src = _record(lm, "llama", eb.ids)
    for l in (0, 7, 15, 29):
        for h in range(m.n_heads):
            for kind in ("attention", "head_output"):
                ref = math.exp(_patched_z(lm, "llama", ea.ids, t, cids, kind, l, h, src, monkeypatch) - z_a)
                assert 1 + m.nie[kind][l, h] == pytest.approx(ref, rel=1e-5), (kind, l, h)
    np.testing.assert_allclose(1 + m32.nie_attention, 1 + m.nie_attention, rtol=1e-4)
