"""Raw attention: α per head, the head mean ᾱ per layer."""
from __future__ import annotations

import numpy as np

from . import mixing
from .info import MethodInfo
from .base import Map


def compute(trace, *, progress=None) -> Map:
    """Trace -> Map(layer ᾱ [L,n,n], heads α [L,H,n,n]); the model's own attention probabilities."""
    return Map("attention", trace.head_mean(), trace.attention64(), {"rows_sum_to_one": True})


def mixing_ratios(trace) -> dict:
    """Trace -> {"Attn-W": [L, n]}: 1 - ᾱ_ii, the attention weight a token gives the others."""
    return {INFO.ratios[0]: np.stack([1 - d for d in mixing.attention_block(trace)["self_weight"]])}


INFO = MethodInfo(
    name="attention", label="Raw attention", unit="attention weight (share of 1)",
    summary="attention probabilities α; layer map = head mean",
    explain=("Raw attention: row i is how one layer's softmax splits token i's attention over the tokens "
             "(each row sums to 1). It ignores the residual stream and the size of the value vectors."),
    what=("**What it shows.** How much each token (row) *looks at* each other token (column) in one layer: "
          "the attention probabilities. Each head has its own map; the layer map is the average over heads. "
          "Each row sums to 1."),
    caveats=("**Caveats.** Attention weights say which *value vectors* are mixed, not how large those vectors are: "
             "a token can receive a big weight and still contribute almost nothing (Kobayashi et al. 2020). "
             "Large weights on [CLS], [SEP] and punctuation are common and often mean 'no-op'. A layer's weights "
             "also ignore everything the layers below already mixed, and the residual connection that keeps most "
             "of a token's own information. Several very different attention maps can give the same prediction "
             "(see the Adversarial page, when present)."),
    reference="Bahdanau et al. 2015; Vaswani et al. 2017",
    per_head=True, layer_map="head mean", rows_sum_to_one=True, decomposition=False, ratios=("Attn-W",),
    cost="cheap", core=True, default_view=True)
