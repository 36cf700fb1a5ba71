"""About: what each method's map means and its caveats, in plain words (one tab per method)."""
from __future__ import annotations

import streamlit as st

from attnviz import METHODS, __version__

EXPLAIN = {
    "attention": (
        "**What it shows.** How much each token (row) *looks at* each other token (column) in one layer: "
        "the attention probabilities. Each head has its own map; the layer map is the average over heads. "
        "Each row sums to 1.",
        "**Caveats.** Attention weights say which *value vectors* are mixed, not how large those vectors are: "
        "a token can receive a big weight and still contribute almost nothing (Kobayashi et al. 2020). "
        "Large weights on [CLS], [SEP] and punctuation are common and often mean 'no-op'. A layer's weights "
        "also ignore everything the layers below already mixed, and the residual connection that keeps most "
        "of a token's own information. Several very different attention maps can give the same prediction "
        "(see the Adversarial page, when present)."),
    "rollout": (
        "**What it shows.** How much of each *input* token ends up at each position after several layers. "
        "Each layer is treated as half attention, half identity (the residual connection), and the layers are "
        "multiplied from the bottom up. Rows sum to 1.",
        "**Caveats.** The 50/50 split between attention and residual is an assumption, not measured from the "
        "model; value vectors, feed-forward layers and LayerNorm are ignored. In upper layers rows tend to "
        "look alike. Good at ranking input tokens for the final prediction (Abnar & Zuidema 2020), not an "
        "exact account of the computation."),
    "flow": (
        "**What it shows.** The layers as a network of pipes: each edge's capacity is the (half attention, "
        "half identity) weight. The value for row *i*, column *j* is the largest amount that can flow from "
        "position *i* at this layer down to input token *j*, then each row is scaled to sum to 1.",
        "**Caveats.** Same assumptions as rollout. Flow is expensive: one maximum-flow problem per pair of "
        "tokens per layer, so long texts ask before running. In upper layers with spread-out attention the "
        "bottleneck is often the input token's own capacity, so all rows become identical: this is a property "
        "of the method, shown as it is."),
    "value_norm": (
        "**What it shows.** The size of what each source token actually adds: the norm of the attention "
        "weight times the transformed value vector, ‖α f(x)‖ (Kobayashi et al. 2020). The layer map is the "
        "norm of the heads' summed vectors (not a sum of norms). Not normalised: the unit is the size of "
        "hidden vectors.",
        "**Caveats.** Still one attention block in isolation: the residual connection and LayerNorm are left "
        "out (see AttnRes-N and ATTNRESLN). Norms ignore direction: two large contributions can cancel."),
    "attn_res": (
        "**What it shows.** Attention plus the residual connection: the token's own input is added to its "
        "diagonal cell, and each cell is the norm of the vector that source contributes (AttnRes-N, "
        "Kobayashi et al. 2021).",
        "**Caveats.** The diagonal is usually large: most of a token's representation is its own. LayerNorm "
        "after the residual, which rescales and re-centres vectors, is not applied here (see ATTNRESLN)."),
    "attn_res_ln": (
        "**What it shows.** Attention, residual and the LayerNorm after them, split into one vector per "
        "source token whose sum is the layer's real output (ATTNRESLN, Kobayashi et al. 2021). Each cell is "
        "the norm of that source's share after normalisation.",
        "**Caveats.** LayerNorm is split linearly by fixing each row's variance at its real value; the bias "
        "terms form a small remainder that belongs to no token. For pre-LN models (GPT-2, Llama) there is no "
        "LayerNorm after the residual, so this map equals AttnRes-N. The feed-forward block is not included."),
    "atb_ff": (
        "**What it shows.** How much each source token contributes to the output of the layer's "
        "feed-forward block (FFN) alone: the attention block's per-source shares are pushed through the "
        "FFN, whose non-linearity is split between sources with integrated gradients (ATBFF, Kobayashi et "
        "al. 2024). Each cell is the norm of that source's share.",
        "**Caveats.** The split of a non-linear block is a choice (integrated gradients from a zero "
        "baseline); the shares add up to the real FFN output only up to a small completeness error, reported "
        "with the map. The residual and the LayerNorm around the FFN are not included (see ATBFFRES, "
        "ATBFFRESLN)."),
    "atb_ff_res": (
        "**What it shows.** The whole layer up to the second residual connection: attention, residual, "
        "first LayerNorm and FFN, plus the residual around the FFN, as one share per source token "
        "(ATBFFRES, Kobayashi et al. 2024).",
        "**Caveats.** Same integrated-gradients split of the FFN as ATBFF, with its completeness error. "
        "The final LayerNorm of the layer is not applied (see ATBFFRESLN)."),
    "atb_ff_res_ln": (
        "**What it shows.** The whole layer, end to end: each source token's share of the layer's real "
        "output vector, including the final LayerNorm (ATBFFRESLN, Kobayashi et al. 2024). The most "
        "complete of the maps here.",
        "**Caveats.** LayerNorm is split linearly at the real variance and the FFN with integrated "
        "gradients, so the shares sum to the real output up to the completeness error shown with the map; "
        "bias terms form a remainder that belongs to no token. Expensive for long texts. Pre-LN models have "
        "no norm after the second residual: the map equals ATBFFRES there."),
}

st.title("About")
st.caption(f"attnviz {__version__}: for a transformer and a sentence, where does each token's representation "
           "come from? One tab per method.")

tabs = st.tabs([info.label for info in METHODS.values()])
for tab, (name, info) in zip(tabs, METHODS.items()):
    with tab:
        what, caveats = EXPLAIN.get(name, (f"**What it shows.** {info.summary}.", ""))
        st.markdown(what)
        if caveats:
            st.markdown(caveats)
        st.caption(f"Method name in the library and the URL: `{name}`. "
                   + ("Rows sum to 1." if info.rows_sum_to_one else "Rows are not normalised.")
                   + (" Has per-head maps." if info.per_head else " Layer maps only."))

st.divider()
st.markdown("**Reading a map.** Row *i* is the token that receives information, column *j* the token it "
            "comes from. Layers count from 1. Token labels start with their position (\"3·the\") because the "
            "same word can occur twice.")
