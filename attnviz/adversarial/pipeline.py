"""The whole adversarial comparison of one sentence at one site, as the Adversarial page and
scripts/frontier_report.py run it: the frontier (with its permutation and uniform baselines), Jain &
Wallace's search and the models trained from other seeds, with one progress callback."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..errors import AttnvizError
from ..models.load import load_model
from ..trace import DEFAULT_MAX_TOKENS
from .jain_wallace import jain_wallace
from .results import Frontier, JWResult
from .search import frontier
from .seeds import seed_baseline
from .settings import DEFAULT_LAMBDAS, Progress
from .site import Site

# shares of the progress bar: the frontier up to FRONTIER_SHARE, Jain & Wallace the next JW_SHARE,
# the seeds from SEEDS_AT
FRONTIER_SHARE = 0.75
JW_SHARE = 0.2
SEEDS_AT = 0.97


@dataclass
class PipelineResult:
    """frontier: the Frontier (its .seeds holds the other seeds' points); jw: Jain & Wallace's result,
    None when not run; seeds_skipped: why each seed that could not be compared was left out."""

    frontier: Frontier
    jw: Optional[JWResult] = None
    seeds_skipped: list = field(default_factory=list)


def run_pipeline(lm, text, site: Site, lambdas: Sequence[float] = DEFAULT_LAMBDAS, steps: int = 200,
                 restarts: int = 3, jw_steps: int = 0, seeds: Sequence = (), target: Optional[int] = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS, progress: Progress = None,
                 load: Optional[Callable] = None) -> PipelineResult:
    """(model, text | Encoded, site) -> PipelineResult: frontier(lm, text, site, lambdas, steps, restarts),
    then jain_wallace with jw_steps steps (0: not run), then seed_baseline against each of `seeds`
    (models, or specs loaded with load, default attnviz.load_model); a seed that cannot be loaded or
    compared on this text is left out with its reason. progress(stage, f): the frontier's stages
    scaled to [0, 0.75], Jain & Wallace's to [0.75, 0.95], then "other seeds" at 0.97."""
    fr = frontier(lm, text, site, lambdas=list(lambdas), steps=steps, restarts=restarts, target=target,
                  max_tokens=max_tokens,
                  progress=(lambda stage, f: progress(stage, FRONTIER_SHARE * f)) if progress else None)
    jw = None
    if jw_steps:
        jw = jain_wallace(lm, text, site, steps=jw_steps, target=target, max_tokens=max_tokens,
                          progress=(lambda stage, f: progress("Jain & Wallace search", FRONTIER_SHARE + JW_SHARE * f))
                          if progress else None)
    skipped = []
    if seeds:
        if progress:
            progress("other seeds", SEEDS_AT)
        load = load or load_model
        fr.seeds = []
        for other in seeds:
            try:
                model = load(other) if isinstance(other, str) else other
                fr.seeds += seed_baseline(lm, [model], text, site, target=target)
            except AttnvizError as e:
                skipped.append(str(e))
    return PipelineResult(fr, jw, skipped)
