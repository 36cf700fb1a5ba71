"""The method contract (attnviz/methods/info.py): every registered method and importance baseline
declares complete info, the declarations match what compute() returns, and a method added as one
module file plus one register() call reaches every consumer: analyze(), the CLI, the study, the
app's labels and units, its About page and the exports."""
from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from conftest import plotly_array
from attnviz.faithfulness.importance import BASELINES, BaselineInfo, importance
from attnviz.methods import METHODS, Completeness, GraphView, MethodInfo, Option, register, unregister
from attnviz.methods import info as info_mod

ROOT = Path(__file__).resolve().parents[1]
SENT = "the keys to the cabinet [MASK] on the table ."

# ------------------------------------------------------------------------------------ the toy method
# what a contributor writes: this file, saved as attnviz/methods/previous_token.py, plus the line
# `register(previous_token)` in attnviz/methods/__init__.py
TOY_SOURCE = textwrap.dedent('''
    """Previous token: every token takes all of its input from the token before it (the first from itself)."""
    import numpy as np

    from attnviz.methods.base import Map
    from attnviz.methods.info import MethodInfo, Option


    def compute(trace, *, progress=None, offset: int = 1) -> Map:
        n, L = len(trace.tokens), trace.n_layers
        M = np.zeros((n, n))
        M[np.arange(n), np.maximum(np.arange(n) - offset, 0)] = 1.0
        return Map("previous_token", np.repeat(M[None], L, 0), None, {"rows_sum_to_one": True})


    INFO = MethodInfo(
        name="previous_token", label="Previous token (toy)", unit="toy share (of 1)",
        summary="row i puts all its weight on token i - offset",
        explain="Toy map: each token draws only on the token before it.",
        what="**What it shows.** A fixed pattern, for tests.",
        caveats="**Caveats.** It ignores the model entirely.",
        rows_sum_to_one=True, decomposition=False, core=True,
        options=(Option(name="offset", default=1, help="how far back"),))
''')


def _expected(n, L, offset=1):
    """The toy map written out with loops."""
    out = np.zeros((L, n, n))
    for l in range(L):
        for i in range(n):
            out[l, i, max(i - offset, 0)] = 1.0
    return out


