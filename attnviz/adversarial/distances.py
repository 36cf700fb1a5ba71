"""The two distances: JSD between attention rows, TVD between output distributions (numpy or torch)."""
from __future__ import annotations

import numpy as np
import torch


def _safe_kl_terms(p, m, xp):
    """Elementwise p·log(p/m) with 0·log 0 = 0 (finite values and gradients everywhere)."""
    if xp is torch:
        pos = p > 0
        ps = torch.where(pos, p, torch.ones_like(p))
        ms = torch.where(pos, m, torch.ones_like(m))
        return torch.where(pos, p * (torch.log(ps) - torch.log(ms)), torch.zeros_like(p))
    pos = p > 0
    ps = np.where(pos, p, 1.0)
    ms = np.where(pos, m, 1.0)
    return np.where(pos, p * (np.log(ps) - np.log(ms)), 0.0)


def jsd(p, q):
    """p [..., n], q [..., n] (probability vectors, broadcastable) -> JSD [...] in nats (<= ln 2).

    JSD(p, q) = ½ KL(p || m) + ½ KL(q || m), m = (p + q) / 2. Works on numpy arrays and torch
    tensors (differentiable, finite gradients at zeros)."""
    xp = torch if isinstance(p, torch.Tensor) or isinstance(q, torch.Tensor) else np
    if xp is np:
        p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    m = (p + q) / 2
    return 0.5 * _safe_kl_terms(p, m, xp).sum(-1) + 0.5 * _safe_kl_terms(q, m, xp).sum(-1)


def tvd(p, q):
    """p [..., C], q [..., C] -> total variation distance [...] = ½ Σ |p - q| (in [0, 1])."""
    if isinstance(p, torch.Tensor) or isinstance(q, torch.Tensor):
        return 0.5 * (p - q).abs().sum(-1)
    return 0.5 * np.abs(np.asarray(p, dtype=float) - np.asarray(q, dtype=float)).sum(-1)

