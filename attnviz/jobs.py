"""Incremental analysis: what a view computes, in which pieces, how long each takes, and how a piece
runs (progress, cancel) and is kept (a bounded cache). No Streamlit and no plotly here: the app's
ui.py draws the bars and buttons and calls this API.

A view asks for methods on (model, text, target, cap). Methods whose MethodInfo declares an `estimate`
(today: attention flow) are computed apart from the rest, each on its own (they depend on the text
only, so changing the other methods keeps them), and one whose estimate exceeds the ask threshold
waits until the person confirms it. Everything else is split in two analyze() calls: the cheap maps
(MethodInfo.cost == "cheap": attention, rollout; they need only the trace), drawn at once, and the
rest, whose time is estimated from the cheap call's trace time before it starts (rough_seconds).
A method whose estimate exceeds LIMIT_SECONDS is not offered at that length (limit_reason).

The pieces after the cheap maps are Jobs (key, methods, estimate, label, compute(progress)).
take_cached merges into the cheap Analysis every job whose result a cache holds and lists the
others as pending; run() computes one with a progress callback that reports monotone fractions and
the time left and raises Cancelled once the person cancels; ResultCache keeps finished results,
least recently used out first.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional, Sequence

from cachetools import LRUCache

from .analysis import Analysis, analyze
from .errors import InputError
from .methods import METHODS
from .trace import encode

LIMIT_SECONDS = 1800.0  # a method estimated above this (30 min) is not offered at that length

# ------------------------------------------------------------------------------------ planning


class Cancelled(Exception):
    """Raised by a progress callback when the person pressed Cancel; the computation stops there."""


def cancellable(progress: Optional[Callable], cancelled: Callable[[], bool]) -> Callable:
    """A progress callback (progress(f) or progress(stage, f)) that raises Cancelled as soon as
    cancelled() is true, before passing the call on."""
    def cb(*args):
        if cancelled():
            raise Cancelled()
        if progress is not None:
            progress(*args)
    return cb


def split_cheap(methods: Sequence[str]) -> tuple:
    """-> (cheap, rest): the methods that need only the trace (cost class "cheap") and the others."""
    cheap = tuple(m for m in methods if METHODS[m].cost == "cheap")
    return cheap, tuple(m for m in methods if m not in cheap)


def rough_seconds(methods: Sequence[str], n_tokens: int, trace_seconds: float, mixing: bool = True) -> float:
    """A rough time for analyze(methods) on n tokens, from the time the trace took on the same text:
    analyze's own cost model (MethodInfo.relative_cost; the trace counts 2, shared computations once,
    mixing ratios like a norms pass) scaled so that 2 units = the trace time, plus one trace."""
    units, seen = 0.0, set()
    for m in methods:
        info = METHODS[m]
        units += 0.1 if info.shared and info.shared in seen else info.relative_cost(n_tokens)
        if info.shared:
            seen.add(info.shared)
    if mixing:
        units += 2.0
    return trace_seconds * (1.0 + units / 2.0)


def trace_seconds(a: Analysis, default: float = 0.1) -> float:
    """The trace time that estimates scale from (rough_seconds): the trace's wall time, or, on CPU, the
    CPU time of the thread that ran it when that is smaller. On a loaded machine the wall time counts
    the waits for a core; an estimate made then would be kept with the cached result and put a cheap
    method behind a button for every later visitor of that text. `default` when a has no trace time."""
    wall = a.timings.get("trace")
    if wall is None:
        return default
    cpu = a.timings.get("trace_cpu")
    return min(wall, cpu) if cpu is not None and cpu > 0 else wall


def estimate_seconds(lm, method: str, n_tokens: int) -> Optional[float]:
    """The method's own estimate for this model and length, or None when it declares none."""
    est = METHODS[method].estimate
    return None if est is None else float(est(lm, n_tokens))


