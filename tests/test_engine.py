"""Engine: loading, the functional trace against the model's own outputs, and the maps against
independent references (plain loops, networkx, the real model's LayerNorm outputs)."""
from __future__ import annotations

import threading

import networkx as nx
import numpy as np
import pytest
import torch

import attnviz
from attnviz.errors import InputError, ModelLoadError
from attnviz.methods import attn_res_ln, flow, rollout, with_residual
from attnviz.trace import trace

from conftest import FAMILIES, SENTENCE

POST = ["bert", "bert-cls", "bert-base", "roberta", "electra", "distilbert"]
PRE = ["gpt2", "llama", "mistral", "qwen2"]


# ---------------------------------------------------------------- the trace reproduces the model
@pytest.mark.parametrize("family", FAMILIES)
def test_self_check_and_trace_match_model(make_tiny, family):
    lm = make_tiny(family)
    assert lm.check.ok, lm.check.reason
    assert lm.check.max_rel_err < 1e-5
    tr = trace(lm, SENTENCE)
    with torch.no_grad():
        out = lm.model(input_ids=tr.enc.ids, output_hidden_states=True, output_attentions=True)
    L = len(tr.layers)
    for l in range(L):
        ours = tr.layers[l].resid_out
        if l == L - 1 and lm.arch.final_norm is not None:
            ours = torch.nn.functional.layer_norm(ours, ours.shape[-1:], lm.arch.final_norm.weight,
                                                  lm.arch.final_norm.bias, lm.arch.final_norm.eps) \
                if lm.arch.final_norm.kind == "layernorm" else \
                ours * torch.rsqrt(ours.pow(2).mean(-1, keepdim=True) + lm.arch.final_norm.eps) * lm.arch.final_norm.weight
        ref = out.hidden_states[l + 1][0]
        assert torch.allclose(ours, ref, rtol=0, atol=1e-5 * ref.abs().max()), (family, l)
        assert torch.allclose(tr.layers[l].probs, out.attentions[l][0], atol=1e-6)
    if lm.task != "encoder":
        assert lm.check.logits_rel_err is not None and lm.check.logits_rel_err < 1e-5


def test_minilm_self_check(minilm):
    assert minilm.check.ok and minilm.check.max_rel_err < 1e-5
    assert minilm.n_layers == 6 and minilm.n_heads == 12 and minilm.task == "encoder"


# ---------------------------------------------------------------- rollout and flow
def _plain_rollout(A):
    L, n, _ = A.shape
    out = []
    R = None
    for l in range(L):
        Al = [[0.5 * A[l, i, j] + (0.5 if i == j else 0.0) for j in range(n)] for i in range(n)]
        if R is None:
            R = Al
        else:
            R = [[sum(Al[i][k] * R[k][j] for k in range(n)) for j in range(n)] for i in range(n)]
        out.append(np.array(R))
    return np.stack(out)


def _random_attention(L, n, seed, peaked=4.0):
    rng = np.random.default_rng(seed)
    A = rng.random((L, n, n)) ** peaked
    return A / A.sum(-1, keepdims=True)


def _nx_flow(A, normalize=True):
    """The paper's way: a networkx DiGraph, edmonds_karp max-flow per (output, input) pair."""
    L, n, _ = A.shape
    G = nx.DiGraph()
    for l in range(1, L + 1):
        for i in range(n):
            for j in range(n):
                G.add_edge((l, i), (l - 1, j), capacity=0.5 * A[l - 1, i, j] + (0.5 if i == j else 0.0))
    out = np.zeros((L, n, n))
    for l in range(1, L + 1):
        for i in range(n):
            for j in range(n):
                out[l - 1, i, j] = nx.maximum_flow_value(G, (l, i), (0, j), flow_func=nx.algorithms.flow.edmonds_karp)
    if normalize:
        out /= out.sum(-1, keepdims=True)
    return out


def test_rollout_matches_plain_loops():
    A = _random_attention(4, 5, 0)
    np.testing.assert_allclose(rollout(A), _plain_rollout(A), rtol=0, atol=1e-12)
    assert np.allclose(rollout(A).sum(-1), 1.0)


