"""The lower envelope of (JSD, TVD) points and the best point per λ."""
from __future__ import annotations

import numpy as np


def lower_envelope(jsd_v: np.ndarray, tvd_v: np.ndarray) -> np.ndarray:
    """jsd [P], tvd [P] -> indices [E] of the lower envelope, JSD ascending: the points with a TVD
    strictly below that of every point of larger JSD (ties in JSD: the lowest TVD). TVD strictly
    increases along it, and envelope TVD at JSD >= x is the least TVD any point reaches there."""
    order = np.lexsort((tvd_v, -jsd_v))  # JSD descending, ties: lower TVD first
    keep, best = [], np.inf
    for i in order:
        if tvd_v[i] < best:
            keep.append(i)
            best = tvd_v[i]
    return np.array(keep[::-1], dtype=int)


def best_per_lambda(jsd_v: np.ndarray, tvd_v: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """-> [K] index of the point minimising TVD - λ·JSD over ALL points (ties: the smaller JSD).

    Choosing over one common set of points makes JSD and TVD of the chosen points non-decreasing
    in λ (for λ1 < λ2: (λ2 - λ1)(J2 - J1) >= 0 and T2 >= T1 + λ1 (J2 - J1))."""
    out = np.zeros(len(lambdas), dtype=int)
    for k, lam in enumerate(lambdas):
        obj = tvd_v - lam * jsd_v
        cand = np.nonzero(obj <= obj.min())[0]
        out[k] = cand[np.argmin(jsd_v[cand])]
    return out