def limit_reason(lm, method: str, n_tokens: int, limit_seconds: float = LIMIT_SECONDS) -> Optional[str]:
    """Why a method is not offered at this length (its own estimate above limit_seconds), naming the
    longest text it is offered for; None when it is."""
    est = estimate_seconds(lm, method, n_tokens)
    if est is None or est <= limit_seconds:
        return None
    lo, hi = 1, n_tokens  # the longest length whose estimate stays under the limit (estimates grow with n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_seconds(lm, method, mid) <= limit_seconds:
            lo = mid
        else:
            hi = mid - 1
    return (f"{METHODS[method].label} would take about {est / 60:.0f} min for {n_tokens} tokens (its cost grows "
            f"much faster than n^2), above the app's limit of {limit_seconds / 60:.0f} min: it is offered up to "
            f"{lo} tokens")


@dataclass
class Plan:
    """now: methods for the main analyze(); apart: {method: estimated seconds} computed one by one now;
    ask: {method: estimated seconds} left out until confirmed; limited: {method: why not offered}."""

    now: tuple
    apart: dict = field(default_factory=dict)
    ask: dict = field(default_factory=dict)
    limited: dict = field(default_factory=dict)


def plan(lm, methods: Sequence[str], n_tokens: int, ask_seconds: float,
         confirmed: Callable[[str], bool] = lambda m: False) -> Plan:
    """Split the requested methods (unknown names dropped) into a Plan; confirmed(method) says whether
    the person already asked for a long one on this text."""
    now, apart, ask, limited = [], {}, {}, {}
    for m in methods:
        if m not in METHODS:
            continue
        est = estimate_seconds(lm, m, n_tokens)
        why = limit_reason(lm, m, n_tokens)
        if why:
            limited[m] = why
        elif est is None:
            now.append(m)
        elif est <= ask_seconds or confirmed(m):
            apart[m] = est
        else:
            ask[m] = est
    return Plan(tuple(now), apart, ask, limited)


def encode_or_automatic(lm, text: str, cap: int, target: Optional[int]) -> tuple:
    """-> (Encoded, target used, fell_back): a target row left over from another text that does not fit
    this one falls back to the automatic target; other input errors are raised (InputError)."""
    try:
        return encode(lm, text, cap, target), target, False
    except InputError:
        if target is None:
            raise
        return encode(lm, text, cap, None), None, True


def compute_apart(lm, text: str, target: Optional[int], cap: int, method: str, progress=None):
    """One method on its own for the text as the main analyze() gets it -> Map (progress(fraction))."""
    a = analyze(lm, text, methods=[method], target=target, max_tokens=cap, mixing=False,
                progress=(lambda stage, f: progress(f)) if progress else None)
    if method not in a.maps:
        raise InputError(a.disabled.get(method) or f"{METHODS[method].label} could not be computed")
    return a.maps[method]


# ------------------------------------------------------------------------------------ time in words


def secs(x: float) -> str:
    """An estimate in words: 0.4 s, 12 s, 3 min."""
    return f"{x:.1f} s" if x < 10 else f"{x:.0f} s" if x < 120 else f"{x / 60:.0f} min"


def time_left(elapsed: float, f: float, estimate: Optional[float] = None) -> str:
    """" — about 12 s left" from the share f of the work done in `elapsed` seconds; while too little is
    done to say (under 5 %, or the first second), from `estimate` (the seconds said before the start) if
    given, else ""."""
    if f > 0.05 and elapsed > 1.0:
        return f" — about {secs(elapsed / f * (1 - f))} left"
    return f" — about {secs(max(estimate - elapsed, 0.0))} left" if estimate is not None else ""


# ------------------------------------------------------------------------------------ jobs


@dataclass
class Job:
    """A piece of a view computed after the cheap maps: key (its cache key, and the key of its buttons),
    the method names it computes, its estimate in seconds, a label ("value-weighted norm"), compute
    (progress -> result; progress(f) or progress(stage, f)), note (said after the estimate, e.g. its
    worst case) and what (the text of its progress bar)."""

    key: tuple
    methods: tuple
    estimate: float
    label: str
    compute: Callable[[Callable], Any]
    note: str = ""
    what: str = ""

    def __post_init__(self):
        if not self.what:
            self.what = f"Computing {self.label} (estimated {secs(self.estimate)})"

    @property
    def slug(self) -> str:
        """The methods joined by '_' (the buttons' keys start with it)."""
        return "_".join(self.methods) or "mixing"


