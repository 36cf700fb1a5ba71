"""Faithfulness: importance baselines against finite differences and explicit per-token loops,
integrated gradients against a plain Riemann loop and completeness, rank correlations against scipy,
and the resumable corpus study."""
from __future__ import annotations

import importlib
import json
import types

import numpy as np
import pytest
import scipy.stats
import torch

from attnviz import faithfulness as F
from attnviz.errors import AttnvizError, InputError
from attnviz.trace import encode

from conftest import SENTENCE, tiny_configs


# ---------------------------------------------------------------- helpers written plainly
def _double_model(tokenizer, family: str, seed: int = 1, init: float = 0.02):
    """A tiny random model in float64 (finite differences need the precision); a larger init scale
    gives peaked output distributions (the default one gives p ~ 1/vocab everywhere)."""
    from attnviz.models.load import wrap

    cls, cfg = tiny_configs(tokenizer.vocab_size)[family]
    cfg.initializer_range = init
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation="eager").double()
    return wrap(model, tokenizer, spec=f"tiny64:{family}", check=False)


def _plain_f(lm, embeds=None, ids=None, pos=0, ids_out=None, ref=None):
    """The target quantity for ONE input, written directly from the model's outputs."""
    kw = dict(inputs_embeds=embeds.unsqueeze(0)) if embeds is not None else dict(input_ids=ids.unsqueeze(0))
    with torch.no_grad():
        out = lm.model(**kw)
    if ref is not None:
        h = out.last_hidden_state[0, pos].double()
        return float(h @ ref.double() / (h.norm() * ref.double().norm()))
    logits = out.logits[0, pos] if out.logits.dim() == 3 else out.logits[0]
    p = torch.softmax(logits.double(), -1)
    return float(p[ids_out[0]] - p[ids_out[1]]) if len(ids_out) == 2 else float(p[ids_out[0]])


# ---------------------------------------------------------------- gradients vs finite differences
@pytest.mark.parametrize("contrast", [None, ("is", "are")])
def test_gradients_match_finite_differences(tokenizer, contrast):
    lm = _double_model(tokenizer, "bert")
    enc = encode(lm, "the keys [MASK] here .")
    imp = F.importance(lm, enc, baselines=["grad_norm", "input_x_grad"], contrast=contrast)
    ids_out = imp.target.ids
    if contrast:
        assert ids_out == tuple(tokenizer.convert_tokens_to_ids(list(contrast)))
    else:
        with torch.no_grad():
            assert ids_out[0] == int(lm.model(input_ids=enc.ids).logits[0, enc.target].argmax())
    e = lm.model.get_input_embeddings().weight[enc.ids[0]].detach().clone()
    n, d = e.shape
    h = 1e-6
    # central differences, every coordinate of every word embedding (all perturbed copies in one batch)
    step = h * torch.eye(n * d, dtype=torch.float64).view(n * d, n, d)
    with torch.no_grad():
        p_plus = torch.softmax(lm.model(inputs_embeds=e + step).logits[:, enc.target], -1)
        p_minus = torch.softmax(lm.model(inputs_embeds=e - step).logits[:, enc.target], -1)
    f = (lambda p: p[:, ids_out[0]] - p[:, ids_out[1]]) if contrast else (lambda p: p[:, ids_out[0]])
    g = ((f(p_plus) - f(p_minus)) / (2 * h)).view(n, d)
    pos = imp.positions
    assert list(pos) == [j for j in range(n) if not enc.special[j] and j != enc.target]
    np.testing.assert_allclose(imp.values["grad_norm"][pos], g.norm(dim=-1).numpy()[pos], rtol=1e-6)
    np.testing.assert_allclose(imp.signed["input_x_grad"][pos], (e * g).sum(-1).numpy()[pos], rtol=1e-5, atol=1e-12)
    assert np.isnan(imp.values["grad_norm"][enc.target]) and np.isnan(imp.values["grad_norm"][0])


