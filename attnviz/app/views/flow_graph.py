"""Flow graph: the layered attention graph (tokens x layers), with the paths feeding one output token."""
from __future__ import annotations

import html
import json

import streamlit as st

from attnviz import figures

from attnviz.text import token_labels
from attnviz.app import ui

st.title("Flow graph")
st.caption("Nodes are tokens at each layer (input at the bottom); an edge from a token to a token one "
           "layer below has the width of its weight ½·attention + ½·identity (the residual), the graph "
           "that rollout and flow use. Red: how the chosen output token's information travels down.")

a = ui.analysis(("attention",))
if a is None:
    st.stop()
for note in a.notes:  # NaN or inf in the maps (which, in which layers, why): said, never drawn blank in silence
    if "not finite" in note:
        st.warning(ui.plain(note), icon=":material/warning:")
n = len(a.tokens)
if n > figures.MAX_GRAPH_TOKENS:
    st.warning(f"The text has {n} tokens; the graph is drawn for up to {figures.MAX_GRAPH_TOKENS}. "
               "Shorten the sentence to see it.")
    st.stop()

L = a.n_layers
labels = token_labels(a.tokens)
ss = st.session_state
graphs = figures.graph_methods()  # the methods that read this graph (MethodInfo.graph), first the default
if ss.get("graph_method") not in graphs:
    ss.graph_method = next(iter(graphs))
if not isinstance(ss.get("graph_top"), int) or not 1 <= ss.graph_top <= L:
    ss.graph_top = L
if ss.get("graph_output") not in range(n):
    ss.graph_output = a.target
if ss.get("graph_source") not in [ui.AUTO] + list(range(n)):
    ss.graph_source = ui.AUTO
if not isinstance(ss.get("graph_threshold"), float):
    ss.graph_threshold = 0.05

c1, c2, c3 = st.columns(3)
c1.radio("Highlight by", list(graphs), key="graph_method", persist_state="session", horizontal=True,
         format_func=lambda m: graphs[m].label, help=" ".join(g.help for g in graphs.values()))
c2.selectbox("Output token (top)", list(range(n)), key="graph_output", persist_state="session", format_func=lambda i: labels[i])
c3.selectbox("Input token (bottom)", [ui.AUTO] + list(range(n)), key="graph_source", persist_state="session",
             format_func=lambda i: "all inputs" if i == ui.AUTO else labels[i])
c4, c5 = st.columns(2)
c4.slider("Top layer", 1, L, key="graph_top", persist_state="session")
c5.slider("Hide edges below", 0.0, 0.5, step=0.01, key="graph_threshold", persist_state="session",
          help="Grey edges with a weight under this value, and red edges carrying less than this share "
               "of the output's total, are not drawn.")

G = figures.attention_graph(a.maps["attention"].layer, a.tokens, method=ss.graph_method, output=ss.graph_output,
                          source=None if ss.graph_source == ui.AUTO else ss.graph_source, top=ss.graph_top)
src = "all inputs" if ss.graph_source == ui.AUTO else labels[ss.graph_source]
# what the figure is of, in the figure itself (its title: the chart's own image download keeps it) and
# under every downloaded file (a caption): the sentence, model, target and prediction, what its marks mean
line = ui.prediction_line(a)
sentence = ui.text()
short = sentence if len(sentence) <= 70 else sentence[:67] + "…"  # one line at 1024 px
method_label = graphs[ss.graph_method].label
title = (f"{method_label}: from {labels[ss.graph_output]} (layer {ss.graph_top}) down to {src}"
         f"<br>“{html.escape(short)}”<br>{html.escape(ui.spec())}" + (f" · prediction {html.escape(line)}" if line else ""))
fig = figures.graph_figure(G, threshold=ss.graph_threshold, title=title)
fig.update_layout(title=dict(x=0.01, xref="container", xanchor="left", font=dict(size=14)),  # clear of the toolbar
                  margin_t=fig.layout.margin.t + 44)
text_of = html.unescape  # the labels are escaped for plotly; the captions are plain text
about = [f"Sentence: {sentence}",
         f"Model: {ui.spec()} · target: {text_of(labels[a.target])}" + (f" · prediction: {line}" if line else ""),
         f"Highlighted: {method_label} from the output token {text_of(labels[ss.graph_output])} at layer "
         f"{ss.graph_top} to {text_of(src)}."] + figures.graph_marks(G, ss.graph_threshold, method_label)
st.plotly_chart(ui.big(fig), theme=None, key="graph", config={"toImageButtonOptions": {"format": "svg", "filename": "attnviz_graph"}})
total = G.graph["total"]
st.caption(graphs[ss.graph_method].caption.format(output=ui.plain(labels[ss.graph_output]), top=ss.graph_top,
                                                   source=ui.plain(src), total=total))
if ss.graph_source == ui.AUTO and total > 0:  # where the highlighted mass ends: one input taking most of it
    arrive = [sum(G.edges[(1, i), (0, j)]["through"] for i in range(n)) for j in range(n)]
    j = max(range(n), key=arrive.__getitem__)
    if arrive[j] / total >= ui.SINK_SHARE:
        why = ""
        if j == 0 and ui._loaded_task() == "causal_lm":
            why = (f"{ui.FIRST_TOKEN_PILEUP} Heads also park attention there that the model does not need (an "
                   "attention sink), and what it passes on can be small: compare the value-weighted norm on "
                   "Explore, which weighs each attention weight by the size of the vector it moves. Lower the "
                   "top layer, or ")
        st.caption(f"**{100 * arrive[j] / total:.0f} % of it ends at {ui.plain(labels[j])}.** {why}"
                   + ("pick" if why else "Pick") + " another input token at the bottom to see only the paths to it.")
with st.expander("Download", icon=":material/download:", key="graph_download"):
    from attnviz import export

    def graph_html() -> str:  # the interactive figure with the caption under it, one file
        body = fig.to_html(full_html=False, include_plotlyjs=True)
        notes = "".join(f"<p style='margin:2px 0'>{html.escape(x)}</p>" for x in about)
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>attnviz flow graph</title></head>"
                f"<body style='font-family:sans-serif'>{body}<div style='color:#333;font-size:14px'>{notes}</div>"
                "</body></html>")

    d1, d2, d3, d4 = st.columns(4)
    d1.download_button("Graph as PNG", lambda: export.figure_bytes(fig, "png", caption=about), file_name="attnviz_graph.png",
                       mime="image/png", on_click="ignore", key="dl_graph_png")
    d2.download_button("Graph as SVG", lambda: export.figure_bytes(fig, "svg", caption=about), file_name="attnviz_graph.svg",
                       mime="image/svg+xml", on_click="ignore", key="dl_graph_svg")
    d3.download_button("Graph as HTML", graph_html, file_name="attnviz_graph.html", mime="text/html",
                       on_click="ignore", key="dl_graph_html")
    d4.download_button("Graph as JSON", lambda: json.dumps(figures.graph_to_dict(
        G, {"sentence": sentence, "model": ui.spec(), "target": text_of(labels[a.target]), "prediction": line,
            "caption": about}), ensure_ascii=False), file_name="attnviz_graph.json", mime="application/json",
                       on_click="ignore", key="dl_graph_json")
    st.caption("Each file carries the sentence, the model, the target and the prediction, and says what its marks "
               "mean; the JSON holds every node and edge (weight, and the highlighted mass through it).")
