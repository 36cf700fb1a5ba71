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


def _patched_z(lm, fam, ids, target, cids, kind, l, j, src, monkeypatch, score=None):
    """z on ids with one mediator (kind, layer or row l, head or token j) set to its value in `src`
    (score(ids): another quantity of the patched run than z_c1 - z_c2 at the target)."""
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
        return _z(lm, ids, target, cids) if score is None else score(ids)
    finally:
        for h in hooks:
            h.remove()
        monkeypatch.undo()


def _setup(lm, a=A, b=B):
    from attnviz.trace import encode, single_token_id

    ea, eb = encode(lm, a), encode(lm, b)
    cids = tuple(single_token_id(lm.tokenizer, c) for c in CONTRAST)
    return ea, eb, cids


def _every_mediator(m, n):
    """(kind, row, column) of every mediator of every kind, after checking each map's shape (n tokens)."""
    L, H = m.n_layers, m.n_heads
    for kind in KINDS:
        rows = {"attention": L, "head_output": L, "residual": L + 1}.get(kind, L)
        cols = H if kind in ("attention", "head_output") else n
        assert m.nie[kind].shape == (rows, cols)
        for l in range(rows):
            for j in range(cols):
                yield kind, l, j


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
    for kind, l, j in _every_mediator(m, n):
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


def _appended(enc, word):
    """ids of the text up to the target with the word's pieces but its last appended."""
    return torch.cat([enc.ids[:, :enc.target + 1], torch.tensor([list(word.ids[:-1])], dtype=enc.ids.dtype)], 1)


def _word_score(lm, ids, t, word):
    """log p(word) = Σ_i log p(piece_i) at row t+i of the HF model's logits on ids."""
    with torch.no_grad():
        lp = torch.log_softmax(lm.model(input_ids=ids).logits[0].double(), -1)
    return float(sum(lp[t + i, p] for i, p in enumerate(word.ids)))


@pytest.mark.parametrize("fam", ("gpt2", "llama"))
@pytest.mark.parametrize("contrast", [("swims", "walks"), ("are", "locks")])
def test_words_of_several_tokens_match_hf_hooks(fam, contrast, tiny64, monkeypatch):
    """Causal LM, contrast words of several tokens ('swims' = s·##wi·##ms, 'walks' = walk·##s; 'are' one
    token beside 'locks' = lock·##s): y = p(c1)/p(c2) with p(word) the product of its pieces'
    probabilities. TE and p against trace.word_logprobs; every NIE and two kinds' NDE against the hooked
    HF model run on each word's text with its pieces appended (the mediator taken from B's run with the
    same pieces), y combining the two words' runs."""
    from attnviz.trace import contrast_words, encode, word_logprobs

    lm = tiny64(fam)
    words = contrast_words(lm, contrast)
    assert any(w.multi for w in words)
    m = mediate(lm, A, B, contrast, dtype=torch.float64, direct=("attention", "residual"))
    assert any("several tokens" in note and "sum of the pieces' log-probabilities" in note for note in m.notes)
    ea, eb = encode(lm, A), encode(lm, B)
    t, tol = ea.target, RTOL64[fam]
    la = word_logprobs(lm, ea.ids, t, words).numpy()
    lb = word_logprobs(lm, eb.ids, t, words).numpy()
    assert m.p_base == pytest.approx(tuple(np.exp(la)), rel=tol)
    assert m.p_cf == pytest.approx(tuple(np.exp(lb)), rel=tol)
    z_a, z_b = float(la[0] - la[1]), float(lb[0] - lb[1])
    assert 1 + m.total_effect == pytest.approx(math.exp(z_b - z_a), rel=tol)
    assert abs(m.total_effect) > 1e-3
    rec_a = [_record(lm, fam, _appended(ea, w)) for w in words]
    rec_b = [_record(lm, fam, _appended(eb, w)) for w in words]

    def patched(run_enc, recs, kind, l, j):
        return sum(sign * _patched_z(lm, fam, _appended(run_enc, w), t, None, kind, l, j, rec, monkeypatch,
                                     score=lambda ids, w=w: _word_score(lm, ids, t, w))
                   for sign, w, rec in zip((1, -1), words, recs))

    n = len(ea.tokens)
    assert n == t + 1  # a causal model reads the text up to the [MASK]
    checked = moved = 0
    for kind, l, j in _every_mediator(m, n):
        ref = math.exp(patched(ea, rec_b, kind, l, j) - z_a)
        assert 1.0 + m.nie[kind][l, j] == pytest.approx(ref, rel=tol), (kind, l, j)
        checked += 1
        moved += abs(ref - 1) > 1e-6
        if kind in m.nde:
            ref = math.exp(patched(eb, rec_a, kind, l, j) - z_a)
            assert 1.0 + m.nde[kind][l, j] == pytest.approx(ref, rel=tol), ("nde", kind, l, j)
    assert moved > checked // 3


