"""Adversarial attention: distances, the attention override, the frontier, baselines, Jain & Wallace.

References are independent of attnviz's code: scipy's Jensen-Shannon distance, TVD as the largest
difference of an event's probability (brute force over events), and a forward pass written here
from the Hugging Face modules' own weights (torch.nn.functional only) with the attention row
replaced by hand.
"""
from __future__ import annotations

import itertools
import re
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.spatial.distance import jensenshannon

from conftest import open_app_page, plotly_array
from attnviz import adversarial as A
from attnviz.errors import AttnvizError, InputError

SENTENCE = "the keys to the cabinet [MASK] on the table ."
QK_STD = 0.08


# ------------------------------------------------------------------ references


def ref_jsd(p, q):
    """scipy's Jensen-Shannon DISTANCE (natural log) squared = the divergence."""
    return float(jensenshannon(np.asarray(p, float), np.asarray(q, float)) ** 2)


def ref_tvd(p, q):
    """TVD as the largest difference of probability over all events (subsets of outcomes)."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    best = 0.0
    for r in range(len(p) + 1):
        for ev in itertools.combinations(range(len(p)), r):
            ev = list(ev)
            best = max(best, abs(p[ev].sum() - q[ev].sum()))
    return best


def hf_bert_probs(model, ids, target, overrides=None):
    """Output distribution of a Hugging Face BertForMaskedLM at `target`, written from its modules'
    weights; overrides {layer: {head: row [n]}} replaces probs[head, target, :] in that layer."""
    cfg = model.config
    d, H = cfg.hidden_size, cfg.num_attention_heads
    dh = d // H
    act = __import__("transformers").activations.ACT2FN[cfg.hidden_act]
    overrides = overrides or {}
    with torch.no_grad():
        h = model.bert.embeddings(input_ids=ids).double()
        n = h.shape[1]

        def lin(x, mod):
            return F.linear(x, mod.weight.double(), mod.bias.double())

        def ln(x, mod):
            return F.layer_norm(x, (d,), mod.weight.double(), mod.bias.double(), mod.eps)

        for li, layer in enumerate(model.bert.encoder.layer):
            sa = layer.attention.self
            q, k, v = (lin(h, m).view(1, n, H, dh).transpose(1, 2) for m in (sa.query, sa.key, sa.value))
            probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
            for head, row in overrides.get(li, {}).items():
                probs[0, head, target] = torch.as_tensor(np.asarray(row), dtype=torch.float64)
            ctx = (probs @ v).transpose(1, 2).reshape(1, n, d)
            a = ln(lin(ctx, layer.attention.output.dense) + h, layer.attention.output.LayerNorm)
            h = ln(lin(act(lin(a, layer.intermediate.dense)), layer.output.dense) + a, layer.output.LayerNorm)
        logits = model.cls.double()(h)[0, target]
        model.cls.float()
    return torch.softmax(logits, -1).numpy()


def copy_model(tokenizer):
    """A 1-layer, 2-head BERT MLM that predicts the token its [MASK] row attends to: values and the
    output projection copy the attended embedding (×20 over the residual), the FFN is zero, the
    output head is the identity followed by the tied embedding matrix. Word embeddings N(0, 1),
    no position or segment embeddings; queries and keys random (std 0.1)."""
    import transformers as T
    from attnviz.models.load import wrap

    d = 128
    cfg = T.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=d, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=64, hidden_act="linear",
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    m = T.BertForMaskedLM._from_config(cfg, attn_implementation="eager")
    eye = torch.eye(d)
    with torch.no_grad():
        e = m.bert.embeddings
        e.word_embeddings.weight.normal_(0.0, 1.0)
        e.position_embeddings.weight.zero_()
        e.token_type_embeddings.weight.zero_()
        layer = m.bert.encoder.layer[0]
        layer.attention.self.query.weight.normal_(0.0, QK_STD)
        layer.attention.self.key.weight.normal_(0.0, QK_STD)
        layer.attention.self.value.weight.copy_(eye)
        layer.attention.self.value.bias.zero_()
        layer.attention.output.dense.weight.copy_(20 * eye)
        layer.attention.output.dense.bias.zero_()
        layer.output.dense.weight.zero_()
        layer.output.dense.bias.zero_()
        tr = m.cls.predictions.transform
        tr.dense.weight.copy_(eye)
        tr.dense.bias.zero_()
        tr.LayerNorm.weight.fill_(0.1)  # softer output: p(copied token) about 0.9
        m.cls.predictions.bias.zero_()
    assert m.cls.predictions.decoder.weight.data_ptr() == e.word_embeddings.weight.data_ptr()
    return wrap(m, tokenizer, spec="tiny:copy")


@pytest.fixture(scope="module")
def copy_lm(tokenizer):
    lm = copy_model(tokenizer)
    assert lm.decompositions_ok, lm.check
    return lm


@pytest.fixture(scope="module")
def copy_frontier(copy_lm):
    return A.frontier(copy_lm, SENTENCE, A.Site("layer", 0), lambdas=[0.0, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0],
                      steps=100, restarts=2, permutations=100, seed=0)


# ------------------------------------------------------------------ distances


def test_jsd_tvd_against_scipy_and_events():
    rng = np.random.default_rng(0)
    for n in (2, 5, 7):
        for _ in range(20):
            p, q = rng.dirichlet(np.ones(n) * 0.5), rng.dirichlet(np.ones(n) * 0.5)
            if rng.random() < 0.3:  # exact zeros
                p[rng.integers(n)] = 0.0
                p /= p.sum()
            assert A.jsd(p, q) == pytest.approx(ref_jsd(p, q), abs=1e-12)
            assert A.tvd(p, q) == pytest.approx(ref_tvd(p, q), abs=1e-12)
            tp, tq = torch.tensor(p), torch.tensor(q)
            assert float(A.jsd(tp, tq)) == pytest.approx(ref_jsd(p, q), abs=1e-12)
            assert float(A.tvd(tp, tq)) == pytest.approx(ref_tvd(p, q), abs=1e-12)
    # known values: disjoint supports reach ln 2 and TVD 1; identical give 0
    assert A.jsd([1, 0, 0], [0, 0.5, 0.5]) == pytest.approx(math.log(2), abs=1e-15)
    assert A.tvd([1, 0, 0], [0, 0.5, 0.5]) == pytest.approx(1.0)
    assert A.jsd([0.2, 0.8], [0.2, 0.8]) == 0.0
    # batched: [..., n] -> [...]
    P, Q = rng.dirichlet(np.ones(4), size=(3, 2)), rng.dirichlet(np.ones(4), size=(3, 2))
    got = A.jsd(P, Q)
    assert got.shape == (3, 2)
    assert got[2, 1] == pytest.approx(ref_jsd(P[2, 1], Q[2, 1]), abs=1e-12)


def test_jsd_gradient_finite_at_zeros():
    theta = torch.tensor([[0.0, -800.0, 1.0]], dtype=torch.float64, requires_grad=True)
    a = torch.softmax(theta, -1)
    assert a[0, 1] == 0.0  # underflow to an exact zero
    j = A.jsd(a, torch.tensor([[0.5, 0.0, 0.5]], dtype=torch.float64))
    j.sum().backward()
    assert torch.isfinite(theta.grad).all()
    # finite-difference check of the gradient on a generic point
    th = torch.tensor([0.3, -0.2, 0.9, 0.1], dtype=torch.float64, requires_grad=True)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    A.jsd(torch.softmax(th, -1), q).backward()
    for i in range(4):
        e = np.zeros(4)
        e[i] = 1e-6
        x = th.detach().numpy()
        f = lambda v: ref_jsd(np.exp(v) / np.exp(v).sum(), q.numpy())  # noqa: E731
        assert th.grad[i].item() == pytest.approx((f(x + e) - f(x - e)) / 2e-6, abs=1e-7)


# ------------------------------------------------------------------ the override


def test_override_matches_hand_written_bert(make_tiny):
    lm = make_tiny("bert")
    enc = A.encode(lm, SENTENCE)
    t, n = enc.target, len(enc.tokens)
    rng = np.random.default_rng(1)
    # the reference itself reproduces the model's own output
    own = torch.softmax(lm.model(input_ids=enc.ids).logits[0, t].double(), -1).detach().numpy()
    assert np.abs(hf_bert_probs(lm.model, enc.ids, t) - own).max() < 1e-6
    for site in (A.Site("head", 0, 2), A.Site("head", 1, 3), A.Site("layer", 1), A.Site("all")):
        rows = site.rows(2, 4)
        alpha = rng.dirichlet(np.ones(n) * 0.3, size=(3, len(rows)))
        _, tv, probs = A.evaluate(lm, SENTENCE, site, alpha)
        for b in range(3):
            ov = {}
            for r, (l, h) in enumerate(rows):
                ov.setdefault(l, {})[h] = alpha[b, r]
            ref = hf_bert_probs(lm.model, enc.ids, t, ov)
            assert np.abs(probs[b] - ref).max() < 1e-6, site
            assert tv[b] == pytest.approx(0.5 * np.abs(ref - own).sum(), abs=2e-6)


def test_override_moves_the_prediction_predictably(copy_lm):
    """In the copy model, putting all attention of the [MASK] row on token j makes the model predict
    token j — for every j — while the original attention predicts something else."""
    enc = A.encode(copy_lm, SENTENCE)
    n, t = len(enc.tokens), enc.target
    ids = enc.ids[0].tolist()
    alpha = np.zeros((n, 2, n))
    for j in range(n):
        alpha[j, :, j] = 1.0
    _, tv, probs = A.evaluate(copy_lm, SENTENCE, A.Site("layer", 0), alpha)
    assert [int(np.argmax(p)) for p in probs] == ids
    assert (tv > 0.5).all()
    # the hand-written forward agrees on two of them
    for j in (1, 4):
        ref = hf_bert_probs(copy_lm.model, enc.ids, t, {0: {0: alpha[j, 0], 1: alpha[j, 1]}})
        assert np.abs(probs[j] - ref).max() < 1e-6


def _deep_tiny(fam, tokenizer, layers=4):
    """A tiny random model of the family with `layers` layers (the conftest ones have 2, which
    leaves no full layer between the site's row-only layer and the row-only last layer)."""
    import copy

    from conftest import tiny_configs

    from attnviz.models.load import wrap

    cls, cfg = tiny_configs(tokenizer.vocab_size)[fam]
    cfg = copy.deepcopy(cfg)
    cfg.num_hidden_layers = layers
    if getattr(cfg, "layer_types", None):  # Qwen2: one attention type per layer
        cfg.layer_types = [cfg.layer_types[0]] * layers
    torch.manual_seed(1)
    return wrap(cls._from_config(cfg, attn_implementation="eager"), tokenizer, spec=f"tiny4:{fam}")


def test_fast_path_equals_run_layers_every_family(tokenizer):
    from conftest import FAMILIES

    for fam in FAMILIES:
        lm = _deep_tiny(fam, tokenizer)
        assert lm.n_layers == 4 and lm.decompositions_ok, (fam, lm.check)
        if lm.arch.head is None:
            continue
        # head at layer 1: full layers 2-3 (the first with the reused q/k/v); layer 2: one full
        # layer; all: overrides inside full layers; head at the last layer: row-only
        for site in (A.Site("head", 0, 1), A.Site("layer", 1), A.Site("all"), A.Site("head", 3, 3)):
            pb = A.prepare(lm, SENTENCE, site)
            g = torch.Generator().manual_seed(3)
            a = torch.softmax(3 * torch.randn(4, pb.alpha0.shape[0], pb.n, generator=g), -1)
            a = a * pb.allowed
            a = a / a.sum(-1, keepdim=True)
            with torch.no_grad():
                fast, slow = pb.outputs(a, fast=True), pb.outputs(a, fast=False)
                same = pb.outputs(pb.alpha0.unsqueeze(0).float(), fast=True)
            # fused kernels (one q/k/v product, F.layer_norm, scaled_dot_product_attention) add up
            # in another order than run_layers: equal up to float32 rounding, relative to each
            # probability (the tiny models' probabilities are ~3e-5 over a 30k vocabulary)
            torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-12, msg=f"{fam} {site}")
            assert float(A.tvd(same[0], pb.y0)) < 1e-6, (fam, site)  # the original rows reproduce ŷ


