"""Attention rollout (Abnar & Zuidema 2020): R_1 = A_1, R_l = A_l R_{l-1}, A_l = 0.5 ᾱ_l + 0.5 I."""
from __future__ import annotations

import numpy as np
import torch

from . import mixing
from .info import MethodInfo
from .base import Map, chain, with_residual


def rollout(A: np.ndarray) -> np.ndarray:
    """A [L, n, n] head-averaged attention (rows sum to 1) -> R [L, n, n]; row i of R_l is how much
    input token j reaches position i at layer l. The residual is added inside."""
    return chain(with_residual(A))


def compute(trace, *, progress=None) -> Map:
    # (ᾱ + I) row-normalised where the trace lives; chain multiplies on the host, or on a GPU for long inputs
    A = trace.head_mean(as_numpy=False)
    R = A + torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return Map("rollout", chain(R / R.sum(-1, keepdim=True)), None, {"rows_sum_to_one": True})


def mixing_ratios(trace) -> dict:
    """Trace -> {"AttnRes-W": [L, n]}: (1 - ᾱ_ii) / 2, the mixing ratio of one rollout step (0.5 ᾱ + 0.5 I)."""
    return {INFO.ratios[0]: np.stack([(1 - d) / 2 for d in mixing.attention_block(trace)["self_weight"]])}


INFO = MethodInfo(
    name="rollout", label="Attention rollout", unit="rollout share (of 1)",
    summary="product of (0.5 ᾱ + 0.5 I) over layers (Abnar & Zuidema 2020)",
    explain=("Rollout: attention composed through the layers, with the residual connection counted as half "
             "of each step ((A + I) / 2, rows renormalised). At layer 1 there is nothing to compose yet, so "
             "rollout equals the first layer's (A + I) / 2 — and so does flow."),
    what=("**What it shows.** How much of each *input* token ends up at each position after several layers. "
          "Each layer is treated as half attention, half identity (the residual connection), and the layers are "
          "multiplied from the bottom up. Rows sum to 1."),
    caveats=("**Caveats.** The 50/50 split between attention and residual is an assumption, not measured from the "
             "model; value vectors, feed-forward layers and LayerNorm are ignored. In upper layers rows tend to "
             "look alike. On a causal (left-to-right) model the first token reads only itself, so what reaches it "
             "stays there, and over many layers rollout piles up at it (SmolLM2: about all of it by layer 30), "
             "whatever the words contribute. Good at ranking input tokens for the final prediction (Abnar & "
             "Zuidema 2020, on a bidirectional model), not an exact account of the computation."),
    reference="Abnar & Zuidema 2020",
    # AttnRes-W = (1 - ᾱ_ii) / 2 is the mixing ratio of one rollout step (0.5 ᾱ + 0.5 I)
    rows_sum_to_one=True, decomposition=False, ratios=("AttnRes-W",), cost="cheap", core=True, default_view=True)
