"""Contrast words under replaced attention: p(word) at the target when the site's rows are α′, by the one
rule for words of several tokens (trace.MULTI_TOKEN_RULE): on a causal LM the word's pieces are appended
after the target and p(word) = Π_k p(piece_k | text up to the target, pieces_<k), the model running on
with α′ in the target's row (the appended positions' own rows are the model's); on a masked LM a word
must be one token (trace.contrast_word refuses the others with the reason)."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import InputError
from ..models.check import hf_forward
from ..models.forward import run_layers
from ..trace import appended_ids, contrast_words, score_words
from .outputs import head_dtype
from .problem import Problem


@torch.no_grad()
def word_probs(pb: Problem, alpha: Optional[torch.Tensor], words) -> torch.Tensor:
    """alpha [B, R, n] (the site's rows; None: the model's own attention, B = 1) and trace.Word words ->
    p(word) [B, W] (float64) at the target, by trace.MULTI_TOKEN_RULE."""
    if pb.output_kind != "token":
        raise InputError("contrast words need a language-model head")
    ext = appended_ids(words)
    m = ext.shape[1]
    if m == 0:  # every word one token: the output distribution itself
        probs = pb.outputs(alpha, fast=False)
        return probs[:, [w.ids[0] for w in words]]
    lm, t, W = pb.lm, pb.target, len(words)
    # the text up to the target with each word's pieces appended, the model's own states at the site's
    # first layer (a causal model: positions up to the target are those of the sentence)
    seq = torch.cat([pb.enc.ids[0, :t + 1].unsqueeze(0).expand(W, -1), ext], 1)
    start = pb.site.start()
    x = hf_forward(lm, seq).hidden_states[start].to(pb.dtype).clone()  # [W, t+1+m, d]
    B = 1 if alpha is None else alpha.shape[0]
    x = x.unsqueeze(0).expand(B, -1, -1, -1).reshape(B * W, t + 1 + m, -1)
    ov = None
    if alpha is not None:
        a = alpha[..., :t + 1].to(x.dtype)
        a = torch.cat([a, a.new_zeros(a.shape[:-1] + (m,))], -1)  # a causal row reads nothing after t
        ov = pb.overrides(a.repeat_interleave(W, dim=0))
    final, _ = run_layers(lm.arch, x, start=start, overrides=ov, layers=lm.layers(pb.dtype))
    logits = lm.arch.head(final[:, t:t + m + 1].to(head_dtype(lm)))  # [B·W, m+1, V]
    return score_words(logits.reshape(B, W, m + 1, -1), words).exp()


def contrast_at(pb: Problem, alpha: Optional[np.ndarray], words: Sequence[str]) -> list:
    """(Problem, one point's rows α′ [R, n] or None, words) -> [(word, p with the model's attention, p with
    α′ (None without α′), the trace.Word)]; raises InputError for a word the model cannot score."""
    got = contrast_words(pb.lm, words)
    p0 = word_probs(pb, None, got)[0]
    p1 = None
    if alpha is not None:
        a = torch.as_tensor(np.asarray(alpha), dtype=pb.dtype, device=pb.x.device).reshape(1, *pb.alpha0.shape)
        p1 = word_probs(pb, a, got)[0]
    return [(w.text, float(p0[k]), None if p1 is None else float(p1[k]), w) for k, w in enumerate(got)]
