"""ATTNRESLN (Kobayashi et al. 2021): the attention block, residual and LayerNorm as one linear map.

Post-LN: y_i = x_i + Σ_j Σ_h α^h_ij f^h(x_j) + b_O is the pre-LN vector; the LN output is
g_i(y_i) + β with g_i(z) = γ ⊙ (z - mean_d z) / sqrt(var(y_i) + eps) (variance of the real y_i).
Map: ||g_i(z_ij)|| with z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i. The papers drop β and b_O; we keep
them as the remainder r_i = g_i(b_O) + β, so Σ_j g_i(z_ij) + r_i equals the real LN output.
Pre-LN models have no norm after the residual: the map equals AttnRes-N, and
Σ_j z_ij + b_O equals the residual stream after attention.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import linear
from . import mixing
from .info import MethodInfo
from .base import Map, attn_res_norms, attn_vectors, summed_norms


def ln_scale(trace, l: int) -> torch.Tensor:
    """Post-LN layer l -> s [n] (float64): LN1's denominator for the real pre-LN vector resid_i."""
    return linear.norm_scale(trace.layers[l].resid_attn.double(), trace.weights[l].norm1)


def compute(trace, *, progress=None) -> Map:
    if trace.placement != "post":
        layer = [attn_res_norms(trace, l) for l in range(trace.n_layers)]
        return Map("attn_res_ln", np.stack(layer), None, {"rows_sum_to_one": False, "note": "pre-LN: equals attn_res"})
    layer = []
    for l, (r, fx) in enumerate(zip(trace.layers, trace.fx)):
        nrm = trace.weights[l].norm1
        # ||g_i(z_ij)|| = ||Σ_h α^h_ij γ⊙c(f^h(x_j)) + δ_ij γ⊙c(x_i)|| / s_i: g_i is linear
        layer.append(summed_norms(r.probs, linear.transform(fx.double(), nrm),
                                  diag_add=linear.transform(r.resid_in.double(), nrm), row_scale=ln_scale(trace, l)))
    return Map("attn_res_ln", np.stack(layer), None, {"rows_sum_to_one": False})


def mixing_ratios(trace) -> dict:
    """Trace -> {"AttnResLn-N": [L, n]}: AttnRes-N's vectors through LN1 (post-LN); pre-LN models have no
    norm there, and the ratio equals AttnRes-N."""
    blk = mixing.attention_block(trace)
    if trace.placement != "post":
        return {INFO.ratios[0]: mixing.ratio(blk["mix"], blk["pres_res"])}
    return {INFO.ratios[0]: mixing.ratio(blk["mix_ln"], blk["pres_res_ln"])}


def parts(trace, l: int):
    """-> (parts [n, n, d], remainder [n, d]) as explicit float64 vectors for layer l (0-based).

    Post-LN: Σ_j parts[i, j] + remainder[i] = the real LN output of the attention block.
    Pre-LN: Σ_j parts[i, j] + remainder[i] = the residual stream after attention (remainder = b_O).
    """
    r = trace.layers[l]
    w = trace.weights[l]
    a, fx, bo = attn_vectors(trace, l)
    z = torch.einsum("hij,hjd->ijd", a, fx)
    n = z.shape[0]
    idx = torch.arange(n, device=z.device)
    z[idx, idx] += r.resid_in.double()
    rem = bo.clone()
    if trace.placement != "post":
        return z, rem
    return linear.distribute_norm(z, rem, w.norm1, r.resid_attn.double())


INFO = MethodInfo(
    name="attn_res_ln", label="ATTNRESLN", unit="‖g(z)‖ after LN (norm, hidden units)",
    summary="attention + residual + LayerNorm, norm (Kobayashi et al. 2021)",
    explain=("ATTNRESLN: like AttnRes-N, after the layer normalisation; adds what LN does to each source's "
             "share. On models with an attention sink (a first token taking most of the mass, e.g. "
             "SmolLM2) one column dwarfs the rest: try the log colour scale."),
    what=("**What it shows.** Attention, residual and the LayerNorm after them, split into one vector per "
          "source token whose sum is the layer's real output (ATTNRESLN, Kobayashi et al. 2021). Each cell is "
          "the norm of that source's share after normalisation."),
    caveats=("**Caveats.** LayerNorm is split linearly by fixing each row's variance at its real value; the bias "
             "terms form a small remainder that belongs to no token. For pre-LN models (GPT-2, Llama) there is no "
             "LayerNorm after the residual, so this map equals AttnRes-N. The feed-forward block is not included."),
    reference="Kobayashi et al. 2021",
    rows_sum_to_one=False, decomposition=True, ratios=("AttnResLn-N",), cost="norms", core=True,
    default_view=True, contextualization_change="before")
