"""Context-mixing ratios (Kobayashi et al. 2021), per layer and receiving token.

For vectors v_ij of a method: preserving_i = v_ii, mixing_i = Σ_{j≠i} v_ij (vectors summed, then
norms); r_i = ||mixing_i|| / (||mixing_i|| + ||preserving_i||). Attn-W: 1 - ᾱ_ii; AttnRes-W: (1 - ᾱ_ii)/2.
"""
from __future__ import annotations

import numpy as np
import torch

from ..linear import distribute, mixing_ratio as _ratio
from .attn_res_ln import ln_scale

NAMES = ("Attn-W", "Attn-N", "AttnRes-W", "AttnRes-N", "AttnResLn-N")


def ratios(trace) -> dict:
    """Trace -> {name: [L, n]} context-mixing ratio of each receiving token at each layer."""
    out = {k: [] for k in NAMES}
    for l, (r, fx) in enumerate(zip(trace.layers, trace.fx)):
        a = r.probs.double()
        fx = fx.double()
        n = a.shape[-1]
        idx = torch.arange(n, device=a.device)
        abar_diag = a.mean(0)[idx, idx].cpu().numpy()
        total = torch.einsum("hij,hjd->id", a, fx)  # Σ_j Σ_h α f (no b_O)
        pres_attn = torch.einsum("hi,hid->id", a[:, idx, idx], fx)
        mix = total - pres_attn
        x = r.resid_in.double()
        out["Attn-W"].append(1 - abar_diag)
        out["AttnRes-W"].append((1 - abar_diag) / 2)
        out["Attn-N"].append(_ratio(mix, pres_attn))
        out["AttnRes-N"].append(_ratio(mix, pres_attn + x))
        if trace.placement == "post":
            nrm, s = trace.weights[l].norm1, ln_scale(trace, l)
            out["AttnResLn-N"].append(_ratio(distribute(mix, nrm, s), distribute(pres_attn + x, nrm, s)))
        else:
            out["AttnResLn-N"].append(out["AttnRes-N"][-1])
    return {k: np.stack(v) for k, v in out.items()}
