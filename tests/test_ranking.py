"""Ranking the maps against the importance baselines (issue 15, item 4): the study's ranking of a small
hand-made summary against ranks written out by hand (ties, undefined means, the summary rank over the
upper half of the layers), its files, and the Faithfulness page's per-layer ranking."""
from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import attnviz.faithfulness as F
from attnviz.faithfulness.correlation import rank_methods, upper_layers
from attnviz.faithfulness.study import StudyResult

nan = float("nan")
METHODS = ["a", "b", "c", "d"]
BASELINES = ["blank_out", "grad_norm"]
# the means per method (rows) and layer (columns) that the two sentences below average to
MEANS = {"blank_out": [[.5, .9, .1, .2],     # a
                       [.5, .2, .8, .7],     # b
                       [.5, .3, nan, .6],    # c: no defined correlation at L3 in either sentence
                       [.1, .4, .8, -.3]],   # d
         "grad_norm": [[.1, .2, .3, .4],
                       [.4, .3, .2, .1],
                       [.0, .0, .5, .5],
                       [nan, nan, nan, nan]]}  # d: never defined against grad_norm
# the ranks, written out by hand (1 = highest mean; ties share the average of their places)
RANKS = {"blank_out": [[2, 1, 3, 3],
                       [2, 4, 1.5, 1],
                       [2, 3, nan, 2],
                       [4, 2, 1.5, 4]],
         "grad_norm": [[2, 2, 2, 2],
                       [1, 1, 3, 3],
                       [3, 3, 1, 1],
                       [nan, nan, nan, nan]]}
# summary rank: mean over layers 3-4 (the upper half of 4) where ranked; overall: mean over the baselines
SUMMARY = {"blank_out": [3.0, 1.25, 2.0, 2.75], "grad_norm": [2.0, 3.0, 1.0, nan]}
UPPER_MEAN = {"blank_out": [.15, .75, .6, .25], "grad_norm": [.35, .15, .5, nan]}
OVERALL = [2.5, 2.125, 1.5, 2.75]


def hand_made() -> StudyResult:
    """Two sentences whose correlations average to MEANS (±0.1 around it); sentence 2 is undefined for
    a at L2 vs blank-out (so that mean is sentence 1's alone, which is set to the mean)."""
    m = np.array([MEANS[b] for b in BASELINES]).transpose(1, 2, 0)  # [M, L, B]
    s1, s2 = m + 0.1, m - 0.1
    s1[0, 1, 0], s2[0, 1, 0] = 0.9, nan
    rho = np.stack([s1, s2])
    return StudyResult(METHODS, BASELINES, 4, rho, rho.copy(), records=[{"i": 0}, {"i": 1}],
                       settings={"model": "hand-made"})


def test_upper_half_of_the_layers():
    assert upper_layers(4) == [2, 3] and upper_layers(6) == [3, 4, 5] and upper_layers(30) == list(range(15, 30))
    assert upper_layers(5) == [2, 3, 4] and upper_layers(1) == [0]


def test_ranks_of_a_hand_made_summary():
    rk = hand_made().ranking()
    for bi, b in enumerate(BASELINES):
        np.testing.assert_allclose(rk.value[:, :, bi], MEANS[b], atol=1e-12)
        np.testing.assert_array_equal(rk.rank[:, :, bi], np.array(RANKS[b], dtype=float))
        np.testing.assert_allclose(rk.summary[:, bi], SUMMARY[b], atol=1e-12)
        np.testing.assert_allclose(rk.upper_value[:, bi], UPPER_MEAN[b], atol=1e-12)
    np.testing.assert_allclose(rk.overall, OVERALL, atol=1e-12)
    assert rk.layers == [2, 3]
    assert rk.n_ranked.tolist() == [[2, 2], [2, 2], [1, 2], [2, 0]]


def test_ties_and_undefined_are_reported():
    rk = hand_made().ranking()
    assert rk.ties() == [(0, "blank_out", ["a", "b", "c"]), (2, "blank_out", ["b", "d"])]
    assert sorted(rk.undefined()) == sorted([("c", 2, "blank_out")] + [("d", l, "grad_norm") for l in range(4)])
    d = rk.to_dict()
    assert d["summary_layers"] == [3, 4] and "upper half" in d["rule"]
    assert {"layer": 3, "baseline": "blank_out", "methods": ["b", "d"]} in d["ties"]
    c = next(x for x in d["methods"] if x["method"] == "c")
    assert c["summary_rank"] == {"blank_out": 2.0, "grad_norm": 1.0} and c["layers_ranked"]["blank_out"] == 1
    dd = next(x for x in d["methods"] if x["method"] == "d")
    assert dd["summary_rank"]["grad_norm"] is None and dd["overall"] == 2.75


def test_order_at_a_layer_best_first_undefined_last():
    rk = hand_made().ranking()
    assert [m for m, _, _ in rk.order(2, "blank_out")] == ["b", "d", "a", "c"]
    assert [r for _, _, r in rk.order(2, "blank_out")][:3] == [1.5, 1.5, 3.0]
    assert math.isnan(rk.order(2, "blank_out")[3][2])
    assert [m for m, _, _ in rk.order(0, "grad_norm")] == ["b", "a", "c", "d"]


def test_other_summary_layers_and_the_last_layer():
    rk = hand_made().ranking(layers=[3])  # the last layer only
    np.testing.assert_array_equal(rk.summary[:, 0], [3, 1, 2, 4])
    np.testing.assert_array_equal(rk.summary[:, 1], [2, 3, 1, nan])


