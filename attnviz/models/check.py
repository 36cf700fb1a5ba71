"""The self-check: our functional forward (forward.py) against the model's own outputs on a probe
sentence, run by the loader on every model it loads (`lm` below is a load.LoadedModel; the loader
imports this module, not the other way round). Also the model's own forward with hidden states
and attentions (hf_forward), the reference the check and the trace compare against."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ..errors import InputError
from .forward import run_layers

PROBE = "the quick brown fox jumps over the lazy dog ."
CHECK_TOL = 1e-4


@dataclass
class SelfCheck:
    """Our functional trace against the model's own outputs on a probe sentence."""

    ok: bool
    max_rel_err: float
    per_layer: list = field(default_factory=list)  # relative error of each layer's output
    attn_err: float = 0.0  # max abs difference of attention probabilities
    logits_rel_err: Optional[float] = None
    reason: Optional[str] = None


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (b the reference)."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def hf_forward(lm, ids: torch.Tensor, **kw):
    """The model's own forward with hidden states and attentions, on the model's device; raises if
    attentions are missing."""
    ids = ids.to(lm.device)
    with torch.inference_mode():
        out = lm.model(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True,
                       output_attentions=True, **kw)
    if not out.attentions or any(a is None for a in out.attentions):
        raise RuntimeError("the model returned no attention probabilities; it must be loaded with "
                           "attn_implementation='eager'")
    return out


def probe_ids(lm, text: str) -> torch.Tensor:
    """A text without [MASK] -> token ids [1, n], tokenised as trace.encode tokenises it (the
    tokenizer's own special tokens, no truncation); InputError, with encode's words, when the model
    cannot read it."""
    tok = lm.tokenizer
    ids = tok(text, return_tensors="pt", truncation=False)["input_ids"]
    n, cap = ids.shape[1], lm.max_tokens
    if n > cap:
        raise InputError(f"the text is {n} tokens long; the limit is {cap} tokens "
                         f"(model maximum {lm.max_tokens}, app cap {lm.max_tokens}): shorten it")
    special_ids = set(tok.all_special_ids) - ({tok.mask_token_id} if getattr(tok, "mask_token_id", None) is not None else set())
    if n == 0 or all(i in special_ids for i in ids[0].tolist()):
        raise InputError("the text has no tokens the model can read")
    return ids


def nonfinite_weights(model: torch.nn.Module) -> Optional[str]:
    """Every parameter and buffer of the model checked for NaN and inf (one pass, no forward) -> None when
    all are finite, else a one-line reason naming the tensors (the first value's index in each). A NaN in
    a row the probe sentence never reads (position 100 of the position embeddings, token type 1) is
    found here, not by the probe."""
    bad, seen = [], set()
    tensors = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))
    for name, t in tensors:
        if id(t) in seen or not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
            continue
        seen.add(id(t))
        with torch.no_grad():
            finite = torch.isfinite(t)
            if bool(finite.all()):
                continue
            count = int((~finite).sum())
            first = [int(i) for i in (~finite).nonzero()[0].tolist()]
        where = f"[{', '.join(map(str, first))}]" if first else ""
        bad.append(f"{name} ({count:,} of {t.numel():,} values, the first at {where})" if where else
                   f"{name} ({count:,} of {t.numel():,} values)")
    if not bad:
        return None
    more = f" and {len(bad) - 3} more tensors" if len(bad) > 3 else ""
    return (f"the model's weights are not finite (NaN or inf in {'; '.join(bad[:3])}{more}): the model file is "
            "damaged, and every text that reaches those values gives NaN")


def weights_check(lm) -> Optional[SelfCheck]:
    """The finite check of every parameter and buffer alone (for models whose layers we cannot read):
    None when all are finite, else a failed SelfCheck saying where they are not."""
    reason = nonfinite_weights(lm.model)
    return None if reason is None else SelfCheck(False, float("nan"), reason=reason)


def self_check(lm, text: str = PROBE) -> SelfCheck:
    """Checks that every weight and buffer is finite, then chains our functional forward from the
    embeddings through every layer and the output head and compares it with the model's own hidden
    states, attentions and logits (relative error)."""
    bad = weights_check(lm)
    if bad is not None:
        return bad
    try:
        out = hf_forward(lm, probe_ids(lm, text.strip()))
    except Exception as e:  # noqa: BLE001
        return SelfCheck(False, float("inf"), reason=f"the probe sentence could not be run: {e}")
    hs = out.hidden_states
    with torch.inference_mode():
        final, kept = run_layers(lm.arch, hs[0], keep=True)
        per_layer = []
        L = len(kept)
        for li, r in enumerate(kept):
            mine = final if li == L - 1 else r.resid_out
            per_layer.append(rel_err(mine, hs[li + 1]))
        attn_err = float(np.max([float((r.probs - a).abs().max()) for r, a in zip(kept, out.attentions)]))
        logits_err = None
        if lm.arch.head is not None and getattr(out, "logits", None) is not None:
            logits_err = rel_err(lm.arch.head(final), out.logits)
    # NaN compares False with everything and max() skips it depending on order: np.max propagates it,
    # and every test below is written "not err <= tol" so that NaN fails
    worst = float(np.max(per_layer))
    nonfinite = [name for name, t in _model_outputs(out) if not bool(torch.isfinite(t).all())]
    reason = None
    if nonfinite:
        more = f" and {len(nonfinite) - 3} more" if len(nonfinite) > 3 else ""
        reason = (f"the model's own outputs are not finite (NaN or inf in {', '.join(nonfinite[:3])}{more}) "
                  "on the probe sentence: its weights or its arithmetic are broken")
    elif not worst <= CHECK_TOL:
        bad = int(np.argmax(per_layer))
        reason = (f"our recomputation of layer {bad + 1} differs from the model's own output by "
                  f"{per_layer[bad]:.1e} (relative; tolerance {CHECK_TOL:.0e})")
    elif not attn_err <= CHECK_TOL:
        reason = f"recomputed attention differs from the model's by {attn_err:.1e}"
    elif logits_err is not None and not logits_err <= CHECK_TOL:
        reason = f"recomputed output logits differ from the model's by {logits_err:.1e} (relative)"
    ok = reason is None
    err = float(np.max([worst, logits_err or 0.0])) if not nonfinite else float("nan")
    return SelfCheck(ok, err, per_layer, attn_err, logits_err, reason)


def _model_outputs(out):
    """(name, tensor) for every output of the model's own forward: hidden states, attentions, logits."""
    for k, h in enumerate(out.hidden_states):
        yield ("the embeddings" if k == 0 else f"hidden states of layer {k}"), h
    for k, a in enumerate(out.attentions):
        yield f"attention of layer {k + 1}", a
    if getattr(out, "logits", None) is not None:
        yield "the logits", out.logits
