"""Head knock-out (attnviz.mediation.knock_out) against the Hugging Face model itself: a forward
pre-hook on the attention output projection zeroes (or replaces by its mean over positions) the head's
slice of the projection's input, and the logits at the target must match."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import attnviz
from attnviz.errors import InputError
from attnviz.mediation.ablation import knock_out, knockout

TEXT = "the keys to the cabinet [MASK] on the table ."


def _o_proj(model, family: str, l: int):
    if family == "bert":
        return model.bert.encoder.layer[l].attention.output.dense
    if family == "gpt2":
        return model.transformer.h[l].attn.c_proj
    return model.model.layers[l].self_attn.o_proj


def _hf_probs(lm, family, heads, mode, ids, target, rows=None, read=1):
    """softmax of the hooked HF model's logits at the target (at rows target..target+read-1: [read, V]);
    "mean" over the first `rows` positions (all when None)."""
    cfg = lm.model.config
    H = cfg.num_attention_heads
    dh = cfg.hidden_size // H
    hooks = []
    for l in sorted({l for l, _ in heads}):
        hs = [h for ll, h in heads if ll == l]

        def pre(mod, args, hs=hs):
            x = args[0].clone()
            for h in hs:
                sl = x[..., h * dh:(h + 1) * dh]
                x[..., h * dh:(h + 1) * dh] = 0.0 if mode == "zero" else sl[:, :rows].mean(dim=1, keepdim=True).expand_as(sl)
            return (x,) + tuple(args[1:])
        hooks.append(_o_proj(lm.model, family, l).register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            logits = lm.model(input_ids=ids).logits[0, target:target + read].double()
    finally:
        for k in hooks:
            k.remove()
    p = torch.softmax(logits, -1)
    return p[0] if read == 1 else p


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_knock_out_equals_a_hook_on_the_hf_output_projection(make_tiny, family, mode):
    lm = make_tiny(family)
    from attnviz.trace import encode

    text = "the keys to the cabinet [MASK]" if family != "bert" else TEXT
    enc = encode(lm, text)
    heads = [(0, 1), (1, 0), (1, 1)]
    k = knock_out(lm, text, heads, mode, contrast=("is", "are"), top=3)
    ids = (lm.tokenizer.convert_tokens_to_ids("is"), lm.tokenizer.convert_tokens_to_ids("are"))
    p_ref = _hf_probs(lm, family, heads, mode, enc.ids, enc.target)
    p0 = _hf_probs(lm, family, [], mode, enc.ids, enc.target)
    np.testing.assert_allclose(k.p_after, [float(p_ref[i]) for i in ids], rtol=1e-4)
    np.testing.assert_allclose(k.p_before, [float(p0[i]) for i in ids], rtol=1e-4)
    np.testing.assert_allclose([p for _, p in k.top_after], torch.topk(p_ref, 3).values.numpy(), rtol=1e-4)
    y_ref = (p_ref[ids[0]] / p_ref[ids[1]]) / (p0[ids[0]] / p0[ids[1]]) - 1
    assert k.y_change == pytest.approx(float(y_ref), rel=1e-4, abs=1e-7)
    assert not torch.equal(p_ref, p0) and k.top_after != k.top_before  # the knock-out moved the output


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_knock_out_scores_words_of_several_tokens(make_tiny, family, mode):
    """Causal LM, 'swims' (s·##wi·##ms) against 'walks' (walk·##s): p(word) = Π p(piece_i), each read on
    the text up to the target with the pieces before it appended, under the same hooks ("mean": over
    the text's positions up to the target)."""
    from attnviz.trace import contrast_words, encode

    lm = make_tiny(family)
    text = "the keys to the cabinet [MASK]"
    enc = encode(lm, text)
    t = enc.target
    heads = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 3)]
    words = contrast_words(lm, ("swims", "walks"))
    assert [len(w.ids) for w in words] == [3, 2]
    k = knock_out(lm, text, heads, mode, contrast=("swims", "walks"))
    ref = {}
    for which, hs in (("before", []), ("after", heads)):
        ps = []
        for w in words:
            ids = torch.cat([enc.ids[:, :t + 1], torch.tensor([list(w.ids[:-1])])], 1)
            p = _hf_probs(lm, family, hs, mode, ids, t, rows=t + 1, read=len(w.ids))
            ps.append(float(np.prod([float(p[i, pid]) for i, pid in enumerate(w.ids)])))
        ref[which] = ps
    np.testing.assert_allclose(k.p_before, ref["before"], rtol=1e-4)
    np.testing.assert_allclose(k.p_after, ref["after"], rtol=1e-4)
    y_ref = (ref["after"][0] / ref["after"][1]) / (ref["before"][0] / ref["before"][1]) - 1
    assert k.y_change == pytest.approx(y_ref, rel=1e-4, abs=1e-7)
    assert abs(y_ref) > 1e-3  # the knock-out moves y
    assert any("several tokens" in n for n in k.notes)
    # the one-head knockout() scores the words by the same rule: head 2.2 alone against the hooked model
    one = knockout(lm, text, 1, 1, mode, contrast=("swims", "walks"))
    ps = []
    for w in words:
        ids = torch.cat([enc.ids[:, :t + 1], torch.tensor([list(w.ids[:-1])])], 1)
        p = _hf_probs(lm, family, [(1, 1)], mode, ids, t, rows=t + 1, read=len(w.ids))
        ps.append(float(np.prod([float(p[i, pid]) for i, pid in enumerate(w.ids)])))
    assert one.y_before == pytest.approx(ref["before"][0] / ref["before"][1], rel=1e-4)
    assert one.y_after == pytest.approx(ps[0] / ps[1], rel=1e-4)
    assert one.change == pytest.approx(one.y_after / one.y_before - 1, rel=1e-6, abs=1e-9)
    assert abs(one.y_after / one.y_before - 1) > 1e-4 and any("several tokens" in n for n in one.notes)


def test_builtin_agreement_knock_out_and_refusals():
    lm = attnviz.load_model("builtin:agreement")
    from attnviz.trace import encode

    enc = encode(lm, TEXT)
    L, H = lm.model.config.num_hidden_layers, lm.model.config.num_attention_heads
    every = [(l, h) for l in range(L) for h in range(H)]
    k = knock_out(lm, TEXT, every[:H], "zero", contrast=("are", "is"))
    ids = tuple(lm.tokenizer.convert_tokens_to_ids(w) for w in ("are", "is"))
    p = _hf_probs(lm, "bert", every[:H], "zero", enc.ids, enc.target)
    np.testing.assert_allclose(k.p_after, [float(p[i]) for i in ids], rtol=1e-4)
    assert k.predicted_before == k.top_before[0][0]
    none = knock_out(lm, TEXT, [], "zero", contrast=("are", "is"))
    assert none.p_after == none.p_before and none.y_change == 0.0
    with pytest.raises(InputError, match="outside this model"):
        knock_out(lm, TEXT, [(L, 0)])
    with pytest.raises(InputError, match="mode"):
        knock_out(lm, TEXT, [(0, 0)], "shuffle")