def analysis_key(spec: str, text: str, methods: Sequence[str], target: Optional[int], cap: int,
                 mixing: bool) -> tuple:
    """The cache key of analyze(methods) on (spec, text, target, cap, mixing)."""
    return ("analyze", spec, text, tuple(methods), target, cap, mixing)


def analysis_job(lm, spec: str, text: str, methods: Sequence[str], target: Optional[int], cap: int,
                 mixing: bool, estimate: float = 0.0, label: str = "", what: str = "") -> Job:
    """analyze(lm, text, methods, target, cap, mixing) as a Job."""
    methods = tuple(methods)
    return Job(analysis_key(spec, text, methods, target, cap, mixing), methods, estimate,
               label or ", ".join(METHODS[m].label for m in methods) or "the context-mixing ratios",
               lambda progress: analyze(lm, text, methods=list(methods), target=target, max_tokens=cap,
                                        progress=progress, mixing=mixing),
               what=what)


@dataclass
class ViewPlan:
    """What a view computes on one text: the target used (None: automatic; fell_back when the one
    asked for did not fit this text), the token count, the Plan, and the methods split into cheap
    (drawn at once) and rest (one analyze() job after them)."""

    spec: str
    text: str
    methods: tuple  # requested and known, in the order asked
    target: Optional[int]
    cap: int
    n_tokens: int
    plan: Plan
    cheap: tuple
    rest: tuple
    fell_back: bool = False


def plan_view(lm, spec: str, text: str, methods: Sequence[str], target: Optional[int], cap: int,
              ask_seconds: float = float("inf")) -> ViewPlan:
    """The ViewPlan of methods on text (InputError when the text cannot be used). Methods with an
    estimate go apart whatever it is by default (ask_seconds inf): the app asks about each job's
    estimate itself before running it."""
    methods = tuple(m for m in methods if m in METHODS)
    enc, target_, fell_back = encode_or_automatic(lm, text, cap, target)
    n = len(enc.tokens)
    p = plan(lm, methods, n, ask_seconds)
    cheap, rest = split_cheap(p.now)
    return ViewPlan(spec, text, methods, target_, cap, n, p, cheap, rest, fell_back)


def first_job(lm, vp: ViewPlan, what: str = "Analysing the sentence") -> Job:
    """The cheap maps of a view (no mixing ratios): one analyze() that needs only the trace."""
    return analysis_job(lm, vp.spec, vp.text, vp.cheap, vp.target, vp.cap, False, what=what)


def retime(lm, a: Analysis, vp: ViewPlan) -> Analysis:
    """a, with the time of a trace of its text measured here when it carries none (a result read from
    the app's disk tier: app/store.py drops the times another process measured, maybe on a busy
    machine), so that the view's estimates scale from this process's own trace. One trace, once: a is
    the cached object, so the next visit finds the time."""
    if "trace" not in a.timings:
        t = analyze(lm, vp.text, methods=[], target=vp.target, max_tokens=vp.cap, mixing=False).timings
        a.timings.update({k: t[k] for k in ("trace", "trace_cpu") if k in t})
    return a


def view_jobs(lm, vp: ViewPlan, trace_seconds: float, mixing: bool = False) -> list:
    """The long parts of a view: the non-cheap methods (with the mixing ratios when asked for) in one
    analyze() call, estimated from the trace's time (rough_seconds); each method with its own
    estimate apart."""
    out = []
    if vp.rest or mixing:
        est = rough_seconds(vp.rest, vp.n_tokens, trace_seconds, mixing)
        out.append(analysis_job(lm, vp.spec, vp.text, vp.rest, vp.target, vp.cap, mixing, est))
    for m, est in {**vp.plan.apart, **vp.plan.ask}.items():
        label = METHODS[m].label
        out.append(Job(("apart", vp.spec, vp.text, vp.target, vp.cap, m), (m,), est, label,
                       lambda progress, m=m: compute_apart(lm, vp.text, vp.target, vp.cap, m, progress),
                       what=f"Computing {label.lower()} (estimated {secs(est)})"))
    return out