def test_words_of_several_tokens_are_refused_on_a_masked_lm(tiny64):
    with pytest.raises(InputError, match="one \\[MASK\\] holds one token"):
        mediate(tiny64("bert"), A, B, ("swims", "walks"))


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


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm2_verb_of_several_tokens_against_hf_hooks(monkeypatch):
    """SmolLM2, 'creeps' (Ġcre·eps) against 'creep' (one token): p, TE against
    trace.word_logprobs and head NIEs of three layers against the hooked model on each word's appended
    text, to 1e-4 relative on y (float32)."""
    from attnviz.trace import contrast_words, encode, word_logprobs

    lm = attnviz.load_model("pkg:smollm2")
    a, b = "the dog near the cats [MASK]", "the dogs near the cats [MASK]"
    contrast = ("creeps", "creep")
    words = contrast_words(lm, contrast)
    assert [len(w.ids) for w in words] == [2, 1], [w.pieces for w in words]  # Ġcre·eps, Ġcreep
    m = mediate(lm, a, b, contrast, kinds=("attention",))
    ea, eb = encode(lm, a), encode(lm, b)
    t = ea.target
    la = word_logprobs(lm, ea.ids, t, words).numpy()
    lb = word_logprobs(lm, eb.ids, t, words).numpy()
    assert m.p_base == pytest.approx(tuple(np.exp(la)), rel=1e-4)
    z_a = float(la[0] - la[1])
    assert 1 + m.total_effect == pytest.approx(math.exp(float(lb[0] - lb[1]) - z_a), rel=1e-4)
    recs = [_record(lm, "llama", _appended(eb, w)) for w in words]
    for l in (0, 15, 29):
        for h in range(m.n_heads):
            z = sum(sign * _patched_z(lm, "llama", _appended(ea, w), t, None, "attention", l, h, rec, monkeypatch,
                                      score=lambda ids, w=w: _word_score(lm, ids, t, w))
                    for sign, w, rec in zip((1, -1), words, recs))
            assert 1 + m.nie_attention[l, h] == pytest.approx(math.exp(z - z_a), rel=1e-4), (l, h)


# ------------------------------------------------------------------ minimal pairs from the shipped sets

def test_agreement_pairs_change_the_subjects_number():
    from attnviz.mediation.pairs import agreement_pairs, shipped_pairs

    words = frozenset({"key", "keys", "cabinet", "cabinets", "man", "men", "bus"})
    items = [dict(text="the old keys to the cabinet [MASK] here .", answer="are", wrong="is", n_attractors=1, n_intervening=1),
             dict(text="the man near the cabinets [MASK] here .", answer="is", wrong="are"),
             dict(text="the noisy bus which the cabinets [MASK] here .", answer="is", wrong="are"),  # no "bus" plural known
             dict(text="the keys and the cabinet [MASK] here .", answer="are", wrong="is", construction="coord_subj"),
             dict(text="albert near the keys [MASK] here .", answer="is", wrong="are")]
    ps = agreement_pairs(items, words)
    assert [(p.base, p.counterfactual, p.contrast) for p in ps] == [
        (items[0]["text"], "the old key to the cabinet [MASK] here .", ("is", "are")),
        (items[1]["text"], "the men near the cabinets [MASK] here .", ("are", "is"))]
    assert ps[0].changed == ("keys", "key") and (ps[0].n_attractors, ps[0].n_attractors_cf) == (1, 0)
    shipped = shipped_pairs("agreement")
    assert len(shipped) >= 1000
    for p in shipped[:200]:  # one word differs, and it is the subject: the contrast swaps the verb's number
        a, b = p.base.split(" "), p.counterfactual.split(" ")
        assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
        assert a.index(p.changed[0]) < a.index("[MASK]")


