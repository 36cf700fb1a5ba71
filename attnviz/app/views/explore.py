"""Explore: the prediction, then the chosen methods' maps side by side for one layer and head."""
from __future__ import annotations

import numpy as np
import streamlit as st

from attnviz import METHODS, export, figures

from attnviz.text import dominant_column, token_labels
from attnviz.app import ui

JSON_BYTES_PER_VALUE = 21.5  # export.to_json: ~21 bytes a number (measured on the built-in model)

present = ui.present()
if present:  # for a projector: the sentence, the prediction in one line and the first map on the first screen
    ui.present_style()
else:
    st.title("Explore")
    st.caption("Each map is read row by row: row *i* is the token that receives information, column *j* the "
               "token it comes from. Pick methods to compare them on the same layer.")


def methods_picker():
    st.multiselect("Methods", list(METHODS), key="methods", persist_state="session", format_func=ui.method_label,
                   help="Several at once: they are drawn side by side with the same token axes. "
                        "The About page explains each one.")


if not present:
    methods_picker()
methods_run = list(st.session_state.get("methods", []))

# the cheap maps (attention, rollout) come at once; the others are computed after the maps are drawn
# (ui.run_jobs at the end of this page: the estimate first, then a progress bar and a Cancel button)
a = ui.analysis(stream=True, mixing=True)
if a is None:
    st.stop()
lm_ = ui.model()
if present:
    ui.open_story(a)  # once: the layer and head where the target row looks at the subject


def model_input():
    if a.blank:
        st.markdown(f"**Model input:** {ui.plain(a.text)} **\\_\\_\\_** :gray[{ui.plain(a.after)}]",
                    help="A causal model reads left to right: it sees only the words before [MASK] and predicts "
                         "the next word there. The greyed words after the blank are not part of its input.")


def headline():
    """Presentation mode's first lines: the sentence, the prediction in one line, where the story is."""
    import html

    tgt = token_labels(a.tokens)[a.target]
    shown_text = (f"{html.escape(a.text)} <b>___</b> <span style='color:#999'>{html.escape(a.after or '')}</span>"
                  if a.blank else html.escape(ui.text()))
    line = ui.prediction_line(a)
    said = ""
    if (got := ui.story(a)) is not None:
        l, h, share, word = got
        said = (f"Layer {l + 1} · head {h + 1}: the {html.escape(readable(tgt))} row puts {100 * share:.0f} % of its "
                f"attention on <b>{html.escape(word)}</b>, the subject.")
    with st.container(key="headline"):
        st.html(f'<div style="font-size:1.75rem;line-height:1.25">{shown_text}</div>'
                + (f'<div style="font-size:1.75rem;line-height:1.3"><span style="color:#555">Prediction:</span> '
                   f'<b>{html.escape(line)}</b></div>' if line else "")
                + (f'<div style="font-size:1.2rem;color:#333">{said}</div>' if said else ""))


def readable(label: str) -> str:
    return label.split("·", 1)[-1]


def prediction_and_notes():
    left, right = st.columns([2, 3])
    with left:
        tgt_label = token_labels(a.tokens)[a.target]
        if a.prediction:
            what = "class" if a.output_kind == "sequence" else "token"
            st.subheader("Prediction for the blank" if a.blank else f"Prediction at {tgt_label}", anchor=False,
                         help=f"Read at {tgt_label}, the last word before the blank: a causal model predicts "
                              "the next word from the words before it." if a.blank else None)
            if not present and (line := ui.prediction_line(a)):
                st.markdown(f"### {ui.plain(line)}")
            ui.show_contrast(a)
            st.plotly_chart(figures.prediction_bars(a.prediction, extra=ui.extra_bars(a), font=ui.fig_font()),
                            theme=None, key="prediction", config={"displayModeBar": False})
            st.caption(f"Top-{len(a.prediction)} {what}s with their probabilities"
                       + (" (orange: the words the blank chooses between, outside the top list)." if ui.extra_bars(a)
                          else "."))
        else:
            st.subheader(f"Target: {tgt_label}", anchor=False)
            st.info("This model has no output head, so there is no prediction to show; the maps still show "
                    f"where the representation of {ui.plain(tgt_label)} comes from.", icon=":material/info:")
    with right:
        positions = list(range(len(a.tokens)))
        labels = token_labels(a.tokens)
        # short enough for the box at 1024 px; the rule in full is in the help
        auto = ("automatic (before [MASK])" if lm_ is not None and lm_.task == "causal_lm"
                else "automatic ([MASK])")

        def _fmt(p):
            return auto if p == ui.AUTO else labels[p]

        st.selectbox("Row to explain (target position)", [ui.AUTO] + positions, key="target", persist_state="session",
                     format_func=_fmt,
                     help="The position whose prediction and row are shown. Automatic: the [MASK] token if "
                          "there is one (for causal models the word before it), else [CLS] for encoders and the "
                          "last token for causal models.")
        if a.prediction:  # what to know before trusting the prediction, beside it
            if (words := ui.choices_caption(a)) is not None:
                st.caption(words)
            for note in ui.prediction_caveats(a, lm_):
                st.caption(note)
        for note in a.notes:
            st.caption(ui.plain(note))
        for m, why in a.disabled.items():
            st.warning(f"{ui.method_label(m)}: {ui.plain(why)}", icon=":material/block:")