def test_plain_encoder_and_bad_sites_give_one_line_errors(make_tiny):
    with pytest.raises(InputError, match="no output head"):
        A.frontier(make_tiny("bert-base"), SENTENCE, A.Site("head", 0, 0), steps=2)
    lm = make_tiny("bert")
    with pytest.raises(InputError, match="layer 7 does not exist"):
        A.prepare(lm, SENTENCE, A.Site("head", 6, 0))
    with pytest.raises(InputError, match="head 5 does not exist"):
        A.prepare(lm, SENTENCE, A.Site("head", 0, 4))
    with pytest.raises(InputError):
        A.Site("neuron", 0, 0)
    bad = make_tiny("bert", seed=5, check=False)
    from attnviz.models.load import SelfCheck
    bad.check = SelfCheck(False, 1.0, reason="layer 1 differs")
    with pytest.raises(AttnvizError, match="disabled"):
        A.prepare(bad, SENTENCE, A.Site("head", 0, 0))


# ------------------------------------------------------------------ frontier


def test_frontier_points_are_what_they_claim(copy_lm, copy_frontier):
    fr = copy_frontier
    enc = A.encode(copy_lm, SENTENCE)
    y0 = hf_bert_probs(copy_lm.model, enc.ids, enc.target)
    # point 0 is the original attention (the model's own rows)
    own = copy_lm.model(input_ids=enc.ids, output_attentions=True).attentions[0][0, :, enc.target].detach().numpy()
    assert np.abs(fr.alpha_of(0) - own).max() < 1e-6
    assert len(fr.alpha_idx) == len(fr.jsd)  # small site: every point's α' is kept
    assert fr.jsd[0] == 0 and fr.tvd[0] == 0
    # a sample of points, including the envelope, recomputed independently
    rng = np.random.default_rng(0)
    pick = set(fr.envelope.tolist()) | set(rng.choice(len(fr.jsd), 8, replace=False).tolist())
    for i in sorted(pick)[:14]:
        a = fr.alpha_of(i).astype(np.float64)
        assert np.allclose(a.sum(-1), 1.0, atol=1e-5)
        assert fr.jsd[i] == pytest.approx(np.mean([ref_jsd(a[r], own[r]) for r in range(2)]), abs=2e-6)
        ref = hf_bert_probs(copy_lm.model, enc.ids, enc.target, {0: {0: a[0], 1: a[1]}})
        assert fr.tvd[i] == pytest.approx(0.5 * np.abs(ref - y0).sum(), abs=2e-5)
        assert int(fr.top_idx[i, 0]) == int(np.argmax(ref))


