"""Adversarial attention: how far can the attention move before the prediction does?

Builds, for the current sentence and an intervention site, the frontier of (JSD between the new and
the original attention, TVD between the new and the original output) with the baselines of Jain &
Wallace (2019) and Wiegreffe & Pinter (2019); the page's two sliders (a fragment: moving one redraws the chart's highlighted point, the text and the bars
below it together) pick the point shown."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from attnviz import adversarial as A
from attnviz import figures
from attnviz.text import clean_token, readable_token, token_labels
from attnviz.adversarial.pipeline import run_pipeline
from attnviz.errors import AttnvizError, InputError
from attnviz.jobs import Cancelled
from attnviz.trace import encode
from attnviz.app import ui

KINDS = {"head": "one head", "layer": "all heads of a layer", "all": "all heads of all layers"}
EPS_CHOICES = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]  # log-spaced (1, 2, 5 a decade): 0.01 mid-scale
COL = dict(points="#c7c7c7", frontier="#1f77b4", perm="#ff7f0e", uniform="#8c564b", seed="#17becf",
           jw="#9467bd", at_jsd="#d62728", within="#2ca02c")

lm = ui.page("Adversarial attention",
             "Give the target word other attention and let the model run on: how different can that attention be "
             "while the prediction stays (almost) the same? If very different attention gives the same prediction, "
             "the attention map alone does not explain the prediction (Jain & Wallace 2019). The chart draws, for "
             "each amount of attention change, the smallest output change found (the frontier; Wiegreffe & Pinter "
             "2019 asked for this whole curve). Two sliders pick a point on it; the text and bars below show that "
             "point. The words are defined under “What the words on this page mean”.")
try:
    A.check_model(lm)
    enc = encode(lm, ui.text(), ui.cap(), ui.target())
except (AttnvizError, InputError) as e:
    ui.show_error(e)
    st.stop()

L, H = lm.n_layers, lm.n_heads
ss = st.session_state
ss.setdefault("adv_kind", "head")
ss.setdefault("adv_layer", L)
ss.setdefault("adv_head", 1)
if ss.adv_kind not in KINDS:
    ss.adv_kind = "head"
ss.adv_layer = min(max(1, int(ss.adv_layer)), L)
ss.adv_head = min(max(1, int(ss.adv_head)), H)
with st.expander("What the words on this page mean", icon=":material/help:"):
    st.markdown(
        "- **Attention change (JSD)**: the Jensen–Shannon divergence between the model's own attention row α and "
        "the replacement α′ — 0 when they are equal, at most ln 2 ≈ 0.69 when they share nothing.\n"
        "- **Output change (TVD)**: the total variation distance between the output distributions before and "
        "after — half the sum of the absolute differences of the probabilities; 0.1 means 10 % of the "
        "probability moved to other words.\n"
        "- **ε (tolerance)**: how much output change still counts as “the same prediction”; Jain & Wallace used "
        "0.01.\n"
        "- **Frontier**: for each attention change, the smallest output change any search found. Points below and "
        "right of it would be attention that changes a lot while the output stays put.\n"
        "- **How the search works** (Search settings): it minimises TVD − λ·JSD by gradient steps (Adam) from "
        "the model's own attention and from random starts (**restarts**), for several weights **λ** at once; every "
        "point it passes is recorded, and the frontier keeps the best of them.")

c1, c2, c3 = st.columns([2, 1, 1])
kind = c1.radio("Where the attention is replaced (the target row)", list(KINDS), format_func=KINDS.get,
                key="adv_kind", horizontal=True, persist_state="session", bind="query-params")
layer = c2.selectbox("Layer", list(range(1, L + 1)), key="adv_layer", disabled=kind == "all",
                     persist_state="session", bind="query-params")
head = c3.selectbox("Head", list(range(1, H + 1)), key="adv_head", disabled=kind != "head",
                    persist_state="session", bind="query-params")
site = A.Site(kind, 0 if kind == "all" else layer - 1, head - 1 if kind == "head" else 0)
seed_specs = A.seed_specs(lm.spec)
with st.expander("Search settings"):
    s1, s2, s3, s4 = st.columns(4)
    steps = int(s1.number_input("Adam steps", 10, 2000, 200, step=50, key="adv_steps", persist_state="session",
                                bind="query-params"))
    restarts = int(s2.number_input("Restarts per λ", 1, 8, 3, key="adv_restarts", persist_state="session",
                                   bind="query-params",
                                   help="Restart 1 starts at the model's own attention, the others at random. "
                                        "With 3 or more, after a quarter of the steps each λ keeps restart 1 "
                                        "and its best random restart; they run to the end."))
    points = int(s3.number_input("λ values", 2, 48, 16, key="adv_points", persist_state="session",
                                 bind="query-params",
                                 help="0 and a geometric grid from 0.001 to 31.6; all in one batch."))
    jw_steps = int(s4.number_input("Jain & Wallace steps", 0, 2000, A.JW_STEPS, step=50, key="adv_jw_steps",
                                   persist_state="session", bind="query-params",
                                   help="Their search: 5 adversaries, Adam lr 0.01, hinge at TVD ε = 0.01, "
                                        "accepted at TVD ≤ 0.05. 0 leaves it out."))
    use_seeds = st.checkbox(f"Compare with the models trained from other seeds ({', '.join(seed_specs) or 'none found'})",
                            value=bool(seed_specs), disabled=not seed_specs, key="adv_seeds")

lambdas = tuple([0.0] + [float(v) for v in np.logspace(-3, 1.5, points - 1)])
key = (lm.spec, enc.text, enc.target, ui.cap(), site, lambdas, steps, restarts, jw_steps,
       tuple(seed_specs) if use_seeds else ())


b1, b2 = st.columns([2, 3])  # wide enough for the whole button label at 1024 px
# results are shared by every session and tab of the server (and kept on disk: ui.RESULTS), keyed by
# everything they depend on, and so are the estimates; a second tab asking while a search runs waits for it
results = ests = ui.RESULTS
key, est_key = ("adversarial",) + key, ("adversarial estimate",) + key
CANCELLED = ("Cancelled: the search was stopped and nothing of it was kept. Fewer λ values, restarts or steps "
             "(Search settings), a shorter text or a head in a higher layer make it faster.")


def _stop_search() -> None:
    ss["adv_cancelled"] = True


if ss.pop("adv_cancelled", False):  # the Cancel click reran the page: the search stopped where it was
    st.info(CANCELLED, icon=":material/cancel:")
if b1.button("Compute the frontier", key="adv_go", icon=":material/play_arrow:", type="primary"):
    stop = st.empty()
    stop.button("Cancel", key="adv_cancel", icon=":material/cancel:", on_click=_stop_search,
                help="Stop the search (it stops at its next progress report); nothing of it is kept.")
    bar = st.progress(0.0, text="Searching for adversarial attention…")

    def report(stage, f, left):  # the time left from the estimate shown, then from the share done
        bar.progress(f, text=f"Searching for adversarial attention: {stage}, {100 * f:.0f} %{left}")

    try:
        def waiting(seconds):
            bar.progress(0.0, text=f"The same search runs for another session or tab — waiting for it ({seconds:.0f} s)")

        results.run(key, lambda progress: run_pipeline(
            lm, ui.text(), site, lambdas=lambdas, steps=steps, restarts=restarts, jw_steps=jw_steps,
            seeds=tuple(seed_specs) if use_seeds else (), target=enc.target, max_tokens=ui.cap(),
            progress=progress, load=ui._load), waiting=waiting,
            report=report, cancelled=lambda: ss.get("adv_cancelled", False), estimate=ests.get(est_key),
            pause=ui.PROGRESS_PAUSE)
    except Cancelled:
        ss.pop("adv_cancelled", None)
        st.info(CANCELLED, icon=":material/cancel:")
    except (AttnvizError, InputError) as e:
        ui.show_error(e)
    finally:
        bar.empty()
        stop.empty()

res = results.get(key)
if res is None:
    # the time it will take, from a few timed steps of this very search (cached per setting): at a
    # head in layer 1 of SmolLM2 it is minutes, at the top layer of the built-in model seconds
    if est_key not in ests:
        try:
            with st.spinner("Timing a step of the search…"):
                ests.put(est_key, A.estimate_seconds(lm, ui.text(), site, lambdas=list(lambdas), steps=steps,
                                                 restarts=restarts, target=enc.target, jw_steps=jw_steps,
                                                 max_tokens=ui.cap()))
        except (AttnvizError, InputError) as e:
            ui.show_error(e)
            st.stop()
    b2.caption(f"The search tries {len(lambdas) * restarts} other attention rows for {site.label()} at the target "
               f"'{ui.plain(readable_token(enc.tokens[enc.target]))}' (position {enc.target}), improving each "
               f"{steps} times. **Press the button: about {ui.secs(ests.get(est_key))}** (timed from a few steps on "
               "this machine; Search settings make it shorter or longer).")
    st.stop()

fr, jw = res.frontier, res.jw
for note in fr.notes:
    st.info(ui.plain(note), icon=":material/info:")


def _follow(which):
    ss.adv_follow = which


def baselines_dwarf(fr, jw=None, ratio: float = 5.0) -> bool:
    """True when the baselines' output changes (permutations, uniform α, other seeds, Jain & Wallace)
    reach more than `ratio` times the frontier's largest: on a linear axis the frontier is then a flat
    line at the bottom, so the TVD axis starts on a log scale."""
    _, ey = fr.envelope_xy()
    front = float(np.max(ey)) if len(ey) else 0.0
    base = [float(np.max(fr.perm_tvd)) if len(fr.perm_tvd) else 0.0, float(fr.uniform[1])]
    base += [float(x.tvd) for x in fr.seeds]
    if jw is not None and len(jw.tvd):
        base.append(float(np.max(jw.tvd)))
    return max(base) > ratio * max(front, 1e-12)


def frontier_figure(fr, jw, i_jsd, i_eps, x_target, eps, log_y=False, follow="eps"):
    """Frontier, all points, baselines and the points of the page's two sliders -> figure (meta 'frontier').
    A view only: the page's sliders (above it) set the attention-change target and ε; the point the
    page shows below (follow: "jsd" or "eps", the slider moved last) is drawn filled, the other open."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=fr.jsd, y=fr.tvd, mode="markers", name="points tried",
                               marker=dict(color=COL["points"], size=4),
                               hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>point tried</extra>"))
    ex, ey = fr.envelope_xy()
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines+markers", name="frontier (smallest output change at each attention change)",
                             line=dict(color=COL["frontier"], shape="vh", width=2), marker=dict(size=5),
                             hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>frontier</extra>"))
    fig.add_trace(go.Scatter(x=fr.perm_jsd, y=fr.perm_tvd, mode="markers", name=f"{len(fr.perm_jsd)} shuffles of α",
                             marker=dict(color=COL["perm"], symbol="x", size=6),
                             hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>permutation</extra>"))
    fig.add_trace(go.Scatter(x=[fr.uniform[0]], y=[fr.uniform[1]], mode="markers", name="uniform α",
                             marker=dict(color=COL["uniform"], symbol="diamond", size=11),
                             hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>uniform</extra>"))
    if fr.seeds:
        fig.add_trace(go.Scatter(x=[s.jsd for s in fr.seeds], y=[s.tvd for s in fr.seeds], mode="markers+text",
                                 name="models from other seeds", text=[s.spec.split(":")[-1].split("-")[-1] for s in fr.seeds],
                                 # seeds land close together: their labels alternate above and below
                                 textposition=[("top left", "bottom left")[k % 2] for k in range(len(fr.seeds))],
                                 marker=dict(color=COL["seed"], symbol="triangle-up", size=12),
                                 customdata=[s.spec for s in fr.seeds],
                                 hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>%{customdata}</extra>"))
    if jw is not None:
        fig.add_trace(go.Scatter(x=jw.jsd, y=jw.tvd, mode="markers", name="Jain & Wallace adversaries",
                                 marker=dict(color=COL["jw"], symbol="star", size=11,
                                             line=dict(width=1, color="black")),
                                 hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>Jain & Wallace</extra>"))
    for which, i, name, sym, col in (("jsd", i_jsd, f"at the attention-change target (JSD ≥ {x_target:.2f})", "circle", COL["at_jsd"]),
                                     ("eps", i_eps, f"within output change ε = {eps:g}", "square", COL["within"])):
        shown = which == follow
        fig.add_trace(go.Scatter(x=[fr.jsd[i]], y=[fr.tvd[i]], mode="markers",
                                 name=name + (" (shown below)" if shown else ""),
                                 marker=dict(color=col, size=17 if shown else 14, symbol=sym if shown else sym + "-open",
                                             line=dict(width=2 if shown else 3, color="black" if shown else col)),
                                 hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>" + name + "</extra>"))
    fig.add_vline(x=x_target, line=dict(color=COL["at_jsd"], dash="dot", width=1))
    fig.add_hline(y=eps, line=dict(color=COL["within"], dash="dot", width=1))
    fig.update_xaxes(title_text="JSD(α′, α): how far the attention moved", range=[-0.01, math.log(2) + 0.01])
    if log_y:
        pos = np.concatenate([fr.tvd[fr.tvd > 0], fr.perm_tvd[fr.perm_tvd > 0], [min(EPS_CHOICES)]])
        lo = max(1e-9, float(pos.min()) / 2) if pos.size else 1e-6
        # 10⁻⁴, not "100μ"; a label a decade only (plotly writes the 2s and 5s between at 3/4 size)
        fig.update_yaxes(type="log", range=[math.log10(lo), 0.05], exponentformat="power", dtick=1)
    fig.update_yaxes(title_text="TVD(ŷ′, ŷ): how far the output moved" + (" (log)" if log_y else ""))
    if not st.session_state.get("adv_legend_all"):  # four legend entries; the rest behind "All legend entries"
        named = [tr for tr in fig.data if tr.showlegend is not False]
        for tr in named[4:]:
            tr.showlegend = False
    # the title at the left, below the chart's toolbar (top right)
    fig.update_layout(height=560, margin=dict(l=10, r=10, t=70, b=10), plot_bgcolor="white", meta="frontier",
                      title=dict(text=f"{site_label(fr)}: attention change vs output change", x=0.01, xref="container",
                                 xanchor="left", y=0.99, yanchor="top"),
                      legend=dict(orientation="h", yanchor="top", y=-0.16, font=dict(size=11)))
    return fig


def site_label(fr):
    return fr.site.label()[0].upper() + fr.site.label()[1:]


def attention_figure(fr, i):
    """Original vs adversarial rows: bars for one head, two heatmaps (rows × tokens) otherwise."""
    labels = token_labels(fr.tokens)
    a0, a1 = fr.alpha0, fr.alpha_of(i)
    if fr.site.kind == "head":
        fig = go.Figure()
        fig.add_trace(go.Bar(x=labels, y=a0[0], name="original α", marker_color="#1f77b4",
                             hovertemplate="%{x}: %{y:.4f}<extra>original</extra>"))
        fig.add_trace(go.Bar(x=labels, y=a1[0], name="adversarial α′", marker_color=COL["at_jsd"],
                             hovertemplate="%{x}: %{y:.4f}<extra>adversarial</extra>"))
        fig.update_layout(barmode="group", height=360)
        fig.update_yaxes(title_text="attention weight", range=[0, 1.02])
    else:
        rows = [f"L{l + 1} H{h + 1}" for l, h in fr.rows]
        fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.03,
                            subplot_titles=["original α", "adversarial α′"])
        for c, (M, name) in enumerate(((a0, "original"), (a1, "adversarial"))):
            fig.add_trace(go.Heatmap(z=M, x=labels, y=rows, zmin=0, zmax=1, colorscale="Blues", name=name,
                                     showscale=c == 1, xgap=1, ygap=1,
                                     hovertemplate="%{y}, source %{x}: %{z:.4f}<extra>" + name + "</extra>"),
                          row=1, col=c + 1)
        fig.update_yaxes(autorange="reversed", type="category")
        fig.update_layout(height=max(300, 18 * len(rows) + 160))
    fig.update_xaxes(type="category", tickangle=-60)
    fig.update_layout(margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white", meta="attention",
                      title=f"Row of '{clean_token(fr.tokens[fr.target])}' (position {fr.target}) at {fr.site.label()}")
    return fig


def contrast_bars(fr, i):
    """The app's contrast words (ui.contrast) outside each top list: ([(word, p)] with the original
    attention, [(word, p)] with point i's α′, a note for words of several tokens); cached per point.
    A word of several tokens is scored by trace.MULTI_TOKEN_RULE (adversarial.contrast_at)."""
    a = ui.analysis(methods=["attention"], ask=False)
    words = tuple(w for w, _ in ui.contrast(a)[:2]) if a is not None else ()
    if len(words) < 2:
        return [], [], None
    ck = ("adversarial contrast",) + key + (int(i), words)
    got = results.get(ck)
    if got is None:
        try:
            alpha = None if i == 0 else fr.alpha_of(i)
            pb = A.prepare(lm, ui.text(), fr.site, target=enc.target, max_tokens=ui.cap())
            got = [(w, p0, p0 if i == 0 else p1, "·".join(readable_token(x) for x in word.pieces) if word.multi else "")
                   for w, p0, p1, word in A.contrast_at(pb, alpha, words)]
        except (AttnvizError, InputError, KeyError):
            return [], [], None
        results.put(ck, got)
    top0 = {readable_token(t).strip().lower() for t, _ in fr.y0_top}
    top1 = {readable_token(t).strip().lower() for t, _ in fr.prediction(i)}
    multi = [f"p('{w}') is the product of its pieces' probabilities ({pcs}): its log-probability is their sum"
             for w, _, _, pcs in got if pcs]
    return ([(w, p0) for w, p0, _, _ in got if w.lower() not in top0],
            [(w, p1) for w, _, p1, _ in got if w.lower() not in top1], "; ".join(multi) or None)


@st.fragment
def explore(fr, jw):
    ss.setdefault("adv_follow", "eps")
    ss.setdefault("adv_eps", A.JW_EPS)
    ss.setdefault("adv_jsd", round(min(0.3, float(fr.jsd.max())), 2))
    if ss.get("_adv_log_for") != key:  # a new result: log TVD when the baselines dwarf the frontier
        ss._adv_log_for = key
        ss.adv_log = baselines_dwarf(fr, jw)
    k1, k2 = st.columns(2)
    x_target = k1.slider("Attention change to reach (JSD)", 0.0, 0.69, step=0.01, key="adv_jsd",
                         on_change=_follow, args=("jsd",), persist_state="session", bind="query-params",
                         help="Shows the point whose attention moved at least this far (Jensen–Shannon divergence "
                              "between the new and the original attention row; 0 = same, 0.69 = nothing in "
                              "common) with the smallest change of the output.")
    if ss.get("adv_eps") not in EPS_CHOICES:  # a value of an older scale (a link): the nearest on this one
        ss.adv_eps = min(EPS_CHOICES, key=lambda e: abs(math.log(e / max(float(ss.adv_eps or A.JW_EPS), 1e-6))))
    eps = k2.select_slider("Output change tolerated (ε, TVD)", EPS_CHOICES, key="adv_eps", on_change=_follow,
                           args=("eps",), persist_state="session", bind="query-params",
                           help="Shows the point whose attention moved furthest while the output moved at most "
                                "ε (total variation distance: the share of probability that went elsewhere). "
                                "The steps are 1, 2, 5 per decade (a log scale); Jain & Wallace used 0.01.")
    # its own row: beside the two sliders a 1024-px window left it a column too narrow for its label
    log_y = st.checkbox("log TVD", key="adv_log", persist_state="session", bind="query-params",
                        help="On by default when the baselines' output changes dwarf the frontier's.")
    i_jsd, i_eps = fr.at_jsd(x_target), fr.within(eps)
    i = i_jsd if ss.adv_follow == "jsd" else i_eps
    st.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(frontier_figure(fr, jw, i_jsd, i_eps, x_target, eps, log_y, ss.adv_follow)), key="adv_frontier_chart")
    st.checkbox("All legend entries", key="adv_legend_all", help="The chart names four series; this names every "
                "one (other seeds, Jain & Wallace's search, the points at the two slider settings).")
    st.markdown(ui.plain(fr.caption(eps)))
    which = (f"the lowest TVD at JSD ≥ {x_target:.2f}" if ss.adv_follow == "jsd"
             else f"the largest JSD at TVD ≤ {eps:g}")
    st.markdown(f"**Shown below** ({ui.plain(which)}; move a slider to switch): JSD {fr.jsd[i]:.4f}, "
                f"TVD {fr.tvd[i]:.5f}" + (" (the model's own attention)." if i == 0 else
                                                f" (found by the search: λ = {fr.lam[i]:.3g}, restart "
                                                f"{int(fr.restart[i]) + 1}, step {int(fr.step[i])})."))
    st.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(attention_figure(fr, i)), key="adv_attention_chart")
    p1, p2 = st.columns(2)
    extra0, extra1, pieces_note = contrast_bars(fr, i)
    before = figures.prediction_bars(fr.y0_top, title="Prediction with the original attention", extra=extra0)
    before.update_layout(meta="pred_before")
    after = figures.prediction_bars(fr.prediction(i), title="Prediction with α′", extra=extra1)
    after.update_layout(meta="pred_after")
    # no toolbar on the small bar charts: on hover it covered their titles
    p1.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(before), key="adv_pred_before", config={"displayModeBar": False})
    p2.plotly_chart(theme=ui.theme(), figure_or_data=ui.big(after), key="adv_pred_after", config={"displayModeBar": False})
    if pieces_note:
        st.caption(ui.plain(pieces_note))
    unsure = fr.y0_top and ui.unsure_note(fr.y0_top[0][1], "the words above mean little as predictions. TVD "
                                          "compares the whole output distributions, so how far the output "
                                          "moves is measured all the same.")
    if unsure:
        st.caption(unsure)
    pm = fr.perm_summary()
    lines = [f"- **Permutations** ({len(fr.perm_jsd)}): JSD median {pm['jsd_median']:.3f}, TVD median "
             f"{pm['tvd_median']:.4f} (range {pm['tvd_min']:.4f}–{pm['tvd_max']:.4f}).",
             f"- **Uniform α**: JSD {fr.uniform[0]:.3f}, TVD {fr.uniform[1]:.4f}."]
    for why in res.seeds_skipped:
        lines.append(f"- left out: {ui.plain(why)}.")
    for s in fr.seeds:
        lines.append(f"- **{ui.plain(s.spec)}** (another seed): attention JSD {s.jsd:.3f}, output TVD {s.tvd:.4f}; "
                     f"predicts {ui.plain(s.top[0][0])} at {s.top[0][1]:.2f}.")
    if jw is not None:
        acc = int(jw.accepted.sum())
        lines.append(f"- **Jain & Wallace** ({jw.steps} steps, hinge at TVD {jw.eps:g}, accepted at ≤ {jw.accept:g}): "
                     f"{acc} of {len(jw.jsd)} adversaries accepted; max JSD within ε = {jw.best_jsd:.3f}.")
    st.markdown("\n".join(lines))


explore(fr, jw)
st.caption(f"Search: {len(fr.lambdas)} λ × {fr.restarts} restart{'s' if fr.restarts != 1 else ''}"
           + (f" (from step {fr.prune_at} on: restart 1 and each λ's best random restart)" if fr.prune_at is not None else "")
           + f", {fr.steps} Adam steps (lr {fr.lr:g}, cosine decay), "
           f"{len(fr.jsd)} points recorded, {fr.timings.get('total', 0):.1f} s. For rows of several heads the JSD "
           "is the mean over the rows. Every point's TVD comes from a real forward pass with α′ in place.")
