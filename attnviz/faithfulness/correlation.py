"""Rank correlations between a map's target row and importance vectors (Spearman ρ, Kendall τ-b).

A correlation is undefined (NaN, with the reason kept) when either vector is constant over the
tokens compared or fewer than MIN_TOKENS finite pairs remain. Both statistics are scipy's (ties: average
ranks; τ-b).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import scipy.stats

from .importance import BASELINES, Importance

MIN_TOKENS = 3


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """x, y [n] -> Spearman ρ (scipy; ties get average ranks); NaN if either is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(scipy.stats.spearmanr(x, y).statistic)


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """x, y [n] -> Kendall τ-b (scipy); NaN if either is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(scipy.stats.kendalltau(x, y, variant="b").statistic)


def rank_corr(x: np.ndarray, y: np.ndarray) -> tuple:
    """x, y [n] (NaN entries dropped pairwise) -> (ρ, τ-b, tokens used, reason or None)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    k = int(ok.sum())
    if k < MIN_TOKENS:
        return float("nan"), float("nan"), k, f"only {k} token(s) to compare"
    cx, cy = np.all(x == x[0]), np.all(y == y[0])
    if cx or cy:
        what = "the map row and the importance are" if cx and cy else ("the map row is" if cx else "the importance is")
        return float("nan"), float("nan"), k, f"{what} constant over the tokens"
    return spearman(x, y), kendall_tau_b(x, y), k, None


@dataclass
class Correlations:
    """ρ and τ-b [M, L, B] of each method's target row (per layer) against each baseline."""

    methods: list
    baselines: list
    rho: np.ndarray
    tau: np.ndarray
    n_tokens: np.ndarray  # [M, L, B] tokens compared
    reasons: dict = field(default_factory=dict)  # (method, layer, baseline) -> why undefined

    @property
    def n_layers(self) -> int:
        return self.rho.shape[1]

    def stat(self, name: str = "spearman") -> np.ndarray:
        return self.rho if name in ("spearman", "rho") else self.tau

    def best(self, stat: str = "spearman") -> np.ndarray:
        """[L, B] index of the method with the highest correlation per layer and baseline (-1: none defined)."""
        a = self.stat(stat)
        out = np.full(a.shape[1:], -1)
        for l in range(a.shape[1]):
            for b in range(a.shape[2]):
                col = a[:, l, b]
                if np.isfinite(col).any():
                    out[l, b] = int(np.nanargmax(col))
        return out

    def n_undefined(self) -> int:
        return int(np.isnan(self.rho).sum())

    def notes(self) -> list:
        """One line per undefined correlation, grouped by reason."""
        groups = {}
        for (m, l, b), why in self.reasons.items():
            groups.setdefault(why, []).append(f"{m} L{l + 1} vs {b}")
        return [f"undefined ({why}): " + ", ".join(v) for why, v in groups.items()]

    def to_dict(self) -> dict:
        nan = lambda a: [[[None if not np.isfinite(v) else float(v) for v in row] for row in m] for m in a]  # noqa: E731
        return dict(methods=self.methods, baselines=self.baselines, spearman=nan(self.rho), kendall=nan(self.tau),
                    n_tokens=self.n_tokens.tolist(),
                    undefined=[dict(method=m, layer=l + 1, baseline=b, reason=r) for (m, l, b), r in self.reasons.items()])


def target_rows(maps: dict, target: int, methods: Optional[Sequence[str]] = None) -> dict:
    """maps {name: Map or [L,n,n]} -> {name: [L, n]} rows of the receiving (target) position."""
    out = {}
    for name in (methods or list(maps)):
        m = maps[name]
        arr = np.asarray(getattr(m, "layer", m), dtype=np.float64)
        out[name] = arr[:, target, :]
    return out


def correlate(maps: dict, imp: Importance, methods: Optional[Sequence[str]] = None,
              baselines: Optional[Sequence[str]] = None) -> Correlations:
    """maps {name: Map or [L,n,n]} and Importance -> Correlations over imp.positions (target row)."""
    methods = list(methods or maps)
    baselines = [b for b in (baselines or BASELINES) if b in imp.values]
    rows = target_rows(maps, imp.target.position, methods)
    L = next(iter(rows.values())).shape[0] if rows else 0
    shape = (len(methods), L, len(baselines))
    rho, tau = np.full(shape, np.nan), np.full(shape, np.nan)
    ntok = np.zeros(shape, dtype=int)
    reasons = {}
    pos = imp.positions
    for mi, m in enumerate(methods):
        if rows[m].shape[-1] != len(imp.tokens):
            raise ValueError(f"map '{m}' covers {rows[m].shape[-1]} tokens, the importance {len(imp.tokens)}")
        for l in range(L):
            for bi, b in enumerate(baselines):
                r, t, k, why = rank_corr(rows[m][l, pos], imp.values[b][pos])
                rho[mi, l, bi], tau[mi, l, bi], ntok[mi, l, bi] = r, t, k
                if why:
                    reasons[(m, l, b)] = why
    return Correlations(methods, baselines, rho, tau, ntok, reasons)
