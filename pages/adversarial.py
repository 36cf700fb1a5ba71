"""Adversarial attention: how far can the attention move before the prediction does?

Builds, for the current sentence and an intervention site, the frontier of (JSD between the new and
the original attention, TVD between the new and the original output) with the baselines of Jain &
Wallace (2019) and Wiegreffe & Pinter (2019); sliders then move along it instantly (a fragment)."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from attnviz import adversarial as A
from attnviz import plots
from attnviz.errors import AttnvizError, InputError
from attnviz.trace import encode
from pages import ui

KINDS = {"head": "one head", "layer": "all heads of a layer", "all": "all heads of all layers"}
EPS_CHOICES = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5]
COL = dict(points="#c7c7c7", frontier="#1f77b4", perm="#ff7f0e", uniform="#8c564b", seed="#17becf",
           jw="#9467bd", at_jsd="#d62728", within="#2ca02c")

st.title("Adversarial attention")
st.caption(
    "Replace the attention of the target row at a site by another distribution α′ and let the model run on "
    "from there: how far can α′ move from the model's own α (Jensen–Shannon divergence, at most ln 2 ≈ 0.69) "
    "while the output moves little (total variation distance between the output distributions)? "
    "Jain & Wallace (2019) found very different attention with an unchanged output; Wiegreffe & Pinter (2019) "
    "argued that the whole trade-off between the two distances is what matters. For every λ of a grid, "
    "α′ = softmax(θ) minimises TVD − λ·JSD (all λ in one batch, several restarts); the frontier is the lowest "
    "TVD reached at each JSD.")

lm = ui.model()
if lm is None:
    st.stop()
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
ss.adv_layer = min(max(1, int(ss.adv_layer)), L)
ss.adv_head = min(max(1, int(ss.adv_head)), H)

c1, c2, c3 = st.columns([2, 1, 1])
kind = c1.radio("Intervention site (the target row)", list(KINDS), format_func=KINDS.get, key="adv_kind",
                horizontal=True)
layer = c2.selectbox("Layer", list(range(1, L + 1)), key="adv_layer", disabled=kind == "all")
head = c3.selectbox("Head", list(range(1, H + 1)), key="adv_head", disabled=kind != "head")
site = A.Site(kind, 0 if kind == "all" else layer - 1, head - 1 if kind == "head" else 0)
seed_specs = A.seed_specs(lm.spec)
with st.expander("Search settings"):
    s1, s2, s3, s4 = st.columns(4)
    steps = int(s1.number_input("Adam steps", 10, 2000, 200, step=50, key="adv_steps"))
    restarts = int(s2.number_input("Restarts per λ", 1, 8, 3, key="adv_restarts",
                                   help="Restart 1 starts at the model's own attention, the others at random. "
                                        "With 3 or more, after a quarter of the steps each λ keeps restart 1 "
                                        "and its best random restart; they run to the end."))
    points = int(s3.number_input("λ values", 2, 48, 16, key="adv_points",
                                 help="0 and a geometric grid from 0.001 to 31.6; all in one batch."))
    jw_steps = int(s4.number_input("Jain & Wallace steps", 0, 2000, A.JW_STEPS, step=50, key="adv_jw_steps",
                                   help="Their search: 5 adversaries, Adam lr 0.01, hinge at TVD ε = 0.01, "
                                        "accepted at TVD ≤ 0.05. 0 leaves it out."))
    use_seeds = st.checkbox(f"Compare with the models trained from other seeds ({', '.join(seed_specs) or 'none found'})",
                            value=bool(seed_specs), disabled=not seed_specs, key="adv_seeds")

lambdas = tuple([0.0] + [float(v) for v in np.logspace(-3, 1.5, points - 1)])
key = (lm.spec, enc.text, enc.target, ui.cap(), site, lambdas, steps, restarts, jw_steps,
       tuple(seed_specs) if use_seeds else ())


def _compute(lm, text, target, cap, site, lambdas, steps, restarts, jw_steps, seeds, progress):
    """The frontier, Jain & Wallace's search and the seed baseline for one key (with progress)."""
    fr = A.frontier(lm, text, site, lambdas=list(lambdas), steps=steps, restarts=restarts, target=target,
                    max_tokens=cap, progress=lambda stage, f: progress(stage, 0.75 * f))
    jw = None
    if jw_steps:
        jw = A.jain_wallace(lm, text, site, steps=jw_steps, target=target, max_tokens=cap,
                            progress=lambda stage, f: progress("Jain & Wallace search", 0.75 + 0.2 * f))
    if seeds:
        progress("other seeds", 0.97)
        fr.seeds = A.seed_baseline(lm, [ui._load(s) for s in seeds], text, site, target=target)
    return dict(frontier=fr, jw=jw)


