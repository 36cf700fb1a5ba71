"""Knock out attention heads and see how the prediction moves.

    k = knock_out(lm, "the keys to the cabinet [MASK] on the table .", heads=[(3, 1)], mode="zero",
                  contrast=("are", "is"))
    k.top_before, k.top_after     # [(token, p)] at the target, the first five
    k.p_before, k.p_after         # (p(are), p(is)) when a contrast pair is given
    k1 = knockout(lm, text, layer=3, head=1, mode="mean", contrast=("are", "is"))   # one head
    k1.p_before, k1.p_after       # the whole output distributions [V]; k1.change, k1.tvd

Both run the same computation (_logits): one run up to the first knocked layer, then the plain and the
knocked runs from there; knock_out takes several heads, knockout one head and keeps the distributions.

A knocked-out head's slice of the attention result (softmax(q k^T) v for that head, before the output
projection) is replaced, at every position, by zero ("zero" ablation) or by its mean over the
sentence's positions ("mean" ablation); the output projection, its bias, the residual sum and
everything after run as usual. Computed on the functional forward (models/forward.py), so it works for
every family attnviz reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import InputError
from ..models.check import hf_forward
from ..models.forward import final_norm, layer_forward, rope_for
from ..text import readable_token
from ..trace import DEFAULT_MAX_TOKENS, encode, predicted_id, score_words
from .core import _ctx, _extended, _from_ctx, _readers, check_model, several_tokens_note

MODES = ("zero", "mean")


@dataclass
class KnockOut:
    """The prediction at the target before and after knocking out `heads` ((layer, head), 0-based).

    top_before / top_after: the k most probable tokens [(token, p)]; predicted_before / _after: the
    prediction (over word-initial tokens at a [MASK] blank of a causal model, as everywhere in attnviz);
    p_before / p_after: (p(c1), p(c2)) of the contrast pair when one is given (else None); y_change:
    the relative change of p(c1)/p(c2), y_after / y_before - 1 (as mediation's effects)."""

    text: str
    tokens: list
    target: int
    heads: list
    mode: str
    top_before: list
    top_after: list
    predicted_before: str
    predicted_after: str
    p_before: Optional[tuple] = None
    p_after: Optional[tuple] = None
    y_change: Optional[float] = None
    notes: list = field(default_factory=list)


@dataclass
class Knockout:
    """One head knocked out at the target: the output distribution before and after (knockout).

    p_before, p_after: [V] float64 probabilities at the target; top: [(token, p_before, p_after)] for
    the tokens most likely before or after; y_before, y_after, change: with a contrast (c1, c2),
    y = p(c1)/p(c2) and its relative change y_after / y_before - 1 (+0.41 = +41 %), else None."""

    layer: int
    head: int
    mode: str
    target: int
    p_before: np.ndarray
    p_after: np.ndarray
    top: list
    y_before: Optional[float] = None
    y_after: Optional[float] = None
    change: Optional[float] = None
    notes: list = field(default_factory=list)

    @property
    def tvd(self) -> float:
        """Total variation distance between the two output distributions (of 1)."""
        return float(0.5 * np.abs(self.p_after - self.p_before).sum())


def _head_slices(heads, L: int, H: int) -> dict:
    by_layer: dict = {}
    for lh in heads:
        try:
            l, h = (int(v) for v in lh)
        except (TypeError, ValueError):
            raise InputError(f"a head is a (layer, head) pair of integers, not {lh!r}") from None
        if not (0 <= l < L and 0 <= h < H):
            raise InputError(f"head ({l}, {h}) is outside this model's {L} layers x {H} heads (0-based)")
        by_layer.setdefault(l, set()).add(h)
    return by_layer


def _knocked(w, x, rope, heads: set, mode: str, rows: Optional[int] = None) -> torch.Tensor:
    """One layer with the given heads' attention results replaced (zero or their mean over positions;
    rows: the mean over the first `rows` positions only, the text's before appended word pieces)."""
    ctx = _ctx(w, layer_forward(w, x, rope=rope))  # [B, n, H*dh], a new tensor
    dh = w.head_dim
    for h in heads:
        sl = ctx[..., h * dh:(h + 1) * dh]
        sl.copy_(torch.zeros_like(sl) if mode == "zero" else sl[:, :rows].mean(1, keepdim=True).expand_as(sl))
    return _from_ctx(w, x, ctx)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InputError(f"knock-out mode {mode!r} is unknown: choose from {', '.join(MODES)}")


def _logits(lm, enc, by_layer: dict, mode: str, dtype, read: int = 1, rows: Optional[int] = None) -> tuple:
    """The logits [V] at the target ([read, V] at the rows target .. target+read-1 when read > 1) without
    and with the heads of by_layer knocked out: one run up to the first knocked layer, then the plain and
    the knocked runs from there. rows: as _knocked's."""
    layers = lm.layers(dtype)
    x = hf_forward(lm, enc.ids).hidden_states[0].to(dtype)
    rope = rope_for(lm.arch, x)
    first = min(by_layer) if by_layer else len(layers)
    for w in layers[:first]:
        x = layer_forward(w, x, rope=rope).resid_out
    plain, knocked = x, x
    for l in range(first, len(layers)):
        w = layers[l]
        plain = layer_forward(w, plain, rope=rope).resid_out
        knocked = (_knocked(w, knocked, rope, by_layer[l], mode, rows) if l in by_layer
                   else layer_forward(w, knocked, rope=rope).resid_out)
    t = enc.target
    hp = next(iter(lm.model.parameters()))
    out = [lm.arch.head(final_norm(lm.arch, y[:, t:t + read]).to(hp.dtype))[0].double() for y in (plain, knocked)]
    return (out[0][0], out[1][0]) if read == 1 else (out[0], out[1])


def knock_out(lm, text: str, heads: Sequence, mode: str = "zero", *, contrast: Optional[Sequence[str]] = None,
              target: Optional[int] = None, top: int = 5, max_tokens: int = DEFAULT_MAX_TOKENS,
              dtype: torch.dtype = torch.float32) -> KnockOut:
    """The prediction of `text` with the given heads knocked out (mode "zero" or "mean"), beside the
    plain prediction. Raises InputError (one line) for an unknown mode, a head outside the model, a
    model without an output head or contrast words that are not one token each on a masked LM.

    A contrast word of several tokens on a causal LM is scored by trace.MULTI_TOKEN_RULE: p(word) is the
    product of its pieces' probabilities, from a run of the text up to the target with the pieces
    appended, knocked out the same way ("mean": the mean over the text's positions up to the target)."""
    _check_mode(mode)
    if lm.arch is None:
        raise InputError(f"knocking heads out needs the functional forward: {lm.disabled_reason}")
    if getattr(lm.arch, "head", None) is None:
        raise InputError(f"{lm.spec} has no output head, so there is no prediction to knock out")
    enc = encode(lm, text, max_tokens, target)
    layers = lm.layers(dtype)
    by_layer = _head_slices(heads, len(layers), layers[0].n_heads)
    ids = words = None
    if contrast is not None:
        if len(contrast) != 2:
            raise InputError("a contrast pair is two words")
        pair, words = _readers(lm, contrast)
        ids = pair.ids if pair is not None else None
    with torch.inference_mode():
        before, after = _logits(lm, enc, by_layer, mode, dtype)

    def tops(logits):
        p = torch.softmax(logits, -1)
        v, i = torch.topk(p, min(top, p.numel()))
        return [(readable_token(lm.tokenizer.convert_ids_to_tokens(int(k))), float(q)) for q, k in zip(v, i)]

    def pred(logits):
        return readable_token(lm.tokenizer.convert_ids_to_tokens(predicted_id(lm, enc, logits)))

    res = KnockOut(text=enc.text, tokens=list(enc.tokens), target=enc.target, heads=sorted(
        (l, h) for l, hs in by_layer.items() for h in hs), mode=mode, top_before=tops(before), top_after=tops(after),
        predicted_before=pred(before), predicted_after=pred(after), notes=list(enc.notes))
    if ids is not None:
        pb, pa = torch.softmax(before, -1), torch.softmax(after, -1)
        res.p_before = (float(pb[ids[0]]), float(pb[ids[1]]))
        res.p_after = (float(pa[ids[0]]), float(pa[ids[1]]))
        zb = float(before[ids[0]] - before[ids[1]])
        za = float(after[ids[0]] - after[ids[1]])
        res.y_change = float(torch.expm1(torch.tensor(za - zb, dtype=torch.float64)))
    if words is not None:
        logp = _word_logps(lm, enc, words, by_layer, mode, dtype)
        res.p_before = (math.exp(logp[0][0]), math.exp(logp[1][0]))
        res.p_after = (math.exp(logp[0][1]), math.exp(logp[1][1]))
        res.y_change = math.expm1((logp[0][1] - logp[1][1]) - (logp[0][0] - logp[1][0]))
        res.notes.append(several_tokens_note(words))
    return res


def _word_logps(lm, enc, words, by_layer: dict, mode: str, dtype) -> list:
    """Per contrast word, (log p before, log p after) the knock-out by trace.MULTI_TOKEN_RULE: a run of the
    text up to the target with the word's pieces appended ("mean": over the text's positions up to the
    target), its pieces' log-probabilities summed."""
    logp = []
    with torch.inference_mode():
        for w in words:
            b, a = _logits(lm, _extended(enc, w), by_layer, mode, dtype, read=len(w.ids), rows=enc.target + 1)
            logp.append(tuple(float(score_words(x.reshape(1, 1, len(w.ids), -1), [w])[0, 0]) for x in (b, a)))
    return logp


def knockout(lm, text: str, layer: int, head: int, mode: str = "zero", contrast: Optional[Sequence[str]] = None,
             top_k: int = 5, target: Optional[int] = None, max_tokens: int = 128) -> Knockout:
    """Knock out head `head` of layer `layer` (0-based), in the model's own precision: "zero" sets the
    head's output (before the output projection) to 0 at every position, "mean" to its mean over the
    text's positions. Returns the target's output distribution before and after (Knockout).

    A contrast word of several tokens on a causal LM is scored as in knock_out (trace.MULTI_TOKEN_RULE,
    said in .notes); the distributions stay those at the target."""
    check_model(lm)
    _check_mode(mode)
    L, H = len(lm.arch.layers), lm.arch.layers[0].n_heads
    if not (0 <= layer < L and 0 <= head < H):
        raise InputError(f"there is no head {layer + 1}.{head + 1}: the model has {L} layers of {H} heads")
    enc = encode(lm, text, max_tokens, target)
    pair, words = _readers(lm, contrast) if contrast is not None else (None, None)
    ids = pair.ids if pair is not None else None
    dtype = next(iter(lm.model.parameters())).dtype
    with torch.inference_mode():
        before, after = _logits(lm, enc, {layer: {head}}, mode, dtype)
        pb, pa = torch.softmax(before, -1).cpu().numpy(), torch.softmax(after, -1).cpu().numpy()
    top_ids = list(dict.fromkeys(list(np.argsort(-pb)[:top_k]) + list(np.argsort(-pa)[:top_k])))
    toks = lm.tokenizer.convert_ids_to_tokens([int(i) for i in top_ids])
    res = Knockout(layer=layer, head=head, mode=mode, target=enc.target, p_before=pb, p_after=pa,
                   top=[(tk, float(pb[i]), float(pa[i])) for tk, i in zip(toks, top_ids)])
    if ids is not None:
        zb = float(before[ids[0]] - before[ids[1]])
        za = float(after[ids[0]] - after[ids[1]])
        res.y_before, res.y_after, res.change = math.exp(zb), math.exp(za), math.expm1(za - zb)
    if words is not None:
        (b1, a1), (b2, a2) = _word_logps(lm, enc, words, {layer: {head}}, mode, dtype)
        res.y_before, res.y_after, res.change = math.exp(b1 - b2), math.exp(a1 - a2), math.expm1((a1 - a2) - (b1 - b2))
        res.notes = [several_tokens_note(words)]
    return res
