"""Context mixing: how much of each token's new representation comes from the other tokens, layer by
layer, for the attention block (Kobayashi et al. 2021) and the whole layer with its feed-forward block
(Kobayashi et al. 2024); for the sentence and for the built-in corpus of ordinary sentences."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from attnviz import context, figures

from attnviz.text import token_labels
from attnviz.jobs import Job, ResultCache, rough_seconds, run, trace_seconds
from attnviz.errors import InputError
from attnviz.methods import METHODS
from attnviz.app import ui

ATTN = ("Attn-W", "Attn-N", "AttnRes-W", "AttnRes-N", "AttnResLn-N")
FFN = ("AtbFf-N", "AtbFfRes-N", "AtbFfResLn-N")
COLORS = {"Attn-W": "#9467bd", "Attn-N": "#8c564b", "AttnRes-W": "#e377c2", "AttnRes-N": "#7f7f7f",
          "AttnResLn-N": "#1f77b4", "AtbFf-N": "#ff7f0e", "AtbFfRes-N": "#2ca02c", "AtbFfResLn-N": "#d62728"}
EXPLAIN = {
    "Attn-W": "attention weights: 1 − ᾱ_ii",
    "Attn-N": "norms of the attention output's parts",
    "AttnRes-W": "weights with the residual: (1 − ᾱ_ii) / 2",
    "AttnRes-N": "attention + residual, norms",
    "AttnResLn-N": "attention + residual + LayerNorm (ATTNRESLN), norms",
    "AtbFf-N": "the FFN's output split over source tokens by integrated gradients",
    "AtbFfRes-N": "attention block + FFN + second residual",
    "AtbFfResLn-N": "the whole layer, + second LayerNorm (ATBFFRESLN)",
}

lm = ui.page("Context mixing", r"The context-mixing ratio of token $i$ at a layer is "
             r"$\lVert\sum_{j\neq i} v_{ij}\rVert \,/\, (\lVert\sum_{j\neq i} v_{ij}\rVert + \lVert v_{ii}\rVert)$: "
             "the share of its new vector that comes from the other tokens, for the per-source vectors $v_{ij}$ "
             "of each method (Kobayashi et al. 2021). The FFN variants carry the split through the "
             "feed-forward block with integrated gradients (Kobayashi et al. 2024).")
if not lm.decompositions_ok:
    st.warning(ui.plain(lm.disabled_reason or "decompositions are unavailable for this model"),
               icon=":material/block:")
    st.stop()

c1, c2 = st.columns(2)
with c1:
    steps = int(st.number_input("Integrated-gradients steps", min_value=1, max_value=256,
                                value=METHODS[context.AFTER].defaults()["steps"], step=8, key="cm_steps",
                                help="Gauss-Legendre nodes for the FFN split; the completeness error "
                                     "below shows what they leave."))
with c2:
    no_special = st.checkbox("Leave [CLS]/[SEP] out of the means", key="cm_no_special",
                             help="Kobayashi et al. averaged over every token, special ones included.")


def _sentence(spec: str, text: str, cap: int, steps: int, lm):
    """The sentence's SentenceMixing, or None (the page says why: asked for, cancelled, failed). The
    FFN split costs n² FFN parts a layer: its estimate comes first (a button over ui.ASK_SECONDS),
    then a progress bar and Cancel."""
    key = ("context_mixing", spec, text, cap, steps)
    if (got := ui.cached_result(key)) is not None:
        return got
    a0 = ui.analysis(["attention"])  # cheap and cached: the tokens and the trace's time on this text
    if a0 is None:
        return None
    est = rough_seconds([context.BEFORE, context.AFTER], len(a0.tokens), trace_seconds(a0))
    what = f"Splitting every layer into per-source parts (estimated {ui.secs(est)})"
    job = Job(key, ("context_mixing",), est, "the split of every layer into per-source parts",
              lambda progress: context.sentence_mixing(lm, text, target=None, max_tokens=cap, steps=steps,
                                                       progress=progress), what=what)
    return ui.run_job(job, len(a0.tokens))


@st.cache_resource
def _corpus_store() -> ResultCache:
    """(spec, steps, sentences, no_special) -> CorpusMixing, shared by every session (read-only), the 16
    used last."""
    return ResultCache(maxsize=16)


def layer_lines(per_layer: dict, title: str, key: str) -> go.Figure:
    """{name: [L] ratio} -> lines over layers (percent)."""
    fig = go.Figure()
    for name in ATTN + FFN:
        if name not in per_layer:
            continue
        y = 100 * np.asarray(per_layer[name], dtype=np.float64)
        fig.add_trace(go.Scatter(x=list(range(1, len(y) + 1)), y=y, name=name, mode="lines+markers",
                                 line=dict(color=COLORS[name], dash="dash" if name in FFN else "solid"),
                                 hovertemplate=f"{name}: {EXPLAIN[name]}<br>layer %{{x}}: %{{y:.1f}} %<extra></extra>"))
    figures.layer_axis(fig, max((len(v) for v in per_layer.values()), default=1))
    fig.update_yaxes(title_text="mean context-mixing ratio (%)", rangemode="tozero")
    fig.update_layout(title=title, height=420, margin=dict(l=10, r=10, t=50, b=10), plot_bgcolor="white",
                      legend=dict(font=dict(size=13)), meta=key)
    return fig


def _means(ratios: dict, keep: np.ndarray) -> dict:
    return {k: v[:, keep].mean(1) for k, v in ratios.items()}


# ---------------------------------------------------------------------------------- the sentence
sm = _sentence(ui.spec(), ui.text(), ui.cap(), steps, lm)
if sm is None:
    st.stop()

labels = token_labels(sm.tokens)
keep = ~sm.special if no_special and (~sm.special).any() else np.ones(len(sm.tokens), dtype=bool)
L = len(sm.change)

st.subheader("This sentence", anchor=False)
st.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(layer_lines(_means(sm.ratios, keep), "Mean ratio per layer: this sentence", "sentence_lines")),
                key="cm_sentence_lines")
with st.expander("What each line is", expanded=True):  # the legend's short names, spelled out
    st.markdown("\n".join(f"- **{k}**: {v}" for k, v in EXPLAIN.items()))
worst = max(sm.completeness)
st.caption(f"ATBFFRESLN completeness error (the parts plus the remainder against the model's own layer "
           f"output, worst token): {worst:.1e} at {sm.steps} steps"
           + (" — raise the steps." if worst > 1e-3 else "."))

name = st.selectbox("Ratio per token", list(ATTN + FFN), index=len(ATTN + FFN) - 1, key="cm_token_method",
                    format_func=lambda k: f"{k} — {EXPLAIN[k]}")
st.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(figures.ratio_heatmap(sm.ratios[name], labels, name)), key="cm_token_heatmap")


# ---------------------------------------------------------------------------------- side by side
@st.fragment
def side_by_side():
    before, after = METHODS[context.BEFORE], METHODS[context.AFTER]
    st.subheader(f"{before.label} vs {after.label}", anchor=False)
    layer = st.slider("Layer", 1, L, value=min(L, max(1, int(st.session_state.get("layer", 1)))), key="cm_layer")
    a = sm.maps[context.BEFORE][layer - 1]
    b = sm.maps[context.AFTER][layer - 1]
    fig = figures.heatmaps([a, b], labels, [f"{before.label}, layer {layer}", f"{after.label}, layer {layer}"],
                         [before.unit, after.unit], target=sm.target)
    st.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(fig), key="cm_maps")
    ch = go.Figure(go.Bar(x=list(range(1, L + 1)), y=sm.change, marker_color=["#d62728" if l == layer else "#1f77b4"
                                                                              for l in range(1, L + 1)],
                          text=[f"{v:.3f}" for v in sm.change], textposition="outside", cliponaxis=False,
                          hovertemplate="layer %{x}: 1 − ρ = %{y:.4f}<extra></extra>"))
    figures.layer_axis(ch, L)
    ch.update_yaxes(title_text="1 − Spearman ρ", rangemode="tozero")
    # a bar's value above it only where it fits at a readable size (30 bars at 1024 px shrank them to
    # ~5 px); the hover gives every value
    ch.update_layout(title="Contextualization change ATTNRESLN → ATBFFRESLN per layer", height=320,
                     margin=dict(l=10, r=10, t=50, b=10), plot_bgcolor="white", meta="change",
                     uniformtext=dict(minsize=10, mode="hide"))
    st.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(ch), key="cm_change")
    st.caption("1 − Spearman's ρ between the two flattened maps of a layer: 0 when the FFN, its residual "
               "and the second norm keep the ranking of the (receiver, source) pairs"
               + ("; a causal model's structurally zero upper triangle is left out." if sm.causal else "."))


side_by_side()

# ---------------------------------------------------------------------------------- the corpus
st.subheader("Over a corpus", anchor=False)
corpus = st.radio("Corpus", list(context.CORPORA), format_func=lambda k: context.CORPORA[k], key="cm_corpus",
                  horizontal=True, help="The synthetic test sets use the built-in models' vocabulary; "
                                        "ordinary English is what Kobayashi et al. measured (on Wikipedia).")
try:
    sentences = context.load_corpus(corpus)
except InputError as e:
    ui.show_error(e)
    st.stop()
n_max = len(sentences)
n_use = int(st.number_input(f"Sentences (of {n_max})", min_value=1, max_value=n_max, value=min(100, n_max),
                            key="cm_corpus_n"))
store = _corpus_store()
ckey = (ui.spec(), corpus, steps, n_use, bool(no_special), ui.cap())
if ckey not in store:
    if st.button(f"Compute over {n_use} sentences", key="cm_corpus_go", icon=":material/play_arrow:"):
        bar = st.progress(0.0, text="starting…")

        def _corpus(progress):
            return context.corpus_mixing(lm, sentences[:n_use], steps=steps, exclude_special=no_special,
                                         progress=lambda done, total: progress(f"sentence {done} of {total}",
                                                                               done / total),
                                         max_tokens=ui.cap())

        try:
            store.put(ckey, run(_corpus, report=lambda stage, f, left: bar.progress(f, text=f"{stage or ''}{left}")))
        except InputError as e:
            ui.show_error(e)
        bar.empty()
cm = store.get(ckey)
if cm is not None:
    st.plotly_chart(layer_lines(cm.per_layer, f"Mean ratio per layer: {cm.n_sentences} sentences, "
                                              f"{cm.n_tokens} tokens", "corpus_lines"), key="cm_corpus_lines")
    rows = [{"method": k, "mean ratio (%)": round(100 * cm.overall[k], 1),
             "BERT-base, Kobayashi et al. 2021 (%)": context.KOBAYASHI_BERT_BASE.get(k)} for k in ATTN + FFN]
    st.dataframe(rows, hide_index=True, key="cm_corpus_table")
    st.caption(f"Token-weighted means over every (sentence, layer, token); worst ATBFFRESLN completeness "
               f"error {cm.max_completeness:.1e}. Kobayashi et al.'s figures are for BERT-base on Wikipedia "
               "text; see docs/context_mixing.md.")
    if cm.skipped:
        st.caption(f"{len(cm.skipped)} sentence(s) skipped (too long for the token cap).")
