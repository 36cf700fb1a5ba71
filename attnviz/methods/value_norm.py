"""Norm-based analysis (Kobayashi et al. 2020): ||α^h_ij f^h(x_j)|| per head, ||Σ_h α^h_ij f^h(x_j)|| per layer.

f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h: value bias in, output bias out. Not row-normalised.
"""
from __future__ import annotations

import numpy as np

from .base import Map, summed_norms


def compute(trace, *, progress=None) -> Map:
    heads, layer = [], []
    for r, fx in zip(trace.layers, trace.fx):
        a = r["probs"].double()
        heads.append((a * fx.double().norm(dim=-1)[:, None, :]).cpu().numpy())
        layer.append(summed_norms(a, fx))
    return Map("value_norm", np.stack(layer), np.stack(heads), {"rows_sum_to_one": False})