@pytest.mark.parametrize("seed,L,n", [(1, 3, 5), (2, 4, 4), (3, 2, 7)])
def test_flow_matches_networkx_edmonds_karp(seed, L, n):
    A = _random_attention(L, n, seed)
    ref_raw = _nx_flow(A, normalize=False)
    np.testing.assert_allclose(flow(A, normalize=False, workers=1), ref_raw, rtol=0, atol=1e-9)
    ref = ref_raw / ref_raw.sum(-1, keepdims=True)
    np.testing.assert_allclose(flow(A, workers=1), ref, rtol=0, atol=1e-9)
    # the first layer's flow is the rollout's first layer (one edge per pair)
    np.testing.assert_allclose(flow(A, workers=1)[0], rollout(A)[0], atol=1e-12)
    # a subset of layers, in the order asked
    np.testing.assert_allclose(flow(A, layers=[L - 1, 0], workers=1), ref[[L - 1, 0]], atol=1e-9)


@pytest.mark.slow  # starts a process pool
def test_flow_pool_equals_serial():
    from attnviz.methods.flow import _solve

    Ares = with_residual(_random_attention(6, 12, 7))
    pairs = [(i, j) for i in range(12) for j in range(12)]
    assert _solve(Ares, 5, pairs, workers=2) == _solve(Ares, 5, pairs, workers=1)


def test_flow_bounds_settle_pairs_exactly():
    # deep and dense enough that upper layers are settled by bounds, not max-flow calls
    A = _random_attention(8, 5, 11, peaked=2.0)
    stats = {}
    ours = flow(A, normalize=False, workers=1, stats=stats)
    assert stats["bounded_pairs"] > 0 and stats["maxflow_pairs"] > 0
    np.testing.assert_allclose(ours, _nx_flow(A, normalize=False), rtol=0, atol=1e-9)


def test_flow_dense_upper_layers_saturate_at_input_capacity():
    # dense attention: the cut sits at each input node's in-capacity, so upper rows become identical
    A = np.full((4, 5, 5), 0.2)
    f = flow(A, normalize=False, workers=1)
    in_cap = (0.5 * A[0] + 0.5 * np.eye(5)).sum(0)
    np.testing.assert_allclose(f[3], np.broadcast_to(np.minimum(in_cap, 1.0), (5, 5)), atol=1e-12)


def test_flow_on_model_attention_matches_networkx(make_tiny):
    a = attnviz.analyze(make_tiny("bert"), "the cat sat .", methods=["attention", "flow"])
    A = a.maps["attention"].layer
    np.testing.assert_allclose(a.maps["flow"].layer, _nx_flow(A), atol=1e-9)


def test_flow_rejects_bad_input():
    with pytest.raises(ValueError):
        flow(np.ones((3, 4)))
    with pytest.raises(ValueError):
        flow(_random_attention(2, 3, 0), layers=[5])


# ---------------------------------------------------------------- norms, written out with loops
def _bert_head_vectors(model, l, x):
    """f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h from the HF module's own weights, with explicit loops."""
    layer = model.bert.encoder.layer[l] if hasattr(model, "bert") else model.encoder.layer[l]
    Wv, bv = layer.attention.self.value.weight, layer.attention.self.value.bias
    Wo = layer.attention.output.dense.weight
    H = model.config.num_attention_heads
    dh = model.config.hidden_size // H
    n = x.shape[0]
    f = torch.zeros(H, n, x.shape[1], dtype=torch.float64)
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        for j in range(n):
            v = x[j].double() @ Wv[sl].double().T + bv[sl].double()
            f[h, j] = v @ Wo[:, sl].double().T
    return f