def test_frontier_is_monotone_and_a_lower_envelope(copy_frontier):
    fr = copy_frontier
    ex, ey = fr.envelope_xy()
    assert (np.diff(ex) > 0).all() and (np.diff(ey) > 0).all()
    assert fr.envelope[0] == 0  # the original anchors it at (0, 0)
    for i in range(len(fr.jsd)):  # every point is on or above the envelope (plain loop)
        assert any(fr.jsd[e] >= fr.jsd[i] and fr.tvd[e] <= fr.tvd[i] for e in fr.envelope)
    for e in fr.envelope:  # and no point dominates an envelope point strictly
        dom = (fr.jsd >= fr.jsd[e]) & (fr.tvd < fr.tvd[e])
        assert not dom.any()
    # per-λ optima: JSD and TVD non-decreasing in λ; each minimises TVD - λ JSD over all points
    bj, bt = fr.jsd[fr.best], fr.tvd[fr.best]
    assert (np.diff(bj) >= 0).all() and (np.diff(bt) >= 0).all()
    for k, lam in enumerate(fr.lambdas):
        assert fr.tvd[fr.best[k]] - lam * fr.jsd[fr.best[k]] <= (fr.tvd - lam * fr.jsd).min() + 1e-15
    # lookups along the frontier
    for x in (0.0, 0.05, 0.2, 0.5):
        i = fr.at_jsd(x)
        if fr.jsd.max() >= x:
            assert fr.jsd[i] >= x and fr.tvd[i] == fr.tvd[fr.jsd >= x].min()
    for eps in (0.0, 0.01, 0.1, 0.5):
        i = fr.within(eps)
        assert fr.tvd[i] <= eps and fr.jsd[i] == fr.jsd[fr.tvd <= eps].max()


def test_lambda_zero_stays_at_the_original_and_large_lambda_moves(copy_frontier):
    fr = copy_frontier
    # λ = 0: the run started at the original ends with TVD ≈ 0 close to the original
    sel = (fr.lam == 0.0) & (fr.restart == 0) & (fr.step == fr.steps)
    assert sel.sum() == 1
    assert fr.tvd[sel][0] < 1e-3 and fr.jsd[sel][0] < 1e-2
    assert fr.best[0] == 0  # nothing beats the original's objective 0 at λ = 0
    # the largest λ buys a large JSD (and pays in TVD): the copy model's output follows attention
    k = len(fr.lambdas) - 1
    assert fr.jsd[fr.best[k]] > 0.3
    assert fr.tvd[fr.best[k]] > 0.3
    # a moderate budget: some attention change is possible for TVD <= 0.01 but the permutations
    # (which move attention a lot) move the output far more
    assert fr.tvd[fr.within(0.01)] <= 0.01
    assert np.median(fr.perm_tvd) > 0.05