if present:
    headline()
else:
    model_input()
    prediction_and_notes()
    # what the model reads, token by token
    ui.show_token_strip(a, lm_)

shown = [m for m in st.session_state.get("methods", []) if m in a.maps]
coming = [m for job in a.pending for m in job.methods]
if not shown and not coming:
    st.info("Pick at least one method above to see its map.")
    if present:
        methods_picker()
    st.stop()
# the estimate, progress and Cancel of the maps still to come (under the maps in presentation mode)
jobs_box = None if present else st.container(key="jobs")


# ---------------------------------------------------------------- maps (a fragment: sliders rerun only this)
@st.fragment
def knock_panel(l: int, h: int) -> None:
    """The "knock out this head" switch: the prediction with head (l, h) replaced by zero or its mean over
    the sentence, beside the plain one (attnviz.mediation.ablation)."""
    from attnviz.errors import InputError
    from attnviz.mediation.ablation import knock_out

    if not st.toggle(f"Knock out head {l + 1}.{h + 1}", key="knock_head",
                     help="Run the sentence again with this head's output replaced, and see how the prediction moves: "
                          "does the model need this head here?"):
        return
    mode = st.radio("Replace its output by", ["zero", "mean"], horizontal=True, key="knock_mode",
                    format_func=lambda m: "zero" if m == "zero" else "its mean over the sentence")
    pair = [w for w, _ in ui.contrast(a)[:2]]
    try:
        k = knock_out(lm_, ui.text(), [(l, h)], mode, contrast=pair if len(pair) == 2 else None, target=a.target)
    except InputError as e:
        ui.show_error(e)
        return
    before = ", ".join(f"{w.strip()} {p:.3f}" for w, p in k.top_before[:3])
    after = ", ".join(f"{w.strip()} {p:.3f}" for w, p in k.top_after[:3])
    st.markdown(f"Prediction **{k.predicted_before.strip()}** → **{k.predicted_after.strip()}** (top 3: {before} → {after})")
    if k.p_before is not None:
        st.markdown(f"p({pair[0]}) {k.p_before[0]:.3f} → **{k.p_after[0]:.3f}**, p({pair[1]}) {k.p_before[1]:.3f} → "
                    f"**{k.p_after[1]:.3f}**: their ratio changes ×{1 + k.y_change:.3g}")
    st.caption("Mediation (from Minimal pair) asks the same of every head at once, as a cause of the change "
               "between two sentences.")