def test_value_norm_and_attn_res_match_kobayashi_loops(make_tiny):
    lm = make_tiny("bert")
    a = attnviz.analyze(lm, SENTENCE)
    with torch.no_grad():
        out = lm.model(input_ids=lm.tokenizer(SENTENCE, return_tensors="pt")["input_ids"],
                       output_hidden_states=True, output_attentions=True)
    for l in range(2):
        x = out.hidden_states[l][0]
        alpha = out.attentions[l][0].double()
        f = _bert_head_vectors(lm.model, l, x)
        H, n = alpha.shape[0], alpha.shape[1]
        for i in range(n):
            for j in range(n):
                for h in range(H):
                    ref = (alpha[h, i, j] * f[h, j]).norm().item()
                    assert abs(a.maps["value_norm"].heads[l, h, i, j] - ref) < 1e-5 * max(1, ref)
                s = sum(alpha[h, i, j] * f[h, j] for h in range(H))
                assert abs(a.maps["value_norm"].layer[l, i, j] - s.norm().item()) < 1e-5
                z = s + (x[i].double() if i == j else 0)
                assert abs(a.maps["attn_res"].layer[l, i, j] - z.norm().item()) < 1e-4


def _real_attention_block_outputs(lm, ids):
    """The model's own post-attention vectors via forward hooks (tests only): post-LN families give the
    attention LayerNorm's output, pre-LN families the residual stream entering the second norm."""
    m = lm.model
    base = m.base_model
    fam = lm.family
    captured = []
    if fam in ("bert", "roberta", "electra"):
        mods = [l.attention.output.LayerNorm for l in base.encoder.layer]
        hook = lambda mod, inp, out: captured.append(out[0].detach())  # noqa: E731
        hs = [mod.register_forward_hook(hook) for mod in mods]
    elif fam == "distilbert":
        mods = [l.sa_layer_norm for l in base.transformer.layer]
        hook = lambda mod, inp, out: captured.append(out[0].detach())  # noqa: E731
        hs = [mod.register_forward_hook(hook) for mod in mods]
    else:
        mods = [b.ln_2 for b in base.h] if fam == "gpt2" else [l.post_attention_layernorm for l in base.layers]
        hook = lambda mod, inp: captured.append(inp[0][0].detach())  # noqa: E731
        hs = [mod.register_forward_pre_hook(hook) for mod in mods]
    try:
        with torch.no_grad():
            m(input_ids=ids)
    finally:
        for h in hs:
            h.remove()
    return captured


