"""GlobEnc (Modarressi et al. 2022, "GlobEnc: Quantifying Global Token Attribution by Incorporating
the Whole Encoder Layer in Transformers"): norm-based per-layer attributions through the second
LayerNorm, aggregated over layers by rollout.

Per layer (post-LN, the paper's setting), as the authors' `output_globenc` code computes it:
  T_ij = γ1 ⊙ c(z_ij) / sqrt(var(pre-LN1_i) + eps1),  z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i
         (ATTNRESLN's vectors: no b_O, no β1),
  N_ij = || γ2 ⊙ c(T_ij) / sqrt(var(pre-LN2_i) + eps2) ||   (c: subtract the mean over d)
i.e. LN2 is applied to the LN1 parts with the real statistics of the vector entering LN2, and the
FFN's own output is left out of the parts (it only enters through LN2's variance) -- the paper's
N_Enc. Aggregation: the plain product of the raw norm matrices, G_1 = N_1, G_l = N_l G_{l-1}, with
no normalisation (the authors' encoder loop).

Map.layer [L, n, n] = G_l with each row divided by its sum (the shares within a row are exactly the
authors' values; the raw rows grow like the product of the layers' norms);
meta["log_row_sum"] [L, n] = log Σ_j G_l[i, j], so exp(log_row_sum)[..., None] * layer is the
authors' raw product; meta["per_layer"] = N_l (raw norms).

Pre-LN decoders (GPT-2, Llama): the definition does not carry over as such -- the second norm sits
inside the FFN branch, not on the residual path, so there is no "through LN2" step; what remains
of N_Enc without the FFN is the attention block with its residual, N_ij = ||z_ij|| (= attn_res,
with f computed from norm1(x_j)), aggregated in the same way.
"""
from __future__ import annotations

import numpy as np

from .. import linear
from . import attn_res_ln
from .info import MethodInfo
from .base import Map, attn_res_norms, per_layer, summed_norms


def layer_norms(trace, l: int) -> np.ndarray:
    """Layer l (0-based) -> N [n, n] raw norms (receiver i, source j).

    Post-LN: γ2 ⊙ c(γ1 ⊙ c(z_ij) / s1_i) / s2_i is linear in z_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i,
    so the norms come from the transformed head vectors (linear.summed_norms, no [n, n, d] tensor).
    Pre-LN: ||z_ij||."""
    r = trace.layers[l]
    if trace.placement != "post":
        return attn_res_norms(trace, l)
    w = trace.weights[l]

    def g(v):
        return linear.transform(linear.transform(v.double(), w.norm1), w.norm2)

    s = attn_res_ln.ln_scale(trace, l) * linear.norm_scale(r.resid_ffn.double(), w.norm2)
    return summed_norms(r.probs, g(trace.fx[l]), diag_add=g(r.resid_in), row_scale=s)


def compute(trace, *, progress=None) -> Map:
    """Trace -> Map globenc: rollout (plain product) of the per-layer N_Enc norms, rows shown as shares."""
    L = trace.n_layers
    per = np.stack(per_layer(trace, layer_norms, progress))
    n = per.shape[-1]
    shares = np.empty_like(per)
    log_rows = np.empty(per.shape[:2])
    R = np.eye(n)
    log_scale = 0.0
    for l in range(L):
        R = per[l] @ R
        m = R.max()
        if m > 0:  # a global rescaling keeps the product finite and changes no share
            R = R / m
            log_scale += float(np.log(m))
        rs = R.sum(-1)
        shares[l] = np.divide(R, rs[:, None], out=np.zeros_like(R), where=rs[:, None] > 0)
        with np.errstate(divide="ignore"):
            log_rows[l] = np.log(rs) + log_scale
    meta = {"rows_sum_to_one": True, "per_layer": per, "log_row_sum": log_rows,
            "aggregation": "plain product of the raw per-layer norms (authors' code); rows shown as shares"}
    if trace.placement != "post":
        meta["note"] = ("pre-LN: no LayerNorm on the residual path, so GlobEnc's 'through LN2' does not "
                        "carry over; per-layer map = ||attention + residual|| (attn_res), FFN left out")
    return Map("globenc", shares, None, meta)


INFO = MethodInfo(
    name="globenc", label="GlobEnc", unit="GlobEnc share (of 1)",
    summary="norms through LN1 and LN2, product over layers, row shares (Modarressi et al. 2022)",
    explain=("GlobEnc: norms of each source's part through both layer norms of the encoder layer, multiplied "
             "through the layers."),
    what=("**What it shows.** The attention block's per-source vectors (as ATTNRESLN) carried through the "
          "second LayerNorm of the layer, as norms; the layers are multiplied from the bottom up and each row "
          "is shown as shares of 1 (Modarressi et al. 2022)."),
    caveats=("**Caveats.** The FFN's own output is left out of the parts (it enters only through the second "
             "norm's statistics). Defined for post-LN encoders: on pre-LN decoders (GPT-2, Llama) there is no "
             "norm on the residual path after the FFN, and what remains is AttnRes-N composed the same way."),
    reference="Modarressi et al. 2022",
    rows_sum_to_one=True, decomposition=True, cost="norms")