@pytest.mark.parametrize("rows", [None, 5])
def test_hidden_target_jacobian_matches_finite_differences(tokenizer, rows, monkeypatch):
    """Plain encoder: the cosine's gradient vanishes, so gradient norm = ||∂h_t/∂e_j||_F, input×grad = ||J_j e_j||.
    rows=5: the Jacobian's rows are taken 5 at a time from one forward graph (several backward batches)."""
    if rows:
        monkeypatch.setattr(importlib.import_module("attnviz.faithfulness.importance"), "_CHUNK", rows)
    lm = _double_model(tokenizer, "bert-base")
    enc = encode(lm, "a dog [MASK] here .")
    imp = F.importance(lm, enc, baselines=["grad_norm", "input_x_grad"])
    assert imp.target.kind == "hidden" and "cosine" in imp.target.label
    assert any("zero at the unperturbed input" in s for s in imp.notes)
    e = lm.model.get_input_embeddings().weight[enc.ids[0]].detach().clone()
    n, d = e.shape
    t = enc.target

    eps = 1e-6
    step = eps * torch.eye(n * d, dtype=torch.float64).view(n * d, n, d)
    with torch.no_grad():
        hp = lm.model(inputs_embeds=e + step).last_hidden_state[:, t]
        hm = lm.model(inputs_embeds=e - step).last_hidden_state[:, t]
    J = ((hp - hm) / (2 * eps)).T.reshape(-1, n, d)  # [d_out, n, d]
    pos = imp.positions
    fro = torch.sqrt((J ** 2).sum((0, 2))).numpy()
    jvp = torch.stack([J[:, j, :] @ e[j] for j in range(n)]).norm(dim=-1).numpy()
    np.testing.assert_allclose(imp.values["grad_norm"][pos], fro[pos], rtol=1e-6)
    np.testing.assert_allclose(imp.values["input_x_grad"][pos], jvp[pos], rtol=1e-5)


# ---------------------------------------------------------------- blank-out / leave-one-out vs loops
@pytest.mark.parametrize("family,contrast", [("bert", None), ("bert", ("is", "are")), ("gpt2", None),
                                             ("bert-base", None), ("bert-cls", None)])
def test_blank_out_and_leave_one_out_match_per_token_loop(tokenizer, family, contrast):
    lm = _double_model(tokenizer, family)  # float64: random tiny models have tiny probabilities
    text = SENTENCE if family != "gpt2" else "the keys to the cabinet"
    enc = encode(lm, text)
    imp = F.importance(lm, enc, baselines=["blank_out", "leave_one_out"], contrast=contrast)
    assert imp.blank_token == "[UNK]"
    ids, t, n = enc.ids[0], enc.target, enc.ids.shape[1]
    ref = None
    if family == "bert-base":
        with torch.no_grad():
            ref = lm.model(input_ids=enc.ids).last_hidden_state[0, t]
    f0 = _plain_f(lm, ids=ids, pos=t, ids_out=imp.target.ids, ref=ref)
    assert imp.f0 == pytest.approx(f0, rel=1e-12)
    for j in range(n):
        attributed = not enc.special[j] and j != t
        if not attributed:
            assert np.isnan(imp.values["blank_out"][j]) and np.isnan(imp.values["leave_one_out"][j])
            continue
        blanked = ids.clone()
        blanked[j] = tokenizer.unk_token_id
        fb = _plain_f(lm, ids=blanked, pos=t, ids_out=imp.target.ids, ref=ref)
        assert imp.values["blank_out"][j] == pytest.approx(abs(fb - f0), rel=1e-6, abs=1e-15), j
        deleted = torch.cat([ids[:j], ids[j + 1:]])
        fl = _plain_f(lm, ids=deleted, pos=t - (j < t), ids_out=imp.target.ids, ref=ref)
        assert imp.signed["leave_one_out"][j] == pytest.approx(fl - f0, rel=1e-6, abs=1e-15), j
    if family == "gpt2":
        assert t == n - 1
    # something actually changes (the test could not pass on all-zero vectors)
    assert np.nanmin(imp.values["blank_out"]) > 0 and np.nanmin(np.abs(imp.signed["leave_one_out"])) > 0


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_leave_one_out_says_when_deletion_shifts_absolute_positions(make_tiny, family):
    """Deleting a token before the target moves the target one position; on a model with absolute
    position embeddings (BERT, GPT-2) a note says so, with the median |Δf| before and after the target
    computed here from the values; a rotary model (Llama) gets no such note."""
    lm = make_tiny(family)
    text = SENTENCE if family == "bert" else "the keys to the cabinet"
    enc = encode(lm, text)
    imp = F.importance(lm, enc, baselines=["leave_one_out"])
    notes = [s for s in imp.notes if "absolute position embeddings" in s]
    if family == "llama":
        assert notes == []
        return
    assert len(notes) == 1
    v, pos, t = imp.values["leave_one_out"], np.asarray(imp.positions), enc.target
    before = [abs(v[j]) for j in pos if j < t and np.isfinite(v[j])]  # values: one per token
    after = [abs(v[j]) for j in pos if j > t and np.isfinite(v[j])]
    assert f"median change here {np.median(before):.3g} for the {len(before)} tokens before" in notes[0]
    if after:
        assert f"against {np.median(after):.3g} for the {len(after)} after it" in notes[0]
    else:  # the target is the last token (causal): nothing after it to compare with
        assert "after it" not in notes[0]