@pytest.mark.parametrize("family", POST + PRE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attn_res_ln_parts_plus_remainder_reproduce_real_output(make_tiny, family, dtype):
    lm = make_tiny(family)
    tr = trace(lm, SENTENCE, dtype=dtype)
    real = _real_attention_block_outputs(lm, tr.enc.ids)
    amap = attn_res_ln.compute(tr).layer
    for l in range(len(tr.layers)):
        parts, rem = attn_res_ln.parts(tr, l)
        total = parts.sum(1) + rem
        ref = real[l].double()
        rel = float((total - ref).abs().max() / ref.abs().max())
        assert rel < 1e-4, (family, l, rel)
        np.testing.assert_allclose(amap[l], parts.norm(dim=-1).numpy(), rtol=1e-6, atol=1e-7)


def test_attn_res_ln_identity_on_minilm(minilm):
    tr = trace(minilm, "the author talked to sara about her book .")
    real = _real_attention_block_outputs(minilm, tr.enc.ids)
    for l in range(6):
        parts, rem = attn_res_ln.parts(tr, l)
        ref = real[l].double()
        assert float(((parts.sum(1) + rem) - ref).abs().max() / ref.abs().max()) < 1e-4


def test_mixing_ratios_match_plain_formula(make_tiny):
    lm = make_tiny("bert")
    a = attnviz.analyze(lm, SENTENCE, keep_trace=True)
    tr = a.trace
    for l in range(2):
        parts, _ = attn_res_ln.parts(tr, l)
        alpha = tr.attentions[l].double()
        f = tr.fx[l].double()
        x = tr.layers[l].resid_in.double()
        n = alpha.shape[-1]
        for i in range(n):
            vec = [sum(alpha[h, i, j] * f[h, j] for h in range(alpha.shape[0])) for j in range(n)]
            mix = sum(vec[j] for j in range(n) if j != i)
            r = lambda m, p: m.norm() / (m.norm() + p.norm())  # noqa: E731
            assert abs(a.mixing["Attn-N"][l, i] - r(mix, vec[i]).item()) < 1e-6
            assert abs(a.mixing["AttnRes-N"][l, i] - r(mix, vec[i] + x[i]).item()) < 1e-6
            pm = sum(parts[i, j] for j in range(n) if j != i)
            assert abs(a.mixing["AttnResLn-N"][l, i] - r(pm, parts[i, i]).item()) < 1e-6
            assert abs(a.mixing["Attn-W"][l, i] - (1 - alpha.mean(0)[i, i].item())) < 1e-6
            assert abs(a.mixing["AttnRes-W"][l, i] - (1 - alpha.mean(0)[i, i].item()) / 2) < 1e-6


# ---------------------------------------------------------------- failures are detected and explained
def test_corrupted_model_disables_decompositions(tokenizer):
    import transformers as T
    from attnviz.models.load import wrap

    from conftest import tiny_configs

    cls, cfg = tiny_configs(tokenizer.vocab_size)["bert"]
    torch.manual_seed(0)
    model = cls._from_config(cfg, attn_implementation="eager")
    # the module now computes something the config (and so our reader) does not say
    model.bert.encoder.layer[1].intermediate.intermediate_act_fn = torch.nn.ReLU()
    lm = wrap(model, tokenizer, spec="corrupt")
    assert not lm.check.ok
    assert "layer 2" in lm.check.reason
    a = attnviz.analyze(lm, SENTENCE)
    assert set(a.disabled) == {m for m, info in attnviz.METHODS.items() if info.decomposition}
    assert {"value_norm", "attn_res", "attn_res_ln"} <= set(a.disabled)
    assert {"attention", "rollout", "flow"} <= set(a.maps)
    assert any("disabled" in n for n in a.notes)
    assert a.mixing == {}
    # raw attention is still the model's own
    with torch.no_grad():
        out = model(input_ids=tokenizer(SENTENCE, return_tensors="pt")["input_ids"], output_attentions=True)
    np.testing.assert_allclose(a.maps["attention"].heads[1], out.attentions[1][0].numpy(), atol=1e-7)


def test_unsupported_architecture_offers_raw_attention(tmp_path, tokenizer):
    import transformers as T

    cfg = T.AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    T.AlbertForMaskedLM(cfg).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    lm = attnviz.load_model(str(tmp_path))
    assert lm.arch is None and "albert" in lm.unsupported_reason
    a = attnviz.analyze(lm, SENTENCE)
    assert {"attention", "rollout", "flow"} <= set(a.maps)
    assert "value_norm" in a.disabled and "no reader" in a.disabled["value_norm"]
    assert a.prediction  # the model's own output still shown


def test_local_folder_roundtrip(tmp_path, make_tiny):
    lm = make_tiny("gpt2")
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    lm2 = attnviz.load_model(str(tmp_path))
    assert lm2.check.ok and lm2.task == "causal_lm"
    a1 = attnviz.analyze(lm, "the cat sat on the")
    a2 = attnviz.analyze(lm2, "the cat sat on the")
    np.testing.assert_allclose(a1.maps["attn_res_ln"].layer, a2.maps["attn_res_ln"].layer, atol=1e-6)


@pytest.mark.parametrize("spec,expected", [
    ("builtin:does-not-exist", "unknown built-in model 'does-not-exist'"),
    ("pkg:nothing", "unknown packaged model"),
    ("./no/such/folder", "no such model folder"),
    ("", "no model given"),
    ("not a valid id!!", "neither a built-in model, a local folder nor a valid Hugging Face id"),
])
def test_bad_specs_give_one_line_errors(spec, expected):
    with pytest.raises(ModelLoadError) as e:
        attnviz.load_model(spec)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        attnviz.load_model(str(tmp_path))


def test_hub_unreachable_says_use_a_local_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # empty cache
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    import attnviz.models.load as load

    monkeypatch.setattr(load, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(ModelLoadError) as e:
        attnviz.load_model("someorg/some-model")
    assert "cannot reach the Hugging Face hub" in str(e.value) and "folder" in str(e.value)
    # and the reachability probe itself answers False for a closed local port, quickly
    monkeypatch.undo()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert load._hub_reachable(timeout=1.0) is False


# ---------------------------------------------------------------- text input
@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text(make_tiny, text):
    with pytest.raises(InputError, match="empty"):
        attnviz.analyze(make_tiny("bert"), text)


def test_too_long_text(make_tiny):
    with pytest.raises(InputError, match="limit is 20 tokens"):
        attnviz.analyze(make_tiny("bert"), "word " * 40, max_tokens=20)
    with pytest.raises(InputError, match="model maximum 64"):
        attnviz.analyze(make_tiny("bert"), "word " * 100, max_tokens=128)


@pytest.mark.parametrize("text", ["🙂🙂 the cat [MASK] .", "مرحبا بالعالم", "zero\u200bwidth\u200d [MASK]",
                                  "<script>alert(1)</script> [MASK]", "\u202eevil [MASK]"])
def test_odd_text_does_not_crash(make_tiny, text):
    a = attnviz.analyze(make_tiny("bert"), text)
    n = len(a.tokens)
    assert a.maps["flow"].layer.shape == (2, n, n)
    assert np.isfinite(a.maps["attn_res_ln"].layer).all()


def test_target_defaults(make_tiny):
    assert attnviz.analyze(make_tiny("bert"), "the cat sat .", methods=["attention"]).target == 0  # [CLS]
    a = attnviz.analyze(make_tiny("bert"), SENTENCE, methods=["attention"])
    assert a.tokens[a.target] == "[MASK]"
    a = attnviz.analyze(make_tiny("bert"), SENTENCE, methods=["attention"], target=2)
    assert a.target == 2
    with pytest.raises(InputError):
        attnviz.analyze(make_tiny("bert"), SENTENCE, methods=["attention"], target=99)


# ---------------------------------------------------------------- thread safety
def test_eight_threads_equal_sequential(make_tiny):
    lm = make_tiny("llama")
    texts = [f"sentence number {k} about the {w} [MASK] here" for k, w in
             enumerate(["cat", "dogs", "key", "cabinets", "author", "book", "table", "sara"])]
    seq = [attnviz.analyze(lm, t) for t in texts]
    results = [None] * len(texts)
    barrier = threading.Barrier(len(texts))

    def work(k):
        barrier.wait()
        results[k] = attnviz.analyze(lm, texts[k])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s, r in zip(seq, results):
        assert s.tokens == r.tokens
        for m in s.maps:
            np.testing.assert_array_equal(s.maps[m].layer, r.maps[m].layer)
        for k in s.mixing:
            np.testing.assert_array_equal(s.mixing[k], r.mixing[k])


def test_analyze_progress_moves_forward_to_one(make_tiny):
    """progress(stage, fraction): fractions never go back, every computed method is named, the FFN
    split reports per layer, and the last call is ("done", 1.0)."""
    import attnviz

    lm = make_tiny("bert")
    calls = []
    attnviz.analyze(lm, "the keys to the cabinet [MASK] on the table .", progress=lambda s, f: calls.append((s, f)))
    fr = [f for _, f in calls]
    assert fr == sorted(fr) and 0 < fr[0] and calls[-1] == ("done", 1.0)
    assert {s for s, _ in calls} >= set(attnviz.METHODS)
    assert sum(1 for s, _ in calls if s == "atb_ff") >= lm.n_layers


def test_analyze_progress_gives_a_method_its_estimated_share(make_tiny, monkeypatch):
    """A method with its own estimate in seconds (flow) gets its share of the progress bar against the
    trace's measured time: estimated at 1000 s, flow starts the bar near 0, not at 2/3 (the trace's
    2 units of 3); estimated at 0 s it keeps its rough class cost (1 unit: flow starts at 2/3)."""
    import dataclasses

    import attnviz
    from attnviz.methods import METHODS

    lm = make_tiny("bert")
    text = "the keys to the cabinet [MASK] on the table ."
    info = METHODS["flow"]
    for est, first in ((1000.0, lambda f: f < 0.01), (0.0, lambda f: f == pytest.approx(2 / 3))):
        monkeypatch.setitem(METHODS, "flow", dataclasses.replace(info, estimate=lambda lm_, n, e=est: e))
        calls = []
        attnviz.analyze(lm, text, methods=["flow"], progress=lambda s, f: calls.append((s, f)))
        start = next(f for s, f in calls if s == "flow")
        assert first(start), (est, start)
        fr = [f for _, f in calls]
        assert fr == sorted(fr) and calls[-1] == ("done", 1.0)
