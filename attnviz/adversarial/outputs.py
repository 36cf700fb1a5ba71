"""The output distribution at the target from the last hidden states, through the model's own head
(in the head's dtype, softmax in float64): shared by Problem.outputs' plain path and its fast path."""
from __future__ import annotations

import torch

from ..models.forward import final_norm


def head_dtype(lm) -> torch.dtype:
    for p in lm.model.parameters():
        return p.dtype
    return torch.float32


def output_probs(lm, final: torch.Tensor, target: int, kind: str) -> torch.Tensor:
    """final hidden [B, n, d] (final norm applied) -> output distribution [B, C] (float64) at the target."""
    head = lm.arch.head
    hd = head_dtype(lm)
    if kind == "token":
        logits = head(final[:, target:target + 1].to(hd))[:, 0]  # position-wise head: only the target row
    else:
        logits = head(final.to(hd))
    return torch.softmax(logits.double(), dim=-1)


def row_output_probs(lm, row: torch.Tensor) -> torch.Tensor:
    """row [B, 1, d] (last layer output at the target, before the final norm) -> output distribution
    [B, C] (float64) for position-wise (token) heads."""
    logits = lm.arch.head(final_norm(lm.arch, row).to(head_dtype(lm)))[:, 0]
    return torch.softmax(logits.double(), dim=-1)
