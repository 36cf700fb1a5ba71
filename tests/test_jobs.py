"""The job layer (attnviz.jobs) without Streamlit: planning a view, merging finished jobs into an
Analysis, the progress/cancel runner, the bounded result cache; and the adversarial pipeline.

References: a single attnviz.analyze() call with every method (for the merged maps), the adversarial
pieces called one by one (for the pipeline), estimates written as numbers here (a toy method
registered for the test)."""
from __future__ import annotations

import numpy as np
import pytest

import attnviz
from attnviz import METHODS, jobs
from attnviz import adversarial as A
from attnviz.adversarial import pipeline
from attnviz.methods.info import MethodInfo
from attnviz.trace import encode

SENTENCE = "the keys to the cabinet [MASK] on the table ."


@pytest.fixture(scope="module")
def tiny(make_tiny):
    return make_tiny("bert")


def _toy_compute(trace, *, progress=None):
    return METHODS["attention"].compute(trace)


@pytest.fixture
def toys():
    """Three registered methods with their own estimates in seconds for n tokens: 0.1·n, 10·n and n⁴."""
    made = {"toy_soon": lambda lm, n: 0.1 * n, "toy_ask": lambda lm, n: 10.0 * n, "toy_huge": lambda lm, n: float(n) ** 4}
    for name, est in made.items():
        METHODS.register(info=MethodInfo(name=name, label=name.replace("_", " "), unit="toy weight (share of 1)",
                                         summary="the attention, under another name", explain="A toy map.",
                                         what="A toy map.", caveats="None.", rows_sum_to_one=True,
                                         decomposition=False, cost="norms", estimate=est),
                         compute=_toy_compute)
    yield list(made)
    for name in made:
        METHODS.unregister(name)


# ------------------------------------------------------------------ planning


def test_plan_splits_cheap_rest_apart_ask_and_limited(toys):
    methods = ["attention", "value_norm", "toy_soon", "toy_ask", "toy_huge", "no_such_method"]
    p = jobs.plan(None, methods, 10, ask_seconds=5.0)
    assert p.now == ("attention", "value_norm")
    assert p.apart == {"toy_soon": pytest.approx(1.0)}  # 0.1 * 10 s: under the ask threshold
    assert p.ask == {"toy_ask": 100.0}  # 10 * 10 s: waits until asked for
    # 10^4 s is over the 30-minute limit; the longest text offered: 6^4 = 1296 <= 1800 < 7^4
    assert list(p.limited) == ["toy_huge"] and "offered up to 6 tokens" in p.limited["toy_huge"]
    assert jobs.split_cheap(p.now) == (("attention",), ("value_norm",))
    confirmed = jobs.plan(None, methods, 10, ask_seconds=5.0, confirmed=lambda m: m == "toy_ask")
    assert confirmed.apart == {"toy_soon": pytest.approx(1.0), "toy_ask": 100.0} and confirmed.ask == {}


def test_view_jobs_and_their_estimates(tiny, toys):
    vp = jobs.plan_view(tiny, "tiny:bert", SENTENCE, ["toy_soon", "value_norm", "attention", "rollout", "toy_huge"],
                        None, 64)
    n = len(encode(tiny, SENTENCE, 64).tokens)
    assert vp.n_tokens == n and vp.target is None and not vp.fell_back
    assert vp.cheap == ("attention", "rollout")
    assert vp.rest == ("value_norm",) and list(vp.plan.limited) == ["toy_huge"]
    first = jobs.first_job(tiny, vp)
    assert first.key == ("analyze", "tiny:bert", SENTENCE, vp.cheap, None, 64, False)
    todo = jobs.view_jobs(tiny, vp, trace_seconds=0.5, mixing=True)
    assert [j.key[0] for j in todo] == ["analyze", "apart"]
    # the rest: the trace's 2 units + value_norm's 2 (a norms pass) + the mixing ratios' 2, and one trace
    assert todo[0].estimate == pytest.approx(0.5 * (1 + (2.0 + 2.0) / 2))
    assert todo[0].methods == ("value_norm",) and todo[0].slug == "value_norm"
    assert todo[1].methods == ("toy_soon",) and todo[1].estimate == pytest.approx(0.1 * n)
    # a target row left over from another text falls back to the automatic one
    assert jobs.plan_view(tiny, "tiny:bert", SENTENCE, ["attention"], 500, 64).fell_back


