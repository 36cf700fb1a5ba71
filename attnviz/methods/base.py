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