def test_importance_figure_wraps_a_long_target_title():
    """A long target label is wrapped (it ran off a 1024 px screen on one line), escaped, and says the
    same words; the top margin grows with the lines."""
    from attnviz.figures import importance_figure

    label = ("cosine of the final hidden state at position 34 ([MASK]) to its unperturbed value, "
             "with a <b>token</b>")
    imp = types.SimpleNamespace(positions=[1, 2], tokens=["[CLS]", "a", "b"], target=types.SimpleNamespace(label=label),
                                values={"blank_out": np.array([np.nan, 0.1, 0.2])})
    fig = importance_figure(imp)
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) >= 2 and all(len(x) <= 64 + 20 for x in lines)  # + room for &lt; &gt;
    assert " ".join(lines) == "importance for " + label.replace("<", "&lt;").replace(">", "&gt;")
    assert fig.layout.margin.t == 70 + 18 * (len(lines) - 1)


def test_include_target_and_blank_token_fallback(make_tiny):
    lm = make_tiny("bert")
    enc = encode(lm, SENTENCE)
    imp = F.importance(lm, enc, baselines=["blank_out", "leave_one_out"], include_target=True)
    assert enc.target in imp.positions
    assert np.isfinite(imp.values["blank_out"][enc.target])
    assert np.isnan(imp.values["leave_one_out"][enc.target])
    assert any("cannot delete the target" in s for s in imp.notes)
    no_unk = types.SimpleNamespace(unk_token=None, unk_token_id=None, mask_token="<mask>", mask_token_id=7)
    assert F.blank_token(no_unk) == (7, "<mask>", "mask")
    pad_only = types.SimpleNamespace(pad_token="<pad>", pad_token_id=1)
    assert F.blank_token(pad_only) == (1, "<pad>", "pad")


def test_input_errors(make_tiny):
    lm = make_tiny("bert")
    with pytest.raises(InputError, match="not one token"):
        F.importance(lm, SENTENCE, contrast=("is", "xylophonically"))
    with pytest.raises(InputError, match="two words"):
        F.importance(lm, SENTENCE, contrast=("is",))
    with pytest.raises(InputError, match="no output head"):
        F.importance(make_tiny("bert-base"), SENTENCE, contrast=("is", "are"))
    with pytest.raises(InputError, match="no tokens to attribute"):
        F.importance(lm, "[MASK]")


# ---------------------------------------------------------------- integrated gradients
def test_integrated_gradients_completeness_and_plain_riemann(tokenizer):
    lm = _double_model(tokenizer, "bert", seed=3, init=0.3)
    enc = encode(lm, SENTENCE)
    imp = F.importance(lm, enc, baselines=["integrated_gradients"], ig_steps=32)
    pos = imp.positions
    ids_out = imp.target.ids
    e = lm.model.get_input_embeddings().weight[enc.ids[0]].detach().clone()
    base = e.clone()
    base[pos] = 0.0
    f_e = _plain_f(lm, e, pos=enc.target, ids_out=ids_out)
    f_b = _plain_f(lm, base, pos=enc.target, ids_out=ids_out)
    ig = imp.signed["integrated_gradients"][pos]
    # completeness: Σ_j IG_j = f(e) - f(e') with both ends from plain forwards
    assert abs(f_e - f_b) > 1e-3  # a non-trivial path
    assert abs(ig.sum() - (f_e - f_b)) < 1e-6 * abs(f_e - f_b)
    assert imp.ig["completeness_abs"] == pytest.approx(abs(ig.sum() - (f_e - f_b)), abs=1e-14)
    assert imp.ig["f_input"] == pytest.approx(f_e, rel=1e-12) and imp.ig["f_baseline"] == pytest.approx(f_b, rel=1e-12)
    # per-token values against a plain midpoint Riemann sum, one gradient per step
    m = 100
    gsum = torch.zeros_like(e)
    for k in range(m):
        a = (k + 0.5) / m
        x = (base + a * (e - base)).clone().requires_grad_(True)
        logits = lm.model(inputs_embeds=x.unsqueeze(0)).logits[0, enc.target]
        p = torch.softmax(logits, -1)
        (g,) = torch.autograd.grad(p[ids_out[0]], x)
        gsum += g / m
    plain = ((e - base) * gsum).sum(-1).detach().numpy()[pos]
    np.testing.assert_allclose(ig, plain, rtol=1e-3, atol=1e-4 * np.abs(plain).max())


