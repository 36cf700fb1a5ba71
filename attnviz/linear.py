"""Linear decomposition: the pieces every norm-based and decomposition method shares.

A layer's output at receiver i is written as a sum over source tokens j of vectors v_ij plus a
remainder r_i. The operations here keep that sum exact:

- `center`, `distribute`, `distribute_norm`: a LayerNorm / RMSNorm applied linearly to each part with
  the statistics of the real vector it normalises, g_i(z) = γ ⊙ c(z) / s_i (c subtracts the mean over
  d for LayerNorm, nothing for RMSNorm; s_i = sqrt(var or mean square of real_i + eps)); β goes to the
  remainder. Σ_j g_i(v_ij) + g_i(r_i) + β = norm(real_i) whenever Σ_j v_ij + r_i = real_i.
- `summed_norms`: ||Σ_h a[h,i,j] vecs[h,j] + δ_ij diag_add_i|| / row_scale_i for every (i, j) from
  the per-source head Gram matrices, without forming the [n, n, d] vectors.
- `mixing_ratio`, `mixing_ratio_of`: the context-mixing ratio of Kobayashi et al. 2021,
  ||mix|| / (||mix|| + ||preserving||).
- `quadrature`: nodes and weights on [0, 1] for integrated gradients (Gauss-Legendre or midpoint).
- `chunk_bytes`: how large one chunk of a method's pairwise work may be on a device (cache-sized on
  the CPU; on a GPU large, so that the work is a few big kernels instead of thousands of small ones).

Everything is device-agnostic: tensors stay on the device of their inputs.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import torch

from .models.forward import norm_stats

RULES = ("gauss", "midpoint")
GPU_CHUNK_MB = float(os.environ.get("ATTNVIZ_GPU_CHUNK_MB", "1024"))


def chunk_bytes(device, cpu_bytes: int) -> int:
    """Bytes one chunk of pairwise work may take on `device`: `cpu_bytes` (each method's own
    cache-sized figure) on the CPU; on a CUDA device ATTNVIZ_GPU_CHUNK_MB (default 1024 MiB), capped
    at a sixteenth of the memory free there, never below `cpu_bytes`. Chunks split receivers (rows)
    only, so the results do not depend on it."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return int(cpu_bytes)
    free = torch.cuda.mem_get_info(dev)[0]
    return int(max(cpu_bytes, min(GPU_CHUNK_MB * 2 ** 20, free // 16)))


def center(v: torch.Tensor, nrm=None) -> torch.Tensor:
    """v [..., d] -> v minus its mean over d (LayerNorm); unchanged for an RMSNorm `nrm`."""
    if nrm is not None and nrm.kind != "layernorm":
        return v
    return v - v.mean(-1, keepdim=True)


def norm_scale(real: torch.Tensor, nrm) -> torch.Tensor:
    """real [n, d] -> s [n]: the norm's denominator for each real vector (eps inside the root)."""
    return norm_stats(real, nrm)[1].reshape(real.shape[:-1])


def transform(v: torch.Tensor, nrm) -> torch.Tensor:
    """γ ⊙ c(v): the norm's linear part before the per-receiver division by s_i."""
    return center(v, nrm) * nrm.weight.to(v.dtype)


def distribute(parts: torch.Tensor, nrm, scale: torch.Tensor, rows: torch.Tensor = None) -> torch.Tensor:
    """g_i(parts) = γ ⊙ c(parts) / s_i (no β). parts [n, ..., d] with receiver i first (s [n]), or
    packed [P, d] with `rows` [P] giving each row's receiver."""
    s = scale.to(parts.dtype)
    s = s[rows].unsqueeze(-1) if rows is not None else s.reshape(-1, *[1] * (parts.dim() - 1))
    return transform(parts, nrm) / s


def distribute_norm(parts: torch.Tensor, rem: torch.Tensor, nrm, real: torch.Tensor, beta: bool = True):
    """A norm applied linearly with the real statistics of real [n, d] to parts [n, n, d] and the
    remainder rem [n, d] -> (parts, remainder); β (when `beta`) goes to the remainder."""
    s = norm_scale(real.to(parts.dtype), nrm)
    p = distribute(parts, nrm, s)
    r = distribute(rem, nrm, s)
    if beta and nrm.bias is not None:
        r = r + nrm.bias.to(r.dtype)
    return p, r


def summed_norms(a: torch.Tensor, vecs: torch.Tensor, diag_add: torch.Tensor = None,
                 row_scale: torch.Tensor = None) -> np.ndarray:
    """a [H,n,n] weights, vecs [H,n,d] per-head source vectors -> [n,n] numpy with
    ||Σ_h a[h,i,j] vecs[h,j] + δ_ij diag_add[i]|| / row_scale[i].

    Off the diagonal the squared norm is a^T G_j a with G_j = the Gram matrix of source j's H head
    vectors: H² d per source plus H² n² for all pairs, never an [n, n, d] tensor; the diagonal is
    computed as a vector. Everything in float64, on the inputs' device.
    """
    a = a.double()
    vecs = vecs.double()
    H, n, _ = vecs.shape
    G = torch.einsum("hjd,gjd->jhg", vecs, vecs)  # [n, H, H]
    # (a^T G a)_ij = Σ_g (Σ_h a[h,i,j] G[j,h,g]) a[g,i,j]: one batched product over j
    aj = a.permute(2, 1, 0)  # [j, i, h]
    sq = (torch.bmm(aj, G) * aj).sum(-1).T.clamp_min(0).sqrt()  # [i, j]
    idx = torch.arange(n, device=a.device)
    diag_vec = torch.einsum("hi,hid->id", a[:, idx, idx], vecs)
    if diag_add is not None:
        diag_vec = diag_vec + diag_add.double()
    sq[idx, idx] = diag_vec.norm(dim=-1)
    if row_scale is not None:
        sq = sq / row_scale.double().reshape(-1, 1)
    return sq.cpu().numpy()


def mixing_ratio(mix: torch.Tensor, pres: torch.Tensor) -> np.ndarray:
    """mixing vectors [..., d], preserving vectors [..., d] -> ||mix|| / (||mix|| + ||pres||) (numpy)."""
    m, p = mix.norm(dim=-1), pres.norm(dim=-1)
    return (m / (m + p)).cpu().numpy()


def mixing_ratio_of(vecs: torch.Tensor) -> np.ndarray:
    """vecs [n, n, d] (receiver i, source j) -> [n] mixing ratio: preserving v_ii, mixing Σ_{j≠i} v_ij."""
    idx = torch.arange(vecs.shape[0], device=vecs.device)
    pres = vecs[idx, idx]
    return mixing_ratio(vecs.sum(1) - pres, pres)


@lru_cache(maxsize=64)
def _nodes(steps: int, rule: str):
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if rule == "gauss":
        x, w = np.polynomial.legendre.leggauss(int(steps))
        t, w = (x + 1) / 2, w / 2
    elif rule == "midpoint":
        t, w = (np.arange(steps) + 0.5) / steps, np.full(steps, 1.0 / steps)
    else:
        raise ValueError(f"unknown quadrature rule '{rule}'; known: {RULES}")
    return t, w


def quadrature(steps: int, rule: str = "gauss", *, dtype=torch.float64, device=None):
    """-> (t [steps], w [steps]) nodes on [0, 1] and weights summing to 1: Gauss-Legendre (exact for
    polynomials of degree < 2·steps) or the midpoint rule."""
    t, w = _nodes(int(steps), rule)
    return (torch.tensor(t, dtype=dtype, device=device), torch.tensor(w, dtype=dtype, device=device))
