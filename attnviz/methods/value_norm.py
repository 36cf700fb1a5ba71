"""Norm-based analysis (Kobayashi et al. 2020): ||α^h_ij f^h(x_j)|| per head, ||Σ_h α^h_ij f^h(x_j)|| per layer.

f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h: value bias in, output bias out. Not row-normalised.
"""
from __future__ import annotations

import numpy as np
import torch

from . import mixing
from .info import MethodInfo
from .base import Map, attn_vectors, summed_norms


def compute(trace, *, progress=None) -> Map:
    H, n, _ = trace.layers[0].probs.shape
    heads, layer = np.empty((trace.n_layers, H, n, n)), np.empty((trace.n_layers, n, n))
    for l in range(trace.n_layers):
        a, fx, _ = attn_vectors(trace, l)  # the model's α and f(x), or with an output norm applied linearly
        torch.from_numpy(heads[l]).copy_((a * fx.norm(dim=-1)[:, None, :]).cpu())
        layer[l] = summed_norms(a, fx)
    return Map("value_norm", layer, heads, {"rows_sum_to_one": False})


def mixing_ratios(trace) -> dict:
    """Trace -> {"Attn-N": [L, n]}: the attention output's mixing ratio, v_ij = Σ_h α^h_ij f^h(x_j)."""
    blk = mixing.attention_block(trace)
    return {INFO.ratios[0]: mixing.ratio(blk["mix"], blk["pres"])}


INFO = MethodInfo(
    name="value_norm", label="Value-weighted norm", unit="‖α f(x)‖ (norm, hidden units)",
    summary="||α f(x)|| (Kobayashi et al. 2020)",
    explain=("Value-weighted norm: ‖α f(x)‖, how large a vector each source token actually adds through "
             "attention (a large weight on a small vector adds little)."),
    what=("**What it shows.** The size of what each source token actually adds: the norm of the attention "
          "weight times the transformed value vector, ‖α f(x)‖ (Kobayashi et al. 2020). The layer map is the "
          "norm of the heads' summed vectors (not a sum of norms). Not normalised: the unit is the size of "
          "hidden vectors."),
    caveats=("**Caveats.** Still one attention block in isolation: the residual connection and LayerNorm are left "
             "out (see AttnRes-N and ATTNRESLN). Norms ignore direction: two large contributions can cancel."),
    reference="Kobayashi et al. 2020",
    per_head=True, rows_sum_to_one=False, decomposition=True, ratios=("Attn-N",), cost="norms", core=True)
