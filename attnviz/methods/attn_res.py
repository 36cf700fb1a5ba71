"""AttnRes-N (Kobayashi et al. 2021): z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i; map ||z_ij||.

x_i is the residual the attention output is added to (the layer input); for pre-LN models f
includes the layer's first norm applied per source token.
"""
from __future__ import annotations

import numpy as np

from .base import Map, summed_norms


def compute(trace, *, progress=None) -> Map:
    layer = [summed_norms(r["probs"], fx, diag_add=r["x"]) for r, fx in zip(trace.layers, trace.fx)]
    return Map("attn_res", np.stack(layer), None, {"rows_sum_to_one": False})