def test_pronoun_pairs_change_the_antecedents_gender():
    from transformers import AutoTokenizer

    from attnviz.mediation.pairs import name_genders, pronoun_pairs, shipped_pairs
    from attnviz.resources import models_dir

    tokenizer = AutoTokenizer.from_pretrained(models_dir() / "agreement")  # the grammar's names are one token each
    g = name_genders()
    assert g["mary"] == "f" and g["peter"] == "m"
    ps = pronoun_pairs([dict(text="mary visited peter near [MASK] house .", answer="her", wrong="its", task="pronoun")],
                       tokenizer=tokenizer)
    (p,) = ps
    new = p.counterfactual.split(" ")[0]
    assert g[new] == "m" and new != "peter" and p.counterfactual.split(" ")[1:] == p.base.split(" ")[1:]
    assert p.contrast == ("his", "her")
    assert len(tokenizer(p.base)["input_ids"]) == len(tokenizer(p.counterfactual)["input_ids"])
    assert len(shipped_pairs("pronoun")) >= 200


# ------------------------------------------------------------------ the corpus study

def _fake_records(N=12, L=3, H=4, seed=0):
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(N):
        te = float(rng.uniform(1, 3))
        nie = rng.normal(0, 0.1, (L, H))
        nie[1, 2] = 0.5 * te + rng.normal(0, 0.05)  # one head carries half of every TE
        sc = {k: (nie + rng.normal(0, 0.2, (L, H))).tolist() for k in
              ("attention", "value_norm", "alti_head", "head_output_norm", "attention_change")}
        recs.append(dict(key=str(i), pair=dict(n_attractors=i % 2), te=te, y_base=0.1, nie={"attention": nie.tolist()},
                         scores=sc))
    return recs


def test_study_summary_against_plain_formulas():
    from scipy import stats

    from attnviz.mediation.study import MediationStudy

    recs = _fake_records()
    s = MediationStudy("fake", recs, kinds=("attention",)).summary("attention")
    nie = np.array([r["nie"]["attention"] for r in recs])
    te = np.array([r["te"] for r in recs])
    N = len(recs)
    # mean and t-interval of one head, by hand
    x = nie[:, 1, 2]
    half = stats.t.ppf(0.975, N - 1) * np.sqrt(((x - x.mean()) ** 2).sum() / (N - 1)) / np.sqrt(N)
    assert s["mean_nie"][1][2] == pytest.approx(x.mean())
    assert s["ci_half"][1][2] == pytest.approx(half)
    assert (s["top_heads"][0]["layer"], s["top_heads"][0]["head"]) == (2, 3)
    # heads for 50 %: pairs whose top head alone reaches half of the TE need 1, others more
    need = []
    for i in range(N):
        v = sorted(nie[i].ravel(), reverse=True)
        acc, k = 0.0, 0
        while k < len(v) and v[k] > 0 and acc < 0.5 * te[i]:
            acc += v[k]
            k += 1
        need.append(k if acc >= 0.5 * te[i] else None)
    got = [k for k in need if k is not None]
    assert s["concentration"]["50%"]["reached"] == pytest.approx(len(got) / N)
    assert s["concentration"]["50%"]["median_heads"] == pytest.approx(np.median(got))
    assert s["top_share"]["top1"] == pytest.approx(np.mean([sorted(nie[i].ravel())[-1] / te[i] for i in range(N)]))
    # Spearman per pair: ranks by hand (no ties in continuous draws), r = 1 - 6 sum d^2 / (m (m^2 - 1))
    sc = np.array([r["scores"]["attention"] for r in recs])
    m = nie[0].size

    def rho(a, b):
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        return 1 - 6 * ((ra - rb) ** 2).sum() / (m * (m * m - 1))

    per = [rho(sc[i].ravel(), nie[i].ravel()) for i in range(N)]
    assert s["spearman"]["attention"]["per_pair_mean"] == pytest.approx(np.mean(per))
    assert s["spearman"]["attention"]["corpus"] == pytest.approx(rho(sc.mean(0).ravel(), nie.mean(0).ravel()))
    lo, hi = s["spearman"]["attention"]["corpus_ci"]
    assert lo <= s["spearman"]["attention"]["corpus"] <= hi


