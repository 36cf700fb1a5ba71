"""Contextualization change (against a hand-written Spearman), corpus means (against plain loops),
and the Context mixing page (AppTest: the figures carry the library's numbers)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import open_app_page, plotly_array
from attnviz import context
from attnviz.methods import METHODS, atb_ff
from attnviz.trace import trace

from conftest import SENTENCE

ROOT = Path(__file__).resolve().parent.parent


def _ratios(tr, steps=atb_ff.DEFAULT_STEPS):
    """Every declared ratio from its own method's mixing_ratios, one method at a time."""
    out = {}
    for info in METHODS.values():
        if info.ratios:
            out.update(info.mixing_ratios(tr, **({"steps": steps} if "steps" in info.option_names() else {})))
    return out


def _ranks(x):
    """Average ranks (1-based), ties share the mean of their positions: plain loops."""
    n = len(x)
    return [1 + sum(1 for b in x if b < a) + (sum(1 for b in x if b == a) - 1) / 2 for a in x]


def _spearman(x, y):
    rx, ry = _ranks(list(x)), _ranks(list(y))
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den


def test_contextualization_change_against_plain_spearman():
    rng = np.random.default_rng(0)
    L, n = 3, 7
    a = rng.random((L, n, n))
    b = a + 0.3 * rng.random((L, n, n))
    b[1] = np.round(b[1], 1)  # ties
    a[2] = -a[2]  # anti-correlated layer
    got = context.contextualization_change(a, b)
    for l in range(L):
        assert abs(got[l] - (1 - _spearman(a[l].ravel(), b[l].ravel()))) < 1e-12
    assert got[2] > 1.0
    # causal: only j <= i
    got_c = context.contextualization_change(a, b, causal=True)
    for l in range(L):
        xs = [a[l, i, j] for i in range(n) for j in range(i + 1)]
        ys = [b[l, i, j] for i in range(n) for j in range(i + 1)]
        assert abs(got_c[l] - (1 - _spearman(xs, ys))) < 1e-12
    assert np.allclose(context.contextualization_change(a, a), 0.0)
    flat = np.ones((1, 3, 3))
    assert np.isnan(context.contextualization_change(flat, rng.random((1, 3, 3)))[0])
    with pytest.raises(ValueError):
        context.contextualization_change(a, b[:, :5, :5])


def test_sentences_file():
    s = context.load_sentences()
    assert len(s) >= 100 and all(x.strip() == x and x for x in s)
    assert context.load_sentences(limit=5) == s[:5]


def test_corpora():
    for name in context.CORPORA:
        s = context.load_corpus(name, limit=4)
        assert len(s) == 4 and all(isinstance(x, str) and x for x in s)
    assert all("[MASK]" in x for x in context.load_corpus("agreement", limit=20))
    with pytest.raises(context.InputError):
        context.load_corpus("wikipedia")


def test_corpus_means_plain(make_tiny):
    lm = make_tiny("bert")
    sents = ["the cat sat on the mat .", "a dog barked at night .", "we went home early today ."]
    cm = context.corpus_mixing(lm, sents, steps=16)
    cm_ns = context.corpus_mixing(lm, sents, steps=16, exclude_special=True)
    L = lm.n_layers
    sums = {k: [0.0] * L for k in context.ALL_RATIOS}
    sums_ns = {k: [0.0] * L for k in context.ALL_RATIOS}
    count = count_ns = 0
    for s in sents:
        tr = trace(lm, s)
        rat = _ratios(tr, 16)
        for k, v in rat.items():
            for l in range(L):
                for i in range(v.shape[1]):
                    sums[k][l] += v[l, i]
                    if not tr.enc.special[i]:
                        sums_ns[k][l] += v[l, i]
        count += len(tr.tokens)
        count_ns += int((~tr.enc.special).sum())
    for k in context.ALL_RATIOS:
        for l in range(L):
            assert abs(cm.per_layer[k][l] - sums[k][l] / count) < 1e-12
            assert abs(cm_ns.per_layer[k][l] - sums_ns[k][l] / count_ns) < 1e-12
        assert abs(cm.overall[k] - sum(sums[k]) / count / L) < 1e-12
    assert cm.n_sentences == 3 and cm.n_tokens == count and cm.max_completeness < 1e-3
    assert "AtbFfResLn-N" in context.table({"tiny": cm})


def test_sentence_mixing_causal(make_tiny):
    lm = make_tiny("gpt2")
    sm = context.sentence_mixing(lm, "the dogs in the garden are happy")
    tr = trace(lm, "the dogs in the garden are happy")
    a = METHODS["attn_res_ln"].compute(tr).layer
    b = METHODS["atb_ff_res_ln"].compute(tr).layer
    assert sm.causal and np.allclose(sm.maps["atb_ff_res_ln"], b) and np.allclose(sm.maps["attn_res_ln"], a)
    n = a.shape[-1]
    for l in range(a.shape[0]):
        xs = [a[l, i, j] for i in range(n) for j in range(i + 1)]
        ys = [b[l, i, j] for i in range(n) for j in range(i + 1)]
        assert abs(sm.change[l] - (1 - _spearman(xs, ys))) < 1e-12
    assert set(sm.ratios) == set(context.ALL_RATIOS)


