"""Context mixing beyond one map: contextualization change between two maps, and mixing ratios
averaged over a corpus of sentences (Kobayashi et al. 2021, 2024)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from .errors import InputError
from .faithfulness.correlation import spearman
from .methods import METHODS
from .resources import sets_dir

SENTENCES_FILE = sets_dir() / "ordinary_sentences.txt"
# the ratios the registered methods declare (MethodInfo.ratios), in registry order
ALL_RATIOS = METHODS.ratio_names()
# Kobayashi et al. (2024)'s contextualization change compares the attention block's map with the whole
# layer's: the two methods that declare those ends (MethodInfo.contextualization_change)
BEFORE, AFTER = METHODS.change_pair()
DEFAULT_STEPS = METHODS[AFTER].defaults()["steps"]  # the whole layer's quadrature nodes (its FFN split)


def contextualization_change(a: np.ndarray, b: np.ndarray, causal: bool = False) -> np.ndarray:
    """a, b [L, n, n] maps -> [L] with 1 - Spearman ρ(flatten(a_l), flatten(b_l)) per layer.

    causal=True compares only the entries j <= i (a causal model's upper triangle is zero in both
    maps by construction, and its ties would inflate ρ). Ties get average ranks. A layer whose
    flattened map is constant in either input gives nan.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 3 or a.shape[1] != a.shape[2]:
        raise ValueError(f"expected two maps of the same shape [L, n, n], got {a.shape} and {b.shape}")
    n = a.shape[-1]
    keep = np.tril(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)
    out = np.empty(a.shape[0])
    for l in range(a.shape[0]):
        x, y = a[l][keep], b[l][keep]
        out[l] = 1.0 - spearman(x, y)  # nan when either is constant
    return out


def all_ratios(trace, steps: int = DEFAULT_STEPS) -> dict:
    """Trace -> {name: [L, n]} for every ratio the registered methods declare (ALL_RATIOS: the five
    attention-block ratios and the three FFN ones), each computed by its method; `steps` goes to those
    that take it (the FFN split's quadrature nodes)."""
    return METHODS.mixing_ratios(trace, options={"steps": steps})


@dataclass
class SentenceMixing:
    """One sentence: tokens [n], special [n], target, ratios {name: [L, n]} (the eight of
    ALL_RATIOS), maps {BEFORE, AFTER: [L, n, n]}, completeness [L] (of AFTER), change [L]
    (contextualization change BEFORE -> AFTER: ATTNRESLN -> ATBFFRESLN), causal, steps."""

    tokens: list
    special: np.ndarray
    target: int
    ratios: dict
    maps: dict
    completeness: list
    change: np.ndarray
    causal: bool
    steps: int


def sentence_mixing(lm, text: str, target: Optional[int] = None, max_tokens: int = 128,
                    steps: int = DEFAULT_STEPS, dtype: torch.dtype = torch.float32,
                    progress: Optional[Callable[[float], None]] = None) -> SentenceMixing:
    """Model + text -> SentenceMixing from one trace. Raises InputError for unusable text or a model
    whose decompositions are disabled. progress(fraction) while the layers are split."""
    from .trace import trace as _trace

    if not lm.decompositions_ok:
        raise InputError(lm.disabled_reason or "decompositions are unavailable for this model")
    tr = _trace(lm, text, dtype=dtype, max_tokens=max_tokens, target=target)
    after = METHODS[AFTER].compute(tr, progress=progress, steps=steps)
    a = METHODS[BEFORE].compute(tr).layer
    b = after.layer
    causal = bool(lm.arch.causal)
    return SentenceMixing(tokens=list(tr.tokens), special=np.asarray(tr.enc.special), target=tr.target,
                          ratios=all_ratios(tr, steps), maps={BEFORE: a, AFTER: b},
                          completeness=list(after.completeness.errors),
                          change=contextualization_change(a, b, causal=causal), causal=causal, steps=int(steps))


def load_sentences(path=None, limit: Optional[int] = None) -> list:
    """-> the built-in ordinary English sentences (one a line; blank lines and # comments skipped)."""
    p = Path(path) if path is not None else SENTENCES_FILE
    if not p.exists():
        raise InputError(f"the sentence file {p} does not exist")
    lines = [s.strip() for s in p.read_text(encoding="utf-8").splitlines()]
    lines = [s for s in lines if s and not s.startswith("#")]
    return lines[:limit] if limit is not None else lines


CORPORA = {"ordinary": "ordinary English sentences (hand-written)",
           "agreement": "built-in agreement test set (synthetic, held out)",
           "pronoun": "built-in pronoun test set (synthetic, held out)"}