def test_pruned_restarts_continue_exactly_and_keep_each_lambdas_best(copy_lm):
    """Pruning at step P keeps, per λ, restart 0 and the random restart with the lowest recorded
    TVD - λ·JSD at P; the survivors then follow exactly the trajectories they have in a run that
    never prunes (Adam state and learning-rate schedule carried over; batch members are
    independent)."""
    site = A.Site("layer", 0)
    lams = [0.0, 0.01, 0.3, 3.0]
    kw = dict(lambdas=lams, steps=40, restarts=4, record_every=10, permutations=4, seed=5)
    full = A.frontier(copy_lm, SENTENCE, site, prune_at=40, **kw)
    pruned = A.frontier(copy_lm, SENTENCE, site, prune_at=20, **kw)
    K = len(lams)
    # before pruning both runs record every restart; after it two per λ
    for s in (0, 10, 20):
        assert (pruned.step == s).sum() == 4 * K and (full.step == s).sum() == 4 * K
    for s in (30, 40):
        assert (pruned.step == s).sum() == 2 * K and (full.step == s).sum() == 4 * K
    for lam in lams:
        at = np.nonzero((pruned.step == 20) & (pruned.lam == lam) & (pruned.restart > 0))[0]
        obj = pruned.tvd[at] - lam * pruned.jsd[at]
        kept = pruned.restart[(pruned.step == 40) & (pruned.lam == lam)]
        assert sorted(kept.tolist()) == [0, pruned.restart[at[np.argmin(obj)]]]
        # the survivors' end points are the unpruned run's end points for those restarts
        for r in kept:
            i = np.nonzero((pruned.step == 40) & (pruned.lam == lam) & (pruned.restart == r))[0][0]
            j = np.nonzero((full.step == 40) & (full.lam == lam) & (full.restart == r))[0][0]
            np.testing.assert_allclose(pruned.alpha_of(i), full.alpha_of(j), atol=1e-5)
            assert pruned.tvd[i] == pytest.approx(full.tvd[j], abs=1e-5)
    # restarts 1 and 2 never prune
    for R in (1, 2):
        one = A.frontier(copy_lm, SENTENCE, site, **{**kw, "restarts": R})
        assert (one.step == 40).sum() == R * K and one.prune_at is None
    assert pruned.prune_at == 20 and full.prune_at is None


def test_a_one_hot_row_can_move(tokenizer):
    """Regression: when the original row is one-hot (exact zeros elsewhere), the run that starts at
    the original must still move (tiny logits get no usable gradient unless floored)."""
    lm = copy_model(tokenizer)
    with torch.no_grad():  # sharpen the copy model's attention until its rows are one-hot
        lm.model.bert.encoder.layer[0].attention.self.query.weight.mul_(2000.0)
    pb = A.prepare(lm, SENTENCE, A.Site("head", 0, 0))
    a0 = pb.alpha0.numpy()[0]
    assert a0.max() > 0.99 and (a0 == 0).sum() >= len(a0) - 3
    fr = A.frontier(lm, SENTENCE, A.Site("head", 0, 0), lambdas=[0.0, 1.0, 10.0], steps=80, restarts=1,
                    permutations=5)
    moved = (fr.restart == 0) & (fr.step == fr.steps) & (fr.lam == 10.0)
    assert fr.jsd[moved][0] > 0.3


def test_lower_envelope_and_best_per_lambda_brute_force():
    rng = np.random.default_rng(5)
    j, t = rng.random(60), rng.random(60)
    j[:5] = j[5:10]  # JSD ties
    env = A.lower_envelope(j, t)
    brute = [i for i in range(60) if not any((j[k] >= j[i]) and (t[k] < t[i]) for k in range(60))
             and not any(j[k] == j[i] and t[k] == t[i] and k < i for k in range(60))]
    assert sorted(env.tolist()) == sorted(brute)
    lams = np.array([0.0, 0.5, 1, 2, 5])
    b = A.best_per_lambda(j, t, lams)
    for k, lam in enumerate(lams):
        assert t[b[k]] - lam * j[b[k]] == pytest.approx(min(t - lam * j))


def test_baselines(copy_lm, copy_frontier):
    fr = copy_frontier
    assert len(fr.perm_jsd) == len(fr.perm_tvd) == 100
    enc = A.encode(copy_lm, SENTENCE)
    n = len(enc.tokens)
    u = np.full(n, 1.0 / n)
    assert fr.uniform[0] == pytest.approx(np.mean([ref_jsd(u, fr.alpha0[r]) for r in range(2)]), abs=1e-9)
    ref = hf_bert_probs(copy_lm.model, enc.ids, enc.target, {0: {0: u, 1: u}})
    y0 = hf_bert_probs(copy_lm.model, enc.ids, enc.target)
    assert fr.uniform[1] == pytest.approx(0.5 * np.abs(ref - y0).sum(), abs=2e-5)
    # permutations keep the values of each row: their JSD to the original is that of some
    # permutation; the median is far from 0 and below ln 2
    assert 0.05 < np.median(fr.perm_jsd) < math.log(2)


def test_permutations_are_permutations(copy_lm):
    pb = A.prepare(copy_lm, SENTENCE, A.Site("layer", 0))
    perms = A._permutations(pb, 100, torch.Generator().manual_seed(0))
    assert perms.shape == (100, 2, pb.n)
    a0 = np.sort(pb.alpha0.numpy(), -1)
    assert np.allclose(np.sort(perms.numpy(), -1), a0[None])
    assert len({tuple(np.argsort(p[0])) for p in perms.numpy()}) > 90


