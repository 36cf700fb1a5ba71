"""Result records: Frontier (every point of a search plus its baselines), JWResult, SeedPoint."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..text import readable_token
from .settings import JW_EPS
from .site import Site


@dataclass
class Frontier:
    """All points of a frontier search plus its baselines for one (model, sentence, site).

    Points are indexed [P]; point 0 is the original attention (JSD 0, TVD 0). alpha [P, R, n] holds
    each point's rows; top_idx/top_p [P, k] its top-k output. envelope: indices of the lower
    envelope sorted by JSD (TVD strictly increasing with JSD: for every other point some envelope
    point has at least its JSD and at most its TVD)."""

    spec: str
    text: str
    tokens: list
    target: int
    site: Site
    rows: list
    output_kind: str
    alpha0: np.ndarray  # [R, n]
    y0_top: list  # [(label, p)]
    lambdas: np.ndarray  # [K]
    jsd: np.ndarray  # [P]
    tvd: np.ndarray  # [P]
    alpha: np.ndarray  # [K', R, n] float32: α' of the points alpha_idx (see alpha_of)
    alpha_idx: np.ndarray  # [K'] sorted point indices whose α' is kept: all points, unless that
    #                        would exceed ALPHA_KEEP values; then the envelope, the per-λ optima and 0
    lam: np.ndarray  # [P] λ of the run that produced the point (nan for the original)
    restart: np.ndarray  # [P] restart index (-1 original)
    step: np.ndarray  # [P] optimisation step (-1 original)
    top_idx: np.ndarray  # [P, k]
    top_p: np.ndarray  # [P, k]
    top_labels: dict  # output index -> label, for every index in top_idx
    best: np.ndarray  # [K] index of the point with the lowest TVD - λ·JSD among all points, per λ
    envelope: np.ndarray  # [E] indices, JSD ascending
    perm_jsd: np.ndarray  # [M]
    perm_tvd: np.ndarray  # [M]
    uniform: tuple  # (jsd, tvd)
    steps: int
    restarts: int
    lr: float
    timings: dict = field(default_factory=dict)
    prune_at: Optional[int] = None  # step from which each λ ran its best restart only (None: never pruned)
    seeds: list = field(default_factory=list)  # [SeedPoint]
    notes: list = field(default_factory=list)

    def alpha_of(self, i: int) -> np.ndarray:
        """-> α' [R, n] of point i (every envelope point and per-λ optimum has one)."""
        k = int(np.searchsorted(self.alpha_idx, i))
        if k >= len(self.alpha_idx) or self.alpha_idx[k] != i:
            raise KeyError(f"the attention of point {i} was not kept (only {len(self.alpha_idx)} of {len(self.jsd)})")
        return self.alpha[k]

    def prediction(self, i: int) -> list:
        """-> [(label, probability)] top-k output of point i."""
        return [(self.top_labels[int(j)], float(p)) for j, p in zip(self.top_idx[i], self.top_p[i])]

    def envelope_xy(self):
        """-> (jsd [E], tvd [E]) of the lower envelope, JSD ascending."""
        return self.jsd[self.envelope], self.tvd[self.envelope]

    def at_jsd(self, target: float) -> int:
        """Index of the point with the lowest TVD among points with JSD >= target (the frontier at
        that JSD); the point of largest JSD when none reaches it."""
        ok = self.jsd[self.envelope] >= target - 1e-12
        if not ok.any():
            return int(self.envelope[-1])
        return int(self.envelope[np.argmax(ok)])

    def within(self, eps: float) -> int:
        """Index of the point with the largest JSD among points with TVD <= eps (the original when
        none other qualifies)."""
        ok = self.tvd[self.envelope] <= eps + 1e-15
        return int(self.envelope[np.nonzero(ok)[0][-1]]) if ok.any() else 0

    def perm_summary(self) -> dict:
        return dict(jsd_median=float(np.median(self.perm_jsd)), tvd_median=float(np.median(self.perm_tvd)),
                    tvd_max=float(self.perm_tvd.max()), tvd_min=float(self.perm_tvd.min()))

    def caption(self, eps: float = JW_EPS) -> str:
        """Plain words: how far attention at this site can move while the output moves by < eps."""
        i = self.within(eps)
        where = f"attention at {self.site.label()}" + ("" if self.site.kind == "head" else " (mean JSD over the rows)")
        pm = self.perm_summary()
        tail = (f" Random permutations of the original attention move it by JSD {pm['jsd_median']:.2f} "
                f"(median) and the output by TVD {pm['tvd_median']:.3f} (median).")
        if i == 0:
            s = (f"{where} cannot move at all without the output moving by TVD ≥ {eps:g}: "
                 f"the smallest change found already costs TVD {self.tvd[self.envelope[1]] if len(self.envelope) > 1 else float('nan'):.3f}.")
        else:
            s = (f"{where[0].upper() + where[1:]} can move to JSD {self.jsd[i]:.2f} (of at most ln 2 = 0.69) "
                 f"while the output moves by TVD {self.tvd[i]:.4f} (< {eps:g}).")
        top = self.prediction(i)[0] if i else None
        if top is not None:
            word, word0 = readable_token(top[0]), readable_token(self.y0_top[0][0])
            s += f" The prediction there is still '{word}' at {top[1]:.2f}" if top[0] == self.y0_top[0][0] \
                else f" The top prediction there changes to '{word}'"
            s += f" (originally '{word0}' at {self.y0_top[0][1]:.2f})."
        return s + tail


@dataclass
class JWResult:
    """Jain & Wallace's search: k adversaries maximising JSD with a hinge on TVD above eps."""

    site: Site
    eps: float
    accept: float
    alpha: np.ndarray  # [k, R, n]
    jsd: np.ndarray  # [k]
    tvd: np.ndarray  # [k]
    accepted: np.ndarray  # [k] bool: tvd <= accept
    best: int  # index of the accepted adversary with the largest JSD; -1: the original (none accepted)
    best_jsd: float  # "max JSD within ε" (0 when only the original qualifies)
    top_idx: np.ndarray  # [k, top]
    top_p: np.ndarray
    top_labels: dict
    steps: int
    lr: float
    seconds: float

    def prediction(self, i: int) -> list:
        return [(self.top_labels[int(j)], float(p)) for j, p in zip(self.top_idx[i], self.top_p[i])]


@dataclass
class SeedPoint:
    """Another seed's model on the same sentence: JSD of its attention rows at the site to the
    reference model's (mean over rows) and TVD of its output distribution to the reference's."""

    spec: str
    jsd: float
    tvd: float
    top: list  # [(label, p)] of the other model
