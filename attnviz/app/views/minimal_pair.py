"""Minimal pair: two sentences that differ in one word, the same maps for each, one above the other,
and their difference (B − A)."""
from __future__ import annotations

import numpy as np
import streamlit as st

from attnviz import METHODS, figures

from attnviz.text import token_labels
from attnviz import pair as P
from attnviz.app import ui

lm = ui.page("Minimal pair", "Two sentences that differ in one word — a singular or plural attractor, “his” or “her” — analysed "
             "with the same maps at the same layer and head. Sentence A's maps, then B's on the same colour "
             "scale, then the difference B − A (blue: more in B, red: more in A).")
table = P.CAUSAL_PAIRS if lm.task == "causal_lm" else P.PAIRS
ss = st.session_state
if not ss.get("methods"):  # the picker shows what is drawn (an empty box with maps drawn misled)
    ss.methods = list(ui.DEFAULT_METHODS)
first = next(iter(table.values()))
if not ss.get("pair_a"):
    ss.pair_a = first[0]
if not ss.get("pair_b"):
    ss.pair_b = first[1]


def _apply_pair() -> None:
    choice = ss.get("pair_preset")
    if choice in table:
        ss.pair_a, ss.pair_b = table[choice]
    ss.pair_preset = ui.PRESET_NONE


present = ui.present()
with st.expander("Sentences and methods", expanded=False) if present else st.container():
    st.selectbox("Examples", [ui.PRESET_NONE] + list(table), key="pair_preset", on_change=_apply_pair)
    c1, c2 = st.columns(2)
    c1.text_input("Sentence A", key="pair_a", persist_state="session", bind="query-params")
    c2.text_input("Sentence B", key="pair_b", persist_state="session", bind="query-params")
    st.multiselect("Methods", list(METHODS), key="methods", persist_state="session", format_func=ui.method_label)

methods = [m for m in ss.get("methods", []) if m in METHODS] or list(ui.DEFAULT_METHODS)
a = ui.analysis(methods, text_=ss.pair_a)
b = ui.analysis(methods, text_=ss.pair_b)
if a is None or b is None:
    st.stop()

# ---------------------------------------------------------------- predictions and what each model reads
if present:  # each sentence and its prediction in one line, then the maps
    import html as _html

    st.html("".join(f'<div style="font-size:1.45rem;line-height:1.3"><b>{name}:</b> {_html.escape(typed)} '
                    f'<span style="color:#555">→</span> <b>{_html.escape(ui.prediction_line(an, typed) or "")}</b></div>'
                    for name, an, typed in (("A", a, ss.pair_a), ("B", b, ss.pair_b))))
pa, pb = st.columns(2) if not present else (None, None)
for col, an, name, typed in (((pa, a, "A", ss.pair_a), (pb, b, "B", ss.pair_b)) if not present else ()):
    with col:
        st.markdown(f"**{name}:** {ui.plain(typed)}")
        if an.prediction:
            st.plotly_chart(figures.prediction_bars(an.prediction, font=ui.fig_font()), theme=None, key=f"pair_pred_{name.lower()}",
                            config={"displayModeBar": False})
            if (words := ui.choices_caption(an)) is not None:
                st.caption(words)
            for note in ui.prediction_caveats(an, None):  # the unsure note per sentence
                st.caption(note)
        ui.show_token_strip(an, lm, key=f"pair_strip_{name.lower()}", typed=typed)
if ui.is_builtin(lm) and not present:
    st.caption(ui.BUILTIN_CAVEAT)  # the built-in model's training, once for both

shown = [m for m in methods if m in a.maps and m in b.maps]
if not shown:
    st.info("Pick at least one method above.")
    st.stop()