def test_causal_rows_keep_future_at_zero(make_tiny):
    lm = make_tiny("gpt2")
    fr = A.frontier(lm, "the keys to the cabinet", A.Site("head", 1, 0), target=2,
                    lambdas=[0.0, 1.0], steps=10, restarts=2, permutations=10)
    assert np.abs(fr.alpha[:, :, 3:]).max() == 0.0
    assert np.allclose(fr.alpha.sum(-1), 1.0, atol=1e-5)


def test_large_sites_keep_the_envelopes_attention_only(make_tiny, monkeypatch):
    monkeypatch.setattr(A.settings, "ALPHA_KEEP", 100)
    lm = make_tiny("bert")
    fr = A.frontier(lm, SENTENCE, A.Site("all"), lambdas=[0.0, 0.1, 10.0], steps=10, restarts=1, permutations=5)
    assert set(fr.envelope) | set(fr.best) | {0} == set(fr.alpha_idx)
    assert fr.alpha.shape == (len(fr.alpha_idx), 8, len(fr.tokens))
    for i in fr.envelope:
        assert np.allclose(fr.alpha_of(i).sum(-1), 1.0, atol=1e-5)
    other = next(i for i in range(len(fr.jsd)) if i not in set(fr.alpha_idx))
    with pytest.raises(KeyError):
        fr.alpha_of(other)


# ------------------------------------------------------------------ Jain & Wallace, seeds


def test_jain_wallace_reports_true_numbers(copy_lm):
    jw = A.jain_wallace(copy_lm, SENTENCE, A.Site("layer", 0), steps=60, seed=0)
    assert jw.alpha.shape[0] == A.JW_K == 5
    enc = A.encode(copy_lm, SENTENCE)
    y0 = hf_bert_probs(copy_lm.model, enc.ids, enc.target)
    own = copy_lm.model(input_ids=enc.ids, output_attentions=True).attentions[0][0, :, enc.target].detach().numpy()
    for i in range(5):
        a = jw.alpha[i].astype(np.float64)
        ref = hf_bert_probs(copy_lm.model, enc.ids, enc.target, {0: {0: a[0], 1: a[1]}})
        assert jw.tvd[i] == pytest.approx(0.5 * np.abs(ref - y0).sum(), abs=2e-5)
        assert jw.jsd[i] == pytest.approx(np.mean([ref_jsd(a[r], own[r]) for r in range(2)]), abs=2e-6)
        assert int(jw.top_idx[i, 0]) == int(np.argmax(ref))
    assert (jw.accepted == (jw.tvd <= 0.05)).all()
    if jw.accepted.any():
        assert jw.best_jsd == jw.jsd[jw.accepted].max() and jw.accepted[jw.best]
    else:
        assert jw.best == -1 and jw.best_jsd == 0.0


def test_jain_wallace_finds_adversaries_where_attention_does_not_matter(make_tiny):
    """A random tiny model's output hardly depends on its attention: Jain & Wallace's search finds
    very different attention (JSD > 0.3 of at most ln 2) within the hinge."""
    jw = A.jain_wallace(make_tiny("bert"), SENTENCE, A.Site("head", 1, 2), steps=150, seed=0)
    assert jw.accepted.all() and (jw.tvd < A.JW_EPS).all()
    assert jw.best_jsd > 0.3 and jw.best == int(np.argmax(jw.jsd))
    # their mutual-JSD term keeps the adversaries apart
    a = jw.alpha[:, 0].astype(np.float64)
    assert min(ref_jsd(a[i], a[k]) for i in range(5) for k in range(i)) > 0.05


def test_seed_baseline_against_the_models_own_outputs(make_tiny):
    a, b = make_tiny("bert", seed=0), make_tiny("bert", seed=1)
    enc = A.encode(a, SENTENCE)
    t = enc.target
    pts = A.seed_baseline(a, [b], SENTENCE, A.Site("head", 1, 2))
    oa = a.model(input_ids=enc.ids, output_attentions=True)
    ob = b.model(input_ids=enc.ids, output_attentions=True)
    ra, rb = oa.attentions[1][0, 2, t].detach().numpy(), ob.attentions[1][0, 2, t].detach().numpy()
    pa = torch.softmax(oa.logits[0, t].double(), -1).detach().numpy()
    pb = torch.softmax(ob.logits[0, t].double(), -1).detach().numpy()
    assert pts[0].jsd == pytest.approx(ref_jsd(ra, rb), abs=1e-6)
    assert pts[0].tvd == pytest.approx(0.5 * np.abs(pa - pb).sum(), abs=1e-6)
    layer = A.seed_baseline(a, [b], SENTENCE, A.Site("layer", 0))[0]
    want = np.mean([ref_jsd(oa.attentions[0][0, h, t].detach().numpy(), ob.attentions[0][0, h, t].detach().numpy())
                    for h in range(4)])
    assert layer.jsd == pytest.approx(want, abs=1e-6)


def test_seed_specs():
    have = ["agreement", "agreement-seed1", "agreement-seed2", "pronoun"]
    assert A.seed_specs("builtin:agreement", have) == ["builtin:agreement-seed1", "builtin:agreement-seed2"]
    assert A.seed_specs("builtin:agreement-seed1", have) == ["builtin:agreement", "builtin:agreement-seed2"]
    assert A.seed_specs("builtin:pronoun", have) == []
    assert A.seed_specs("pkg:minilm", have) == []


def test_caption_says_what_the_plot_says(copy_frontier):
    fr = copy_frontier
    text = fr.caption(0.01)
    i = fr.within(0.01)
    assert "all heads of layer 1" in text
    assert f"JSD {fr.jsd[i]:.2f}" in text and f"TVD {fr.tvd[i]:.4f}" in text
    # a byte-level BPE vocabulary's entries ('Ġthe') are named as a reader writes them
    import dataclasses
    bpe = dataclasses.replace(fr, top_labels={k: "Ġ" + v for k, v in fr.top_labels.items()},
                              y0_top=[("Ġ" + w, p) for w, p in fr.y0_top])
    word = fr.prediction(i)[0][0]
    assert "Ġ" not in bpe.caption(0.01) and f"'{word}'" in bpe.caption(0.01)


