"""ALTI (Ferrando et al. 2022, "Measuring the Mixing of Contextual Information in the Transformer"):
per-layer contributions from the L1 distance of each transformed vector to the output, aggregated
over layers by rollout.

Per layer l and receiving token i the attention block's output is a sum over source tokens j of
transformed vectors T_i(x_j) plus a bias term:
  post-LN (BERT family): y_i = LN1(x_i + attn_i) = Σ_j T_i(x_j) + g_i(b_O) + β1, with
      T_i(x_j) = g_i(Σ_h α^h_ij f^h(x_j) + δ_ij x_i), g_i(z) = γ1 ⊙ (z - mean_d z) / sqrt(var(pre-LN_i) + eps)
      (attn_res_ln.parts: LN1 applied linearly with the real statistics of the pre-LN vector);
  pre-LN (GPT-2, Llama): y_i = x_i + attn_i (the residual stream after attention; the authors' code
      `pre_layer_norm` branch), T_i(x_j) = Σ_h α^h_ij f^h(x_j) + δ_ij x_i with f^h(x_j) computed from
      norm1(x_j) (a function of x_j alone), bias b_O (zero for Llama).
Contribution: c_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), C_ij = c_ij / Σ_j c_ij (the authors'
`normalize_contributions(..., 'min_sum', resultant_norm=||y||_1)`). Aggregation by rollout without an
added identity (the residual is already inside T_i(x_i)): R_1 = C_1, R_l = C_l R_{l-1}.

Map.layer [L, n, n] = R_l (rows sum to 1); meta["per_layer"] = C_l; Map.completeness [L] =
max_i ||Σ_j T_i(x_j) + bias_i - real_i|| / ||real_i|| against the recomputed LN1 output (post-LN) or
residual stream (pre-LN).

Where the paper's definition does not carry over: the paper and its code analyse the attention
block only (the FFN, its residual and LN2 are not in the per-layer map), on post-LN encoders. The
pre-LN variant here is the authors' own `pre_layer_norm=True` branch; for Llama-type models it
applies unchanged (no LN after the residual, so T_i(x_j) are the AttnRes vectors). The authors'
code computes the LN scale as std(pre_ln + eps), i.e. without eps in practice; we put eps inside
the root as LayerNorm does (difference below 1e-9 on BERT's eps 1e-12), and their
F.pairwise_distance adds 1e-6 to each coordinate difference, which we do not.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import linear
from . import attn_res_ln
from .info import MethodInfo
from .base import Completeness, Map, attn_vectors, chain, per_layer, row_normalise


def layer_contributions(trace, l: int):
    """Layer l (0-based) -> (C [n, n] normalised contributions, completeness error, T [n,n,d], y [n,d])."""
    T, rem = attn_res_ln.parts(trace, l)  # float64; Σ_j T + rem = LN1 output (post) / resid (pre)
    y = T.sum(1) + rem
    r = trace.layers[l]
    real = (r.resid_mid if trace.placement == "post" else r.resid_attn).double()
    err = float(((y - real).norm(dim=-1) / real.norm(dim=-1).clamp_min(1e-30)).max())
    dist = torch.cdist(y[:, None, :], T, p=1)[:, 0, :]  # ||y_i - T_i(x_j)||_1  [n, n]
    c = (y.abs().sum(-1, keepdim=True) - dist).clamp_min(0)
    c[~(T != 0).any(-1)] = 0  # a zero vector (causal j > i) contributes exactly 0, whatever the rounding
    c = c.cpu().numpy()
    return row_normalise(c), err, T, y


_CHUNK_BYTES = 32 * 2 ** 20


def layer_scores(trace, l: int):
    """Layer l (0-based) -> (C [n, n], completeness error): `layer_contributions` without keeping the
    [n, n, d] vectors -- they are built a chunk of receivers at a time (causal models: sources j <= i
    only; a source no head attends to, j != i, has T_i(x_j) = 0 and contributes exactly 0)."""
    r = trace.layers[l]
    w = trace.weights[l]
    a, fx, rem = attn_vectors(trace, l)  # α and f(x), or with the attention output's norm applied linearly
    x = r.resid_in.double()
    n, d = x.shape
    post = trace.placement == "post"
    zsum = torch.einsum("hij,hjd->id", a, fx) + x  # Σ_j z_ij
    if post:
        s = attn_res_ln.ln_scale(trace, l)
        zsum, rem = linear.distribute_norm(zsum, rem, w.norm1, r.resid_attn.double())
    y = zsum + rem
    real = (r.resid_mid if post else r.resid_attn).double()
    err = float(((y - real).norm(dim=-1) / real.norm(dim=-1).clamp_min(1e-30)).max())
    y1 = y.abs().sum(-1)
    c = torch.zeros(n, n, dtype=torch.float64, device=x.device)
    rows = max(1, linear.chunk_bytes(x.device, _CHUNK_BYTES) // (8 * n * d))
    for s0 in range(0, n, rows):
        sl = slice(s0, min(n, s0 + rows))
        cols = sl.stop if w.causal else n
        idx = torch.arange(sl.start, sl.stop, device=x.device)
        z = torch.einsum("hij,hjd->ijd", a[:, sl, :cols], fx[:, :cols])
        z[idx - s0, idx] += x[sl]
        T = linear.distribute(z, w.norm1, s[sl]) if post else z
        c[sl, :cols] = (y1[sl, None] - (y[sl, None, :] - T).abs().sum(-1)).clamp_min(0)
    zero = a.sum(0) == 0
    zero.fill_diagonal_(False)
    c[zero] = 0
    return row_normalise(c.cpu().numpy()), err


def compute(trace, *, progress=None) -> Map:
    """Trace -> Map alti: rollout of the per-layer ALTI contributions (rows sum to 1)."""
    res = per_layer(trace, layer_scores, progress)  # not the [n, n, d] vectors
    per = np.stack([r[0] for r in res])
    errs = [r[1] for r in res]
    meta = {"rows_sum_to_one": True, "per_layer": per,
            "aggregation": "rollout of the per-layer contributions, no identity added"}
    post = trace.placement == "post"
    completeness = Completeness(tuple(errs), "the recomputed output of the first LayerNorm (resid_mid)" if post
                                else "the recomputed residual stream after attention (resid_attn)")
    if not post:
        meta["note"] = ("pre-LN: T_i(x_j) are the attention-block + residual vectors (the authors' "
                        "pre_layer_norm branch); the output is the residual stream after attention")
    else:
        meta["note"] = "attention block through LN1 (the FFN, LN2 are not in the per-layer map, as in the paper)"
    return Map("alti", chain(per, trace.lm.device), None, meta, completeness)


INFO = MethodInfo(
    name="alti", label="ALTI", unit="ALTI contribution (share of 1)",
    summary="L1-distance contributions of the transformed vectors, rollout over layers (Ferrando et al. 2022)",
    explain=("ALTI: how close each source's transformed vector is to token i's output (L1 distance), as shares, "
             "composed through the layers like rollout."),
    what=("**What it shows.** For each layer, token i's attention-block output is split into one transformed "
          "vector per source token; a source's contribution is how much closer (in L1 distance) the output is "
          "to that vector than to nothing, max(0, ‖y‖₁ − ‖y − T(x_j)‖₁), as shares of the row. The layers are "
          "then composed like rollout (Ferrando et al. 2022). Rows sum to 1."),
    caveats=("**Caveats.** Like the paper, the per-layer map covers the attention block only (the FFN, its "
             "residual and the second norm are left out). On pre-LN models (GPT-2, Llama) the authors' pre-LN "
             "variant is used: the vectors are the AttnRes ones. The completeness error of the split is shown "
             "with the map."),
    reference="Ferrando et al. 2022",
    rows_sum_to_one=True, decomposition=True, completeness=True, cost="norms")