def test_head_scores_against_plain_loops(tokenizer):
    from attnviz.mediation.study import head_scores
    from attnviz.trace import trace

    lm = _tiny(tokenizer, "bert", dtype=torch.float32)
    subj = [2]
    sc = head_scores(lm, A, B, subj)
    ta, tb = trace(lm, A), trace(lm, B)
    t = ta.target
    for l in range(ta.n_layers):
        P, Pb, F = ta.layers[l].probs.double(), tb.layers[l].probs.double(), ta.fx[l].double()
        y = ta.layers[l].resid_attn.double()[t]
        for h in range(P.shape[0]):
            z = P[h, t, 2] * F[h, 2]
            assert sc["attention"][l, h] == pytest.approx(float(P[h, t, 2]))
            assert sc["value_norm"][l, h] == pytest.approx(float(torch.sqrt((z * z).sum())))
            assert sc["alti_head"][l, h] == pytest.approx(max(0.0, float(y.abs().sum() - (y - z).abs().sum())), abs=1e-9)
            whole = sum(P[h, t, j] * F[h, j] for j in range(P.shape[-1]))
            assert sc["head_output_norm"][l, h] == pytest.approx(float(torch.sqrt((whole * whole).sum())))
            assert sc["attention_change"][l, h] == pytest.approx(0.5 * float((Pb[h, t] - P[h, t]).abs().sum()))


def test_study_command_writes_and_resumes(tiny_bert_folder, tmp_path, capsys):
    import json

    from attnviz.cli import main

    items = [dict(base=A, counterfactual=B, contrast=["are", "is"], task="agreement"),
             dict(base="the keys to the cabinet [MASK] on the table .", counterfactual="the key to the cabinet [MASK] on the table .",
                  contrast=["is", "are"], task="agreement"),
             dict(base=A, counterfactual="the keys to the big cabinets [MASK] on the table .", contrast=["are", "is"])]
    for it in items:
        it["text"] = it["base"]  # a data file's items have a text
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(it) + "\n" for it in items))
    out = tmp_path / "med"
    base = ["study", "--mediation", "--model", str(tiny_bert_folder), "--data", str(data), "--out", str(out), "--quiet"]
    assert main(base + ["--n", "1", "--kinds", "attention"]) == 0
    capsys.readouterr()
    assert main(base + ["--kinds", "attention"]) == 0
    printed = capsys.readouterr().out
    assert "2 pairs (1 from an earlier run, 0 skipped)" in printed
    assert "left out 1 pair(s): patching is position by position" in printed
    recs = [json.loads(l) for l in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 2
    lm = attnviz.load_model(str(tiny_bert_folder))
    m = mediate(lm, items[1]["base"], items[1]["counterfactual"], ("is", "are"), kinds=("attention",))
    np.testing.assert_allclose(np.array(recs[1]["nie"]["attention"]), m.nie_attention, rtol=1e-12)
    summ = json.loads((out / "summary.json").read_text())["attention"]
    assert summ["n_pairs"] == 2
    assert (out / "heads.csv").read_text().startswith("kind,layer,head,mean_nie")
    capsys.readouterr()
    # the Ray engine's flags: refused without --engine ray; an unreachable cluster is one line, before the model
    assert main(base + ["--workers", "2"]) == 2
    assert capsys.readouterr().err.strip() == "error: --workers only apply with --engine ray"
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nothing listens on
    assert main(base + ["--engine", "ray", "--address", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("fam", FAMS)
@pytest.mark.parametrize("mode", ("zero", "mean"))
def test_knockout_matches_hf_hooks(fam, mode, tiny64):
    """A head knocked out (its output before the projection set to 0, or to its mean over positions) by
    a pre-hook on the HF model's output projection."""
    from attnviz.mediation import knockout

    lm = tiny64(fam)
    text = A
    ea, _, cids = _setup(lm, text, text)
    P = _parts(lm.model, fam)
    l, h = 1, 2

    def pre(m, args):
        x = args[0].clone()
        dh = x.shape[-1] // 4
        s = x[..., h * dh:(h + 1) * dh]
        x[..., h * dh:(h + 1) * dh] = 0 if mode == "zero" else s.mean(1, keepdim=True)
        return (x,) + tuple(args[1:])

    hk = P["o"][l].register_forward_pre_hook(pre)
    try:
        with torch.no_grad():
            ref = torch.softmax(lm.model(input_ids=ea.ids).logits[0, ea.target].double(), -1).numpy()
    finally:
        hk.remove()
    k = knockout(lm, text, l, h, mode=mode, contrast=CONTRAST)
    tol = max(RTOL64[fam], 1e-6)
    np.testing.assert_allclose(k.p_after, ref, rtol=tol, atol=1e-12)
    z_a = _z(lm, ea.ids, ea.target, cids)
    assert k.y_before == pytest.approx(math.exp(z_a), rel=tol)
    assert 1 + k.change == pytest.approx(ref[cids[0]] / ref[cids[1]] / math.exp(z_a), rel=tol)
    assert k.tvd > 1e-4
    with pytest.raises(InputError, match="no head"):
        knockout(lm, text, 9, 0)