# ------------------------------------------------------------------ the app page


_arr = plotly_array


def _charts(at):
    import json

    return {json.loads(c.proto.spec)["layout"].get("meta"): json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def _trace(chart, prefix):
    return next(t for t in chart["data"] if t.get("name", "").startswith(prefix))


def test_adversarial_page(tokenizer):
    """The page on builtin:agreement: compute a small frontier, then check the figures against the
    model's own attention and outputs and a hand-written forward with α′ in place; move the sliders."""
    import attnviz
    from attnviz.models.load import builtin_names
    from attnviz.text import clean_token

    if "agreement" not in builtin_names():
        pytest.skip("builtin:agreement is not installed")
    at = open_app_page("adversarial", "builtin:agreement", SENTENCE)
    assert not at.exception, [e.value for e in at.exception]
    assert not _charts(at)  # nothing is computed before the button
    at.number_input(key="adv_steps").set_value(40)
    at.number_input(key="adv_points").set_value(6)
    at.number_input(key="adv_restarts").set_value(2)
    at.number_input(key="adv_jw_steps").set_value(20)
    at.run()
    # before the button: the time it will take, timed from steps of this search
    cap = " ".join(c.value for c in at.caption if "Press the button" in c.value)
    assert re.search(r"about [\d.]+ (s|min)", cap), cap
    at.button(key="adv_go").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    ch = _charts(at)
    assert {"frontier", "attention", "pred_before", "pred_after"} <= set(ch)

    lm = attnviz.load_model("builtin:agreement")
    enc = A.encode(lm, SENTENCE)
    t, L = enc.target, lm.n_layers
    own = lm.model(input_ids=enc.ids, output_attentions=True)
    a0 = own.attentions[L - 1][0, 0, t].detach().numpy()  # default site: layer L, head 1
    y0 = hf_bert_probs(lm.model, enc.ids, t)
    y_own = torch.softmax(own.logits[0, t].double(), -1).detach().numpy()
    assert np.abs(y0 - y_own).max() < 1e-6

    def check_shown(ch, marker):
        bars = ch["attention"]["data"]
        orig, adv = _arr(bars[0]["y"]).astype(float), _arr(bars[1]["y"]).astype(float)
        assert np.abs(orig - a0).max() < 1e-6
        assert abs(adv.sum() - 1) < 1e-5
        pt = _trace(ch["frontier"], marker)
        x, y = float(_arr(pt["x"])[0]), float(_arr(pt["y"])[0])
        assert x == pytest.approx(ref_jsd(adv / adv.sum(), a0), abs=1e-5)
        ref = hf_bert_probs(lm.model, enc.ids, t, {L - 1: {0: adv / adv.sum()}})
        assert y == pytest.approx(0.5 * np.abs(ref - y0).sum(), abs=1e-4)
        top = np.argsort(-ref)[:5]
        after = ch["pred_after"]["data"][0]
        assert [lbl.endswith(clean_token(lm.tokenizer.convert_ids_to_tokens(int(i)))) for lbl, i in zip(after["y"], top)] == [True] * 5
        assert np.allclose(_arr(after["x"]).astype(float)[:5], ref[top], atol=1e-4)
        # below the top 5: the contrast words it leaves out (is / are), with α′ in place
        for lbl, p in zip(after["y"][5:], _arr(after["x"]).astype(float)[5:]):
            word = lbl.split("·")[-1].strip()
            assert word in ("is", "are") and p == pytest.approx(ref[lm.tokenizer.convert_tokens_to_ids(word)], abs=1e-4)
        assert {lbl.split("·")[-1].strip() for lbl in after["y"]} >= {"is", "are"}
        return x, y

    # before: the model's own top-5
    before = ch["pred_before"]["data"][0]
    top0 = np.argsort(-y_own)[:5]
    assert np.allclose(_arr(before["x"]).astype(float)[:5], y_own[top0], atol=1e-5)
    assert before["y"][0].endswith(clean_token(lm.tokenizer.convert_ids_to_tokens(int(top0[0]))))
    # a top answer under 0.2 is said to be an uncertain one
    unsure = [c.value for c in at.caption if "model is unsure" in c.value]
    assert bool(unsure) == (y_own.max() < 0.2), (y_own.max(), unsure)
    if unsure:
        assert f"{y_own.max():.2f}" in unsure[0]
    # the frontier line is monotone; the point shown first is the largest JSD within ε = 0.01
    fx, fy = _arr(_trace(ch["frontier"], "frontier")["x"]), _arr(_trace(ch["frontier"], "frontier")["y"])
    assert (np.diff(fx) > 0).all() and (np.diff(fy) > 0).all()
    x1, y1 = check_shown(ch, "within output change")
    assert y1 <= 0.01 and x1 == pytest.approx(fx[fy <= 0.01].max())
    perm = _trace(ch["frontier"], "100 shuffles of α")
    assert len(_arr(perm["x"])) == 100
    # a larger ε: the point moves right along the frontier, instantly (no recomputation)
    at.select_slider(key="adv_eps").set_value(0.1)
    at.run()
    ch = _charts(at)
    x2, y2 = check_shown(ch, "within output change")
    assert y2 <= 0.1 and x2 >= x1
    # the JSD slider: the lowest TVD with at least that JSD
    at.slider(key="adv_jsd").set_value(0.2)
    at.run()
    ch = _charts(at)
    fx, fy = _arr(_trace(ch["frontier"], "frontier")["x"]), _arr(_trace(ch["frontier"], "frontier")["y"])
    x3, y3 = check_shown(ch, "at the attention-change target")
    if fx.max() >= 0.2:
        assert x3 >= 0.2 and y3 == pytest.approx(fy[fx >= 0.2].min())
    # the other seeds (Wiegreffe & Pinter): the model's own attention of each seed's model
    seeds = A.seed_specs("builtin:agreement")
    if seeds:
        tr = _trace(ch["frontier"], "models from other seeds")
        for k, s in enumerate(seeds):
            other = attnviz.load_model(s)
            oo = other.model(input_ids=enc.ids, output_attentions=True)
            assert float(_arr(tr["x"])[k]) == pytest.approx(
                ref_jsd(oo.attentions[L - 1][0, 0, t].detach().numpy(), a0), abs=1e-6)
            yo = torch.softmax(oo.logits[0, t].double(), -1).detach().numpy()
            assert float(_arr(tr["y"])[k]) == pytest.approx(0.5 * np.abs(yo - y_own).sum(), abs=1e-6)
    # another site: all heads of layer 1 -> heatmaps of the 8 rows
    at.radio(key="adv_kind").set_value("layer")
    at.selectbox(key="adv_layer").set_value(1)
    at.run()
    assert "frontier" not in _charts(at)
    at.button(key="adv_go").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    hm = _charts(at)["attention"]["data"]
    z0 = _arr(hm[0]["z"]).astype(float)
    assert z0.shape == (lm.n_heads, len(enc.tokens))
    assert np.abs(z0 - own.attentions[0][0, :, t].detach().numpy()).max() < 1e-6


def test_adversarial_page_plain_encoder_says_why(minilm):
    """MiniLM has no output head: the page says so in one line instead of a traceback."""
    at = open_app_page("adversarial", "pkg:minilm", SENTENCE)
    assert not at.exception, [e.value for e in at.exception]
    errs = [e.value for e in at.error]
    assert len(errs) == 1 and "no output head" in errs[0] and "TVD" in errs[0]
    assert not _charts(at)


# ------------------------------------------------------------------ the causal target-row path


CAUSAL = ("gpt2", "llama", "mistral", "qwen2")


def plain_jsd(p, q):
    """JSD written out term by term (natural log, 0·log 0 = 0)."""
    out = 0.0
    for a, b in zip(p, q):
        m = (a + b) / 2
        if a > 0:
            out += 0.5 * a * math.log(a / m)
        if b > 0:
            out += 0.5 * b * math.log(b / m)
    return out


def hf_replaced(lm, ids, target, repl, read=None):
    """The Hugging Face model itself, rerun with attention rows replaced by hooks: repl {(layer, head):
    α [B, n]} -> output distribution at the target (or at position `read`) [B, V] (float64). A forward hook on the layer's value
    projection keeps the value vectors; a pre-hook on the output projection writes α·V into the head's
    slice of the target row of the attention context (what replacing the probabilities does)."""
    m = lm.model
    base = getattr(m, "model", None) or getattr(m, "transformer")
    blocks = base.layers if hasattr(base, "layers") else base.h
    B = next(iter(repl.values())).shape[0]
    cfg = m.config
    H = cfg.num_attention_heads
    dh = cfg.hidden_size // H
    rep = H // (getattr(cfg, "num_key_value_heads", None) or H)
    handles, store = [], {}
    for li, blk in enumerate(blocks):
        mine = {h: a for (l, h), a in repl.items() if l == li}
        if not mine:
            continue
        att = blk.self_attn if hasattr(blk, "self_attn") else blk.attn
        if hasattr(att, "v_proj"):
            vmod, omod = att.v_proj, att.o_proj

            def keep_v(mod, inp, out, li=li):
                store[li] = out  # [B, n, Hkv·dh]
        else:  # GPT-2: c_attn gives q|k|v, c_proj the output projection
            vmod, omod = att.c_attn, att.c_proj

            def keep_v(mod, inp, out, li=li):
                store[li] = out[..., 2 * cfg.hidden_size:]

        def write(mod, args, li=li, mine=mine):
            ctx = args[0].clone()
            v = store[li]
            for h, a in mine.items():
                g = h // rep
                vh = v[..., g * dh:(g + 1) * dh]  # [B, n, dh]
                ctx[:, target, h * dh:(h + 1) * dh] = torch.einsum("bn,bnd->bd", a.to(ctx.dtype), vh)
            return (ctx,) + tuple(args[1:])

        handles += [vmod.register_forward_hook(keep_v), omod.register_forward_pre_hook(write)]
    try:
        with torch.no_grad():
            logits = m(input_ids=ids.expand(B, -1)).logits
    finally:
        for hd in handles:
            hd.remove()
    return torch.softmax(logits[:, target if read is None else read].double(), -1)


@pytest.mark.parametrize("fam", CAUSAL)
def test_causal_target_row_path_equals_the_model_rerun_with_hooks(tokenizer, fam):
    """Target last on a causal model (the fast CausalRow path): its output distribution equals the
    Hugging Face model rerun with the rows replaced by hooks, and run_layers with overrides; JSD and
    TVD against plain formulas."""
    from attnviz.adversarial.fastpath import causal_last

    lm = _deep_tiny(fam, tokenizer)
    text = "the keys to the cabinet near the door"
    for site in (A.Site("head", 0, 1), A.Site("head", 2, 3), A.Site("head", 3, 0), A.Site("layer", 1), A.Site("all")):
        pb = A.prepare(lm, text, site)
        assert causal_last(pb) and pb.target == pb.n - 1, (fam, site)
        g = torch.Generator().manual_seed(5)
        a = torch.softmax(3 * torch.randn(3, pb.alpha0.shape[0], pb.n, generator=g), -1)
        with torch.no_grad():
            fast = pb.outputs(a, fast=True)
            slow = pb.outputs(a, fast=False)
            j, t, probs = pb.distances(a)
        hf = hf_replaced(lm, pb.enc.ids, pb.target, {rc: a[:, r] for r, rc in enumerate(pb.rows)})
        torch.testing.assert_close(fast, hf, rtol=2e-4, atol=1e-9, msg=f"{fam} {site} vs hooks")
        torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-12, msg=f"{fam} {site} vs run_layers")
        y0 = torch.softmax(lm.model(input_ids=pb.enc.ids).logits[0, pb.target].double(), -1).detach()
        for b in range(a.shape[0]):
            want_t = 0.5 * sum(abs(x - y) for x, y in zip(hf[b].tolist(), y0.tolist()))
            assert abs(float(t[b]) - want_t) < 1e-5, (fam, site, b)
            want_j = np.mean([plain_jsd(a[b, r].double().tolist(), pb.alpha0[r].tolist())
                              for r in range(a.shape[1])])
            assert abs(float(j[b]) - want_j) < 1e-9, (fam, site, b)