def test_estimates_scale_from_the_trace_cpu_time_not_the_waits_of_a_busy_machine(tiny, monkeypatch):
    """A trace that waited 0.6 s for a core (a sleep here: wall time, no CPU) must not inflate the estimate
    of the rest, which the app keeps with the cached result for every later visitor of the text."""
    import time as _time

    from attnviz import analysis

    real = analysis._trace

    def waiting(*args, **kwargs):
        _time.sleep(0.6)
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis, "_trace", waiting)
    a = attnviz.analyze(tiny, SENTENCE, methods=["attention"])
    assert a.timings["trace"] >= 0.6
    assert 0 < a.timings["trace_cpu"] < 0.3 and jobs.trace_seconds(a) == a.timings["trace_cpu"]
    vp = jobs.plan_view(tiny, "tiny:bert", SENTENCE, ["attention", "value_norm"], None, 64)
    est = jobs.view_jobs(tiny, vp, jobs.trace_seconds(a))[0].estimate
    assert est == pytest.approx(a.timings["trace_cpu"] * (1 + 2.0 / 2)) and est < 0.6
    # without a CPU time (a result from a GPU, or an older cache) the wall time is used
    a.timings.pop("trace_cpu")
    assert jobs.trace_seconds(a) == a.timings["trace"]
    # without any (read from the app's disk tier): retime measures one trace of the text here, once
    monkeypatch.setattr(analysis, "_trace", real)
    a.timings.pop("trace")
    assert jobs.trace_seconds(a, default=0.7) == 0.7
    assert jobs.retime(tiny, a, vp) is a and 0 < jobs.trace_seconds(a) < 0.3
    again = dict(a.timings)
    jobs.retime(tiny, a, vp)
    assert a.timings == again  # a time already there is kept


def test_merged_jobs_equal_one_analyze_call(tiny):
    methods = ["flow", "value_norm", "attention", "rollout", "alti"]
    vp = jobs.plan_view(tiny, "tiny:bert", SENTENCE, methods, None, 64)
    assert "flow" in vp.plan.apart  # flow declares an estimate: a job of its own
    base = jobs.first_job(tiny, vp).compute(None)
    todo = jobs.view_jobs(tiny, vp, base.timings["trace"], mixing=True)
    done = {j.key: j.compute(None) for j in todo}
    a, pending = jobs.take_cached(base, todo, done.get, vp)
    ref = attnviz.analyze(tiny, SENTENCE, methods=methods, max_tokens=64, mixing=True)
    assert pending == [] and list(a.maps) == methods  # in the order asked for
    for m in methods:
        np.testing.assert_array_equal(a.maps[m].layer, ref.maps[m].layer)
        if ref.maps[m].heads is None:
            assert a.maps[m].heads is None
        else:
            np.testing.assert_array_equal(a.maps[m].heads, ref.maps[m].heads)
    assert set(a.mixing) == set(ref.mixing) and ref.mixing
    for k in ref.mixing:
        np.testing.assert_array_equal(a.mixing[k], ref.mixing[k])
    assert a.tokens == ref.tokens and a.target == ref.target and a.prediction == ref.prediction
    # the cached cheap analysis is left as it was; a job not in the cache stays pending
    assert set(base.maps) == set(vp.cheap)
    missing = todo[-1]
    b, pending = jobs.take_cached(base, todo, lambda k: None if k == missing.key else done[k], vp)
    assert pending == [missing] and not set(missing.methods) & set(b.maps)


def test_limited_methods_say_why(tiny, toys):
    vp = jobs.plan_view(tiny, "tiny:bert", SENTENCE, ["attention", "toy_huge"], None, 64)
    base = jobs.first_job(tiny, vp).compute(None)
    a, pending = jobs.take_cached(base, jobs.view_jobs(tiny, vp, 0.1), lambda k: None, vp)
    assert pending == [] and list(a.maps) == ["attention"] and "offered up to" in a.disabled["toy_huge"]


