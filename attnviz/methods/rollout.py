"""Attention rollout (Abnar & Zuidema 2020): R_1 = A_1, R_l = A_l R_{l-1}, A_l = 0.5 ᾱ_l + 0.5 I."""
from __future__ import annotations

import numpy as np

from .base import Map, with_residual


def rollout(A: np.ndarray) -> np.ndarray:
    """A [L, n, n] head-averaged attention (rows sum to 1) -> R [L, n, n]; row i of R_l is how much
    input token j reaches position i at layer l. The residual is added inside."""
    Ares = with_residual(A)
    out = np.empty_like(Ares)
    R = np.eye(Ares.shape[-1])
    for l in range(Ares.shape[0]):
        R = Ares[l] @ R
        out[l] = R
    return out


def compute(trace, *, progress=None) -> Map:
    return Map("rollout", rollout(trace.attention().mean(1)), None, {"rows_sum_to_one": True})