def test_causal_target_row_path_gradients_match_run_layers(tokenizer):
    """The gradient the search follows: d TVD / d α through the fast path equals that through run_layers."""
    lm = _deep_tiny("llama", tokenizer)
    pb = A.prepare(lm, "the keys to the cabinet near the door", A.Site("head", 1, 2))
    g = torch.Generator().manual_seed(7)
    theta = torch.randn(4, 1, pb.n, generator=g, dtype=torch.float64)
    grads = []
    for fast in (True, False):
        th = theta.clone().float().requires_grad_(True)
        probs = pb.outputs(torch.softmax(th, -1), fast=fast)
        A.tvd(probs, pb.y0.unsqueeze(0)).sum().backward()
        grads.append(th.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-3, atol=1e-7)
    assert float(grads[1].abs().max()) > 1e-6  # the comparison is not between two zeros


def test_a_seed_that_cannot_be_compared_is_left_out(monkeypatch):
    """A seed whose tokenizer splits the sentence differently: the frontier is still drawn, the other
    seeds are still compared, and the page says which seed was left out and why."""
    from attnviz import adversarial as A
    from attnviz.adversarial import pipeline
    from attnviz.errors import InputError
    from attnviz.models.load import builtin_names

    if not {"agreement", "agreement-seed1", "agreement-seed2"} <= set(builtin_names()):
        pytest.skip("the built-in seeds are not installed")
    real = A.seed_baseline

    def fake(lm, others, *a, **k):
        if others and others[0].spec.endswith("-seed1"):
            raise InputError(f"{others[0].spec} tokenises the sentence differently from {lm.spec}: "
                             "their attention cannot be compared")
        return real(lm, others, *a, **k)

    monkeypatch.setattr(pipeline, "seed_baseline", fake)
    at = open_app_page("adversarial", "builtin:agreement", SENTENCE)
    for key, v in (("adv_steps", 20), ("adv_points", 4), ("adv_restarts", 1), ("adv_jw_steps", 0)):
        at.number_input(key=key).set_value(v)
    at.run()
    at.button(key="adv_go").click()
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    ch = _charts(at)
    seeds = _trace(ch["frontier"], "models from other seeds")
    assert list(seeds["customdata"]) == ["builtin:agreement-seed2"]
    text = " ".join(m.value for m in at.markdown)
    assert "left out: builtin" in text and "seed1 tokenises the sentence differently" in text.replace("\\", "")


