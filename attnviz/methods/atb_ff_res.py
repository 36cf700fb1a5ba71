"""ATBFFRES (Kobayashi et al. 2024): attention block + FFN + the second residual, one share per source
token. Computed by atb_ff.analyse together with ATBFF and ATBFFRESLN (one pass, cached on the trace)."""
from __future__ import annotations

from .atb_ff import scope_compute, scope_info, scope_mixing_ratios

compute = scope_compute("atb_ff_res")
mixing_ratios = scope_mixing_ratios("atb_ff_res")

INFO = scope_info(
    "atb_ff_res", label="ATBFFRES", unit="‖share‖ 2nd residual (norm, hidden units)",
    summary="attention block + FFN + second residual, norm (Kobayashi et al. 2024)",
    explain="ATBFFRES: ATBFF plus the second residual connection.",
    what=("**What it shows.** The whole layer up to the second residual connection: attention, residual, "
          "first LayerNorm and FFN, plus the residual around the FFN, as one share per source token "
          "(ATBFFRES, Kobayashi et al. 2024)."),
    caveats=("**Caveats.** Same integrated-gradients split of the FFN as ATBFF, with its completeness error. "
             "The final LayerNorm of the layer is not applied (see ATBFFRESLN)."))