# ------------------------------------------------------------------ running and caching


def test_cancel_stops_midway_and_nothing_is_cached(tiny):
    cache = jobs.ResultCache(maxsize=4)
    job = jobs.analysis_job(tiny, "tiny:bert", SENTENCE, ["attention", "value_norm", "rollout"], None, 64, False)
    stages, flag = [], [False]

    def report(stage, f, left):
        stages.append(stage)
        if stage == "attention":
            flag[0] = True  # "Cancel" pressed while attention runs

    with pytest.raises(jobs.Cancelled):
        cache.run(job.key, job.compute, report=report, cancelled=lambda: flag[0])
    assert stages == ["attention"]  # value_norm and rollout never started
    assert job.key not in cache and len(cache) == 0
    got = cache.run(job.key, job.compute)
    assert job.key in cache and cache.get(job.key) is got
    ref = attnviz.analyze(tiny, SENTENCE, methods=["attention", "value_norm", "rollout"], max_tokens=64, mixing=False)
    np.testing.assert_array_equal(got.maps["value_norm"].layer, ref.maps["value_norm"].layer)


def test_cancellable_progress_stops_analyze_between_methods(tiny):
    """jobs.cancellable: once the flag is up, analyze stops at the next progress report, so later
    methods are never computed."""
    flag, stages = [False], []

    def progress(stage, f):
        stages.append(stage)
        if stage == "attention":
            flag[0] = True

    with pytest.raises(jobs.Cancelled):
        attnviz.analyze(tiny, "the dogs [MASK] happy .", methods=["attention", "value_norm", "rollout"],
                        progress=jobs.cancellable(progress, lambda: flag[0]))
    assert stages == ["attention"]
    assert METHODS["attention"].cost == "cheap" and jobs.split_cheap(["value_norm", "rollout", "attention"]) == (
        ("rollout", "attention"), ("value_norm",))


def test_runner_fractions_are_monotone_and_end_at_one(tiny):
    seen = []
    job = jobs.analysis_job(tiny, "tiny:bert", SENTENCE, ["attention", "value_norm", "rollout", "flow"], None, 64, True)
    out = jobs.run(job.compute, report=lambda stage, f, left: seen.append((stage, f)))
    fs = [f for _, f in seen]
    assert len(fs) > 4 and all(b >= a for a, b in zip(fs, fs[1:])) and fs[-1] == 1.0
    assert {"attention", "value_norm", "rollout", "flow"} <= {s for s, _ in seen} and set(out.maps) == {
        "attention", "value_norm", "rollout", "flow"}

    def wobbly(progress):  # one-argument reports, one going back, one past the end
        for f in (0.2, 0.1, 0.5, 1.3):
            progress(f)
        return "done"

    seen.clear()
    assert jobs.run(wobbly, report=lambda stage, f, left: seen.append((stage, f))) == "done"
    assert seen == [(None, 0.2), (None, 0.2), (None, 0.5), (None, 1.0)]
    seen.clear()
    jobs.run(lambda progress: progress("half", 0.5), report=lambda stage, f, left: seen.append((stage, f)))
    assert seen == [("half", 0.5), ("half", 1.0)]  # the end is reported once it is reached


def test_runner_time_left_from_the_estimate_then_the_share_done():
    clock = iter([0.0, 0.5, 10.0])
    texts = []

    def compute(progress):
        progress(0.01)  # 0.5 s in, 1 % done: too little to say, so from the estimate (46 s)
        progress(0.5)  # 10 s in, half done: 10 s left

    jobs.run(compute, report=lambda stage, f, left: texts.append(left), estimate=46.0, clock=lambda: next(clock))
    assert texts[:2] == [" — about 46 s left", " — about 10 s left"]
    assert jobs.secs(0.44) == "0.4 s" and jobs.secs(12.4) == "12 s" and jobs.secs(180) == "3 min"


