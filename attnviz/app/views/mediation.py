"""Mediation: is the attention the cause? Causal mediation on a minimal pair (Vig et al. 2020;
Finlayson et al. 2021): the total effect of changing sentence A into B, the natural indirect effect of
each head (its attention weights, or its output, taken from B), and causal tracing (a layer's state at
one token taken from B), beside the attention, rollout and flow maps of the same sentence; then knock
heads out and see how the prediction moves."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import streamlit as st

from attnviz import figures
from attnviz.errors import InputError
from attnviz.figures.mediation import effect_map, row_map
from attnviz.jobs import Job
from attnviz.mediation import heads_for_share, mediate, nominal_layer_passes
from attnviz.mediation.ablation import knock_out
from attnviz.text import token_labels
from attnviz.app import ui

lm = ui.page("Mediation", "Is the attention the cause? Change sentence A into sentence B (one word: the subject's "
             "number, a pronoun's antecedent) and watch the ratio of two answers, y = p(first word) / p(second "
             "word), at the blank. Then run A again with one piece of the model — one head's attention, one "
             "layer's state at one token — taken from B: how much of the change does that piece carry? "
             "(Vig et al. 2020; Finlayson et al. 2021; causal tracing, Meng et al. 2022.)")

# (A, B, contrast): B changes one word of A; y = p(c1)/p(c2) goes up from A to B when the model follows
PAIRS = {
    "Agreement: singular vs plural subject": ("the key to the cabinets [MASK] red .", "the keys to the cabinets [MASK] red .",
                                              ("are", "is")),
    "Agreement: singular vs plural attractor": ("the key to the cabinet [MASK] red .", "the key to the cabinets [MASK] red .",
                                                ("are", "is")),
    "Pronoun: woman vs man": ("the woman who met the boys lost [MASK] keys .", "the man who met the boys lost [MASK] keys .",
                              ("his", "her")),
}
CAUSAL_PAIRS = {
    "Agreement: singular vs plural subject": ("The key to the cabinets [MASK]", "The keys to the cabinets [MASK]",
                                              ("are", "is")),
    "Agreement: no attractor": ("The cat [MASK]", "The cats [MASK]", ("are", "is")),
    "Pronoun: woman vs man": ("The woman who talked to the boys lost [MASK]", "The man who talked to the boys lost [MASK]",
                              ("his", "her")),
}
table = CAUSAL_PAIRS if lm.task == "causal_lm" else PAIRS
ss = st.session_state
first = next(iter(table.values()))
for k, v in (("med_a", first[0]), ("med_b", first[1]), ("med_c1", first[2][0]), ("med_c2", first[2][1])):
    if not ss.get(k):
        ss[k] = v


def _apply_pair() -> None:
    choice = ss.get("med_preset")
    if choice in table:
        ss.med_a, ss.med_b, (ss.med_c1, ss.med_c2) = table[choice]
    ss.med_preset = ui.PRESET_NONE


st.selectbox("Examples", [ui.PRESET_NONE] + list(table), key="med_preset", on_change=_apply_pair)
c1, c2 = st.columns(2)
c1.text_input("Sentence A (the run that is patched)", key="med_a", persist_state="session", bind="query-params")
c2.text_input("Sentence B (where the patches come from)", key="med_b", persist_state="session", bind="query-params")
w1, w2, _ = st.columns([1, 1, 2])
w1.text_input("First word (y's numerator)", key="med_c1", persist_state="session", bind="query-params")
w2.text_input("Second word (y's denominator)", key="med_c2", persist_state="session", bind="query-params")

A, B, C = str(ss.med_a), str(ss.med_b), (str(ss.med_c1).strip(), str(ss.med_c2).strip())
if not A.strip() or not B.strip() or not all(C):
    st.info("Type two sentences and two answer words.")
    st.stop()
if ui.is_builtin(lm):
    st.caption(ui.BUILTIN_CAVEAT)

# the cheap part first: the total effect alone (texts of any length), then the head maps, then the rest
try:
    te = ui.with_progress(("mediation_te", ui.spec(), A, B, C), lambda progress: mediate(lm, A, B, C, kinds=()),
                          "Running both sentences")
except InputError as e:
    ui.show_error(e)
    st.stop()

pA, pB = te.p_base, te.p_cf


def _pp(p: float) -> str:
    return f"{p:.3f}" if p >= 1e-3 else f"{p:.1e}"


def _num(f: float) -> str:
    return f"{f:.3g}" if 1e-3 <= f < 1e4 else f"{f:.1e}"


def _factor(f: float) -> str:
    return f"× {f:.3g}" if 1e-3 <= f < 1e4 else f"× {f:.1e}"


def _share(nie: np.ndarray) -> np.ndarray:
    """Effects as the share of the total change of log y that the patch makes: log(1 + NIE) / log(1 + TE)
    (1: the whole change from A to B, 0: none; the logit-difference share of activation patching)."""
    return np.log1p(np.asarray(nie, dtype=np.float64)) / LOG_TE


LOG_TE = float(np.log1p(te.total_effect))
k1, k2, k3 = st.columns(3)
k1.metric(f"A: p({C[0]}) / p({C[1]})", _num(pA[0] / pA[1]), help=f"p({C[0]}) = {_pp(pA[0])}, p({C[1]}) = {_pp(pA[1])}")
k2.metric(f"B: p({C[0]}) / p({C[1]})", _num(pB[0] / pB[1]), help=f"p({C[0]}) = {_pp(pB[0])}, p({C[1]}) = {_pp(pB[1])}")
k3.metric("Total effect: y(B) / y(A)", _factor(1 + te.total_effect),
          help=f"Vig et al.'s total effect y(B)/y(A) − 1 = {100 * te.total_effect:+,.1f} %")
st.caption(f"A: p({C[0]}) {_pp(pA[0])} · p({C[1]}) {_pp(pA[1])}  —  B: p({C[0]}) {_pp(pB[0])} · p({C[1]}) {_pp(pB[1])}. "
           + ("" if te.total_effect > 0 else f"The ratio goes down from A to B: B favours '{C[1]}' over '{C[0]}' more "
              f"than A does. If B should favour '{C[0]}' (the examples put that word first), the model does not follow "
              f"the change here; if B should favour '{C[1]}', swap the two words so that the effects below measure "
              f"the change the model makes."))
for note in te.notes:
    st.caption(note)
if abs(LOG_TE) < 1e-3:
    st.info("A and B give the same ratio (y changes by less than 0.1 %): there is no change to trace.")
    st.stop()
if len(te.tokens_base) != len(te.tokens_cf):
    st.warning(f"A has {len(te.tokens_base)} tokens and B {len(te.tokens_cf)}: a piece of the model can only be "
               f"taken from B at the same position, so the sentences must have the same number of tokens "
               f"(change one word for a word of as many tokens).")
    st.stop()

L, H, n = te.n_layers, lm.n_heads, len(te.tokens_base)
trace_s = 0.05 * L * max(n, 4) / 64  # rough: one layer over 64 tokens ~ 50 ms on one CPU thread
# contrast words of several tokens: one pair of runs per word (mediation's multi-token rule)
trace_s *= 2 if isinstance(te.contrast_ids[0], tuple) else 1


def _job(kinds: tuple, label: str) -> Job:
    work = nominal_layer_passes(L, H, n, kinds)
    key = ("mediation", ui.spec(), A, B, C, kinds)

    def compute(progress):
        return mediate(lm, A, B, C, kinds=kinds,
                       progress=lambda kind, done, total, part: progress(kind, done / max(total, 1)))
    return Job(key=key, methods=(), estimate=trace_s * work / L, label=label, compute=compute)


fig_font = ui.fig_font()


def _side_by_side():
    """Two places for a pair of maps: columns, or (presentation mode) one under the other at the page's
    full width, so the numbers in the cells keep room at projector fonts."""
    return st.columns(2) if fig_font is None else (st.container(), st.container())


FIRST, SECOND = ("left", "right") if fig_font is None else ("top", "bottom")  # where _side_by_side puts them


labels_a = token_labels(te.tokens_base)
rows_l = [f"L{l + 1}" for l in range(L)]
heads_x = [f"h{h + 1}" for h in range(H)]

# ---------------------------------------------------------------- heads
st.subheader("Which heads carry the change?", anchor=False)
hm = ui.run_job(_job(("attention", "head_output"), "the head effects"), n)
if hm is not None:
    att, out = _share(hm.nie["attention"]), _share(hm.nie["head_output"])
    best = np.unravel_index(int(np.argmax(att)), att.shape)  # the largest share towards B's answer
    k80 = heads_for_share(att.ravel(), 1.0, 0.8)
    if att[best] >= 0.05:
        line = (f"Taking head {best[0] + 1}.{best[1] + 1}'s attention from B moves log p({C[0]})/p({C[1]}) "
                f"**{100 * att[best]:.0f} %** of the way from A's value to B's (p({C[0]})/p({C[1]}) "
                f"{_factor(1 + hm.nie['attention'][best])})")
    else:
        line = (f"No single head's attention carries much of the change: the largest share is "
                f"**{100 * max(att[best], 0):.1f} %** (head {best[0] + 1}.{best[1] + 1})")
    line += (f"; {k80} head{'s' if k80 != 1 else ''} together carry 80 % of the change (summing their shares)."
             if k80 else "; no set of heads' attention carries 80 % of the change (summing their shares).")
    st.markdown(line)
    g1, g2 = _side_by_side()
    with g1:
        fig = effect_map(att, heads_x, rows_l, "Head attention from B",
                         skipped=hm.skipped.get("attention"), font=fig_font)
        ev = st.plotly_chart(fig, theme=None, key="med_heads", on_select="rerun", selection_mode="points",
                             config={"displayModeBar": False})
    with g2:
        st.plotly_chart(effect_map(out, heads_x, rows_l, "Head output from B",
                                   skipped=hm.skipped.get("head_output"), font=fig_font),
                        theme=None, key="med_head_out", config={"displayModeBar": False})
    st.caption(f"Each cell: A run again with that head's attention weights ({FIRST}) or its whole output before "
               f"the output projection ({SECOND}) taken from B; the number is the share of the change of log "
               "p(first)/p(second) from A to B that this alone makes, in percent (100: all of it). Blue: towards B's answer, red: away. “·”: exactly 0 (nothing differs there, e.g. before "
               "the changed word in a causal model). Click a head to open it on Explore (sentence A).")
    pts = ev.selection.points if ev and ev.get("selection") else []
    if pts:
        ss.layer, ss.head = int(pts[0]["y"]) + 1, str(int(pts[0]["x"]) + 1)
        ss.text = A
        st.switch_page(Path(__file__).with_name("explore.py"))

# ---------------------------------------------------------------- layer x token
st.subheader("Where is the information? Layer × token", anchor=False)
rest = ui.run_job(_job(("residual", "attn_block", "ffn"), "causal tracing"), n)
if rest is not None:
    res = _share(rest.nie["residual"])
    rows_r = ["emb"] + rows_l
    where = [int(np.argmax(res[r])) for r in range(L + 1)]  # per layer, the token whose state carries most
    spans, start = [], 0
    for r in range(1, L + 2):
        if r == L + 1 or where[r] != where[start]:
            span = rows_r[start] if r - 1 == start else f"{rows_r[start]}–{rows_r[r - 1]}"
            spans.append(f"{span}: **{labels_a[where[start]]}** ({100 * res[start:r, where[start]].min():.0f}–"
                         f"{100 * res[start:r, where[start]].max():.0f} %)")
            start = r
    st.markdown("Where B's state carries the change (the token whose state, taken from B, moves the prediction "
                "most, and its share): " + "; ".join(spans) + ".")
    cmp = st.radio("Beside it", ["attention", "rollout", "flow"], horizontal=True, key="med_compare",
                   format_func=ui.method_label)
    m1, m2 = _side_by_side()
    m1.plotly_chart(effect_map(res, labels_a, rows_r, "Hidden state from B (causal tracing)",
                               skipped=rest.skipped.get("residual"), cells=n * (L + 1) <= 400, font=fig_font),
                    theme=None, key="med_map_0", config={"displayModeBar": False})
    cheap = ui.analysis([cmp], text_=A)
    if cheap is not None and cmp in cheap.maps:
        t = cheap.target
        m2.plotly_chart(row_map(cheap.maps[cmp].layer[:, t, :], labels_a, rows_l,
                                f"{ui.method_label(cmp)}: row of {labels_a[t]} (A)", units=ui.value_name(cmp),
                                font=fig_font), theme=None, key="med_map_1", config={"displayModeBar": False})
    st.caption(f"{FIRST.capitalize()}: the patching map, a cause (how much of the change of log p(first)/p(second) the state at "
               f"that layer and token makes when it is taken from B). {SECOND.capitalize()}: the target's row of the chosen map "
               "for A at every layer (where that map says the target's information comes from). Where they agree, "
               "the map points at a cause.")
    with st.expander("Attention-block and feed-forward outputs from B"):
        a1, a2 = _side_by_side()
        a1.plotly_chart(effect_map(_share(rest.nie["attn_block"]), labels_a, rows_l, "Attention-block output from B",
                                   skipped=rest.skipped.get("attn_block"), cells=n * L <= 400, font=fig_font),
                        theme=None, key="med_attn_block", config={"displayModeBar": False})
        a2.plotly_chart(effect_map(_share(rest.nie["ffn"]), labels_a, rows_l, "Feed-forward output from B",
                                   skipped=rest.skipped.get("ffn"), cells=n * L <= 400, font=fig_font),
                        theme=None, key="med_ffn", config={"displayModeBar": False})

# ---------------------------------------------------------------- knock-out
st.subheader("Knock heads out", anchor=False)
options = [(l, h) for l in range(L) for h in range(H)]
default = []
if hm is not None:
    order = np.argsort(-np.abs(hm.nie["attention"]).ravel())[:3]
    default = [options[int(i)] for i in order]
chosen = st.multiselect("Heads", options, default=default, key="med_knock",
                        format_func=lambda lh: f"{lh[0] + 1}.{lh[1] + 1}")
mode = st.radio("Replace their output by", ["zero", "mean"], horizontal=True, key="med_knock_mode",
                format_func=lambda m: "zero" if m == "zero" else "its mean over the sentence")
if chosen:
    ko = [knock_out(lm, s, chosen, mode, contrast=C) for s in (A, B)]
    q1, q2 = st.columns(2)
    for col, k, name in ((q1, ko[0], "A"), (q2, ko[1], "B")):
        col.markdown(f"**{name}:** p({C[0]}) {_pp(k.p_before[0])} → **{_pp(k.p_after[0])}**, "
                     f"p({C[1]}) {_pp(k.p_before[1])} → **{_pp(k.p_after[1])}** "
                     f"(ratio {_factor(1 + k.y_change)}); prediction {k.predicted_before} → {k.predicted_after}")
    st.caption("The chosen heads' part of the attention result is replaced at every position (by 0, or by its "
               "mean over the sentence), the rest of the model runs as usual.")
