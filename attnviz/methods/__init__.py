"""Method registry: a new method is one file here plus one entry in METHODS."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import attention, attn_res, attn_res_ln, flow as _flow, rollout as _rollout, value_norm
from . import atb_ff
from . import alti, decompx, globenc, value_zeroing
from .base import Map, with_residual
from .flow import flow
from .rollout import rollout


@dataclass(frozen=True)
class MethodInfo:
    name: str
    label: str
    compute: Callable
    per_head: bool  # has a per-head form
    rows_sum_to_one: bool
    decomposition: bool  # needs the functional trace (disabled when the self-check fails)
    summary: str


METHODS = {
    "attention": MethodInfo("attention", "Raw attention", attention.compute, True, True, False,
                            "attention probabilities α; layer map = head mean"),
    "rollout": MethodInfo("rollout", "Attention rollout", _rollout.compute, False, True, False,
                          "product of (0.5 ᾱ + 0.5 I) over layers (Abnar & Zuidema 2020)"),
    "flow": MethodInfo("flow", "Attention flow", _flow.compute, False, True, False,
                       "max-flow through the layered attention graph (Abnar & Zuidema 2020)"),
    "value_norm": MethodInfo("value_norm", "Value-weighted norm", value_norm.compute, True, False, True,
                             "||α f(x)|| (Kobayashi et al. 2020)"),
    "attn_res": MethodInfo("attn_res", "AttnRes-N", attn_res.compute, False, False, True,
                           "attention + residual, norm (Kobayashi et al. 2021)"),
    "attn_res_ln": MethodInfo("attn_res_ln", "ATTNRESLN", attn_res_ln.compute, False, False, True,
                              "attention + residual + LayerNorm, norm (Kobayashi et al. 2021)"),
    "atb_ff": MethodInfo("atb_ff", "ATBFF", atb_ff.compute_ff, False, False, True,
                         "attention block, then the FFN split by integrated gradients, norm (Kobayashi et al. 2024)"),
    "atb_ff_res": MethodInfo("atb_ff_res", "ATBFFRES", atb_ff.compute_ff_res, False, False, True,
                             "attention block + FFN + second residual, norm (Kobayashi et al. 2024)"),
    "atb_ff_res_ln": MethodInfo("atb_ff_res_ln", "ATBFFRESLN", atb_ff.compute_ff_res_ln, False, False, True,
                                "the whole layer: + second LayerNorm (post-LN), norm (Kobayashi et al. 2024)"),
    "alti": MethodInfo("alti", "ALTI", alti.compute, False, True, True, "L1-distance contributions of the transformed vectors, rollout over layers (Ferrando et al. 2022)"),
    "value_zeroing": MethodInfo("value_zeroing", "Value zeroing", value_zeroing.compute, False, True, True, "cosine distance of the layer output when token j's values are zeroed, rollout over layers (Mohebbi et al. 2023)"),
    "globenc": MethodInfo("globenc", "GlobEnc", globenc.compute, False, True, True, "norms through LN1 and LN2, product over layers, row shares (Modarressi et al. 2022)"),
    "decompx": MethodInfo("decompx", "DecompX", decompx.compute, False, False, True, "input-token decomposition propagated through every layer incl. the FFN, norm (Modarressi et al. 2023)"),
}

__all__ = ["METHODS", "MethodInfo", "Map", "flow", "rollout", "with_residual"]
