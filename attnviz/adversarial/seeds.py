"""Seed variance (Wiegreffe & Pinter 2019): the same sentence through models trained from other seeds."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..errors import InputError
from ..models.load import builtin_names
from .distances import jsd, tvd
from .problem import prepare
from .results import SeedPoint
from .search import _topk
from .site import Site


def seed_specs(spec: str, available: Optional[Sequence[str]] = None) -> list:
    """'builtin:NAME' -> ['builtin:NAME-seed1', 'builtin:NAME-seed2', ...] that exist (sorted)."""
    if not isinstance(spec, str) or not spec.startswith("builtin:"):
        return []
    name = spec.split(":", 1)[1]
    if available is None:
        available = builtin_names()
    base = name.split("-seed")[0]
    out = [f"builtin:{a}" for a in available if a.startswith(base + "-seed") and a != name]
    if name != base and base in available:
        out.insert(0, f"builtin:{base}")
    return sorted(set(out))


def seed_baseline(lm, others: Sequence, text, site: Site, target: Optional[int] = None,
                  dtype: torch.dtype = torch.float32, top_k: int = 5) -> list:
    """Reference model lm and models trained from other seeds -> [SeedPoint]: JSD between their
    attention rows at the site (same layer and head indices; mean over rows) and TVD between their
    output distributions on the same sentence. The tokenizers must agree on the sentence."""
    ref = prepare(lm, text, site, target, dtype)
    out = []
    for other in others:
        pb = prepare(other, ref.enc.text, site, ref.target, dtype)
        if pb.enc.ids.shape != ref.enc.ids.shape or not torch.equal(pb.enc.ids, ref.enc.ids):
            raise InputError(f"{other.spec} tokenises the sentence differently from {lm.spec}: "
                             f"their attention cannot be compared")
        if pb.y0.shape != ref.y0.shape:
            raise InputError(f"{other.spec} has a different output space from {lm.spec}")
        j = float(jsd(pb.alpha0.cpu().numpy(), ref.alpha0.cpu().numpy()).mean())
        t = float(tvd(pb.y0.cpu().numpy(), ref.y0.cpu().numpy()))
        ti, tp = _topk(pb.y0.unsqueeze(0), top_k, pb)
        out.append(SeedPoint(spec=other.spec, jsd=j, tvd=t,
                             top=[(pb.label_of(int(i)), float(p)) for i, p in zip(ti[0], tp[0])]))
    return out
