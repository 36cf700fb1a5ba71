"""Jain & Wallace's (2019) adversarial search."""
from __future__ import annotations

import math
import time
from typing import Optional

import numpy as np
import torch

from ..trace import DEFAULT_MAX_TOKENS
from .distances import jsd
from .problem import prepare
from .results import JWResult
from .search import _labels_for, _topk
from .settings import (JW_ACCEPT, JW_EPS, JW_INIT_NOISE, JW_K, JW_LR, JW_PENALTY, JW_STEPS, Progress)
from .site import Site


def jain_wallace(lm, text, site: Site, eps: float = JW_EPS, accept: float = JW_ACCEPT, k: int = JW_K,
                 steps: int = JW_STEPS, lr: float = JW_LR, penalty: float = JW_PENALTY,
                 init_noise: float = JW_INIT_NOISE, seed: int = 0, target: Optional[int] = None,
                 dtype: torch.dtype = torch.float32, top_k: int = 5, progress: Progress = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS) -> JWResult:
    """Jain & Wallace (2019): k adversaries α'_i = softmax(θ_i), θ_i = log(uniform) + 3·N(0,1),
    Adam(amsgrad, lr 0.01), 500 steps on Σ_i [-JSD(α'_i, α) + 500·relu(TVD_i - eps)] - Σ_ij JSD(α'_i, α'_j)/k;
    an adversary is accepted when TVD <= accept; the result is the accepted one with the largest JSD
    (the original, JSD 0, when none is accepted). Returns JWResult with [k] arrays."""
    t0 = time.perf_counter()
    pb = prepare(lm, text, site, target, dtype, max_tokens)
    R, m = pb.alpha0.shape[0], int(pb.allowed.sum())
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(k, R, m, generator=gen, dtype=dtype).to(pb.x.device)  # drawn on the CPU: the same on every device
    theta = (math.log(1.0 / m) + init_noise * noise).requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr, amsgrad=True)
    with torch.inference_mode(False), torch.enable_grad():
        for s in range(steps):
            alpha = pb.softmax_rows(theta)
            j, t, _ = pb.distances(alpha)
            a = alpha.double()
            cross = jsd(a.unsqueeze(0), a.unsqueeze(1)).mean(-1)  # [k, k] mean over rows
            loss = (-j + penalty * torch.relu(t - eps)).sum() - cross.sum() / k
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if progress and s % 25 == 0:
                progress("jain_wallace", (s + 1) / steps)
        with torch.no_grad():
            alpha = pb.softmax_rows(theta)
            j, t, probs = pb.distances(alpha)
    jv, tv = j.cpu().numpy(), t.cpu().numpy()
    acc = tv <= accept
    best = int(np.argmax(np.where(acc, jv, -1.0))) if acc.any() else -1
    ti, tp = _topk(probs, top_k, pb)
    return JWResult(site=site, eps=eps, accept=accept, alpha=alpha.float().cpu().numpy(), jsd=jv, tvd=tv,
                    accepted=acc, best=best, best_jsd=float(jv[best]) if best >= 0 else 0.0,
                    top_idx=ti, top_p=tp, top_labels=_labels_for(pb, [ti]), steps=steps, lr=lr,
                    seconds=time.perf_counter() - t0)
