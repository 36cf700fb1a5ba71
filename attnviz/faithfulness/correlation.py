"""Rank correlations between a map's target row and importance vectors (Spearman ρ, Kendall τ-b).

A correlation is undefined (NaN, with the reason kept) when either vector is constant over the
tokens compared or fewer than MIN_TOKENS finite pairs remain. Both statistics are scipy's (ties: average
ranks; τ-b).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import functools
import itertools

import numpy as np
import scipy.stats

from ..text import dominant_column
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


CHANCE_EXACT_MAX = 9  # up to this many tokens the chance level is counted over every ordering (9! = 362,880)


@functools.lru_cache(maxsize=64)
def chance_level(n: int, stat: str = "spearman", level: float = 0.05) -> tuple:
    """How large a rank correlation over n tokens (no ties) must be before chance alone reaches it less
    often than `level`, two-sided: (c, exact) with c the smallest value such that a random ordering gives
    |stat| >= c with probability <= level, or None where even |stat| = 1 is more likely than that
    (n = 4: 2 of 24 orderings). Kendall: exact for any n (the inversion-count distribution). Spearman:
    exact counts over all n! orderings up to CHANCE_EXACT_MAX tokens, above that the normal
    approximation (sd 1/sqrt(n-1))."""
    if n < 2:
        return None, True
    if stat != "spearman":
        # τ = 1 − 4·inversions / (n(n−1)); the number of orderings with k inversions (Mahonian numbers)
        # by adding one element at a time: exact for any n, no enumeration
        counts = np.array([1.0])
        for m in range(2, n + 1):
            counts = np.convolve(counts, np.ones(m))
        probs = counts / counts.sum()
        vals = 1.0 - 4.0 * np.arange(len(counts)) / (n * (n - 1))
        return _smallest_rare(np.round(np.abs(vals), 12), probs, level), True
    if n <= CHANCE_EXACT_MAX:
        ref = np.arange(n, dtype=np.float64)
        perms = np.array(list(itertools.permutations(range(n))), dtype=np.float64)
        vals = 1.0 - 6.0 * ((perms - ref) ** 2).sum(1) / (n * (n * n - 1))
        return _smallest_rare(np.round(np.abs(vals), 12), np.full(len(vals), 1.0 / len(vals)), level), True
    z = scipy.stats.norm.ppf(1 - level / 2)
    return float(min(1.0, z / np.sqrt(n - 1))), False


def _smallest_rare(a: np.ndarray, probs: np.ndarray, level: float):
    """|values| a with probabilities -> the smallest c with P(a >= c) <= level, or None."""
    for c in np.unique(a):
        if probs[a >= c].sum() <= level + 1e-12:
            return float(c)
    return None


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

    def ranking(self, stat: str = "spearman", layers: Optional[Sequence[int]] = None) -> "Ranking":
        """The methods ranked by this sentence's correlation per (layer, baseline) (see Ranking)."""
        return ranking(self.methods, self.baselines, self.stat(stat), "spearman" if stat in ("spearman", "rho")
                       else "kendall", layers)

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


DOMINATED_SHARE = 0.99


def dominated_rows(rows: dict, positions: Sequence[int], share: float = DOMINATED_SHARE) -> dict:
    """rows {name: [L, n]} (target rows) -> {name: [(layer, position, share), ...]}: the layers where one
    of the compared positions holds `share` or more of the row's total over them (a non-negative row),
    so that the ranks of the other tokens rest on the rest (rollout on a causal model piles up at the
    first token: SmolLM2's layer-30 rows put 1.000 there)."""
    pos = np.asarray(positions, dtype=int)
    out = {}
    for name, R in rows.items():
        R = np.asarray(R, dtype=np.float64)[:, pos]
        hits = [(l, int(pos[j]), s) for l in range(R.shape[0])
                for j, s in [dominant_column(R[l][None, :])] if j is not None and s >= share]
        if hits:
            out[name] = hits
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


# ---------------------------------------------------------------- ranking the methods
TIE_DECIMALS = 9  # means equal to 9 decimals are a tie (the same ranks give the same ρ in every sentence)

