"""The adversarial search's fixed settings: the default λ grid, Jain & Wallace's (2019) constants,
the start of restart 0 and how many α' values a Frontier keeps."""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

LN2 = math.log(2.0)
# λ grid: 0 plus 15 values from 1e-3 to 10^1.5 (the frontier's slope dTVD/dJSD at its optimum is λ)
DEFAULT_LAMBDAS = tuple([0.0] + [float(v) for v in np.logspace(-3, 1.5, 15)])
# Jain & Wallace (2019) settings (their code: Adam(amsgrad) lr 0.01, 500 steps, 5 adversaries
# initialised at log(uniform) + 3·N(0,1), loss -JSD + 500·relu(Δy - 0.01) - mutual JSD, accepted
# when Δy <= 0.05)
JW_EPS = 0.01
JW_ACCEPT = 0.05
JW_STEPS = 500
JW_LR = 0.01
JW_K = 5
JW_PENALTY = 500.0
JW_INIT_NOISE = 3.0
INIT_FLOOR = 1e-4  # restart 0: log(max(α, floor)) + 1e-3·N(0, 1)
# a Frontier keeps every point's α' up to this many values (else only the envelope's and optima's)
ALPHA_KEEP = 4_000_000

Progress = Optional[Callable[[str, float], None]]