def test_result_cache_evicts_the_least_recently_used():
    cache = jobs.ResultCache(maxsize=3)
    for k in "abc":
        cache.put(k, k.upper())
    assert cache.get("a") == "A"  # a is now the most recently used
    cache.put("d", "D")
    assert "b" not in cache and set(cache.keys()) == {"a", "c", "d"} and len(cache) == 3
    for k in "efgh":
        cache.put(k, k)
    assert len(cache) == 3 == cache.maxsize and set(cache.keys()) == {"f", "g", "h"}
    assert cache.get("a") is None and cache.get("a", 0) == 0
    cache.clear()
    assert len(cache) == 0


def test_method_limit_names_the_longest_offered_text(tiny):
    """limit_reason: a method whose own estimate passes the limit is not offered, and the length it
    names is the longest whose estimate stays under the limit (checked by a plain scan)."""
    est = lambda n: jobs.estimate_seconds(tiny, "flow", n)  # noqa: E731
    limit = est(40) * 1.5
    longest = max(n for n in range(1, 200) if est(n) <= limit)
    assert jobs.limit_reason(tiny, "flow", longest, limit) is None
    why = jobs.limit_reason(tiny, "flow", 199, limit)
    assert why and f"offered up to {longest} tokens" in why
    assert jobs.limit_reason(tiny, "attention", 10_000, limit) is None  # no estimate: no limit


# ------------------------------------------------------------------ the adversarial pipeline


def test_pipeline_equals_its_pieces(make_tiny):
    lm, other = make_tiny("bert"), make_tiny("bert", seed=1)
    site, lambdas = A.Site("layer", 1), (0.0, 0.1, 1.0, 10.0)
    seen = []
    res = pipeline.run_pipeline(lm, SENTENCE, site, lambdas=lambdas, steps=20, restarts=3, jw_steps=25,
                                seeds=[other], progress=lambda stage, f: seen.append((stage, f)))
    fr = A.frontier(lm, SENTENCE, site, lambdas=list(lambdas), steps=20, restarts=3)
    jw = A.jain_wallace(lm, SENTENCE, site, steps=25)
    seeds = A.seed_baseline(lm, [other], SENTENCE, site)
    for name in ("jsd", "tvd", "lam", "restart", "step", "perm_jsd", "perm_tvd"):
        np.testing.assert_array_equal(getattr(res.frontier, name), getattr(fr, name))
    np.testing.assert_array_equal(res.frontier.envelope, fr.envelope)
    assert res.frontier.uniform == fr.uniform
    np.testing.assert_array_equal(res.jw.jsd, jw.jsd)
    np.testing.assert_array_equal(res.jw.tvd, jw.tvd)
    assert [(s.spec, s.jsd, s.tvd) for s in res.frontier.seeds] == [(s.spec, s.jsd, s.tvd) for s in seeds]
    assert res.seeds_skipped == []
    # progress: the frontier within [0, 0.75], Jain & Wallace within [0.75, 0.95], the seeds at 0.97
    fs = [f for _, f in seen]
    assert all(b >= a for a, b in zip(fs, fs[1:]))
    assert max(f for s, f in seen if s in ("frontier", "baselines")) == pytest.approx(0.75)
    jwf = [f for s, f in seen if s == "Jain & Wallace search"]
    assert jwf and 0.75 <= min(jwf) and max(jwf) <= 0.95 + 1e-12
    assert seen[-1] == ("other seeds", 0.97)


def test_pipeline_leaves_out_a_seed_it_cannot_compare(make_tiny):
    lm = make_tiny("bert")
    res = pipeline.run_pipeline(lm, SENTENCE, A.Site("head", 1, 0), lambdas=(0.0, 1.0), steps=4, restarts=1,
                                seeds=["builtin:no-such-model", make_tiny("bert", seed=2)])
    assert res.jw is None and len(res.frontier.seeds) == 1 and res.frontier.seeds[0].spec == "tiny:bert"
    assert len(res.seeds_skipped) == 1 and "no-such-model" in res.seeds_skipped[0]
