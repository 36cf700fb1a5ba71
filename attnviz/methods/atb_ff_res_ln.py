"""ATBFFRESLN (Kobayashi et al. 2024): the whole layer, through the second norm, one share per source
token. Computed by atb_ff.analyse together with ATBFF and ATBFFRES (one pass, cached on the trace)."""
from __future__ import annotations

from .atb_ff import scope_compute, scope_info, scope_mixing_ratios

compute = scope_compute("atb_ff_res_ln")
mixing_ratios = scope_mixing_ratios("atb_ff_res_ln")

INFO = scope_info(
    "atb_ff_res_ln", label="ATBFFRESLN", unit="‖share‖ layer output (norm, hidden units)",
    summary="the whole layer: + second LayerNorm (post-LN), norm (Kobayashi et al. 2024)",
    explain="ATBFFRESLN: the whole layer's output per source token, after the last layer norm.",
    what=("**What it shows.** The whole layer, end to end: each source token's share of the layer's real "
          "output vector, including the final LayerNorm (ATBFFRESLN, Kobayashi et al. 2024). The most "
          "complete of the maps here."),
    caveats=("**Caveats.** LayerNorm is split linearly at the real variance and the FFN with integrated "
             "gradients, so the shares sum to the real output up to the completeness error shown with the "
             "map; bias terms form a remainder that belongs to no token. Expensive for long texts. Pre-LN "
             "models have no norm after the second residual: the map equals ATBFFRES there."),
    contextualization_change="after")  # the whole layer's map, against ATTNRESLN's attention block
