"""Value zeroing (Mohebbi et al. 2023, "Quantifying Context Mixing in Transformers").

For layer l and source token j: zero token j's value vector (including b_V) in every head, rerun the
whole layer from the layer's real input (attention probabilities unchanged, residual, norms, FFN),
and take the cosine distance of each token's new output to its original output:
  VZ_l[i, j] = 1 - cos(out_i^{¬j}, out_i),  rows then normalised to sum 1.
Rollout over layers without an added identity (the authors' compute_joint_attention(res=False)):
R_1 = VZ_1, R_l = VZ_l R_{l-1}.

Rerun: zeroing v_j in every head changes the attention output of receiver i by exactly
-Σ_h α^h_ij f^h(x_j) (f^h includes b_V; b_O stays), so the zeroed attention output is
attn_out_i - Σ_h α^h_ij f^h(x_j), and the rest of the layer is the engine's own
`models.forward.after_attention` run on all (receiver, source) pairs at once. The test checks this
against `layer_forward` with the attention column j set to zero (the literal rerun). Causal models:
receivers i < j do not see j, their distance is 0 and they are not rerun.

Map.layer [L, n, n] = R_l (rows sum to 1); meta["per_layer"] = VZ_l (rows sum to 1).

Post-LN encoders: the paper's setting (BERT). Pre-LN decoders (GPT-2, Llama): the definition
carries over unchanged; "the original output" is the layer's output before the model's final
norm for the last layer (the authors' script compares with hidden_states[l+1], which for a pre-LN
model's last layer has the final norm applied, while the rerun layer's output does not).
The cosine distance is computed as ||a/|a| - b/|b|||^2 / 2 (= 1 - cos, without its cancellation
for small distances).
"""
from __future__ import annotations

import numpy as np
import torch

from .. import linear
from ..models.forward import after_attention
from .info import MethodInfo
from .base import Map, chain, per_layer, row_normalise

_CHUNK_BYTES = 96 * 2 ** 20


def _cos_dist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a = a.double()
    b = b.double()
    ua = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    ub = b / b.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return 0.5 * ((ua - ub) ** 2).sum(-1)


def layer_scores(trace, l: int) -> np.ndarray:
    """Layer l (0-based) -> [n, n] cosine distances (row i receiver, column j zeroed source), not normalised."""
    w = trace.weights[l]
    r = trace.layers[l]
    # the output projection's output (before an attention output norm, which after_attention applies)
    x, attn_out, out = r.resid_in, (r.attn_out if r.attn_raw is None else r.attn_raw), r.resid_out
    probs, fx = r.probs, trace.fx[l]  # [H,n,n], [H,n,d]
    n, d = x.shape
    cd = x.dtype
    dev = x.device
    if w.causal:
        ii, jj = torch.tril_indices(n, n, device=dev)
    else:
        ii, jj = torch.meshgrid(torch.arange(n, device=dev), torch.arange(n, device=dev), indexing="ij")
        ii, jj = ii.reshape(-1), jj.reshape(-1)
    wc = w.to(cd) if w.wq.dtype != cd else w
    I = w.w1.shape[1]
    per_pair = 8 * (d * 8 + I * 3)
    step = max(1, int(linear.chunk_bytes(dev, _CHUNK_BYTES) // per_pair))
    S = torch.zeros(n, n, dtype=torch.float64, device=dev)
    for s in range(0, len(ii), step):
        i, j = ii[s:s + step], jj[s:s + step]
        # attention output of receiver i with v_j zeroed in every head
        delta = torch.einsum("hp,hpd->pd", probs[:, i, j].to(cd), fx[:, j].to(cd))
        ao = attn_out[i] - delta
        new = after_attention(wc, x[i].unsqueeze(0), ao.unsqueeze(0)).resid_out[0]
        S[i, j] = _cos_dist(new, out[i])
    return S.cpu().numpy()


def compute(trace, *, progress=None) -> Map:
    """Trace -> Map value_zeroing: rollout of the row-normalised per-layer value-zeroing scores."""
    per = row_normalise(np.stack(per_layer(trace, layer_scores, progress)))
    meta = {"rows_sum_to_one": True, "per_layer": per, "distance": "cosine",
            "aggregation": "rollout of the per-layer scores, no identity added"}
    if trace.placement != "post":
        meta["note"] = ("pre-LN: the layer output is compared before the final norm; causal: "
                        "receivers before the zeroed source are unchanged (0)")
    return Map("value_zeroing", chain(per, trace.lm.device), None, meta)


INFO = MethodInfo(
    name="value_zeroing", label="Value zeroing", unit="value-zeroing share (of 1)",
    summary="cosine distance of the layer output when token j's values are zeroed, rollout over layers (Mohebbi et al. 2023)",
    explain=("Value zeroing: how much token i's output changes (cosine distance) when source j's value "
             "vector is zeroed and the layer rerun, as shares, composed through the layers."),
    what=("**What it shows.** For each layer and source token j: token j's value vectors are set to zero in "
          "every head, the whole layer (residual, norms, FFN) is rerun, and each cell is the cosine distance "
          "between token i's new output and its real one, rows scaled to sum to 1; the layers are composed "
          "like rollout (Mohebbi et al. 2023)."),
    caveats=("**Caveats.** A distance, not a decomposition: the scores of a row do not add up to anything "
             "in the model, and zeroing a value is itself an intervention the model never saw. It costs one "
             "rerun of the layer per source token: slow for long texts. Causal models: a token before j "
             "does not see j and gets 0."),
    reference="Mohebbi et al. 2023",
    rows_sum_to_one=True, decomposition=True, cost="pairs")
