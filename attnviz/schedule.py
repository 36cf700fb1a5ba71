"""What the app computes for a view, and in which pieces: no Streamlit here (views/ui.py keeps the
widgets and the caching).

A view asks for methods on (model, text, target, cap). Methods whose MethodInfo declares an `estimate`
(today: attention flow) are computed apart from the rest, each on its own (they depend on the text
only, so changing the other methods keeps them), and one whose estimate exceeds the ask threshold
waits until the person confirms it. Everything else is split in two analyze() calls: the cheap maps
(MethodInfo.cost == "cheap": attention, rollout; they need only the trace), drawn at once, and the
rest, whose time is estimated from the cheap call's trace time before it starts (rough_seconds).
A method whose estimate exceeds LIMIT_SECONDS is not offered at that length (limit_reason).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from .errors import InputError
from .methods import METHODS
from .trace import Encoded, encode


LIMIT_SECONDS = 1800.0  # a method estimated above this (30 min) is not offered at that length


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


def estimate_seconds(lm, method: str, n_tokens: int) -> Optional[float]:
    """The method's own estimate for this model and length, or None when it declares none."""
    est = METHODS[method].estimate
    return None if est is None else float(est(lm, n_tokens))


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
    from .analysis import analyze

    a = analyze(lm, text, methods=[method], target=target, max_tokens=cap, mixing=False,
                progress=(lambda stage, f: progress(f)) if progress else None)
    if method not in a.maps:
        raise InputError(a.disabled.get(method) or f"{METHODS[method].label} could not be computed")
    return a.maps[method]


def ask_message(method: str, n_tokens: int, seconds: float) -> str:
    """The warning shown while a long method waits to be asked for."""
    info = METHODS[method]
    return (f"{info.label} for {n_tokens} tokens would take about {seconds:.0f} s. It is left out until "
            "you ask for it.")
