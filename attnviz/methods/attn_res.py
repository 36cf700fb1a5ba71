"""AttnRes-N (Kobayashi et al. 2021): z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i; map ||z_ij||.

x_i is the residual the attention output is added to (the layer input); for pre-LN models f
includes the layer's first norm applied per source token.
"""
from __future__ import annotations

import numpy as np

from . import mixing
from .info import MethodInfo
from .base import Map, attn_res_norms


def compute(trace, *, progress=None) -> Map:
    layer = [attn_res_norms(trace, l) for l in range(trace.n_layers)]
    return Map("attn_res", np.stack(layer), None, {"rows_sum_to_one": False})


def mixing_ratios(trace) -> dict:
    """Trace -> {"AttnRes-N": [L, n]}: the mixing ratio of z_ij (the residual x_i in the preserving part)."""
    blk = mixing.attention_block(trace)
    return {INFO.ratios[0]: mixing.ratio(blk["mix"], blk["pres_res"])}


INFO = MethodInfo(
    name="attn_res", label="AttnRes-N", unit="‖z‖ attn+residual (norm, hidden units)",
    summary="attention + residual, norm (Kobayashi et al. 2021)",
    explain=("AttnRes-N: the attention output plus the residual stream, split per source token (norms): "
             "the token's own share includes its residual copy."),
    what=("**What it shows.** Attention plus the residual connection: the token's own input is added to its "
          "diagonal cell, and each cell is the norm of the vector that source contributes (AttnRes-N, "
          "Kobayashi et al. 2021)."),
    caveats=("**Caveats.** The diagonal is usually large: most of a token's representation is its own. LayerNorm "
             "after the residual, which rescales and re-centres vectors, is not applied here (see ATTNRESLN)."),
    reference="Kobayashi et al. 2021",
    rows_sum_to_one=False, decomposition=True, ratios=("AttnRes-N",), cost="norms", core=True)
