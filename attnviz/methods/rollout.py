"""Attention rollout (Abnar & Zuidema 2020): R_1 = A_1, R_l = A_l R_{l-1}, A_l = 0.5 ᾱ_l + 0.5 I."""
from __future__ import annotations

import numpy as np

from .base import Map, chain, with_residual


def rollout(A: np.ndarray) -> np.ndarray:
    """A [L, n, n] head-averaged attention (rows sum to 1) -> R [L, n, n]; row i of R_l is how much
    input token j reaches position i at layer l. The residual is added inside."""
    return chain(with_residual(A))


def compute(trace, *, progress=None) -> Map:
    return Map("rollout", rollout(trace.attention().mean(1)), None, {"rows_sum_to_one": True})
