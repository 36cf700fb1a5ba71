"""The self-check's record and settings: what load.py reports and trace.py computes (a module of its
own, so that trace.py does not import the loader and the loader imports trace only when it checks)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

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
