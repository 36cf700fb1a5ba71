"""flow's cost model: seconds for a model's layers and length (shown before a long run, and where
flow is offered at all), and for a batch of max-flow calls (whether a process pool pays for itself)."""
from __future__ import annotations

import importlib.util
from typing import Iterable, Optional

from . import kernels

# serial seconds per (pair x edge), measured on the development machine; used only to decide
# whether a pool is worth its start-up and to show a cost estimate before a long job
_SECONDS_PER_PAIR_EDGE = 2.5e-8


# causal attention: pairs j > i are zero and each remaining pair is solved on positions j..i only;
# measured on SmolLM2 at 32 and 128 tokens (bench/scale_flow.py): 10-35x below the dense estimate
_CAUSAL_FACTOR = 1 / 15


def estimate_seconds(L: int, n: int, layers: Optional[Iterable[int]] = None, workers: int = 1,
                     causal: bool = False) -> float:
    """Rough cost in seconds of flow for L layers x n tokens (only `layers`, 0-based, if given), shown
    before a long run and used to decide where flow is offered at all (jobs.limit_reason).

    Compiled kernels: about c * n^3 * (layers counted), where the layers above the second count
    (layers 1-2 are closed form) but at most four of them: the bounds settle most pairs of the upper
    layers, so 30 causal layers of SmolLM2 cost what 6 of MiniLM cost. Measured (2026-11-25,
    bench/flow_estimate.py's paragraphs, two threads on a machine with one other busy process):
    MiniLM 64 / 96 / 128 / 192 / 256 / 384 / 512 tokens 0.70 / 2.34 / 5.47 / 16.8 / 37.3 / 127 / 366 s,
    SmolLM2 64 / 96 / 128 tokens 0.75 / 2.22 / 5.34 s; c is the largest of t / (4 n^3) over these
    (6.8e-7, at 512 tokens), rounded up. The built-in 6-layer model takes about a fifth of this. On
    two free cores the time is about half.
    The igraph path (no numba) keeps its per-pair-edge rate."""
    layers = list(range(L)) if layers is None else list(layers)
    if kernels.USE_COMPILED and importlib.util.find_spec("numba") is not None:
        top = max(layers) + 1 if layers else 0  # every layer below the highest asked is solved too
        counted = min(max(top - 2, 0), _LAYERS_COUNTED_COMPILED)
        return _SECONDS_PER_CUBE_COMPILED * float(n) ** 3 * counted + 1e-7 * n * n * top
    work = sum(n * n * (l + 1) * n * n for l in layers)
    return work * _SECONDS_PER_PAIR_EDGE / max(1, workers) * (_CAUSAL_FACTOR if causal else 1.0)


_SECONDS_PER_CUBE_COMPILED = 7.0e-7  # MiniLM 512 tokens: 366 s = 6.8e-7 * 512^3 * 4
_LAYERS_COUNTED_COMPILED = 4


def estimate_pairs(pairs: int, l: int, n: int) -> float:
    """Serial seconds for `pairs` max-flow calls on the graph of 0-based layer l."""
    return pairs * (l + 1) * n * n * _SECONDS_PER_PAIR_EDGE
