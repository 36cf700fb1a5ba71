"""Adversarial attention: how far can attention move before the prediction does?

Jain & Wallace (2019) searched for attention distributions very different from the model's own
that leave the output unchanged; Wiegreffe & Pinter (2019) argued that the trade-off between the
attention distance (JSD) and the output distance (TVD) is what matters. This module measures that
trade-off for one sentence and one intervention site:

- `jsd`, `tvd`: the two distances (natural log; JSD <= ln 2; TVD = half the L1 distance).
- `Site`: which attention rows are replaced: the target row of one head in one layer ("head"),
  of every head of one layer ("layer"), or of every head in every layer ("all").
- `evaluate`: the model's output distribution at the target when the site's rows are replaced by
  given distributions; the rest of the model is recomputed by the functional forward
  (models/forward.run_layers with attention overrides; the fast path does the same arithmetic on less
  work, models/fused.py), so the output really follows the new attention.
- `frontier`: for a grid of λ (all λ and all restarts in ONE batch) minimise
  TVD(ŷ', ŷ) - λ·JSD(α', α) over α' = softmax(θ) with Adam; every evaluated point is kept and the
  lower envelope of (JSD, TVD) is the frontier. Baselines on the same axes: random permutations of
  α and the uniform distribution.
- `estimate_seconds`: about how long a frontier (and their search) takes, from one timed step.
- `jain_wallace`: their search: k adversaries maximising JSD (and their mutual JSD) with a hinge
  penalty on TVD above ε; accepted when TVD <= 0.05.
- `run_pipeline` (pipeline.py): what the Adversarial page and scripts/frontier_report.py run for one
  sentence and site: the frontier, Jain & Wallace's search and the other seeds, with one progress.
- `contrast_at` (contrast.py): the contrast words' probabilities with the model's attention and with a
  point's α′, a word of several tokens scored by trace.MULTI_TOKEN_RULE (its pieces appended after the
  target on a causal LM; refused on a masked LM).
- `seed_baseline`: JSD between the attention of models trained from different seeds on the same
  sentence, and TVD between their outputs (Wiegreffe & Pinter's seed variance).

For multi-row sites (a layer's heads, all layers) the JSD of a candidate is the MEAN of the
per-row JSDs, so it stays in [0, ln 2]. Positions a causal model cannot attend to stay at zero.
Everything is a pure function of (model, text, site, settings): no hooks, nothing written to the model.

Files, one job each: settings.py (the default λ grid, Jain & Wallace's constants), distances.py (jsd,
tvd), site.py (Site), problem.py (Problem: what is fixed for one model, sentence and site; prepare,
evaluate, check_model), fastpath.py (Problem.outputs' fast path on models/fused.py), search.py
(frontier: the batched optimisation over λ × restarts, and its baselines), envelope.py
(lower_envelope, best_per_lambda), contrast.py (contrast_at, word_probs), jain_wallace.py, seeds.py (seed_specs, seed_baseline), results.py
(Frontier, JWResult, SeedPoint).
"""

from __future__ import annotations

from ..trace import encode
from .contrast import contrast_at, word_probs
from .distances import jsd, tvd
from .envelope import best_per_lambda, lower_envelope
from .jain_wallace import jain_wallace
from .pipeline import run_pipeline
from .problem import Problem, check_model, evaluate, prepare
from .results import Frontier, JWResult, SeedPoint
from .search import _permutations, baselines, estimate_seconds, frontier, search_seconds
from .seeds import seed_baseline, seed_specs
from .settings import (ALPHA_KEEP, DEFAULT_LAMBDAS, INIT_FLOOR, JW_ACCEPT, JW_EPS, JW_INIT_NOISE, JW_K, JW_LR,
                       JW_PENALTY, JW_STEPS, LN2)
from .site import Site

__all__ = ["run_pipeline", "contrast_at", "word_probs", "jsd", "tvd", "Site", "Problem", "prepare", "evaluate", "check_model", "frontier", "Frontier",
           "estimate_seconds", "search_seconds",
           "jain_wallace", "JWResult", "seed_baseline", "seed_specs", "SeedPoint", "baselines",
           "lower_envelope", "best_per_lambda", "DEFAULT_LAMBDAS", "JW_EPS", "JW_ACCEPT", "JW_STEPS", "JW_LR", "LN2"]