@pytest.fixture
def toy(tmp_path):
    """The toy method module loaded from its own file and registered through the public API."""
    path = tmp_path / "previous_token.py"
    path.write_text(TOY_SOURCE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("previous_token", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    register(module)
    try:
        yield module
    finally:
        unregister("previous_token")
    assert "previous_token" not in METHODS


@pytest.fixture(scope="module")
def lm():
    from attnviz.models.load import builtin_names

    if "agreement" not in builtin_names():
        pytest.skip("builtin:agreement is not installed")
    return attnviz.load_model("builtin:agreement")


# ------------------------------------------------------------------------------------ declarations

def test_every_method_declares_complete_info():
    assert len(METHODS) >= 13
    for name, info in METHODS.items():
        assert isinstance(info, MethodInfo) and info.name == name
        for field in ("label", "unit", "summary", "explain", "what", "caveats", "reference"):
            assert len(str(getattr(info, field)).strip()) > 3, (name, field)
        assert ("(share of 1)" in info.unit or "of 1)" in info.unit) == info.rows_sum_to_one, name
        assert info.rows_sum_to_one or "hidden units" in info.unit, name
        assert info.cost in info_mod.COST_CLASSES
        sig = inspect.signature(info.compute)
        assert sig.parameters["progress"].kind is inspect.Parameter.KEYWORD_ONLY
        assert sig.parameters["progress"].default is None
        for o in info.options:  # every option is a keyword-only argument with the declared default
            assert sig.parameters[o.name].kind is inspect.Parameter.KEYWORD_ONLY, (name, o.name)
            assert sig.parameters[o.name].default == o.default, (name, o.name)
            assert o.help
        assert set(sig.parameters) == {"trace", "progress", *info.option_names()}, name
    labels = [i.label for i in METHODS.values()]
    assert len(set(labels)) == len(labels)


def test_declarations_match_what_compute_returns(make_tiny):
    """per_head, rows_sum_to_one, completeness and the name, checked on the maps of a tiny BERT and a
    tiny Llama; the declared mixing ratios are the ones the ratio functions produce."""
    from attnviz.context import all_ratios
    from attnviz.trace import trace

    for fam in ("bert", "llama"):
        lm = make_tiny(fam)
        tr = trace(lm, "the keys to the cabinet are here", dtype=torch.float64)
        n = len(tr.tokens)
        for name, info in METHODS.items():
            kw = {"steps": 4} if "steps" in info.option_names() else {}
            m = info.compute(tr, **kw)
            assert m.name == name
            assert m.layer.shape == (tr.n_layers, n, n), name
            assert (m.heads is not None) == info.per_head, name
            # the completeness error is a typed field of the Map, one error per layer and what it measures
            assert (m.completeness is not None) == info.completeness and "completeness" not in m.meta, name
            if m.completeness is not None:
                assert isinstance(m.completeness, Completeness) and len(m.completeness.errors) == tr.n_layers, name
                assert all(isinstance(e, float) and 0 <= e < 1 for e in m.completeness.errors), name
                assert m.completeness.worst == max(m.completeness.errors), name
                assert "output" in m.completeness.target or "resid" in m.completeness.target, name
            if info.rows_sum_to_one:
                np.testing.assert_allclose(m.layer.sum(-1), 1.0, atol=1e-9, err_msg=name)
            else:  # norms: not shares
                assert not np.allclose(m.layer.sum(-1), 1.0, atol=1e-3), name
        got = all_ratios(tr, steps=4)
        assert set(got) == set(METHODS.ratio_names())
        for r in METHODS.ratio_names():
            assert got[r].shape == (tr.n_layers, n) and np.all((got[r] >= 0) & (got[r] <= 1)), r


def test_register_refuses_incomplete_or_mismatched_info():
    good = dict(name="x", label="X", unit="x (share of 1)", summary="s", explain="e", what="w", caveats="c",
                rows_sum_to_one=True, decomposition=False)

    def compute(trace, *, progress=None):
        return None

    with pytest.raises(ValueError, match="empty field"):
        register(info=MethodInfo(**{**good, "caveats": " "}), compute=compute)
    with pytest.raises(ValueError, match="share of 1"):
        register(info=MethodInfo(**{**good, "unit": "x (norm)"}), compute=compute)
    with pytest.raises(ValueError, match="keyword-only progress"):
        register(info=MethodInfo(**good), compute=lambda trace, progress=None: None)
    with pytest.raises(ValueError, match="option 'k'"):
        register(info=MethodInfo(**good, options=(Option(name="k", default=2, help="h"),)), compute=compute)

    def compute_k(trace, *, progress=None, k=3):
        return None

    with pytest.raises(ValueError, match="defaults to 3"):
        register(info=MethodInfo(**good, options=(Option(name="k", default=2, help="h"),)), compute=compute_k)
    with pytest.raises(ValueError, match="not declared"):
        register(info=MethodInfo(**good), compute=compute_k)
    with pytest.raises(ValueError, match="already registered"):
        register(info=METHODS["attention"], compute=METHODS["attention"].compute)
    assert "x" not in METHODS


def test_register_refuses_ratios_without_their_function():
    """A method that declares ratios computes them (mixing_ratios, with declared options only), and one
    that computes ratios declares them; two methods cannot declare the same ratio."""
    good = dict(name="x", label="X", unit="x (share of 1)", summary="s", explain="e", what="w", caveats="c",
                rows_sum_to_one=True, decomposition=False)

    def compute(trace, *, progress=None):
        return None

    def compute_k(trace, *, progress=None, k=2):
        return None

    opts = (Option(name="k", default=2, help="h"),)
    with pytest.raises(ValueError, match="no mixing_ratios"):
        register(info=MethodInfo(**good, ratios=("X-W",)), compute=compute)
    with pytest.raises(ValueError, match="declares none"):
        register(info=MethodInfo(**good), compute=compute, mixing_ratios=lambda trace: {})
    with pytest.raises(ValueError, match="keyword-only option"):
        register(info=MethodInfo(**good, ratios=("X-W",), options=opts), compute=compute_k,
                 mixing_ratios=lambda trace, *, j=1: {})
    with pytest.raises(ValueError, match="keyword-only option"):
        register(info=MethodInfo(**good, ratios=("X-W",), options=opts), compute=compute_k,
                 mixing_ratios=lambda trace, k=2: {})
    with pytest.raises(ValueError, match="defaults to 3"):
        register(info=MethodInfo(**good, ratios=("X-W",), options=opts), compute=compute_k,
                 mixing_ratios=lambda trace, *, k=3: {})
    with pytest.raises(ValueError, match="already declared by"):
        register(info=MethodInfo(**good, ratios=("Attn-W",)), compute=compute, mixing_ratios=lambda trace: {})
    with pytest.raises(ValueError, match="contextualization_change"):
        register(info=MethodInfo(**good, contextualization_change="during"), compute=compute)
    assert "x" not in METHODS
    # a ratio function that returns other names than it declares is refused when it runs
    register(info=MethodInfo(**good, ratios=("X-W",)), compute=compute, mixing_ratios=lambda trace: {"Y-W": 0})
    try:
        with pytest.raises(ValueError, match="returned"):
            METHODS.mixing_ratios(None, ["X-W"])
    finally:
        unregister("x")
    with pytest.raises(ValueError, match="unknown ratio"):
        METHODS.mixing_ratios(None, ["X-W"])


def test_every_declared_ratio_comes_from_its_method(make_tiny):
    """Each method's mixing_ratios returns exactly its declared ratios; the registry's call (analyze's
    mixing, context.all_ratios) hands them on unchanged; the two ends of the contextualization change
    are declared once each."""
    from attnviz.analysis import MIXING_COSTS
    from attnviz.context import AFTER, BEFORE
    from attnviz.trace import trace

    assert METHODS.change_pair() == (BEFORE, AFTER)
    assert METHODS[BEFORE].contextualization_change == "before" and METHODS[AFTER].contextualization_change == "after"
    lm = make_tiny("bert")
    a = attnviz.analyze(lm, SENT, methods=["attention"])
    tr = trace(lm, SENT)
    assert list(a.mixing) == list(METHODS.ratio_names(costs=MIXING_COSTS))
    for name, info in METHODS.items():
        assert (info.mixing_ratios is not None) == bool(info.ratios), name
        if not info.ratios:
            continue
        got = info.mixing_ratios(tr, **({"steps": 4} if "steps" in info.option_names() else {}))
        assert list(got) == list(info.ratios), name
        if info.cost in MIXING_COSTS:
            for r in info.ratios:
                np.testing.assert_array_equal(a.mixing[r], got[r])
        else:  # the FFN scopes: not in analyze's ratios, but in all_ratios with the steps given
            assert not set(info.ratios) & set(a.mixing)
            from attnviz.context import all_ratios
            for r in info.ratios:
                np.testing.assert_array_equal(all_ratios(tr, steps=4)[r], got[r])


def test_a_method_with_a_ratio_reaches_analyze_and_context(make_tiny):
    """A toy method declaring a ratio: analyze's mixing and context.all_ratios carry it, computed by its own
    function; its value checked against the toy's definition written out (every token but the first
    takes all of its input from another token: ratio 1, the first keeps itself: 0)."""
    from attnviz.context import all_ratios
    from attnviz.trace import trace

    info = MethodInfo(name="prev_toy", label="Prev toy", unit="toy share (of 1)", summary="s", explain="e",
                      what="w", caveats="c", rows_sum_to_one=True, decomposition=False, ratios=("Prev-W",),
                      options=(Option(name="offset", default=1, help="how far back"),))

    def compute(trace, *, progress=None, offset=1):
        n, L = len(trace.tokens), trace.n_layers
        M = np.zeros((n, n))
        M[np.arange(n), np.maximum(np.arange(n) - offset, 0)] = 1.0
        return attnviz.methods.Map("prev_toy", np.repeat(M[None], L, 0), None, {"rows_sum_to_one": True})

    def mixing_ratios(trace, *, offset=1):
        m = compute(trace, offset=offset).layer
        return {"Prev-W": 1 - np.diagonal(m, axis1=1, axis2=2)}

    register(info=info, compute=compute, mixing_ratios=mixing_ratios)
    try:
        lm = make_tiny("bert")
        n_layers = lm.n_layers
        a = attnviz.analyze(lm, SENT, methods=["attention"])
        n = len(a.tokens)
        want = np.array([[0.0] + [1.0] * (n - 1)] * n_layers)
        np.testing.assert_array_equal(a.mixing["Prev-W"], want)
        assert list(a.mixing)[-1] == "Prev-W"
        b = attnviz.analyze(lm, SENT, methods=["prev_toy"], options={"prev_toy": {"offset": 0}})
        np.testing.assert_array_equal(b.mixing["Prev-W"], np.zeros((n_layers, n)))
        np.testing.assert_array_equal(all_ratios(trace(lm, SENT), steps=4)["Prev-W"], want)
    finally:
        unregister("prev_toy")
    assert "Prev-W" not in METHODS.ratio_names()


def test_graph_views_give_their_methods_maps(make_tiny):
    """A method that reads the layered attention graph (MethodInfo.graph, offered by the Flow graph
    page) gives, edge by edge, the mass its own map is made of: each level of edges carries the total,
    and the totals to every input, normalised, are the method's own row at that layer."""
    from attnviz.figures import graph_methods
    from attnviz.trace import trace

    views = graph_methods()
    assert views and list(views) == [m for m, i in METHODS.items() if i.graph is not None]
    tr = trace(make_tiny("bert"), SENT)
    A = tr.head_mean()
    n = A.shape[-1]
    for m, view in views.items():
        assert view.label and view.help and "{total" in view.caption
        ref = METHODS[m].compute(tr).layer
        for out, top in ((n - 1, tr.n_layers), (2, 1)):
            totals = []
            for src in range(n):
                total, F = view.edges(A, out, src, top)
                assert F.shape == (top, n, n) and np.all(F >= -1e-12)
                np.testing.assert_allclose(F.sum((1, 2)), total, rtol=1e-9, atol=1e-12)
                totals.append(total)
            np.testing.assert_allclose(np.array(totals) / sum(totals), ref[top - 1, out], rtol=1e-5, atol=1e-6)
    good = dict(name="x", label="X", unit="x (share of 1)", summary="s", explain="e", what="w", caveats="c",
                rows_sum_to_one=True, decomposition=False)
    with pytest.raises(ValueError, match="GraphView"):
        register(info=MethodInfo(**good, graph=GraphView(label="X", help="", caption="c", edges=len)),
                 compute=lambda trace, *, progress=None: None)
    assert "x" not in METHODS


def test_every_baseline_declares_complete_info():
    assert len(BASELINES) == 5
    for name, b in BASELINES.items():
        assert isinstance(b, BaselineInfo) and b.name == name and b.label and b.summary and callable(b.compute)


def test_a_baseline_added_to_the_registry_reaches_importance_and_correlations(make_tiny):
    """A toy baseline (importance = the token's position) through importance() and score_sentence."""
    from attnviz.faithfulness import score_sentence

    def compute(ctx):
        return ctx.positions.astype(float), False

    BASELINES["position"] = BaselineInfo(name="position", label="Position (toy)", summary="j", compute=compute)
    try:
        lm = make_tiny("bert")
        imp = importance(lm, "the keys [MASK] on the table", baselines=["position", "blank_out"])
        pos = imp.positions
        np.testing.assert_array_equal(imp.values["position"][pos], pos)
        assert np.isnan(np.delete(imp.values["position"], pos)).all()
        r = score_sentence(lm, "the keys [MASK] on the table", methods=["attention"], baselines=["position"])
        A = r.analysis.maps["attention"].layer
        t = r.importance.target.position
        import scipy.stats
        for l in range(A.shape[0]):
            assert r.correlations.rho[0, l, 0] == pytest.approx(scipy.stats.spearmanr(A[l, t, pos], pos).statistic)
    finally:
        del BASELINES["position"]


# ------------------------------------------------------------------------------------ a new method reaches every consumer

def test_new_method_in_analyze_with_its_option(toy, make_tiny):
    lm = make_tiny("bert")
    a = attnviz.analyze(lm, "the keys [MASK] on the table", methods=["attention", "previous_token"])
    n, L = len(a.tokens), lm.n_layers
    np.testing.assert_array_equal(a.maps["previous_token"].layer, _expected(n, L))
    b = attnviz.analyze(lm, "the keys [MASK] on the table", methods=["previous_token"],
                        options={"previous_token": {"offset": 2}})
    np.testing.assert_array_equal(b.maps["previous_token"].layer, _expected(n, L, 2))
    c = attnviz.analyze(lm, "the keys [MASK] on the table", methods=["previous_token"], options={"offset": 3})
    np.testing.assert_array_equal(c.maps["previous_token"].layer, _expected(n, L, 3))
    with pytest.raises(ValueError, match="no option"):
        attnviz.analyze(lm, "the keys", methods=["previous_token"], options={"previous_token": {"steps": 2}})
    with pytest.raises(ValueError, match="unknown option"):
        attnviz.analyze(lm, "the keys", methods=["previous_token"], options={"nonsense": 2})


def test_new_method_in_the_cli(toy, tiny_bert_folder, tmp_path, capsys):
    from attnviz import cli

    out = tmp_path / "a.json"
    assert cli.main(["analyze", "--model", str(tiny_bert_folder), "--text", "the keys [MASK] on the table",
                     "--methods", "attention,previous_token", "--option", "previous_token.offset=2",
                     "--out", str(out)]) == 0
    d = json.loads(out.read_text(encoding="utf-8"))
    layer = np.array(d["maps"]["previous_token"]["layer"], dtype=float)
    np.testing.assert_array_equal(layer, _expected(len(d["tokens"]), layer.shape[0], 2))
    assert d["method_info"]["previous_token"]["unit"] == "toy share (of 1)"
    capsys.readouterr()
    assert cli.main(["methods"]) == 0
    listing = capsys.readouterr().out
    assert "previous_token" in listing and "Previous token (toy)" in listing and "offset=1" in listing


def test_new_method_in_the_study_and_its_defaults(toy, make_tiny, tmp_path):
    from attnviz.faithfulness import available_methods, study

    lm = make_tiny("bert")
    assert "previous_token" in available_methods(lm)[0]  # core=True: in the default set
    res = study(lm, ["the keys [MASK] on the table", "the dog [MASK] here"], methods=["previous_token", "attention"],
                baselines=["blank_out"], use_contrast=False)
    assert res.methods[0] == "previous_token"
    summ = res.summary()["spearman"]
    assert summ["mean"].shape[0] == 2


def test_new_method_in_the_app_labels_units_and_about(toy, lm):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["model"] = "builtin:agreement"
    at.query_params["methods"] = "attention,previous_token"
    at.query_params["text"] = SENT
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.id.endswith("-maps")]
    spec = charts[0]
    assert [tr["colorbar"]["title"]["text"] for tr in spec["data"]] == ["attention weight (share of 1)",
                                                                        "toy share (of 1)"]
    z = plotly_array(spec["data"][1]["z"])
    ref = attnviz.analyze(lm, SENT, methods=["previous_token"]).maps["previous_token"].layer[0]
    np.testing.assert_array_equal(z, ref)
    assert any("Previous token (toy)" in str(a.get("text", "")) for a in spec["layout"]["annotations"])
    assert any("Toy map: each token draws only on the token before it." in c.value.replace("\\", "")
               for c in at.caption)
    at.switch_page("attnviz/app/views/about.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Previous token (toy)" in [t.label for t in at.tabs]
    md = " ".join(m.value for m in at.markdown)
    assert "A fixed pattern, for tests." in md and "It ignores the model entirely." in md


def test_cli_option_errors_are_one_line_before_the_model_loads(tmp_path, capsys):
    from attnviz import cli

    for opt, said in (("stepz=3", "no method declares an option 'stepz'"),
                      ("atb_ff.rule=simpson", "choose one of gauss, midpoint"),
                      ("nomethod.steps=3", "unknown method 'nomethod'"),
                      ("steps", "write NAME=VALUE")):
        # the model spec does not exist: the option is refused before any load is tried
        rc = cli.main(["analyze", "--model", str(tmp_path / "no_such_model"), "--text", "a [MASK] b",
                       "--out", str(tmp_path / "a.json"), "--option", opt])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and said in err and "Traceback" not in err and len(err.splitlines()) == 1, (opt, err)
    assert cli.parse_options(["steps=8", "atb_ff_res.rule=midpoint", "flow.workers=2"]) == {
        "steps": 8, "atb_ff_res": {"rule": "midpoint"}, "flow": {"workers": 2}}
