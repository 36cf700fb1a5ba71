"""What the app computes for a view, and in which pieces: no Streamlit here (pages/ui.py keeps the
widgets and the caching).

A view asks for methods on (model, text, target, cap). Methods whose MethodInfo declares an `estimate`
(today: attention flow) are computed apart from the rest, each on its own (they depend on the text
only, so changing the other methods keeps them), and one whose estimate exceeds the ask threshold
waits until the person confirms it. Everything else is one analyze() call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from .errors import InputError
from .methods import METHODS
from .trace import Encoded, encode


@dataclass
class Plan:
    """now: methods for the main analyze(); apart: {method: estimated seconds} computed one by one now;
    ask: {method: estimated seconds} left out until confirmed."""

    now: tuple
    apart: dict = field(default_factory=dict)
    ask: dict = field(default_factory=dict)


def estimate_seconds(lm, method: str, n_tokens: int) -> Optional[float]:
    """The method's own estimate for this model and length, or None when it declares none."""
    est = METHODS[method].estimate
    return None if est is None else float(est(lm, n_tokens))


def plan(lm, methods: Sequence[str], n_tokens: int, ask_seconds: float,
         confirmed: Callable[[str], bool] = lambda m: False) -> Plan:
    """Split the requested methods (unknown names dropped) into a Plan; confirmed(method) says whether
    the person already asked for a long one on this text."""
    now, apart, ask = [], {}, {}
    for m in methods:
        if m not in METHODS:
            continue
        est = estimate_seconds(lm, m, n_tokens)
        if est is None:
            now.append(m)
        elif est <= ask_seconds or confirmed(m):
            apart[m] = est
        else:
            ask[m] = est
    return Plan(tuple(now), apart, ask)


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