b1, b2 = st.columns([1, 3])
if b1.button("Compute the frontier", key="adv_go", icon=":material/play_arrow:", type="primary"):
    try:
        ui.with_progress(("adversarial",) + key,
                         lambda progress: _compute(lm, ui.text(), enc.target, ui.cap(), site, lambdas, steps, restarts,
                                                   jw_steps, tuple(seed_specs) if use_seeds else (), progress),
                         "Searching for adversarial attention")
    except (AttnvizError, InputError) as e:
        ui.show_error(e)

res = ui.cached_result(("adversarial",) + key)
if res is None:
    b2.caption(f"{len(lambdas)} λ × {restarts} restarts = a batch of {len(lambdas) * restarts}"
               + (f" (after {steps // 4} steps: restart 1 and each λ's best random restart)" if restarts > 2 else "")
               + f", {steps} steps, "
               f"for {site.label()} at the target '{enc.tokens[enc.target]}' (position {enc.target}). "
               "Press the button: a few seconds for a head in an upper layer of the built-in model, more "
               "further down and for larger models.")
    st.stop()

fr, jw = res["frontier"], res["jw"]
for note in fr.notes:
    st.info(ui.plain(note), icon=":material/info:")


def _follow(which):
    ss.adv_follow = which


def frontier_figure(fr, jw, i_jsd, i_eps, x_target, eps, log_y=False):
    """Frontier, all points, baselines and the two slider points -> figure (meta 'frontier')."""
    fig = go.Figure()
    fig.add_trace(go.Scattergl(x=fr.jsd, y=fr.tvd, mode="markers", name="points tried",
                               marker=dict(color=COL["points"], size=4),
                               hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>point tried</extra>"))
    ex, ey = fr.envelope_xy()
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines+markers", name="frontier (lowest TVD at each JSD)",
                             line=dict(color=COL["frontier"], shape="vh", width=2), marker=dict(size=5),
                             hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>frontier</extra>"))
    fig.add_trace(go.Scatter(x=fr.perm_jsd, y=fr.perm_tvd, mode="markers", name=f"{len(fr.perm_jsd)} random permutations of α",
                             marker=dict(color=COL["perm"], symbol="x", size=6),
                             hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>permutation</extra>"))
    fig.add_trace(go.Scatter(x=[fr.uniform[0]], y=[fr.uniform[1]], mode="markers", name="uniform α",
                             marker=dict(color=COL["uniform"], symbol="diamond", size=11),
                             hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>uniform</extra>"))
    if fr.seeds:
        fig.add_trace(go.Scatter(x=[s.jsd for s in fr.seeds], y=[s.tvd for s in fr.seeds], mode="markers+text",
                                 name="other seeds (same sentence)", text=[s.spec.split(":")[-1].split("-")[-1] for s in fr.seeds],
                                 textposition="top center", marker=dict(color=COL["seed"], symbol="triangle-up", size=12),
                                 customdata=[s.spec for s in fr.seeds],
                                 hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>%{customdata}</extra>"))
    if jw is not None:
        fig.add_trace(go.Scatter(x=jw.jsd, y=jw.tvd, mode="markers", name="Jain & Wallace adversaries",
                                 marker=dict(color=COL["jw"], symbol="star", size=11,
                                             line=dict(width=1, color="black")),
                                 hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>Jain & Wallace</extra>"))
    fig.add_trace(go.Scatter(x=[fr.jsd[i_jsd]], y=[fr.tvd[i_jsd]], mode="markers", name=f"lowest TVD at JSD ≥ {x_target:.2f}",
                             marker=dict(color=COL["at_jsd"], size=15, symbol="circle-open", line=dict(width=3)),
                             hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>at the JSD target</extra>"))
    fig.add_trace(go.Scatter(x=[fr.jsd[i_eps]], y=[fr.tvd[i_eps]], mode="markers", name=f"largest JSD at TVD ≤ {eps:g}",
                             marker=dict(color=COL["within"], size=15, symbol="square-open", line=dict(width=3)),
                             hovertemplate="JSD %{x:.4f}<br>TVD %{y:.5f}<extra>within ε</extra>"))
    fig.add_vline(x=x_target, line=dict(color=COL["at_jsd"], dash="dot", width=1))
    fig.add_hline(y=eps, line=dict(color=COL["within"], dash="dot", width=1))
    fig.update_xaxes(title_text="JSD(α′, α)  — how far the attention moved", range=[-0.01, math.log(2) + 0.01])
    if log_y:
        pos = np.concatenate([fr.tvd[fr.tvd > 0], fr.perm_tvd[fr.perm_tvd > 0], [eps]])
        lo = max(1e-9, float(pos.min()) / 2) if pos.size else 1e-6
        fig.update_yaxes(type="log", range=[math.log10(lo), 0.05])
    fig.update_yaxes(title_text="TVD(ŷ′, ŷ)  — how far the output moved")
    fig.update_layout(height=480, margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white", meta="frontier",
                      title=f"{site_label(fr)}: attention distance vs output distance",
                      legend=dict(orientation="h", yanchor="top", y=-0.15, font=dict(size=11)))
    return fig


def site_label(fr):
    return fr.site.label()[0].upper() + fr.site.label()[1:]


def attention_figure(fr, i):
    """Original vs adversarial rows: bars for one head, two heatmaps (rows × tokens) otherwise."""
    labels = plots.token_labels(fr.tokens)
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
                      title=f"Row of '{fr.tokens[fr.target]}' (position {fr.target}) at {fr.site.label()}")
    return fig


@st.fragment
def explore(fr, jw):
    ss.setdefault("adv_follow", "eps")
    ss.setdefault("adv_eps", A.JW_EPS)
    ss.setdefault("adv_jsd", round(min(0.3, float(fr.jsd.max())), 2))
    k1, k2, k3 = st.columns([3, 3, 1])
    x_target = k1.slider("JSD target: the lowest TVD reached with at least this JSD", 0.0, 0.69, step=0.01,
                         key="adv_jsd", on_change=_follow, args=("jsd",))
    eps = k2.select_slider("ε: the largest JSD reached with TVD at most ε", EPS_CHOICES, key="adv_eps",
                           on_change=_follow, args=("eps",))
    log_y = k3.checkbox("log TVD", key="adv_log")
    i_jsd, i_eps = fr.at_jsd(x_target), fr.within(eps)
    i = i_jsd if ss.adv_follow == "jsd" else i_eps
    st.plotly_chart(frontier_figure(fr, jw, i_jsd, i_eps, x_target, eps, log_y), key="adv_frontier_chart")
    st.markdown(ui.plain(fr.caption(eps)))
    which = (f"the lowest TVD at JSD ≥ {x_target:.2f}" if ss.adv_follow == "jsd"
             else f"the largest JSD at TVD ≤ {eps:g}")
    st.markdown(f"**Shown below** ({ui.plain(which)}; move a slider to switch): JSD {fr.jsd[i]:.4f}, "
                f"TVD {fr.tvd[i]:.5f}" + ("" if i == 0 else f", found at λ = {fr.lam[i]:.3g}, restart "
                                                            f"{int(fr.restart[i]) + 1}, step {int(fr.step[i])}."))
    st.plotly_chart(attention_figure(fr, i), key="adv_attention_chart")
    p1, p2 = st.columns(2)
    before = plots.prediction_bars(fr.y0_top, title="Prediction with the original attention")
    before.update_layout(meta="pred_before")
    after = plots.prediction_bars(fr.prediction(i), title="Prediction with α′")
    after.update_layout(meta="pred_after")
    p1.plotly_chart(before, key="adv_pred_before")
    p2.plotly_chart(after, key="adv_pred_after")
    pm = fr.perm_summary()
    lines = [f"- **Permutations** ({len(fr.perm_jsd)}): JSD median {pm['jsd_median']:.3f}, TVD median "
             f"{pm['tvd_median']:.4f} (range {pm['tvd_min']:.4f}–{pm['tvd_max']:.4f}).",
             f"- **Uniform α**: JSD {fr.uniform[0]:.3f}, TVD {fr.uniform[1]:.4f}."]
    for s in fr.seeds:
        lines.append(f"- **{ui.plain(s.spec)}** (another seed): attention JSD {s.jsd:.3f}, output TVD {s.tvd:.4f}; "
                     f"predicts {ui.plain(s.top[0][0])} at {s.top[0][1]:.2f}.")
    if jw is not None:
        acc = int(jw.accepted.sum())
        lines.append(f"- **Jain & Wallace** ({jw.steps} steps, hinge at TVD {jw.eps:g}, accepted at ≤ {jw.accept:g}): "
                     f"{acc} of {len(jw.jsd)} adversaries accepted; max JSD within ε = {jw.best_jsd:.3f}.")
    st.markdown("\n".join(lines))


explore(fr, jw)
st.caption(f"Search: {len(fr.lambdas)} λ × {fr.restarts} restarts"
           + (f" (from step {fr.prune_at} on: restart 1 and each λ's best random restart)" if fr.prune_at is not None else "")
           + f", {fr.steps} Adam steps (lr {fr.lr:g}, cosine decay), "
           f"{len(fr.jsd)} points recorded, {fr.timings.get('total', 0):.1f} s. For rows of several heads the JSD "
           "is the mean over the rows. Every point's TVD comes from a real forward pass with α′ in place.")
