"""The Map record every method returns, and small shared array helpers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ..linear import summed_norms  # noqa: F401 - the methods import it from here


@dataclass(frozen=True)
class Completeness:
    """How closely a decomposition adds up: for each layer, the largest relative error over the
    receiving tokens i of its parts plus its remainder against the real vector they split,
    max_i ||Σ_j parts_ij + remainder_i - real_i|| / ||real_i||."""

    errors: tuple  # [L] floats, one per layer
    target: str  # what the real vector is, e.g. "the model's layer output (hidden_states)"

    @property
    def worst(self) -> float:
        """The largest error over the layers (0 for no layers)."""
        return max(self.errors) if self.errors else 0.0


@dataclass
class Map:
    """layer [L, n, n] (row i receives, column j is the source); heads [L, H, n, n] or None;
    completeness: set by the methods that split a real vector into parts (MethodInfo.completeness)."""

    name: str
    layer: np.ndarray
    heads: Optional[np.ndarray] = None
    meta: dict = field(default_factory=dict)
    completeness: Optional[Completeness] = None


def with_residual(A: np.ndarray) -> np.ndarray:
    """A [L, n, n] head-averaged attention -> (A + I) row-renormalised (= 0.5 A + 0.5 I for stochastic rows)."""
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"expected a head-averaged attention array [L, n, n], got shape {A.shape}")
    R = A + np.eye(A.shape[-1])
    return R / R.sum(-1, keepdims=True)


# below this many tokens the product runs on the host even for a GPU trace: the GPU's first float64
# matrix product costs about 50 ms (measured on an H100), more than the whole product of small maps
GPU_CHAIN_MIN = 256


def graph_top(L: int, n: int, output: int, source, top) -> int:
    """Checks a path query on the layered attention graph of L layers and n tokens (output and source
    positions, top layer 1..L, default L) and returns the top layer; ValueError naming what is out of range."""
    top = L if top is None else int(top)
    if not 1 <= top <= L:
        raise ValueError(f"top layer {top} is outside 1..{L}")
    for name, p in (("output", output), ("source", source)):
        if p is not None and not 0 <= int(p) < n:
            raise ValueError(f"{name} position {p} is outside 0..{n - 1}")
    return top


def chain(C, device=None) -> np.ndarray:
    """C [L, n, n] per-layer maps -> R [L, n, n] with R_1 = C_1, R_l = C_l R_{l-1} (rollout without an
    added identity: the maps already contain the residual). numpy on the CPU; a tensor on a GPU, or
    device="cuda...", multiplies there in float64 and copies the result back once (from GPU_CHAIN_MIN
    tokens on)."""
    dev = C.device if isinstance(C, torch.Tensor) else torch.device(device or "cpu")
    if dev.type != "cpu" and C.shape[-1] >= GPU_CHAIN_MIN:
        T = torch.as_tensor(C, dtype=torch.float64, device=dev)
        out = torch.empty_like(T)
        R = out[0] = T[0]
        for l in range(1, T.shape[0]):
            R = out[l] = T[l] @ R
        return out.cpu().numpy()
    C = C.cpu().numpy() if isinstance(C, torch.Tensor) else C
    C = np.asarray(C, dtype=np.float64)
    out = np.empty_like(C)
    R = np.eye(C.shape[-1])
    for l in range(C.shape[0]):
        R = C[l] @ R
        out[l] = R
    return out


def attn_vectors(trace, l: int):
    """Layer l (0-based) -> (a [H, n, n], fx [H, n, d], bo [n, d]) float64 with Σ_j Σ_h a[h,i,j] fx[h,j]
    + bo[i] = the attention block's output as it joins the residual stream (attn_out).

    Most families: a = the model's attention α, fx = f^h(x_j) = v^h_j W_O^h, bo = b_O. Layers with a norm
    on the attention block's output (Gemma 3's post_attention_layernorm, an RMSNorm) apply it linearly
    with the real statistics, as ATTNRESLN does with LN1: fx = γ ⊙ f^h(x_j), a = α / s_i and bo = γ ⊙ b_O / s_i,
    with s_i = sqrt(mean(attn_raw_i²) + eps) of the real pre-norm output. `a` then carries the receiver's
    factor 1/s_i: use it for vectors, the model's attention (trace.layers[l].probs) for weights."""
    r, w = trace.layers[l], trace.weights[l]
    a, fx = r.probs.double(), trace.fx[l].double()
    n, d = r.resid_in.shape
    bo = (a.new_zeros(d) if w.bo is None else w.bo.double()).expand(n, -1)
    if w.attn_out_norm is None:
        return a, fx, bo
    from ..linear import norm_scale, transform
    s = norm_scale(r.attn_raw.double(), w.attn_out_norm)  # [n]
    return a / s.reshape(1, -1, 1), transform(fx, w.attn_out_norm), transform(bo, w.attn_out_norm) / s.reshape(-1, 1)


def attn_res_norms(trace, l: int) -> np.ndarray:
    """Layer l -> [n, n] ||z_ij|| with z_ij = Σ_h a f^h(x_j) + δ_ij x_i, the attention block's part of
    source j plus the residual (attn_vectors' a and fx): when a carries 1/s_i, the norm is
    ||Σ_h α f' + δ_ij s_i x_i|| / s_i."""
    r = trace.layers[l]
    a, fx, _ = attn_vectors(trace, l)
    if trace.weights[l].attn_out_norm is None:
        return summed_norms(a, fx, diag_add=r.resid_in)
    from ..linear import norm_scale
    s = norm_scale(r.attn_raw.double(), trace.weights[l].attn_out_norm)
    return summed_norms(r.probs, fx, diag_add=r.resid_in.double() * s.reshape(-1, 1), row_scale=s)


def per_layer(trace, fn, progress=None) -> list:
    """[fn(trace, l) for every layer l], reporting progress(l / L) before each."""
    L = trace.n_layers
    out = []
    for l in range(L):
        if progress:
            progress(l / L)
        out.append(fn(trace, l))
    return out


def row_normalise(c: np.ndarray) -> np.ndarray:
    """c [..., n] nonnegative -> rows divided by their sums (a zero row stays zero)."""
    s = c.sum(-1, keepdims=True)
    return np.divide(c, s, out=np.zeros_like(c), where=s > 0)
