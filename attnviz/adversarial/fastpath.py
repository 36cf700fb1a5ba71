"""The fast path of Problem.outputs: the output distribution for replaced attention rows α' with the
same arithmetic as models/forward.run_layers (the plain formulation) and less work, on the layer
pieces of models/fused.py.

- Causal model, token output, target the last position (a causal LM's usual case): only the target
  row changes in any layer, so models/fused.CausalRow recomputes that one row from the site's layer
  on (everything else computed once), and the output head runs on that one row.
- Otherwise (bidirectional encoders, or a causal target before the end): the first intervened layer
  changes only the target row (its keys and values are the unmodified ones), so only that row is
  computed there and spliced into the layer's unmodified output; the next layer reuses the other
  rows' q/k/v; for position-wise output heads the last layer is computed for the target row only;
  the layers in between run on every row of the batch.
"""
from __future__ import annotations

import torch

from ..models.forward import final_norm
from ..models.fused import CausalRow, FusedLayer
from .outputs import output_probs, row_output_probs


def fused_layers(pb) -> list:
    """[FusedLayer] of the model in the problem's dtype, made once per Problem (pb: a problem.Problem,
    which calls this module; read here through its fields only)."""
    if "fused" not in pb.cache:
        pb.cache["fused"] = [FusedLayer(w) for w in pb.lm.layers(pb.dtype)]
    return pb.cache["fused"]


def causal_last(pb) -> bool:
    """True when the causal target-row path applies."""
    return pb.output_kind == "token" and bool(pb.lm.arch.causal) and pb.target == pb.n - 1


def outputs_fast(pb, alpha: torch.Tensor) -> torch.Tensor:
    """alpha [B, R, n] -> output distribution [B, C] (float64), differentiable in alpha."""
    groups = pb.by_layer(alpha)
    if causal_last(pb):
        if "causal" not in pb.cache:
            pb.cache["causal"] = CausalRow(fused_layers(pb), pb.x, pb.site.start(), pb.rope)
        return row_output_probs(pb.lm, pb.cache["causal"](groups, alpha.shape[0]))
    return _general(pb, groups)


def _general(pb, groups: dict) -> torch.Tensor:
    fz = fused_layers(pb)
    L, s, t, rope = len(fz), pb.site.start(), pb.target, pb.rope
    token = pb.output_kind == "token"
    if "kv_start" not in pb.cache:
        with torch.no_grad():
            _, k, v = fz[s].split(fz[s].qkv(pb.x), rope)
        pb.cache["kv_start"] = (k, v)
    row = fz[s].rows(pb.x, t, rope, groups.get(s), kv=pb.cache["kv_start"])  # [B, 1, d]
    if s == L - 1 and token:
        return row_output_probs(pb.lm, row)
    is_t = torch.zeros(1, pb.n, 1, dtype=torch.bool, device=pb.x.device)
    is_t[0, t, 0] = True
    x = torch.where(is_t, row, pb.out_start)  # [B, n, d]: the unmodified output with row t replaced
    last = L - 1 if token else L
    for li in range(s + 1, last):
        qkv = None
        if li == s + 1:  # only row t of the input differs from the unmodified run
            if "qkv_next" not in pb.cache:
                with torch.no_grad():
                    pb.cache["qkv_next"] = fz[li].qkv(pb.out_start)
            qkv = torch.where(is_t, fz[li].qkv(row), pb.cache["qkv_next"])
        x = fz[li].full(x, t, rope, groups.get(li), qkv=qkv)
    if token:
        return row_output_probs(pb.lm, fz[L - 1].rows(x, t, rope, groups.get(L - 1)))
    return output_probs(pb.lm, final_norm(pb.lm.arch, x), t, pb.output_kind)
