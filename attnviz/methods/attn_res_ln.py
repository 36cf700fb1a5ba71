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

from .base import Map, summed_norms


def _ln_parts(trace, l: int):
    """-> (center-and-scale function g_i for vectors [..., n?, d], row scale s [n], gamma, beta)."""
    w = trace.weights[l]
    r = trace.layers[l]
    y = r["resid"].double()
    s = torch.sqrt(((y - y.mean(-1, keepdim=True)) ** 2).mean(-1) + w.norm1.eps)
    gamma = w.norm1.weight.double()
    beta = None if w.norm1.bias is None else w.norm1.bias.double()
    return s, gamma, beta


def _center(v):
    return v - v.mean(-1, keepdim=True)


def compute(trace, *, progress=None) -> Map:
    if trace.placement != "post":
        layer = [summed_norms(r["probs"], fx, diag_add=r["x"]) for r, fx in zip(trace.layers, trace.fx)]
        return Map("attn_res_ln", np.stack(layer), None, {"rows_sum_to_one": False, "note": "pre-LN: equals attn_res"})
    layer = []
    for l, (r, fx) in enumerate(zip(trace.layers, trace.fx)):
        s, gamma, _ = _ln_parts(trace, l)
        u = _center(fx.double()) * gamma
        xu = _center(r["x"].double()) * gamma
        layer.append(summed_norms(r["probs"], u, diag_add=xu, row_scale=s))
    return Map("attn_res_ln", np.stack(layer), None, {"rows_sum_to_one": False})


def parts(trace, l: int):
    """-> (parts [n, n, d], remainder [n, d]) as explicit float64 vectors for layer l (0-based).

    Post-LN: Σ_j parts[i, j] + remainder[i] = the real LN output of the attention block.
    Pre-LN: Σ_j parts[i, j] + remainder[i] = the residual stream after attention (remainder = b_O).
    """
    r = trace.layers[l]
    w = trace.weights[l]
    a = r["probs"].double()
    fx = trace.fx[l].double()
    z = torch.einsum("hij,hjd->ijd", a, fx)
    n = z.shape[0]
    idx = torch.arange(n)
    z[idx, idx] += r["x"].double()
    bo = torch.zeros(z.shape[-1], dtype=torch.float64) if w.bo is None else w.bo.double()
    if trace.placement != "post":
        return z, bo.expand(n, -1).clone()
    s, gamma, beta = _ln_parts(trace, l)
    g = _center(z) * gamma / s.reshape(n, 1, 1)
    rem = _center(bo).expand(n, -1) * gamma / s.reshape(n, 1)
    if beta is not None:
        rem = rem + beta
    return g, rem
