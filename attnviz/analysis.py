"""analyze(model, text) -> Analysis: tokens, target, prediction, maps and context-mixing ratios."""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from .errors import InputError, LongInputWarning
from .methods import METHODS
from .text import readable_token
from .trace import DEFAULT_MAX_TOKENS, Trace, contrast_word, encode, trace as _trace, word_logprobs, word_start_ids

DEFAULT_METHODS = tuple(METHODS)
# analyze() computes the context-mixing ratios of the methods of these cost classes (one pass over the
# attention blocks in all); the FFN scopes' ratios come with their pass (context.all_ratios)
MIXING_COSTS = ("cheap", "norms")


def mixing_ratios(trace: Trace, options: Optional[dict] = None) -> dict:
    """Trace -> {ratio: [L, n]}: the context-mixing ratios analyze() computes, those the registered methods
    of the MIXING_COSTS classes declare (MethodInfo.ratios), in registry order, each from its method."""
    return METHODS.mixing_ratios(trace, METHODS.ratio_names(costs=MIXING_COSTS), options)


def _long_input(n: int) -> Optional[str]:
    """A note for texts longer than the usual cap: the maps' cost grows with n^2 and faster."""
    if n <= DEFAULT_MAX_TOKENS:
        return None
    fast = [i.label for i in METHODS.values() if i.cost in ("pairs", "flow")]
    return (f"{n} tokens is more than the usual {DEFAULT_MAX_TOKENS}: the maps' cost grows with n² (about "
            f"{(n / DEFAULT_MAX_TOKENS) ** 2:.0f}x the time and memory of a {DEFAULT_MAX_TOKENS}-token text), and faster "
            f"for {', '.join(fast)}, which can mean minutes and gigabytes; shorten the text or ask for fewer methods")


def _layers(bad: np.ndarray) -> str:
    """[L] bools -> "layer 3" | "layers 2-6" | "layers 1, 4" (counted from 1)."""
    ls = [int(i) + 1 for i in np.flatnonzero(bad)]
    if len(ls) == 1:
        return f"layer {ls[0]}"
    if ls == list(range(ls[0], ls[-1] + 1)):
        return f"layers {ls[0]}-{ls[-1]}"
    return "layers " + ", ".join(map(str, ls[:6])) + (", ..." if len(ls) > 6 else "")


def _nonfinite(maps: dict, mix: dict, pred: list) -> list:
    """The results that hold NaN or inf, each with its layers: ["attention (layers 1-6)", "mixing Attn-W
    (layer 2)", "the prediction"]."""
    bad = []
    for m, mp in maps.items():
        per = ~np.isfinite(mp.layer).reshape(mp.layer.shape[0], -1).all(1)
        if mp.heads is not None:
            per |= ~np.isfinite(mp.heads).reshape(mp.heads.shape[0], -1).all(1)
        if per.any():
            bad.append(f"{m} ({_layers(per)})")
    for k, v in mix.items():
        v = np.asarray(v, dtype=float)
        per = ~np.isfinite(v).reshape(v.shape[0], -1).all(1) if v.ndim else ~np.isfinite(v).reshape(1)
        if per.any():
            bad.append(f"mixing {k} ({_layers(per)})" if v.ndim else f"mixing {k}")
    if any(not np.isfinite(p) for _, p in pred):
        bad.append("the prediction")
    return bad


def _nonfinite_cause(lm, tr: Trace) -> str:
    """Why an analysis holds NaN or inf: the load check's reason (weights not finite), else the first of
    the model's own hidden states on this text that is not finite, else an overflow in our arithmetic."""
    if lm.check is not None and not lm.check.ok and "not finite" in (lm.check.reason or ""):
        return lm.check.reason
    first = next((k for k, h in enumerate(tr.hidden_states) if not bool(torch.isfinite(h).all())), None)
    if first is not None:
        where = "the embeddings" if first == 0 else f"the output of layer {first}"
        return f"the model's own outputs on this text are not finite from {where} on"
    return "the computation overflowed (the model's own outputs on this text are finite)"


@dataclass
class Analysis:
    spec: str
    text: str
    tokens: list
    special: np.ndarray
    target: int
    prediction: list  # [(label, probability)] top-k at the target; [] for plain encoders
    output_kind: str  # "token" | "sequence" | "hidden"
    maps: dict  # name -> Map
    mixing: dict  # name -> [L, n]
    trace_err: float
    notes: list = field(default_factory=list)
    disabled: dict = field(default_factory=dict)  # method -> reason
    timings: dict = field(default_factory=dict)
    trace: Optional[Trace] = field(default=None, repr=False)
    after: str = ""  # causal models: the words after [MASK], not part of the input
    blank: bool = False  # causal models: the text had a [MASK]; the prediction is the word that goes there
    # at a [MASK] blank: [(words, probabilities)] for each group of CHOICES whose words are all single
    # tokens of the vocabulary (the verb's number, the possessive), so that agreement shows even when
    # the top-k are other words
    choices: list = field(default_factory=list)

    @property
    def n_layers(self) -> int:
        return next(iter(self.maps.values())).layer.shape[0] if self.maps else 0