@st.fragment
def pair_maps():
    a = ui.analysis(shown, ask=False, text_=ss.pair_a)
    b = ui.analysis(shown, ask=False, text_=ss.pair_b)
    if a is None or b is None:
        return
    L, H = a.n_layers, lm.n_heads
    ui.clamp_layer_head(L, H)
    k1, k2, k3 = st.columns([3, 2, 2])
    k1.slider("Layer", 1, L, key="layer", persist_state="session", bind="query-params")
    k2.selectbox("Head (all = the layer map)", ui.head_options(H), key="head", persist_state="session",
                 bind="query-params")
    k3.selectbox("Maps per row", ["auto", "1", "2", "3", "4", "5", "6"], key="per_row", persist_state="session",
                 bind="query-params")
    l, h = ss.layer - 1, ui.head_index()
    per_row = ss.get("per_row", "auto")
    cols = None if per_row in (None, "auto") else int(per_row)

    def pick(an, m):
        mp = an.maps[m]
        if h and mp.heads is not None:
            return mp.heads[l, h - 1], f"head {h}"
        return mp.layer[l], "layer map"

    mats_a, mats_b, titles, longs, units = [], [], [], [], []
    for m in shown:
        Ma, where = pick(a, m)
        Mb, _ = pick(b, m)
        mats_a.append(np.asarray(Ma, dtype=np.float64))
        mats_b.append(np.asarray(Mb, dtype=np.float64))
        titles.append(f"<b>{ui.method_label(m)}</b><br>{where}")
        longs.append(f"{ui.method_label(m)} · layer {l + 1} · {where}")
        units.append(ui.value_name(m))
    zmax = [max(float(x.max()), float(y.max())) for x, y in zip(mats_a, mats_b)]  # one scale per method for A and B
    where = f"layer {l + 1} · " + (f"head {h}" if h else "all heads")
    diffs = [P.difference(x, y, a.tokens, b.tokens) for x, y in zip(mats_a, mats_b)]
    if ui.present() and diffs[0].diff is not None:  # A | B | B − A side by side, one row per method
        labels = P.pair_labels(a.tokens, b.tokens)
        for c, m in enumerate(shown):
            fig = figures.heatmaps([mats_a[c], mats_b[c], diffs[c].diff], labels,
                                   ["<b>A</b>", "<b>B</b>", "<b>B − A</b>"],
                                   [units[c], units[c], f"B − A: {units[c]}"],
                                   target=a.target if a.target == b.target else None,
                                   title=f"{ui.method_label(m)}, {where}" + ("" if h and a.maps[m].heads is not None
                                                                           else " (layer map)" if h else ""),
                                   hover_titles=[f"A: {longs[c]}", f"B: {longs[c]}", f"B − A: {longs[c]}"],
                                   cols=3 if len(labels) <= 12 else None, zmax=[zmax[c], zmax[c], None],
                                   diverging=[False, False, True], cell_text=False, font=ui.fig_font(),
                                   width=figures.PRESENT_WIDTH, max_cols=3)
            st.plotly_chart(fig, theme=None, key=f"pair_present_{m}")
        changed = ", ".join(labels[i] for i in diffs[0].changed) or "none"
        st.caption(f"Tokens that differ: {ui.plain(changed)}. A and B share one colour scale per method; B − A is "
                   "blue where B's value is larger, red where A's is.")
        return
    for name, an, mats in (("A", a, mats_a), ("B", b, mats_b)):
        fig = figures.heatmaps(mats, token_labels(an.tokens), titles, units, target=an.target,
                             title=f"{name}: {where}", hover_titles=[f"{name}: {t}" for t in longs], cols=cols,
                             zmax=zmax, cell_text=False)
        st.plotly_chart(fig, theme=None, key=f"pair_{name.lower()}_maps")
    if diffs[0].diff is None:
        st.info(ui.plain(diffs[0].reason) + ".", icon=":material/info:")
        return
    labels = P.pair_labels(a.tokens, b.tokens)
    fig = figures.heatmaps([d.diff for d in diffs], labels, titles, [f"B − A: {u}" for u in units],
                         target=a.target if a.target == b.target else None, title=f"Difference B − A: {where}",
                         hover_titles=[f"B − A: {t}" for t in longs], cols=cols, diverging=[True] * len(diffs),
                         cell_text=False)
    st.plotly_chart(fig, theme=None, key="pair_diff")
    changed = ", ".join(labels[i] for i in diffs[0].changed) or "none"
    st.caption(f"Tokens that differ: {ui.plain(changed)}. A cell is blue where B's value is larger, red where A's "
               "is. The colour bars are symmetric around 0; hover a cell for the exact difference.")


pair_maps()


def _to_mediation() -> None:
    ss.med_a, ss.med_b = ss.pair_a, ss.pair_b
    ss._goto_mediation = True


st.button("Is the attention the cause? Open this pair on Mediation", on_click=_to_mediation, key="pair_mediation",
          icon=":material/call_split:")
if ss.pop("_goto_mediation", False):
    from pathlib import Path

    st.switch_page(Path(__file__).with_name("mediation.py"))