def merge(a: Analysis, job: Job, result) -> None:
    """Writes a finished job's result into the Analysis a: one Map for a method computed apart,
    else the maps, mixing ratios, disabled methods, timings (not the trace's) and new notes of an
    Analysis."""
    if job.key[0] == "apart":
        a.maps[job.methods[0]] = result
    else:
        a.maps.update(result.maps)
        a.mixing.update(result.mixing)
        a.disabled.update(result.disabled)
        a.timings.update({k: v for k, v in result.timings.items() if k not in ("trace", "trace_cpu")})
        a.notes.extend(x for x in result.notes if x not in a.notes)


def fresh(a: Analysis) -> Analysis:
    """A copy of a whose maps, mixing, disabled, timings and notes can be changed without touching a
    (a cached Analysis stays as it was computed; the arrays are shared)."""
    return dataclasses.replace(a, maps=dict(a.maps), mixing=dict(a.mixing), disabled=dict(a.disabled),
                               timings=dict(a.timings), notes=list(a.notes))


def take_cached(base: Analysis, jobs: Sequence[Job], lookup: Callable[[tuple], Any],
                vp: Optional[ViewPlan] = None) -> tuple:
    """-> (Analysis, pending): a copy of base with every job whose result lookup(job.key) gives (None:
    not computed) merged in, and the jobs still to run. With vp, the methods not offered at this
    length are in .disabled with the reason and the maps follow the order asked for."""
    a, pending = fresh(base), []
    for job in jobs:
        res = lookup(job.key)
        if res is not None:
            merge(a, job, res)
        else:
            pending.append(job)
    if vp is not None:
        for m, why in vp.plan.limited.items():
            a.disabled[m] = why
        a.maps = {m: a.maps[m] for m in vp.methods if m in a.maps}
    return a, pending


# ------------------------------------------------------------------------------------ running


def run(compute: Callable[[Callable], Any], report: Optional[Callable[[Optional[str], float, str], None]] = None,
        cancelled: Optional[Callable[[], bool]] = None, estimate: Optional[float] = None,
        pause: float = 0.0, clock: Callable[[], float] = time.perf_counter):
    """compute(progress) -> its result, with one progress callback for every computation: progress(f)
    or progress(stage, f), f the share done. Each call first raises Cancelled when cancelled() is
    true (the computation stops there and returns nothing), then calls report(stage, f, left): stage
    (None when not given), f clamped to [0, 1] and never below an earlier one, left the time-left
    text (time_left, from `estimate` until enough is done); then sleeps `pause` seconds (slow motion
    for demonstrations of Cancel). When compute returns, report gets f = 1 once more if it has not."""
    t0 = clock()
    state = {"f": 0.0, "stage": None}

    def progress(*args) -> None:
        if cancelled is not None and cancelled():
            raise Cancelled()
        stage, f = (args[0], args[1]) if len(args) == 2 else (None, args[0])
        f = max(state["f"], min(1.0, max(0.0, float(f))))
        state["f"], state["stage"] = f, stage
        if report is not None:
            report(stage, f, time_left(clock() - t0, f, estimate))
        if pause > 0:
            time.sleep(pause)

    out = compute(progress)
    if report is not None and state["f"] < 1.0:
        report(state["stage"], 1.0, "")
    return out


class ResultCache:
    """Finished results by key, at most maxsize of them, the least recently used out first
    (cachetools.LRUCache), behind a lock so that the app's sessions (threads) can share one. Stored
    results are shared, not copied: treat them as read-only."""

    def __init__(self, maxsize: int):
        self._cache = LRUCache(maxsize=maxsize)
        self._lock = threading.RLock()

    @property
    def maxsize(self) -> int:
        return int(self._cache.maxsize)

    def get(self, key: Hashable, default=None):
        with self._lock:
            return self._cache.get(key, default)

    def put(self, key: Hashable, value) -> None:
        with self._lock:
            self._cache[key] = value

    def pop(self, key: Hashable, default=None):
        with self._lock:
            return self._cache.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def keys(self) -> list:
        with self._lock:
            return list(self._cache.keys())

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._cache

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def run(self, key: Hashable, compute: Callable[[Callable], Any], **kw):
        """The result cached for key, else run(compute, **kw) stored under key (nothing is stored when
        it raises, e.g. Cancelled)."""
        got = self.get(key)
        if got is not None:
            return got
        out = run(compute, **kw)
        self.put(key, out)
        return out