def method_options(methods: Sequence[str], options: Optional[dict] = None) -> dict:
    """{option: value, method: {option: value}} -> {method: kwargs for its compute()}: an option goes to
    every method that declares it; unknown names raise ValueError."""
    options = dict(options or {})
    out = {m: {} for m in methods}
    declared = {o for info in METHODS.values() for o in info.option_names()}
    for k, v in options.items():
        if k in METHODS:
            bad = [o for o in v if o not in METHODS[k].option_names()]
            if bad:
                raise ValueError(f"method '{k}' has no option(s) {bad}; its options: {list(METHODS[k].option_names())}")
            if k in out:
                out[k].update(v)
        elif k in declared:
            for m in methods:
                if k in METHODS[m].option_names():
                    out[m].setdefault(k, v)
        else:
            raise ValueError(f"unknown option '{k}'; known: {sorted(declared)} (or a method name with a dict)")
    return out


CHOICES = (("is", "are"), ("was", "were"), ("has", "have"), ("his", "her", "their"))


def choices_at(trace: Trace, groups=CHOICES, notes: Optional[list] = None) -> list:
    """At a [MASK] blank (the mask token of a masked LM, or the word a causal model predicts there):
    [(words, probabilities)] for each group whose words the model can score (trace.contrast_word: one
    token, or on a causal model a word of several tokens, whose probability is the product of its
    pieces' -- trace.MULTI_TOKEN_RULE; a masked LM leaves out a group with such a word); [] elsewhere or
    without a token head. notes: if given, a line for each word of several tokens is appended."""
    lm = trace.lm
    enc = trace.enc
    mask_id = getattr(lm.tokenizer, "mask_token_id", None)
    at_mask = enc.blank or (mask_id is not None and int(enc.ids.reshape(-1)[enc.target]) == mask_id)
    if not at_mask or lm.output_kind != "token":
        return []
    p = trace.output_probs()
    if p is None:
        return []
    out = []
    for words in groups:
        try:
            scored = [contrast_word(lm, w) for w in words]
        except InputError:
            continue
        if any(w.multi for w in scored):
            probs = np.exp(word_logprobs(lm, trace.enc.ids, trace.enc.target, scored).cpu().numpy())
            if notes is not None:
                notes.extend(f"p('{w.text}') is the product of its pieces' probabilities "
                             f"({'·'.join(readable_token(x) for x in w.pieces)}): its log-probability is their sum"
                             for w in scored if w.multi)
        else:
            probs = [p[w.ids[0]] for w in scored]
        out.append((tuple(words), tuple(float(x) for x in probs)))
    return out


def prediction_at(trace: Trace, top_k: int = 5):
    """-> ([(label, probability)] top-k at the target, output kind). For a [MASK] blank on a causal
    model only word-initial tokens are ranked (probabilities are the model's own, not renormalised)."""
    lm = trace.lm
    p = trace.output_probs()
    if p is None:
        return [], "hidden"
    if trace.enc.blank and len(word_start_ids(lm)):
        ws = word_start_ids(lm)
        idx = ws[np.argsort(-p[ws])[:top_k]]
    else:
        idx = np.argsort(-p)[:top_k]
    if lm.output_kind == "sequence":
        labels = getattr(lm.config, "id2label", {}) or {}
        return [(str(labels.get(int(i), i)), float(p[i])) for i in idx], "sequence"
    return [(lm.tokenizer.convert_ids_to_tokens(int(i)), float(p[i])) for i in idx], "token"


