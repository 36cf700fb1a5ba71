"""Context-mixing ratios (Kobayashi et al. 2021) of the attention block: what five methods' ratios
are made of, computed in one pass and kept with the trace (trace.cached, key ("mixing",)).

For vectors v_ij of a method: preserving_i = v_ii, mixing_i = Σ_{j≠i} v_ij (vectors summed, then
norms); r_i = ||mixing_i|| / (||mixing_i|| + ||preserving_i||). Each method that declares a ratio
computes it in its own module (its mixing_ratios function) from the parts below:
  Attn-W      1 - ᾱ_ii                          (attention)
  AttnRes-W   (1 - ᾱ_ii) / 2                    (rollout: one step of 0.5 ᾱ + 0.5 I)
  Attn-N      v_ij = Σ_h α^h_ij f^h(x_j)        (value_norm)
  AttnRes-N   the same + δ_ij x_i               (attn_res)
  AttnResLn-N the same through LN1 (post-LN)    (attn_res_ln; pre-LN: equals AttnRes-N)
"""
from __future__ import annotations

import numpy as np
import torch

from ..linear import distribute, norm_scale
from .base import attn_vectors


def attention_block(trace) -> dict:
    """Trace -> per layer l (lists of L entries), kept with the trace:
    "self_weight": ᾱ_ii [n] (numpy, head mean of the recomputed attention);
    "mix", "pres", "pres_res": ||Σ_{j≠i} Σ_h α^h_ij f^h(x_j)||, ||Σ_h α^h_ii f^h(x_i)||, ||that + x_i|| [n];
    post-LN also "mix_ln", "pres_res_ln": the norms of the mixing and of the preserving-plus-residual
    vector through LN1, split linearly at the real statistics [n] (float64 tensors on the trace's device)."""
    return trace.cached(("mixing",), lambda: _attention_block(trace))


def _attention_block(trace) -> dict:
    out = {k: [] for k in ("self_weight", "mix", "pres", "pres_res")}
    post = trace.placement == "post"
    if post:
        out.update(mix_ln=[], pres_res_ln=[])
    for l, r in enumerate(trace.layers):
        a, fx, _ = attn_vectors(trace, l)  # α and f(x), or with the attention output's norm applied linearly
        n = a.shape[-1]
        idx = torch.arange(n, device=a.device)
        out["self_weight"].append(r.probs.double().mean(0)[idx, idx].cpu().numpy())
        total = torch.einsum("hij,hjd->id", a, fx)  # Σ_j Σ_h α f (no b_O)
        pres_attn = torch.einsum("hi,hid->id", a[:, idx, idx], fx)
        mix = total - pres_attn
        x = r.resid_in.double()
        out["mix"].append(mix.norm(dim=-1))
        out["pres"].append(pres_attn.norm(dim=-1))
        out["pres_res"].append((pres_attn + x).norm(dim=-1))
        if post:
            nrm = trace.weights[l].norm1
            s = norm_scale(r.resid_attn.double(), nrm)  # LN1's denominator for the real pre-LN vector
            out["mix_ln"].append(distribute(mix, nrm, s).norm(dim=-1))
            out["pres_res_ln"].append(distribute(pres_attn + x, nrm, s).norm(dim=-1))
    return out


def ratio(mix_norms: list, pres_norms: list) -> np.ndarray:
    """Per-layer norms of the mixing and preserving vectors ([n] tensors) -> [L, n] ||m|| / (||m|| + ||p||)."""
    return np.stack([(m / (m + p)).cpu().numpy() for m, p in zip(mix_norms, pres_norms)])
