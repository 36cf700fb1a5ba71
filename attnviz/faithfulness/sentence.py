"""One sentence: the maps (from analyze), the importance baselines and their rank correlations."""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..analysis import Analysis, analyze
from ..errors import InputError
from ..methods import METHODS
from ..trace import DEFAULT_MAX_TOKENS, encode
from .correlation import Correlations, correlate
from .importance import DEFAULT_IG_STEPS, Importance, importance

# the maps the faithfulness check covers by default (MethodInfo.core; the others on request), as
# registered when this module was imported (available_methods reads the registry at each call)
CORE_METHODS = METHODS.core()


@dataclass
class SentenceResult:
    analysis: Analysis
    importance: Importance
    correlations: Correlations
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        imp = self.importance
        nan = lambda v: [None if v_ != v_ else float(v_) for v_ in v]  # noqa: E731
        return dict(text=self.analysis.text, tokens=imp.tokens, target=imp.target.position,
                    target_quantity=imp.target.label, target_kind=imp.target.kind, f0=imp.f0,
                    positions=imp.positions.tolist(), blank_token=imp.blank_token,
                    blank_degeneracy=imp.blank_degeneracy,
                    importance={k: nan(v) for k, v in imp.values.items()}, integrated_gradients=imp.ig,
                    correlations=self.correlations.to_dict(), notes=self.notes)


def available_methods(lm, methods: Optional[Sequence[str]] = None) -> tuple:
    """-> (methods this model can compute, {method: reason} for the ones left out)."""
    methods = list(METHODS.core() if methods is None else methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; known: {list(METHODS)}")
    if lm.decompositions_ok:
        return methods, {}
    left = {m: lm.disabled_reason for m in methods if METHODS[m].decomposition}
    return [m for m in methods if m not in left], left


def score_sentence(lm, text: str, methods: Optional[Sequence[str]] = None, baselines: Optional[Sequence[str]] = None,
                   contrast: Optional[Sequence] = None, ig_steps: int = DEFAULT_IG_STEPS, include_target: bool = False,
                   target: Optional[int] = None, analysis: Optional[Analysis] = None,
                   max_tokens: int = DEFAULT_MAX_TOKENS, options: Optional[dict] = None,
                   progress: Optional[Callable[[str, float], None]] = None,
                   ig_tol: Optional[float] = None, blank: str = "auto") -> SentenceResult:
    """Model + text -> SentenceResult (maps' target rows vs importance baselines, per method and layer).

    analysis: an Analysis of the same text to take the maps from (else analyze() runs here).
    options: the methods' options, as analyze takes them (e.g. {"workers": 1}).
    ig_tol: integrated gradients' completeness bound (see importance; None: its default, 1 %).
    blank: what blank-out puts in place of a token (importance.BLANKS)."""
    methods, left = available_methods(lm, methods)
    if analysis is None:
        analysis = analyze(lm, text, methods=methods, target=target, max_tokens=max_tokens, mixing=False,
                           options=options,
                           progress=(lambda s, f: progress(s, 0.5 * f)) if progress else None)
    else:
        methods = [m for m in methods if m in analysis.maps]
    enc = encode(lm, analysis.text, max_tokens=max_tokens, target=analysis.target)
    # a causal model's [MASK] blank was cut off analysis.text: keep its meaning (word-initial prediction)
    enc = dataclasses.replace(enc, blank=analysis.blank, after=analysis.after)
    if list(enc.tokens) != list(analysis.tokens):
        raise InputError("the analysis was made for another text: run it again")
    imp = importance(lm, enc, baselines=baselines, contrast=contrast, ig_steps=ig_steps,
                     include_target=include_target, ig_tol=ig_tol, blank=blank,
                     progress=(lambda s, f: progress(s, 0.5 + 0.5 * f)) if progress else None)
    corr = correlate(analysis.maps, imp, methods=methods)
    notes = list(imp.notes) + [f"{m}: {why}" for m, why in left.items()] + corr.notes()
    return SentenceResult(analysis, imp, corr, notes)

