"""Exact bounds on a layer's flows from the exact flows of the layers below (numpy), and the test
for causal attention. The compiled path runs the same formulas as kernels (kernels.py)."""
from __future__ import annotations

import numpy as np

CERTIFY_TOL = 1e-12  # lower and upper bounds this close settle a pair without a max-flow


def _is_causal(Ares: np.ndarray) -> bool:
    """True when no position attends to a later one (decoder attention): every capacity above the
    diagonal is exactly 0, so (l, i) reaches only positions <= i and (0, j) is reached only from >= j."""
    return not np.any(np.triu(Ares, 1))


def _bounds(Al: np.ndarray, F_prev: np.ndarray, in_cap: np.ndarray):
    """Exact bounds on layer-l flows from layer l-1 flows -> (lower [n,n], upper [n,n]).

    Al [n,n] residual attention of layer l, F_prev [n(k), n(j)] raw flows from (l-1, k) to (0, j),
    in_cap [n] capacity into each input node, or [n(i), n(j)] the capacity into (0, j) from the
    positions (l, i) can reach (causal attention: Σ_{k<=i} A_1[k, j]).
    Upper: min(out-capacity of (l,i), in_cap, Σ_k min(Al[i,k], F_prev[k,j])) — every unit passes
    one first edge and then travels on from (l-1, k).
    Lower, the larger of: (flow side) a convex combination of feasible flows is feasible, so Σ_k y_k
    with y_k ≤ min(Al[i,k], F_prev[k,j]) and Σ_k y_k / F_prev[k,j] ≤ 1 is reachable: a fractional
    knapsack, taken greedily from the largest F_prev[k,j]; (cut side) min over θ of
    θ + Σ_{k: F_prev[k,j] > θ} Al[i,k], since a cut is a set, not a fraction (below).
    """
    cap = np.minimum(Al[:, :, None], F_prev[None, :, :])  # [i, k, j]
    upper = np.minimum(np.minimum(Al.sum(1)[:, None], in_cap), cap.sum(1))
    order = np.argsort(-F_prev, axis=0, kind="stable")  # per j: k by decreasing flow
    Fs = np.take_along_axis(F_prev, order, 0)
    caps = np.take_along_axis(cap, np.broadcast_to(order[None], cap.shape), 1)
    safe = np.where(Fs > 0, Fs, np.inf)[None]
    cost = caps / safe
    before = np.cumsum(cost, 1) - cost
    frac = np.where(cost > 0, np.clip((1.0 - before) / np.where(cost > 0, cost, 1.0), 0.0, 1.0), 0.0)
    lower = (caps * frac).sum(1)
    # the cut side: every cut of (l,i) from (0,j) puts some set K of layer l-1 nodes on the source
    # side and costs Al[i, not K] + (max-flow from K) >= Al[i, not K] + max_{k in K} F_prev[k, j]
    # (the flow from a set is at least the flow from any member). For a given largest member
    # value θ the cheapest K is every k with F_prev[k, j] <= θ: min over θ of θ + Al[i, F_prev > θ].
    Ao = np.take_along_axis(np.broadcast_to(Al[:, :, None], cap.shape), np.broadcast_to(order[None], cap.shape), 1)
    above = np.concatenate([np.zeros((Al.shape[0], 1, Fs.shape[1])), np.cumsum(Ao, 1)], 1)  # Al[i, r largest]
    theta = np.concatenate([Fs, np.zeros((1, Fs.shape[1]))], 0)  # after the r largest: the next value
    lower = np.maximum(lower, (above + theta[None]).min(1))
    return lower, upper


def _lower_two(Al: np.ndarray, Aprev: np.ndarray, F_pp: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Cut-side lower bound two layers down, for the pairs (i, j) where mask is set (else -inf).

    A cut of (l,i) from (0,j) puts sets K (layer l-1) and K' (layer l-2) on the source side and
    costs at least Al[i, not K] + Aprev[K, not K'] + max_{k' in K'} F_pp[k', j]. For a largest
    member value θ the cheapest K' is every k' with F_pp[k', j] <= θ, and then each k is cheapest
    alone: min over θ of θ + Σ_k min(Al[i, k], Aprev[k, F_pp[:, j] > θ])."""
    n = Al.shape[0]
    out = np.full((n, n), -np.inf)
    for j in np.nonzero(mask.any(0))[0]:
        rows = np.nonzero(mask[:, j])[0]
        v = F_pp[:, j]
        keep = np.nonzero(v > 0)[0]  # a k' that carries nothing is free to put on either side
        order = keep[np.argsort(-v[keep], kind="stable")]
        cols = np.nonzero(Aprev[:, keep].any(1))[0]  # k that reach some k' that carries flow
        a = np.concatenate([np.zeros((len(cols), 1)), np.cumsum(Aprev[np.ix_(cols, order)], 1)], 1)
        theta = np.concatenate([v[order], [0.0]])
        val = np.minimum(Al[np.ix_(rows, cols)][:, :, None], a[None]).sum(1) + theta[None]
        out[rows, j] = val.min(1)
    return out