SUMMARY_RULE = ("summary rank = the mean, over the upper half of the layers (layers ⌊L/2⌋+1 … L), of the "
                "method's rank within each (layer, baseline): rank 1 = the highest mean correlation; methods "
                "whose means are equal to 9 decimals share the average of their places (1, 2.5, 2.5, 4, …); a "
                "method whose mean is undefined (no defined correlation) at a layer gets no rank there and that "
                "layer is left out of its average; overall = the mean of the summary ranks over the baselines")


def upper_layers(n_layers: int) -> list:
    """0-based layers of the upper half, ⌊L/2⌋ … L-1 (1-based ⌊L/2⌋+1 … L): 4-6 of 6, 16-30 of 30."""
    return list(range(n_layers // 2, n_layers))


def rank_methods(values: np.ndarray) -> np.ndarray:
    """values [M, L, B] (higher = agrees better; NaN = undefined) -> ranks [M, L, B] within each (layer,
    baseline): 1 = highest, ties (equal to TIE_DECIMALS decimals) share the average place, NaN where the
    value is undefined (the defined methods are ranked among themselves)."""
    v = np.round(np.asarray(values, dtype=np.float64), TIE_DECIMALS)
    out = np.full(v.shape, np.nan)
    for l in range(v.shape[1]):
        for b in range(v.shape[2]):
            col = v[:, l, b]
            ok = np.isfinite(col)
            if ok.any():
                out[ok, l, b] = scipy.stats.rankdata(-col[ok], method="average")
    return out


@dataclass
class Ranking:
    """The methods ranked by a correlation per (layer, baseline), and a summary rank (SUMMARY_RULE)."""

    methods: list
    baselines: list
    value: np.ndarray  # [M, L, B] what is ranked (a sentence's ρ, or a study's mean ρ); NaN = undefined
    rank: np.ndarray  # [M, L, B] 1 = best; NaN where value is undefined
    layers: list  # 0-based layers the summary averages over
    summary: np.ndarray  # [M, B] mean rank over `layers` (NaN if undefined at all of them)
    n_ranked: np.ndarray  # [M, B] layers of `layers` where the method was ranked
    upper_value: np.ndarray  # [M, B] mean of `value` over the same layers (where defined)
    overall: np.ndarray  # [M] mean of summary over the baselines where defined
    stat: str = "spearman"
    rule: str = SUMMARY_RULE

    @property
    def n_layers(self) -> int:
        return self.value.shape[1]

    def undefined(self) -> list:
        """(method, layer 0-based, baseline) where the value, so the rank, is undefined."""
        return [(self.methods[m], int(l), self.baselines[b]) for m, l, b in zip(*np.nonzero(~np.isfinite(self.value)))]

    def ties(self) -> list:
        """(layer 0-based, baseline, [methods sharing one place]) for every tie."""
        out = []
        for l in range(self.n_layers):
            for b in range(len(self.baselines)):
                col = self.rank[:, l, b]
                for r in sorted({x for x in col if np.isfinite(x)}):
                    who = [self.methods[m] for m in np.nonzero(col == r)[0]]
                    if len(who) > 1:
                        out.append((l, self.baselines[b], who))
        return out

    def order(self, layer: int, baseline: str) -> list:
        """[(method, value, rank)] at one layer (0-based) and baseline, best first; undefined last."""
        b = self.baselines.index(baseline)
        items = [(m, float(self.value[i, layer, b]), float(self.rank[i, layer, b])) for i, m in enumerate(self.methods)]
        return sorted(items, key=lambda t: (not np.isfinite(t[2]), t[2] if np.isfinite(t[2]) else 0.0, t[0]))

    def rows(self) -> list:
        """Long format: method, layer (1-based), baseline, stat, value, rank (None where undefined)."""
        f = lambda x: float(x) if np.isfinite(x) else None  # noqa: E731
        return [dict(method=m, layer=l + 1, baseline=b, stat=self.stat, value=f(self.value[mi, l, bi]),
                     rank=f(self.rank[mi, l, bi]))
                for mi, m in enumerate(self.methods) for l in range(self.n_layers) for bi, b in enumerate(self.baselines)]

    def to_dict(self) -> dict:
        f = lambda x: float(x) if np.isfinite(x) else None  # noqa: E731
        return dict(stat=self.stat, rule=self.rule, summary_layers=[l + 1 for l in self.layers],
                    baselines=self.baselines,
                    methods=[dict(method=m, overall=f(self.overall[mi]),
                                  summary_rank={b: f(self.summary[mi, bi]) for bi, b in enumerate(self.baselines)},
                                  layers_ranked={b: int(self.n_ranked[mi, bi]) for bi, b in enumerate(self.baselines)},
                                  upper_mean={b: f(self.upper_value[mi, bi]) for bi, b in enumerate(self.baselines)},
                                  last_layer_rank={b: f(self.rank[mi, -1, bi]) for bi, b in enumerate(self.baselines)})
                             for mi, m in enumerate(self.methods)],
                    undefined=[dict(method=m, layer=l + 1, baseline=b) for m, l, b in self.undefined()],
                    ties=[dict(layer=l + 1, baseline=b, methods=w) for l, b, w in self.ties()])

    def markdown(self, label=None) -> str:
        """Methods (best overall first) × baselines: summary rank (mean value over the same layers)."""
        label = label or (lambda m: m)
        lo, hi = self.layers[0] + 1, self.layers[-1] + 1
        head = (f"| method (layers {lo}–{hi}) | " + " | ".join(self.baselines) + " | overall |")
        lines = [head, "|---" * (len(self.baselines) + 2) + "|"]
        idx = sorted(range(len(self.methods)),
                     key=lambda i: (not np.isfinite(self.overall[i]), self.overall[i] if np.isfinite(self.overall[i]) else 0))
        for i in idx:
            cells = []
            for b in range(len(self.baselines)):
                r, v = self.summary[i, b], self.upper_value[i, b]
                cells.append("n/a" if not np.isfinite(r) else f"{r:.1f} ({v:+.2f})")
            o = self.overall[i]
            lines.append(f"| {label(self.methods[i])} | " + " | ".join(cells) + f" | {'n/a' if not np.isfinite(o) else f'{o:.1f}'} |")
        return "\n".join(lines)

    def layer_markdown(self, baseline: str, label=None) -> str:
        """Methods × layers: rank (value) against one baseline."""
        label = label or (lambda m: m)
        b = self.baselines.index(baseline)
        L = self.n_layers
        lines = ["| method | " + " | ".join(f"L{l + 1}" for l in range(L)) + " |", "|---" * (L + 1) + "|"]
        for i, m in enumerate(self.methods):
            cells = ["n/a" if not np.isfinite(self.rank[i, l, b]) else
                     f"{self.rank[i, l, b]:g} ({self.value[i, l, b]:+.2f})" for l in range(L)]
            lines.append(f"| {label(m)} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def ranking(methods: Sequence[str], baselines: Sequence[str], values: np.ndarray, stat: str = "spearman",
            layers: Optional[Sequence[int]] = None) -> Ranking:
    """values [M, L, B] -> Ranking (summary over `layers`, 0-based; default the upper half)."""
    v = np.asarray(values, dtype=np.float64)
    M, L, B = v.shape
    layers = list(upper_layers(L) if layers is None else layers)
    rank = rank_methods(v)
    sub, subv = rank[:, layers, :], v[:, layers, :]
    n = np.isfinite(sub).sum(1)
    with np.errstate(invalid="ignore"):
        summary = np.where(n > 0, np.nansum(np.where(np.isfinite(sub), sub, 0), 1) / np.maximum(n, 1), np.nan)
        nv = np.isfinite(subv).sum(1)
        upper = np.where(nv > 0, np.where(np.isfinite(subv), subv, 0).sum(1) / np.maximum(nv, 1), np.nan)
        nb = np.isfinite(summary).sum(1)
        overall = np.where(nb > 0, np.where(np.isfinite(summary), summary, 0).sum(1) / np.maximum(nb, 1), np.nan)
    return Ranking(list(methods), list(baselines), v, rank, layers, summary, n, upper, overall, stat)