def test_integrated_gradients_error_shrinks_with_steps(make_tiny):
    lm = make_tiny("bert")
    errs = [F.importance(lm, SENTENCE, baselines=["integrated_gradients"], ig_steps=s, ig_tol=0).ig["completeness_abs"]
            for s in (1, 16)]
    assert errs[1] < errs[0]
    assert errs[1] < 1e-5


# ---------------------------------------------------------------- correlations vs plain formulas
def _avg_ranks(x):
    """1-based ranks, tied values sharing the mean of their ranks (written out, O(n^2))."""
    return np.array([1 + sum(v < u for v in x) + (sum(v == u for v in x) - 1) / 2 for u in x])


def _plain_spearman(x, y):
    rx, ry = _avg_ranks(x), _avg_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return (rx * ry).sum() / np.sqrt((rx * rx).sum() * (ry * ry).sum())


def _plain_tau_b(x, y):
    n = len(x)
    pairs = [(np.sign(x[i] - x[j]), np.sign(y[i] - y[j])) for i in range(n) for j in range(i + 1, n)]
    num = sum(a * b for a, b in pairs)
    return num / np.sqrt(sum(a * a for a, _ in pairs) * sum(b * b for _, b in pairs))


def test_rank_correlations_match_plain_formulas():
    rng = np.random.default_rng(0)
    cases = [(rng.normal(size=12), rng.normal(size=12)),
             (np.array([1, 2, 2, 3, 5, 5, 5, 8.0]), np.array([3, 1, 4, 1, 5, 9, 2, 6.0])),  # ties in both
             (np.arange(6.0), np.arange(6.0)[::-1]),
             (rng.integers(0, 3, 20).astype(float), rng.normal(size=20))]
    for x, y in cases:
        rho, tau, k, why = F.rank_corr(x, y)
        assert why is None and k == len(x)
        assert rho == pytest.approx(_plain_spearman(x, y), abs=1e-12)
        assert tau == pytest.approx(_plain_tau_b(x, y), abs=1e-12)
    assert F.rank_corr(np.arange(6.0), np.arange(6.0)[::-1])[:2] == pytest.approx((-1.0, -1.0))


def test_undefined_correlations_are_nan_with_reason():
    rho, tau, k, why = F.rank_corr(np.ones(5), np.arange(5.0))
    assert np.isnan(rho) and np.isnan(tau) and "map row is constant" in why
    rho, _, _, why = F.rank_corr(np.arange(5.0), np.zeros(5))
    assert np.isnan(rho) and "importance is constant" in why
    rho, _, k, why = F.rank_corr(np.array([1.0, np.nan, 2.0]), np.array([1.0, 2.0, np.nan]))
    assert np.isnan(rho) and k == 1 and "only 1 token" in why
    # NaN pairs are dropped, the rest correlated
    x = np.array([1.0, 2.0, np.nan, 4.0, 3.0])
    y = np.array([2.0, 1.0, 5.0, 4.0, 3.0])
    rho, _, k, why = F.rank_corr(x, y)
    ok = np.isfinite(x)
    assert k == 4 and rho == pytest.approx(_plain_spearman(x[ok], y[ok]))