def test_search_seconds_is_the_sum_of_its_steps():
    """search_seconds against the steps written out: a step at batch b costs t1 + (tB - t1)(b - 1)/(B - 1);
    with 3 restarts, steps // 4 steps of K·3 members, the rest of 2K; Jain & Wallace's k = 5; the
    baselines half a step per 128 permutations."""
    def step(b, t1=0.01, tB=0.2, B=48):
        return t1 + (tB - t1) * (b - 1) / (B - 1)

    K, steps = 16, 200
    want = 50 * step(48) + 150 * step(32) + 100 * step(5) + 0.5 * step(101)
    assert A.search_seconds(0.01, 0.2, 48, K, 3, steps, 50, jw_steps=100, permutations=100) == pytest.approx(want)
    # one restart: no pruning, every step at K
    want1 = steps * step(16, B=16) + 0.5 * step(101, B=16)
    assert A.search_seconds(0.01, 0.2, 16, K, 1, steps, steps) == pytest.approx(want1)


def test_estimate_seconds_times_the_search_steps(copy_lm, monkeypatch):
    """estimate_seconds times steps at batch 1 and at the full batch, and gives search_seconds what it
    measured (a fake clock makes every step at batch b take 0.01 + 0.001·b s); the real timing of a tiny
    model's search is positive and finite."""
    from attnviz.adversarial import search

    lm = copy_lm
    site = A.Site("head", 0, 0)
    calls = []

    def fake(pb, b, dtype):
        calls.append(b)
        return 0.01 + 0.001 * b

    monkeypatch.setattr(search, "_step_seconds", fake)
    lams = [0.0, 0.1, 1.0, 10.0]
    est = A.estimate_seconds(lm, SENTENCE, site, lambdas=lams, steps=40, restarts=3, jw_steps=20)
    assert calls == [1, 12]
    assert est == pytest.approx(A.search_seconds(0.011, 0.022, 12, 4, 3, 40, 10, jw_steps=20))
    # a slow step (all layers of a large model): the full batch of 12 is not run; batch 6 (6 × 0.5 s of
    # batch 1 = 3 s) is, and the line through batches 1 and 6 (0.2 + 0.3·b) gives batch 12: 3.8 s
    calls.clear()
    monkeypatch.setattr(search, "_step_seconds", lambda pb, b, dtype: calls.append(b) or 0.2 + 0.3 * b)
    est = A.estimate_seconds(lm, SENTENCE, site, lambdas=lams, steps=40, restarts=3, jw_steps=20)
    assert calls == [1, 6]
    assert est == pytest.approx(A.search_seconds(0.5, 3.8, 12, 4, 3, 40, 10, jw_steps=20))
    monkeypatch.undo()
    real = A.estimate_seconds(lm, SENTENCE, site, lambdas=lams, steps=40, restarts=1)
    assert 0 < real < 60
