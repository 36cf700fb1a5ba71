"""Attention rollout (Abnar & Zuidema 2020): R_1 = A_1, R_l = A_l R_{l-1}, A_l = 0.5 ᾱ_l + 0.5 I."""
from __future__ import annotations

import numpy as np
import torch

from . import mixing
from .info import GraphView, MethodInfo
from .base import Map, chain, graph_top, with_residual


def rollout(A: np.ndarray) -> np.ndarray:
    """A [L, n, n] head-averaged attention (rows sum to 1) -> R [L, n, n]; row i of R_l is how much
    input token j reaches position i at layer l. The residual is added inside."""
    return chain(with_residual(A))


def compute(trace, *, progress=None) -> Map:
    # (ᾱ + I) row-normalised where the trace lives; chain multiplies on the host, or on a GPU for long inputs
    A = trace.head_mean(as_numpy=False)
    R = A + torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return Map("rollout", chain(R / R.sum(-1, keepdim=True)), None, {"rows_sum_to_one": True})


def edge_mass(A: np.ndarray, output: int, source=None, top=None) -> tuple:
    """The mass the node (top, output) of the layered attention graph sends down each edge, summed over
    all paths: on edge (l, i) -> (l-1, j), U_l[output, i] Â_l[i, j] D_{l-1}[j, source] (U: the product of
    the layers above, D: rollout below; to all inputs when source is None). A [L, n, n] head-averaged
    attention (Â = (ᾱ + I) row-normalised inside); top = L by default, 1..L. -> (total, F [top, n, n]),
    F[l - 1][i, j] on edge (l, i) -> (l - 1, j); each level carries the total, the rollout value
    rollout[top][output, source] (1 to all inputs)."""
    Ah = with_residual(np.asarray(A, dtype=np.float64))
    L, n, _ = Ah.shape
    top = graph_top(L, n, output, source, top)
    # U_l[output, i]: mass arriving at (l, i) from the output node; D_l[j, source]: rollout below
    U = np.zeros((top + 1, n))
    U[top, output] = 1.0
    for l in range(top, 0, -1):
        U[l - 1] = U[l] @ Ah[l - 1]
    D = np.zeros((top + 1, n))  # D[l][j] = rollout of layer l from node (l, j) to the source (or 1)
    D[0] = 1.0 if source is None else np.eye(n)[source]
    for l in range(1, top + 1):
        D[l] = Ah[l - 1] @ D[l - 1]
    F = np.empty((top, n, n))
    for l in range(1, top + 1):
        F[l - 1] = U[l][:, None] * Ah[l - 1] * D[l - 1][None, :]
    return float(U[0] @ D[0]), F


def mixing_ratios(trace) -> dict:
    """Trace -> {"AttnRes-W": [L, n]}: (1 - ᾱ_ii) / 2, the mixing ratio of one rollout step (0.5 ᾱ + 0.5 I)."""
    return {INFO.ratios[0]: np.stack([(1 - d) / 2 for d in mixing.attention_block(trace)["self_weight"]])}


INFO = MethodInfo(
    name="rollout", label="Attention rollout", unit="rollout share (of 1)",
    summary="product of (0.5 ᾱ + 0.5 I) over layers (Abnar & Zuidema 2020)",
    explain=("Rollout: attention composed through the layers, with the residual connection counted as half "
             "of each step ((A + I) / 2, rows renormalised). At layer 1 there is nothing to compose yet, so "
             "rollout equals the first layer's (A + I) / 2 — and so does flow."),
    what=("**What it shows.** How much of each *input* token ends up at each position after several layers. "
          "Each layer is treated as half attention, half identity (the residual connection), and the layers are "
          "multiplied from the bottom up. Rows sum to 1."),
    caveats=("**Caveats.** The 50/50 split between attention and residual is an assumption, not measured from the "
             "model; value vectors, feed-forward layers and LayerNorm are ignored. In upper layers rows tend to "
             "look alike. On a causal (left-to-right) model the first token reads only itself, so what reaches it "
             "stays there, and over many layers rollout piles up at it (SmolLM2: about all of it by layer 30), "
             "whatever the words contribute. Good at ranking input tokens for the final prediction (Abnar & "
             "Zuidema 2020, on a bidirectional model), not an exact account of the computation."),
    reference="Abnar & Zuidema 2020",
    # AttnRes-W = (1 - ᾱ_ii) / 2 is the mixing ratio of one rollout step (0.5 ᾱ + 0.5 I)
    rows_sum_to_one=True, decomposition=False, ratios=("AttnRes-W",), cost="cheap", core=True, default_view=True,
    graph=GraphView(label="Rollout (all paths)",
                    help="Rollout: the share of the output's mass that passes through each edge, summed over all paths.",
                    caption="Rollout from {output} at layer {top} to {source}: {total:.4f} (each level of red edges "
                            "carries this much in total).",
                    edges=edge_mass))