def test_correlate_uses_the_target_row_over_attributed_tokens():
    rng = np.random.default_rng(1)
    L, n, t = 3, 7, 4
    A = rng.random((L, n, n))
    A[1, t, :] = 0.5  # a constant row -> undefined at layer 2
    special = np.zeros(n, bool)
    special[[0, n - 1]] = True
    pos = np.array([1, 2, 3, 5])
    v = np.full(n, np.nan)
    v[pos] = rng.random(4)
    imp = F.Importance(tokens=[f"t{i}" for i in range(n)], special=special, target=F.Target("prob", t, (0,)),
                       positions=pos, values={"blank_out": v}, signed={}, f0=0.5)
    c = F.correlate({"m": A}, imp)
    for l in (0, 2):
        assert c.rho[0, l, 0] == pytest.approx(scipy.stats.spearmanr(A[l, t, pos], v[pos]).statistic)
        assert c.tau[0, l, 0] == pytest.approx(scipy.stats.kendalltau(A[l, t, pos], v[pos]).statistic)
    assert np.isnan(c.rho[0, 1, 0]) and ("m", 1, "blank_out") in c.reasons
    assert c.n_undefined() == 1 and "m L2 vs blank_out" in c.notes()[0]
    B = A.copy()
    B[:, t, pos] = -A[:, t, pos]
    B[1, t, pos] = np.arange(4.0)
    c2 = F.correlate({"a": A, "b": B}, imp)
    best = c2.best()
    for l in (0, 2):
        assert best[l, 0] == int(np.argmax([c2.rho[0, l, 0], c2.rho[1, l, 0]]))
    assert best[1, 0] == 1  # a's row is constant there: b is the only defined one


# ---------------------------------------------------------------- one sentence, end to end
def test_score_sentence_on_maps(make_tiny):
    lm = make_tiny("bert")
    r = F.score_sentence(lm, SENTENCE, ig_steps=8)
    assert r.correlations.methods == list(F.CORE_METHODS)
    assert r.correlations.rho.shape == (6, 2, 5)
    # raw attention's row against blank-out, from the model's own attentions and scipy
    with torch.no_grad():
        out = lm.model(input_ids=encode(lm, SENTENCE).ids, output_attentions=True)
    t, pos = r.importance.target.position, r.importance.positions
    for l in range(2):
        row = out.attentions[l][0].mean(0)[t].double().numpy()[pos]
        ref = scipy.stats.spearmanr(row, r.importance.values["blank_out"][pos]).statistic
        assert r.correlations.rho[0, l, 0] == pytest.approx(ref, abs=1e-9)
    # layer 1: rollout and flow rows are the same (0.5 ᾱ + 0.5 I) -> same correlations
    np.testing.assert_allclose(r.correlations.rho[1, 0], r.correlations.rho[2, 0])
    d = r.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["target_kind"] == "prob" and len(d["importance"]["blank_out"]) == len(d["tokens"])


# ---------------------------------------------------------------- the corpus study
ITEMS = [dict(text="the key to the cabinets [MASK] here .", answer="is", wrong="are"),
         dict(text="the keys [MASK] on the table .", answer="are", wrong="is"),
         dict(text="a dog near the cats [MASK] .", answer="is", wrong="are"),
         "the cat [MASK] on the mat .",
         dict(text="the teacher of the students [MASK] tired .", answer="is", wrong="are")]


def test_study_summary_matches_per_sentence_results(make_tiny, tmp_path):
    lm = make_tiny("bert")
    calls = []
    res = F.study(lm, ITEMS, baselines=["blank_out", "grad_norm"], ig_steps=4, out_dir=tmp_path / "s",
                  progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, 5) and calls[-1] == (5, 5)
    assert res.n_sentences == 5 and res.rho.shape == (5, 6, 2, 2) and not res.skipped
    # each sentence's cells equal an independent single-sentence run
    for s, it in enumerate(ITEMS):
        text = it if isinstance(it, str) else it["text"]
        contrast = None if isinstance(it, str) else (it["answer"], it["wrong"])
        one = F.score_sentence(lm, text, baselines=["blank_out", "grad_norm"], contrast=contrast, ig_steps=4)
        np.testing.assert_allclose(res.rho[s], one.correlations.rho, equal_nan=True)
    summ = res.summary()["spearman"]
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(summ["mean"], np.nanmean(res.rho, 0), equal_nan=True)
        np.testing.assert_allclose(summ["std"], np.nanstd(res.rho, 0, ddof=1), equal_nan=True)
    np.testing.assert_array_equal(summ["count"], np.isfinite(res.rho).sum(0))
    paths = res.write(tmp_path / "s")
    rows = (tmp_path / "s" / "summary.csv").read_text().splitlines()
    assert rows[0] == "method,layer,baseline,stat,mean,std,n_defined,n_undefined"
    assert len(rows) == 1 + 6 * 2 * 2 * 2
    js = json.loads(open(paths["json"]).read())
    first = js["summary"][0]
    assert (first["method"], first["layer"], first["baseline"], first["stat"]) == ("attention", 1, "blank_out", "spearman")
    assert first["mean"] == pytest.approx(float(np.nanmean(res.rho[:, 0, 0, 0])))
    acc = np.mean([res.records[k]["f0"] > 0 for k in range(5) if not isinstance(ITEMS[k], str)])
    assert js["accuracy"] == pytest.approx(acc)
    assert "| attention |" in res.markdown("blank_out")