def test_rank_methods_plain_loop_reference():
    """Random values with planted ties and NaN: each rank = 1 + (number strictly greater) + (number
    equal - 1) / 2, counted by a plain loop."""
    rng = np.random.default_rng(0)
    v = np.round(rng.normal(size=(7, 5, 3)), 1)  # one decimal: many ties
    v[rng.random(v.shape) < 0.15] = nan
    r = rank_methods(v)
    for l in range(5):
        for b in range(3):
            for i in range(7):
                if math.isnan(v[i, l, b]):
                    assert math.isnan(r[i, l, b])
                    continue
                others = [v[j, l, b] for j in range(7) if not math.isnan(v[j, l, b])]
                greater = sum(x > v[i, l, b] for x in others)
                equal = sum(x == v[i, l, b] for x in others)
                assert r[i, l, b] == 1 + greater + (equal - 1) / 2


def test_the_summary_files_carry_the_ranking(tmp_path):
    res = hand_made()
    paths = res.write(tmp_path)
    with open(paths["ranking_csv"], newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 4 * 2
    for row in rows:
        mi, l, bi = METHODS.index(row["method"]), int(row["layer"]) - 1, BASELINES.index(row["baseline"])
        want = RANKS[row["baseline"]][mi][l]
        assert (row["rank"] == "" and math.isnan(want)) or float(row["rank"]) == want
    js = json.loads(Path(paths["json"]).read_text())
    assert [m["overall"] for m in js["ranking"]["methods"]] == OVERALL
    md = Path(paths["ranking_md"]).read_text()
    assert "| c | 2.0 (+0.60) | 1.0 (+0.50) | 1.5 |" in md  # best overall first
    assert md.index("| c |") < md.index("| b |") < md.index("| a |") < md.index("| d |")
    assert "- L1 vs blank_out: a, b, c" in md and "- d L4 vs grad_norm" in md
    html = Path(paths["html"]).read_text()
    assert "summary rank" in html and "<td>1.5 (+0.80)</td>" in html


def test_a_sentence_ranking_orders_by_its_correlations(make_tiny):
    """One sentence on a tiny model: the per-layer order is the correlations sorted by a plain sort."""
    lm = make_tiny("bert")
    r = F.score_sentence(lm, "the keys to the cabinet [MASK] here .", methods=["attention", "rollout", "value_norm"],
                         baselines=["blank_out", "grad_norm"], ig_steps=4)
    corr = r.correlations
    rk = corr.ranking()
    for l in range(corr.n_layers):
        for bi, b in enumerate(corr.baselines):
            vals = {m: corr.rho[mi, l, bi] for mi, m in enumerate(corr.methods) if np.isfinite(corr.rho[mi, l, bi])}
            got = [m for m, _, rank in rk.order(l, b) if np.isfinite(rank)]
            want = sorted(vals, key=lambda m: (-round(vals[m], 9), m))
            assert got == want
            assert [vals[m] for m in got] == sorted(vals.values(), reverse=True)


# ---------------------------------------------------------------- the page
ROOT = Path(__file__).resolve().parents[1]


def _faithfulness_page(app_spec, timeout):
    """The app's Faithfulness page on app_spec, run once."""
    from streamlit.testing.v1 import AppTest

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    at.query_params["model"] = app_spec
    at.query_params["page"] = "faithfulness"
    at.run()
    return at


def test_the_page_ranks_the_maps_per_layer(app_spec):
    at = _faithfulness_page(app_spec, 600)
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value  # the correlation table; rows: map labels, columns: L1..
    ranked = at.table[0].value  # the ranking below it (a static table); rows: L1.., columns: #1..
    assert list(ranked.index) == list(table.columns)
    for layer in table.columns:
        col = table[layer].dropna()
        cells = [c for c in ranked.loc[layer] if isinstance(c, str) and not c.endswith("(n/a)")]
        assert len(cells) == len(col)
        # each cell: "Label (+0.12)[, tied]": the labels in the order of the values (plain sort)
        tied = [c.endswith(", tied") for c in cells]
        cells = [c.removesuffix(", tied") for c in cells]
        got = [c.rsplit(" (", 1)[0] for c in cells]
        assert tied == [sum(round(col[x], 9) == round(col[g], 9) for x in col.index) > 1 for g in got]
        vals = [float(c.rsplit("(", 1)[1].rstrip(")")) for c in cells]
        assert vals == sorted(vals, reverse=True)
        np.testing.assert_allclose(vals, [col[g] for g in got], atol=0.006)
        assert sorted(got) == sorted(col.index)
    assert any("Summary rank = the mean place over the upper half" in c.value for c in at.caption)


def test_the_page_ranks_the_maps_of_a_study(app_spec):
    """After the page's study (3 sentences): the ranking table below the study's means orders the maps
    by those means (plain sort)."""
    at = _faithfulness_page(app_spec, 600)
    at.number_input(key="fa_study_n").set_value(3)
    at.button(key="fa_study_go").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    means = at.dataframe[1].value  # the study's mean table
    ranked = at.table[1].value  # its ranking (the sentence's is table 0)
    assert list(ranked.index) == list(means.columns)
    for layer in means.columns:
        col = means[layer].dropna()
        cells = [c for c in ranked.loc[layer] if isinstance(c, str) and not c.endswith("(n/a)")]
        got = [c.removesuffix(", tied").rsplit(" (", 1)[0] for c in cells]
        want = sorted(col.index, key=lambda m: -round(col[m], 9))
        np.testing.assert_allclose([col[g] for g in got], [col[w] for w in want], atol=1e-12)
    assert any(c.value.startswith("Summary rank (mean place over L") for c in at.caption)