# ------------------------------------------------------------------------------ the page
_arr = plotly_array


def _charts(at):
    out = {}
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        out[spec["layout"].get("meta") or spec["layout"].get("title", {}).get("text")] = spec
    return out


def test_context_mixing_page(minilm):
    at = open_app_page("context_mixing", "pkg:minilm", SENTENCE)
    assert not at.exception, [e.value for e in at.exception]
    charts = _charts(at)
    # reference: the library on an independent trace of the same text
    tr = trace(minilm, SENTENCE)
    rat = _ratios(tr)
    L, n = rat["Attn-W"].shape
    lines = {t["name"]: t for t in charts["sentence_lines"]["data"]}
    assert set(lines) == set(context.ALL_RATIOS)
    for k, t in lines.items():
        assert list(_arr(t["x"])) == list(range(1, L + 1))
        assert np.allclose(_arr(t["y"]), 100 * rat[k].mean(1), atol=1e-9), k
    # Attn-W straight from the model's own attention: 1 - mean_h α_ii
    att = tr.attention()
    assert np.allclose(_arr(lines["Attn-W"]["y"]), [100 * (1 - np.mean([att[l].mean(0)[i, i] for i in range(n)]))
                                              for l in range(L)], atol=1e-4)
    hm = charts["token_heatmap"]["data"][0]
    assert np.allclose(_arr(hm["z"]), 100 * rat["AtbFfResLn-N"].T, atol=1e-9)
    assert len(hm["y"]) == n and hm["y"][0].startswith("0·")
    # side-by-side maps at layer 1 and the contextualization change per layer
    maps = next(s for s in charts.values() if len(s["data"]) == 2)
    A = METHODS["attn_res_ln"].compute(tr).layer
    B = METHODS["atb_ff_res_ln"].compute(tr).layer
    assert np.allclose(_arr(maps["data"][0]["z"]), A[0], atol=1e-9)
    assert np.allclose(_arr(maps["data"][1]["z"]), B[0], atol=1e-6)
    ch = _arr(charts["change"]["data"][0]["y"])
    for l in range(L):
        assert abs(ch[l] - (1 - _spearman(A[l].ravel(), B[l].ravel()))) < 1e-6
    # the layer slider redraws the maps for another layer
    at.slider(key="cm_layer").set_value(L)
    at.run()
    maps = next(s for s in _charts(at).values() if len(s["data"]) == 2)
    assert np.allclose(_arr(maps["data"][1]["z"]), B[L - 1], atol=1e-6)
    # the corpus over 3 sentences, with its progress and table
    at.number_input(key="cm_corpus_n").set_value(3)
    at.run()
    at.button(key="cm_corpus_go").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    corpus = {t["name"]: t for t in _charts(at)["corpus_lines"]["data"]}
    sents = context.load_sentences(limit=3)
    sums, count = {k: np.zeros(L) for k in context.ALL_RATIOS}, 0
    for s in sents:
        t2 = trace(minilm, s)
        r2 = _ratios(t2)
        for k in sums:
            sums[k] += r2[k].sum(1)
        count += len(t2.tokens)
    for k in context.ALL_RATIOS:
        assert np.allclose(_arr(corpus[k]["y"]), 100 * sums[k] / count, atol=1e-9), k
    table = at.dataframe[0].value
    row = table[table["method"] == "AttnResLn-N"].iloc[0]
    assert row["BERT-base, Kobayashi et al. 2021 (%)"] == 18.8
    assert abs(row["mean ratio (%)"] - round(100 * (sums["AttnResLn-N"] / count).mean(), 1)) < 1e-9


def test_context_mixing_page_says_its_estimate_and_waits_when_long(minilm):
    """Over ASK_SECONDS the split waits for a button that names the estimate; after the click the page
    draws the same ratios as the library on the text."""
    from attnviz.app import ui

    old = ui.ASK_SECONDS
    ui.ASK_SECONDS = 0.0
    ui.RESULTS.clear()
    try:
        at = open_app_page("context_mixing", "pkg:minilm", SENTENCE)
        assert not at.exception, [e.value for e in at.exception]
        assert any("would take about" in w.value and "per-source parts" in w.value.replace("\\", "") for w in at.warning)
        assert "sentence_lines" not in _charts(at)
        btn = next(b for b in at.button if b.key and b.key.startswith("ask_go_context_mixing_"))
        btn.click().run()
        assert not at.exception, [e.value for e in at.exception]
        lines = {t["name"]: t for t in _charts(at)["sentence_lines"]["data"]}
        rat = dict(atb_ff.ratios(trace(minilm, SENTENCE)))
        assert np.allclose(_arr(lines["AtbFfResLn-N"]["y"]), 100 * rat["AtbFfResLn-N"].mean(1), atol=1e-9)
    finally:
        ui.ASK_SECONDS = old
