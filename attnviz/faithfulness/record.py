"""One study record: a checked item scored into the JSON-able dict that the study writes to
records.jsonl, the same function for every engine (study.py's local loop and ray_engine's actors),
so the same settings and threads give the same bytes."""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from .sentence import score_sentence


def to_lists(a: np.ndarray) -> list:
    """[M, L, B] correlations -> nested lists with NaN written as None (JSON has no NaN)."""
    return [[[None if not math.isfinite(v) else float(v) for v in row] for row in m] for m in a]


def from_lists(x) -> np.ndarray:
    """to_lists' nested lists -> [M, L, B] float64 with None read back as NaN."""
    return np.array([[[np.nan if v is None else v for v in row] for row in m] for m in x], dtype=np.float64)


def score_record(lm, i: int, key: str, item: dict, settings: dict) -> dict:
    """One checked item -> its record (the same function for every engine, so the same numbers)."""
    use_contrast = settings["use_contrast"]
    contrast = (item["answer"], item["wrong"]) if use_contrast and item.get("answer") and item.get("wrong") else None
    try:
        res = score_sentence(lm, item["text"], methods=settings["methods"], baselines=settings["baselines"],
                             contrast=contrast, ig_steps=settings["ig_steps"], include_target=settings["include_target"],
                             max_tokens=settings["max_tokens"], options={"workers": 1}, ig_tol=settings["ig_tol"])
    except InputError as e:
        return dict(key=key, i=i, text=item["text"], error=str(e))
    c = res.correlations
    return dict(key=key, i=i, text=item["text"], n_tokens=len(res.importance.tokens), f0=res.importance.f0,
                contrast=contrast is not None, pieces=max((len(w.ids) for w in res.importance.target.words), default=None),
                ig_rel=res.importance.ig.get("completeness_rel"),
                ig_steps=res.importance.ig.get("steps"), ig_met=res.importance.ig.get("met"),
                blank_deg=_finite_or_none(res.importance.blank_degeneracy), rho=to_lists(c.rho), tau=to_lists(c.tau))


def _finite_or_none(v):
    return None if v is None or not math.isfinite(float(v)) else float(v)