def test_study_resumes_after_interrupt_and_crash(make_tiny, tmp_path):
    lm = make_tiny("bert")
    kw = dict(baselines=["blank_out", "leave_one_out"], out_dir=tmp_path)
    full = F.study(lm, ITEMS, baselines=kw["baselines"])  # no folder: the reference

    def stop_at_3(done, total):
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        F.study(lm, ITEMS, progress=stop_at_3, **kw)
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 3  # the three finished sentences are on disk
    # simulate a crash in the middle of writing the 4th line
    with open(tmp_path / "records.jsonl", "a") as f:
        f.write('{"key": "3:abc", "i": 3, "rho": [[0.1')
    again = F.study(lm, ITEMS, **kw)
    assert again.resumed == 3
    np.testing.assert_allclose(again.rho, full.rho, equal_nan=True)
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 5
    loaded = F.load_study(tmp_path)
    np.testing.assert_allclose(loaded.rho, full.rho, equal_nan=True)
    # other settings in the same folder are refused, a fresh start is allowed
    with pytest.raises(AttnvizError, match="other settings"):
        F.study(lm, ITEMS, baselines=["blank_out"], out_dir=tmp_path)
    fresh = F.study(lm, ITEMS[:2], baselines=["blank_out"], out_dir=tmp_path, resume=False)
    assert fresh.resumed == 0 and fresh.n_sentences == 2


def test_study_skips_unusable_sentences(make_tiny):
    lm = make_tiny("bert")
    res = F.study(lm, ["the cat [MASK] here .", "[MASK]"], baselines=["blank_out"])
    assert res.n_sentences == 1 and res.skipped[0][0] == 1 and "no tokens to attribute" in res.skipped[0][1]


def test_study_on_a_model_without_head_ignores_contrasts(make_tiny):
    lm = make_tiny("bert-base")
    res = F.study(lm, ITEMS[:2], baselines=["blank_out"])
    assert res.n_sentences == 2 and not res.skipped and res.settings["use_contrast"] is False
    assert "no output head" in res.notes[0] and res.accuracy() is None


# ---------------------------------------------------------------- the app page
# two-sided 5 % critical values for n ranks without ties (Zar 1972, J. Am. Stat. Assoc. 67, Table 1;
# Kendall: the exact null distribution tables, e.g. Kendall & Gibbons, Rank Correlation Methods)
SPEARMAN_05 = {5: 1.000, 6: 0.886, 7: 0.786, 8: 0.738, 9: 0.700}
KENDALL_05 = {5: 1.000, 6: 0.867, 7: 0.714, 8: 0.643, 9: 0.556, 10: 0.511, 11: 0.491, 12: 0.455}


def test_dominated_rows_by_a_plain_loop():
    rng = np.random.default_rng(0)
    rows = {"a": rng.random((4, 6)), "b": rng.random((4, 6))}
    rows["a"][2] = [5e-4, 1.0, 2e-3, 1e-3, 3e-3, 9.0]  # position 5 is left out: position 1 holds 99.4 %
    rows["b"][0] = [0.0, 0.0, 0.0, 0.5, 0.0, 0.0]       # one non-zero entry: 100 %
    pos = [0, 1, 2, 3, 4]
    got = F.dominated_rows(rows, pos)
    want = {}
    for name, R in rows.items():
        for l in range(4):
            vals = [R[l][j] for j in pos]
            k = max(range(len(pos)), key=lambda i: vals[i])
            if vals[k] / sum(vals) >= 0.99:
                want.setdefault(name, []).append((l, pos[k], vals[k] / sum(vals)))
    assert got.keys() == want.keys() == {"a", "b"}
    for name in want:
        assert [(l, j) for l, j, _ in got[name]] == [(l, j) for l, j, _ in want[name]]
        assert [s for *_, s in got[name]] == pytest.approx([s for *_, s in want[name]])