def load_corpus(name: str = "ordinary", limit: Optional[int] = None) -> list:
    """name in CORPORA -> its sentences (the synthetic test items keep their [MASK])."""
    if name == "ordinary":
        return load_sentences(limit=limit)
    if name not in CORPORA:
        raise InputError(f"unknown corpus '{name}' (known: {', '.join(CORPORA)})")
    from .datasets import load_eval_set

    try:
        items = load_eval_set(name, limit)
    except (OSError, ValueError) as e:
        raise InputError(f"the {CORPORA[name]} is not available: {e}") from None
    return [it["text"] for it in items]


@dataclass
class CorpusMixing:
    """Per-layer mean ratios over every token of every sentence: per_layer {name: [L]}; overall
    {name: mean over all (sentence, layer, token)}; n_sentences, n_tokens (per layer)."""

    per_layer: dict
    overall: dict
    n_sentences: int
    n_tokens: int
    max_completeness: float  # worst ATBFFRESLN completeness error met on the corpus
    skipped: list = field(default_factory=list)  # (sentence, reason)


def corpus_mixing(lm, sentences: Sequence[str], steps: int = DEFAULT_STEPS, max_tokens: int = 128,
                  exclude_special: bool = False, dtype: torch.dtype = torch.float32,
                  progress: Optional[Callable[[int, int], None]] = None) -> CorpusMixing:
    """Model + sentences -> CorpusMixing (token-weighted means, as Kobayashi et al. 2021 pooled them:
    every non-pad token including [CLS]/[SEP] unless exclude_special). progress(done, total)."""
    from .trace import trace as _trace

    if not lm.decompositions_ok:
        raise InputError(f"context mixing needs the decomposition methods, disabled for this model: "
                         f"{lm.disabled_reason}")
    sums, count, worst, skipped, used = None, 0, 0.0, [], 0
    total = len(sentences)
    for k, s in enumerate(sentences):
        try:
            tr = _trace(lm, s, dtype=dtype, max_tokens=max_tokens)
        except InputError as e:
            skipped.append((s, str(e)))
            continue
        rat = all_ratios(tr, steps)
        keep = ~tr.enc.special if exclude_special else np.ones(len(tr.tokens), dtype=bool)
        if sums is None:
            sums = {name: np.zeros(v.shape[0]) for name, v in rat.items()}
        for name, v in rat.items():
            sums[name] += v[:, keep].sum(1)
        count += int(keep.sum())
        used += 1
        worst = max(worst, METHODS[AFTER].compute(tr, steps=steps).completeness.worst)
        if progress:
            progress(k + 1, total)
    if not count:
        raise InputError("none of the sentences could be analysed")
    per_layer = {name: v / count for name, v in sums.items()}
    return CorpusMixing(per_layer, {name: float(v.mean()) for name, v in per_layer.items()}, used, count,
                        worst, skipped)


KOBAYASHI_BERT_BASE = {"Attn-W": 97.1, "Attn-N": 85.2, "AttnRes-W": 48.6, "AttnRes-N": 22.3, "AttnResLn-N": 18.8}


def table(results: dict) -> str:
    """{column title: CorpusMixing} -> a markdown table of overall mean ratios (%) per method, with
    Kobayashi et al.'s (2021) BERT-base figures in the last column."""
    cols = list(results)
    lines = ["| method | " + " | ".join(cols) + " | BERT-base (Kobayashi et al. 2021) |",
             "|---" * (len(cols) + 2) + "|"]
    for name in ALL_RATIOS:
        ref = KOBAYASHI_BERT_BASE.get(name)
        cells = [f"{100 * results[c].overall[name]:.1f}" for c in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'' if ref is None else f'{ref:.1f}'} |")
    return "\n".join(lines)


def main(argv=None):
    """python -m attnviz.context [--model SPEC ...] [--limit N] [--exclude-special]: the corpus table."""
    import argparse

    from .models.load import load_model

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--model", action="append", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    ap.add_argument("--exclude-special", action="store_true")
    ap.add_argument("--file", default=None)
    ap.add_argument("--corpus", default="ordinary", choices=list(CORPORA))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    sentences = load_sentences(a.file, a.limit) if a.file else load_corpus(a.corpus, a.limit)
    res = {}
    for spec in a.model or ["pkg:minilm"]:
        cm = corpus_mixing(load_model(spec), sentences, steps=a.steps, exclude_special=a.exclude_special)
        res[f"{spec} ({cm.n_sentences} sentences, {cm.n_tokens} tokens)"] = cm
        print(f"{spec}: worst {METHODS[AFTER].label} completeness error {cm.max_completeness:.1e}; "
              f"skipped {len(cm.skipped)}")
        for name in ALL_RATIOS:
            print(f"  {name:13s} per layer: " + " ".join(f"{100 * v:5.1f}" for v in cm.per_layer[name]))
    print(table(res))


if __name__ == "__main__":
    main()