def maps_panel():
    a = ui.analysis(ask=False, mixing=True)  # only what is cached: the sliders never compute
    if a is None:
        return
    shown = [m for m in st.session_state.get("methods", []) if m in a.maps]
    if not shown:
        return
    L = a.n_layers
    lm = ui.model()
    H = lm.n_heads if lm is not None else max(
        (a.maps[m].heads.shape[1] for m in shown if a.maps[m].heads is not None), default=0)
    ui.clamp_layer_head(L, H)
    has_special = any(a.special)
    if present:  # one compact row above the maps; the display options below them
        c1, c2, c3 = st.columns([3, 2, 2])
    else:  # two columns at most per row, so that no label is cut short in a 1024 px window with the sidebar
        c1, c2 = st.columns([3, 2])
    with c1:
        st.slider("Layer", 1, L, key="layer", persist_state="session", bind="query-params", help="Layers count from 1 (the first attention layer).")
    with c2:
        st.selectbox("Head (all = the layer map)", ui.head_options(H), key="head", persist_state="session",
                     bind="query-params",
                     help="Per-head maps exist for raw attention and the value-weighted norm; the "
                          "other methods always show their layer map.")

    def draw_as():
        st.radio("Draw as", ["heatmaps", "lines"], key="draw", persist_state="session", bind="query-params",
                 horizontal=True, help="Lines: the bertviz view of one layer and several heads, tokens on both sides, "
                                       "line weight = value; hover a token to see only its lines, click it to keep them.")

    def display_options():
        t1, t2 = st.columns(2)
        with t1:
            if has_special:  # causal models have no [CLS]/[SEP]
                st.toggle("Hide [CLS]/[SEP]", key="hide", persist_state="session", bind="query-params",
                          help="Drop special tokens' rows and columns; rows of attention, rollout and flow are "
                               "renormalised to sum to 1.")
            st.toggle("Merge word pieces", key="merge", persist_state="session", bind="query-params",
                      help="One row/column per word: columns are summed over a word's pieces, rows averaged.")
            st.toggle("Numbers in cells", key="cells", persist_state="session", bind="query-params",
                      help="Write each value (2 decimals) in its cell; hovering a cell always shows it. "
                           "Off by default: the maps redraw about twice as fast without them.")
        t2.toggle("Same colour scale", key="same_scale", persist_state="session", bind="query-params",
                  help="One colour scale for raw attention, rollout and flow (their rows are shares of 1, so "
                       "equal colours mean equal shares). Norm-based maps keep their own scale.")
        t2.toggle("Log colours", key="log_colour", persist_state="session", bind="query-params",
                  help="Colours on a log scale (hover still shows the value): for maps where one column, e.g. "
                       "the first token of SmolLM2 (an attention sink), is thousands of times larger than the rest.")
        d3, d4 = st.columns(2)
        d3.selectbox("Maps per row", ["auto", "1", "2", "3", "4", "5", "6"], key="per_row", persist_state="session",
                     bind="query-params", help="auto: as many as stay readable in a 1024 px window (a projector).")
        if not present:
            with d4:
                draw_as()

    if present:
        with c3:
            draw_as()
    else:
        display_options()
    l, h = st.session_state.layer - 1, ui.head_index()
    view = ui.view_for(a)
    mats, titles, longs, units = [], [], [], []
    for m in shown:
        mp = a.maps[m]
        if h and mp.heads is not None:
            M, where = mp.heads[l, h - 1], f"head {h}"
        else:
            M = mp.layer[l]
            where = "layer map" if mp.heads is not None or not h else "layer map (no per-head form)"
        mats.append(view.apply(M, METHODS[m].rows_sum_to_one))
        titles.append(f"<b>{ui.method_label(m)}</b><br>{where.replace(' (no per-head form)', '*')}")
        longs.append(f"{ui.method_label(m)} · layer {l + 1} · {where}")
        units.append(ui.value_name(m))
    same = bool(st.session_state.get("same_scale"))
    shares = [i for i, m in enumerate(shown) if ui.is_share(m)]
    zmax = [None] * len(shown)
    if same and shares:
        top = max(float(mats[i].max()) for i in shares)
        for i in shares:
            zmax[i] = top
    per_row = st.session_state.get("per_row", "auto")
    fig_title = f"Layer {l + 1} · " + (f"head {h}" if h else "all heads (layer maps)")
    fig = figures.heatmaps(mats, view.labels, titles, units, target=view.target, title=fig_title, hover_titles=longs,
                         cols=None if per_row in (None, "auto") else int(per_row), zmax=zmax,
                         log=bool(st.session_state.get("log_colour")),
                         cell_text=bool(st.session_state.get("cells")) and len(view.labels) <= figures.MAX_CELL_TEXT,
                         font=ui.fig_font(), width=figures.PRESENT_WIDTH if present else None,
                         max_cols=3 if present else None)
    n_lab = len(view.labels)
    # x labels read top to bottom need a tick's spacing each (14 px, more in presentation mode): up to
    # 40 tokens the grid makes room; beyond that (SmolLM2 takes 8192 tokens) every k-th column is labelled
    tick = figures.sizes(ui.fig_font()).tick_px
    room = figures.PRESENT_WIDTH if present else figures.MIN_WIDTH
    every = 1 if n_lab * tick <= room else int(-(-n_lab * tick // (room - 120)))
    if every > 1:  # a long text (SmolLM2 takes 8192 tokens): label every k-th column, the target's too
        keep = figures.row_ticks(n_lab, every, view.target)
        fig.update_xaxes(tickmode="array", tickvals=[view.labels[i] for i in keep],
                         ticktext=[view.labels[i] for i in keep])
    if st.session_state.get("draw") == "lines":
        st.markdown(f"**{ui.plain(fig_title)}** — right: the receiving token (row i); left: the tokens it draws "
                    "from (column j). Line weight = the value, relative to the map's largest. Head chips switch heads "
                    "on and off (each its own colour); the layer picker changes layer; click a token to keep its lines.")
        if len(view.labels) > ui.STRIP_OPEN_MAX:  # 160 tokens: 3,600 px of crossing lines a map
            st.caption(f"At {len(view.labels)} tokens each line view is {46 + 22 * len(view.labels) + 70:,} px "
                       "tall and its lines cross densely: hover a token to see only its own lines, or draw "
                       "heatmaps to see a whole map on one screen.")
        from streamlit.components.v1 import html as component_html
        font = ui.fig_font() or 15
        first_heads = next((m for m in shown if a.maps[m].heads is not None), None)
        for c, (m, M) in enumerate(zip(shown, mats)):  # one above the other, each the page's width
            mp = a.maps[m]
            kw, n_layers = {}, 1
            if mp.heads is not None:  # every head (and the layer map) of every layer when they fit, else this layer's
                rs1 = METHODS[m].rows_sum_to_one
                ls = range(L) if L * (mp.heads.shape[1] + 1) * len(view.labels) ** 2 <= figures.lineview.MAX_EMBED else [l]
                stack = np.array([[view.apply(X, rs1) for X in list(mp.heads[k]) + [mp.layer[k]]] for k in ls])
                n_layers = len(stack)
                kw = dict(heads=stack, layer=l, selected=[h - 1] if h else [mp.heads.shape[1]],
                          head_names=[f"head {k + 1}" for k in range(mp.heads.shape[1])] + ["layer map"],
                          model_view=m == first_heads)
                if m == first_heads and m == "attention":
                    kw["qk"] = ui.query_keys(a, l, view)
            with st.container(key=f"lines_{m}"):
                component_html(figures.line_view_html(M, view.labels, title=longs[c], value_name=units[c],
                                                      target=view.target, font=font, **kw),
                               height=figures.line_view_height(len(view.labels), n_layers, bool(kw.get("model_view")),
                                                               kw.get("qk") is not None, font),
                               scrolling=True)
    else:
        # no camera in the chart's toolbar: its image would carry no sentence, model or prediction; the
        # Download section's PNG / SVG / HTML add that caption
        st.plotly_chart(fig, theme=None, key="maps", config={"modeBarButtonsToRemove": ["toImage"], "displaylogo": False})
    if present:
        with st.expander("Methods and display options", icon=":material/tune:", key="present_options"):
            methods_picker()
            display_options()
        if list(st.session_state.get("methods", [])) != methods_run:  # new maps to compute: the whole page
            st.rerun(scope="app")
    if not st.session_state.get("log_colour"):
        sinks = [(m, *dominant_column(M)) for m, M in zip(shown, mats)]
        sinks = [(m, j, share) for m, j, share in sinks if j is not None and share >= ui.SINK_SHARE]
        if sinks:
            said = "; ".join(f"{ui.method_label(m)}: {100 * share:.0f} % in column {view.labels[j]}"
                             for m, j, share in sinks)
            why = "On causal models the first token often takes attention the model does not need: an attention sink."
            if ui._loaded_task() == "causal_lm" and any(j == 0 and METHODS[m].graph is not None for m, j, _ in sinks):
                why += " " + ui.FIRST_TOKEN_PILEUP
            st.caption(f"**Most of the map's total is in one column** ({ui.plain(said)}), so on this colour scale "
                       f"the other cells look white. Turn on **Log colours** to see them. ({why})")
    if every > 1:
        rows_every = figures.row_label_every(n_lab)
        rows_said = ("every row is labelled" if rows_every <= 1 else
                     f"every {ui.ordinal(rows_every)} row is labelled")
        st.caption(f"{n_lab} tokens: every {ui.ordinal(every)} column is labelled, and {rows_said} (the target's "
                   "always); hover a cell for its row and column.")
    if any("*" in t for t in titles):
        st.caption("\\* layer map: this method has no per-head form, so the picked head does not apply to it.")
    for m in shown:
        st.caption(ui.plain(ui.explain(m)))
    for m in shown:
        comp = a.maps[m].completeness
        if comp is not None and len(comp.errors) > l:
            st.caption(f"{ui.method_label(m)}: the source shares sum to the layer's real vector up to a relative "
                       f"completeness error of {float(comp.errors[l]):.1e} at layer {l + 1} (integrated gradients).")
    if view.target is not None:
        tl = view.labels[view.target]
        rows = [M[view.target] for M in mats]
        bars = figures.row_bars(rows, view.labels, [f"{ui.method_label(m)}" for m in shown], units,
                                target=view.target, font=ui.fig_font())
        st.subheader(f"What {tl} draws from at layer {l + 1}", anchor=False)
        st.caption("Row of the target position in each map above, one bar per source token.")
        st.plotly_chart(bars, theme=None, key="rowbars", config={"displayModeBar": False})
    else:
        bars = None
        st.caption("The target position is hidden, so there is no row to show.")

    with st.expander("Download", icon=":material/download:", key="download"):
        stem = "attnviz_layer%d%s" % (l + 1, "" if not h else f"_head{h}")
        # what an exported figure is of, under it: it must make sense away from the app
        line = ui.prediction_line(a)
        about = [f"Sentence: {ui.text()}",
                 f"Model: {ui.spec()} · target (row): {token_labels(a.tokens)[a.target]}"
                 + (f" · prediction: {line}" if line else "") + f" · {fig_title}",
                 "Rows: the receiving token i; columns: the source token j; the target's row label is red."]
        if any("*" in t for t in titles):
            about.append("* layer map: this method has no per-head form, so the picked head does not apply to it.")
        d1, d2, d3, d4 = st.columns(4)
        d1.download_button("Maps as PNG", lambda: export.figure_bytes(fig, "png", caption=about), file_name=stem + ".png",
                           mime="image/png", on_click="ignore", key="dl_png")
        d2.download_button("Maps as SVG", lambda: export.figure_bytes(fig, "svg", caption=about), file_name=stem + ".svg",
                           mime="image/svg+xml", on_click="ignore", key="dl_svg")
        d3.download_button("Analysis as JSON", lambda: export.to_json(a), file_name="attnviz_analysis.json",
                           mime="application/json", on_click="ignore", key="dl_json")
        d4.download_button("Analysis as NPZ", lambda: export.to_npz(a), file_name="attnviz_analysis.npz",
                           mime="application/octet-stream", on_click="ignore", key="dl_npz")
        if bars is not None:
            st.download_button("Row bars as PNG", lambda: export.figure_bytes(bars, "png", caption=about),
                               file_name=stem + "_row.png", mime="image/png", on_click="ignore", key="dl_row")
        values = sum(m.layer.size + (m.heads.size if m.heads is not None else 0) for m in a.maps.values())
        values += sum(np.asarray(v).size for v in (a.mixing or {}).values())
        size = ""
        if values * JSON_BYTES_PER_VALUE > 20e6:  # say it before a click builds a file of hundreds of MB
            size = (f" This analysis has {values / 1e6:.0f} million numbers: about {values * JSON_BYTES_PER_VALUE / 1e6:,.0f} MB "
                    f"as JSON, up to {values * 8 / 1e6:,.0f} MB as NPZ (compressed), built when you click.")
        st.caption("JSON and NPZ hold the tokens, every computed map (all layers and heads), the prediction, "
                   "the model spec and the attnviz version." + size)
    if h and a.prediction:
        knock_panel(l, h - 1)


if shown:
    maps_panel()
if present:
    jobs_box = st.container(key="jobs")
if present:  # below the maps: the full prediction, the row picker, the notes, the tokens
    model_input()
    prediction_and_notes()
    ui.show_token_strip(a, lm_)
if a.pending and ui.run_jobs(a, jobs_box):
    st.rerun()  # the maps just computed are cached now: draw them all
