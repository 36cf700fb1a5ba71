"""Causal mediation on minimal pairs: is a head's attention, a layer's state at a token, the cause of
the prediction? (Vig et al. 2020; Finlayson et al. 2021; causal tracing, Meng et al. 2022.)

    m = mediate(lm, "the key to the cabinets [MASK] here .", "the keys to the cabinets [MASK] here .",
                contrast=("are", "is"))
    m.total_effect            # y(x')/y(x) - 1, y = p(are)/p(is) at the target
    m.nie_attention           # [L, H] natural indirect effect of each head's attention weights
    m.residual                # [L+1, n] causal tracing: the hidden state at (layer, token) from x'
    k = knockout(lm, text, layer=3, head=1, mode="zero", contrast=("are", "is"))   # one head knocked out
    k = knock_out(lm, text, heads=[(3, 1), (4, 0)], mode="mean", contrast=("are", "is"))  # several

core.py: the interventions; ablation.py: knocking heads out; pairs.py: minimal pairs built from the
shipped sets; study.py: the corpus study.
"""
from .ablation import KnockOut, Knockout, knock_out, knockout
from .core import HEAD_KINDS, KIND_LABELS, KINDS, Mediation, align, heads_for_share, mediate, nominal_layer_passes

__all__ = ["mediate", "Mediation", "knockout", "Knockout", "knock_out", "KnockOut", "KINDS", "HEAD_KINDS", "KIND_LABELS",
           "align", "heads_for_share", "nominal_layer_passes"]