def analyze(lm, text: str, methods: Optional[Sequence[str]] = None, target: Optional[int] = None,
            dtype: torch.dtype = torch.float32, max_tokens: int = DEFAULT_MAX_TOKENS, top_k: int = 5,
            mixing: bool = True, progress: Optional[Callable[[str, float], None]] = None,
            options: Optional[dict] = None, keep_trace: bool = False) -> Analysis:
    """Model + text -> Analysis. methods: names from METHODS (default all). Raises InputError for
    unusable text. Methods that need the functional trace are skipped with a reason when the
    model did not pass its self-check. options: {option: value} passed to every method that declares
    that option (MethodInfo.options, e.g. {"workers": 1}), and {method: {option: value}} for one method.
    mixing: also the context-mixing ratios (mixing_ratios; only where the decompositions are available)."""
    methods = list(DEFAULT_METHODS if methods is None else methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; known: {list(METHODS)}")
    per_method = method_options(methods, options)
    timings = {}
    t0, c0 = time.perf_counter(), time.thread_time()
    enc = encode(lm, text, max_tokens, target)
    long_note = _long_input(len(enc.tokens))
    if long_note:  # said before the work starts, not after minutes of it
        warnings.warn(long_note, LongInputWarning, stacklevel=2)
    tr = _trace(lm, enc, dtype=dtype)
    timings["trace"] = time.perf_counter() - t0
    if str(getattr(lm, "device", "cpu")).startswith("cpu"):
        # this thread's CPU time: what the trace costs without the waits of a busy machine (jobs.trace_seconds)
        timings["trace_cpu"] = time.thread_time() - c0
    notes = list(enc.notes) + ([long_note] if long_note else [])
    disabled = {}
    if not lm.decompositions_ok:
        reason = lm.disabled_reason
        for m in methods:
            if METHODS[m].decomposition:
                disabled[m] = reason
        notes.append(reason)
    elif tr.max_rel_err > 1e-4 or tr.attn_err > 1e-4:
        notes.append(f"warning: the recomputed trace differs from the model by {tr.max_rel_err:.1e} on this text")
    if lm.arch is not None:
        notes.extend(lm.arch.notes)
    maps = {}
    todo = [m for m in methods if m not in disabled]
    n = len(enc.tokens)
    # rough relative costs (MethodInfo.cost), so that the fraction passed to progress() moves evenly in
    # time; entries that share one computation (MethodInfo.shared) cost it once
    cost, seen = {}, set()
    for m in todo:
        info = METHODS[m]
        cost[m] = 0.1 if info.shared and info.shared in seen else info.relative_cost(n)
        if info.estimate is not None and timings["trace"] > 0:
            # a method with its own estimate in seconds (flow): its share against the trace just timed,
            # so that a 60 s flow after a 0.2 s trace does not start the bar at two thirds
            try:
                cost[m] = max(cost[m], 2.0 * float(info.estimate(lm, n)) / max(timings["trace"], 1e-3))
            except Exception:  # noqa: BLE001 - an estimate is a hint for the progress bar, never an error
                pass
        if info.shared:
            seen.add(info.shared)
    total_cost = 2.0 + sum(cost.values())  # 2: the trace, already done
    done_cost = 2.0
    for m in todo:
        t = time.perf_counter()
        sub = None
        if progress:
            progress(m, done_cost / total_cost)
            sub = (lambda f, m=m, c0=done_cost: progress(m, (c0 + f * cost[m]) / total_cost))
        maps[m] = METHODS[m].compute(tr, progress=sub, **per_method[m])
        done_cost += cost[m]
        timings[m] = time.perf_counter() - t
    mix = {}
    if mixing and lm.decompositions_ok:
        t = time.perf_counter()
        mix = mixing_ratios(tr, per_method)
        timings["mixing"] = time.perf_counter() - t
    if progress:
        progress("done", 1.0)
    pred, kind = prediction_at(tr, top_k)
    if enc.blank and kind == "token":
        top = int(np.argmax(tr.output_probs()))
        if pred and lm.tokenizer.convert_ids_to_tokens(top) != pred[0][0]:
            notes.append(f"the blank is a word, so only tokens that start a word are ranked; the most likely next "
                         f"token overall is '{readable_token(lm.tokenizer.convert_ids_to_tokens(top))}' "
                         f"({float(tr.output_probs()[top]):.2f})")
    if kind == "hidden":
        notes.append("this model has no output head: the target is the final hidden state at "
                     f"position {enc.target} ({readable_token(enc.tokens[enc.target])})")
    bad = _nonfinite(maps, mix, pred)
    if bad:
        notes.append(f"values are not finite (NaN or inf) in {', '.join(bad)}: {_nonfinite_cause(lm, tr)}")
    return Analysis(spec=lm.spec, text=enc.text, tokens=enc.tokens, special=enc.special, target=enc.target,
                    prediction=pred, output_kind=kind, maps=maps, mixing=mix,
                    trace_err=tr.max_rel_err, notes=notes, disabled=disabled, timings=timings,
                    trace=tr if keep_trace else None, after=enc.after, blank=enc.blank,
                    choices=choices_at(tr, notes=notes) if kind == "token" else [])