def test_chance_level_matches_published_critical_values():
    for n, c in SPEARMAN_05.items():
        got, exact = F.chance_level(n, "spearman")
        assert exact and got == pytest.approx(c, abs=6e-4), n
    for n, c in KENDALL_05.items():
        got, exact = F.chance_level(n, "kendall")
        assert exact and got == pytest.approx(c, abs=6e-4), n
    # 3 or 4 tokens: even a perfect correlation comes by chance more than one time in 20 (2 of 24)
    assert F.chance_level(4, "spearman") == (None, True) and F.chance_level(3, "kendall") == (None, True)
    # above the exact range: the normal approximation, close to the exact tables (n = 10: 0.648 / 0.511)
    got, exact = F.chance_level(10, "spearman")
    assert not exact and got == pytest.approx(0.648, abs=0.01)
    got, _ = F.chance_level(10, "kendall")
    assert got == pytest.approx(0.511, abs=0.03)


@pytest.mark.slow
def test_faithfulness_page_tables(monkeypatch):
    """The page's correlation table against an independent reference (the model's own attentions, an
    explicit blank-out loop, scipy), and the corpus table against per-sentence results."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    import attnviz
    from attnviz.datasets import load_eval_set

    monkeypatch.setenv("ATTNVIZ_TORCH_THREADS", "1")
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=600)
    at.run()
    at.switch_page("attnviz/app/views/faithfulness.py")
    at.run()
    assert not at.exception and not at.error
    spec, text = at.session_state["spec"], at.session_state["text"]
    lm = attnviz.load_model(spec)
    enc = encode(lm, text)
    ids, t = enc.ids[0], enc.target
    with torch.no_grad():
        out = lm.model(input_ids=enc.ids, output_attentions=True, output_hidden_states=True)

    def f(x):  # the target quantity, written plainly for either kind of model
        with torch.no_grad():
            o = lm.model(input_ids=x.unsqueeze(0))
        if getattr(o, "logits", None) is not None:
            return float(torch.softmax(o.logits[0, t].double(), -1)[int(out.logits[0, t].argmax())])
        h, h0 = o.last_hidden_state[0, t].double(), out.last_hidden_state[0, t].double()
        return float(h @ h0 / (h.norm() * h0.norm()))

    pos = [j for j in range(len(ids)) if not enc.special[j] and j != t]
    f0 = f(ids)
    # the target box says when the model's own top answer is under 0.2 (an uncertain guess is explained)
    if getattr(out, "logits", None) is not None:
        top = float(torch.softmax(out.logits[0, t].double(), -1).max())
        box = " ".join(i.value for i in at.info if "Target quantity" in i.value)
        assert ("model is unsure" in box) == (top < 0.2), (top, box)
        assert top >= 0.2 or f"probability {top:.2f}" in box
    blank = []
    for j in pos:
        b = ids.clone()
        b[j] = lm.tokenizer.unk_token_id
        blank.append(abs(f(b) - f0))
    df = at.dataframe[0].value
    assert list(df.columns) == [f"L{l + 1}" for l in range(lm.n_layers)]
    for l in range(lm.n_layers):
        row = out.attentions[l][0].double().mean(0)[t].numpy()[pos]
        assert df.loc["Raw attention", f"L{l + 1}"] == pytest.approx(scipy.stats.spearmanr(row, blank).statistic, abs=1e-6)
    assert len(at.get("plotly_chart")) == 1
    # few tokens compared: the table says what chance alone reaches (published critical value, n <= 20)
    said = [c.value for c in at.caption if "chance alone reaches" in c.value or "beyond chance" in c.value]
    crit = SPEARMAN_05.get(len(pos))
    assert bool(said) == (len(pos) <= 20), (len(pos), said)
    if crit is not None:
        assert f"|ρ| ≥ {crit:.2f} one time in 20" in said[0], said
    # the corpus panel on 3 sentences
    at.number_input(key="fa_study_n").set_value(3)
    at.button(key="fa_study_go").click()
    at.run()
    assert not at.exception and not at.error
    table = at.dataframe[1].value
    per = []
    for it in load_eval_set("agreement", 3):
        contrast = None if F.output_kind(lm) == "hidden" else (it["answer"], it["wrong"])
        per.append(F.score_sentence(lm, it["text"], contrast=contrast).correlations.rho[:, :, 0])
    np.testing.assert_allclose(table.to_numpy(), np.nanmean(per, 0), atol=1e-9, equal_nan=True)
    assert len(at.get("plotly_chart")) == 2


def test_adaptive_integrated_gradient_steps(tokenizer):
    """With ig_tol the steps double until the completeness error is within it (a sharp path needs more)."""
    lm = _double_model(tokenizer, "bert", seed=3, init=0.5)
    fixed = F.importance(lm, SENTENCE, baselines=["integrated_gradients"], ig_steps=16, ig_tol=0)
    assert fixed.ig["completeness_rel"] > 1e-2 and fixed.ig["tried"] == [16]
    adaptive = F.importance(lm, SENTENCE, baselines=["integrated_gradients"], ig_steps=16, ig_tol=1e-3)
    assert adaptive.ig["tried"][0] == 16 and adaptive.ig["steps"] == adaptive.ig["tried"][-1] > 16
    assert all(b == 2 * a for a, b in zip(adaptive.ig["tried"], adaptive.ig["tried"][1:]))
    assert adaptive.ig["completeness_rel"] <= 1e-3
    # the stated error is the real one: Σ IG against f(e) - f(e') from the model
    f_gap = adaptive.ig["f_input"] - adaptive.ig["f_baseline"]
    assert abs(np.nansum(adaptive.signed["integrated_gradients"]) - f_gap) == pytest.approx(
        adaptive.ig["completeness_abs"], abs=1e-12)
    capped = F.importance(lm, SENTENCE, baselines=["integrated_gradients"], ig_steps=4, ig_tol=1e-12, ig_max_steps=16)
    assert capped.ig["tried"] == [4, 8, 16] and any("still" in n for n in capped.notes)


def test_every_importance_panel_names_its_tokens():
    """The stacked bars: each panel (baselines, then the maps' rows) shows the token labels of the
    attributed positions under its own bars, in position order."""
    from attnviz.figures import importance_figure

    tokens = ["[CLS]", "the", "keys", "[MASK]", "[SEP]"]
    imp = types.SimpleNamespace(positions=[1, 2], tokens=tokens, target=types.SimpleNamespace(label="p('are')"),
                                values={"blank_out": np.array([0, .2, .7, 0, 0]), "grad_norm": np.array([0, 1., 3., 0, 0])})
    rows = {"rollout": np.arange(10.0).reshape(2, 5)}
    fig = importance_figure(imp, rows, 1)
    assert len(fig.data) == 3
    for k, tr in enumerate(fig.data):
        assert list(tr.x) == ["1·the", "2·keys"]
        axis = fig.layout["xaxis" + ("" if k == 0 else str(k + 1))]
        assert axis.showticklabels is True
    np.testing.assert_allclose(fig.data[2].y, [6.0, 7.0])  # layer 2's row at positions 1, 2


def test_progress_moves_within_each_baseline_and_changes_nothing(make_tiny):
    """progress(stage, f) is reported after every batch inside blank-out, leave-one-out and integrated
    gradients (80 steps: two batches of 64), never goes back, ends at 1, and the values are those of
    the same call without progress."""
    lm = make_tiny("bert")
    text = " ".join(["the keys to the cabinet near the doors"] * 7) + " [MASK] ."
    enc = encode(lm, text)  # the tiny model's limit is 64 positions: 60 tokens, one batch each
    assert 40 < len(enc.tokens) <= 64
    seen = []
    imp = F.importance(lm, enc, ig_steps=80, progress=lambda s, f: seen.append((s, f)))
    plain = F.importance(lm, enc, ig_steps=80)
    fr = [f for _, f in seen]
    assert fr == sorted(fr) and fr[-1] == 1.0 and fr[0] == 0.0
    per_stage = {s: sum(1 for x, _ in seen if x == s) for s in F.BASELINES}
    for b in ("blank_out", "leave_one_out"):  # its start, then one report per batch
        assert per_stage[b] >= 2, (b, per_stage)
    assert per_stage["integrated_gradients"] >= 3, per_stage  # its start, then two batches of steps
    for b in F.BASELINES:
        np.testing.assert_array_equal(imp.values[b], plain.values[b])
    # the estimate counts the forward passes: blank-out n + 1, leave-one-out n, gradients 3, IG 3·steps + 2, + 1
    n = len(enc.tokens)
    assert F.estimate_seconds(n, list(F.BASELINES), 1.0, 80) == pytest.approx(1 + (n + 1) + n + 3 + 3 * 80 + 2)
    assert F.estimate_seconds(n, ["blank_out"], 0.5, 80) == pytest.approx(0.5 * (1 + n + 1))
    # the adaptive steps' worst case: 32, 64, 128, 256 run in turn
    assert F.estimate_seconds(n, ["integrated_gradients"], 1.0, 32, 256) == pytest.approx(1 + 3 * 480 + 2 * 4)
