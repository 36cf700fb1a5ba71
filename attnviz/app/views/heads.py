"""Heads: the model view, every layer x head as a small heatmap for one method; a click opens it on Explore."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from attnviz import METHODS, figures
from attnviz.app import ui

PER_HEAD = [m for m, info in METHODS.items() if info.per_head]

st.title("Heads")
st.caption("All layers (rows) and heads (columns) at once; the last column is the layer map. "
           "Click a cell to open it large on Explore.")

if st.session_state.get("heads_method") not in PER_HEAD:
    st.session_state.heads_method = PER_HEAD[0]
st.radio("Method", PER_HEAD, key="heads_method", persist_state="session", format_func=ui.method_label, horizontal=True,
         help="Only these methods have a per-head form; the others are layer maps (see Explore).")
method = st.session_state.heads_method

a = ui.analysis((method,))
if a is None:
    st.stop()
for note in a.notes:  # NaN or inf in the maps (which, in which layers, why): said, never drawn blank in silence
    if "not finite" in note:
        st.warning(ui.plain(note), icon=":material/warning:")
if method not in a.maps:
    st.warning(f"{ui.method_label(method)} is not available for this model: "
               f"{ui.plain(a.disabled.get(method, 'unknown reason'))}")
    st.stop()

mp = a.maps[method]
L, H = mp.heads.shape[:2]
view = ui.view_for(a)
rs1 = METHODS[method].rows_sum_to_one
heads = [[view.apply(mp.heads[l, h], rs1) for h in range(H)] for l in range(L)]
layer_maps = [view.apply(mp.layer[l], rs1) for l in range(L)]
import numpy as np  # noqa: E402

heads, layer_maps, labels, value_name = np.array(heads), np.array(layer_maps), view.labels, ui.value_name(method)
n_tok = len(labels)
block = -(-n_tok // figures.GRID_MAX_TOKENS)
if block > 1:  # a long text: L x (H+1) maps of n x n would be hundreds of MB for cells of ~50 px
    heads, layer_maps = figures.block_pool(heads, block), figures.block_pool(layer_maps, block)
    labels = figures.block_labels(labels, block)
    value_name = f"{value_name}, blocks of {block} tokens"
    st.caption(f"{n_tok} tokens: each cell shows blocks of {block} tokens (the rows of a block averaged, its "
               f"columns summed, so rows still sum as they did), to keep the grid light; open a cell on Explore "
               f"for every token.")
lm = ui.model()
if "heads_log" not in st.session_state:  # a causal model's first column (an attention sink) washes out the rest
    st.session_state.heads_log = lm is not None and lm.task == "causal_lm"
colorbar = None
if st.toggle("Log colours", key="heads_log", help="Colours on a log scale (down to 1/10,000 of the grid's largest "
                                                  "value): the cells beside an attention sink become visible."):
    floor = max(float(heads.max()), float(layer_maps.max()), 1e-12) * 1e-4
    heads, layer_maps = np.log10(np.clip(heads, floor, None)), np.log10(np.clip(layer_maps, floor, None))
    heads, layer_maps = heads - np.log10(floor), layer_maps - np.log10(floor)
    colorbar = f"{value_name} (log scale)"
    value_name = f"log10(value / {floor:.1e}): {value_name}"
# readable with many layers (SmolLM2: 30 x 9 + 1 maps) at 1024 px: rows of a fixed height, layer names
# written horizontally ("L12"), the colour scale a short bar at the top right (not one bar the height
# of all 30 rows, whose title ends up off screen); the head names in a header row that
# stays at the top of the window while the grid scrolls (below)
ROW_PX = 50 if L > 12 else 90
fig = figures.head_grid(heads, layer_maps, labels, value_name=value_name, layer_label=METHODS[method].layer_map,
                        row_px=ROW_PX, colorbar_title=colorbar, column_titles=False)
fig.update_layout(height=ROW_PX * L + 16, margin=dict(l=44, r=78, t=8, b=8))
hm = fig.data[0]
hm.colorbar.update(lenmode="pixels", len=min(260, ROW_PX * L), thickness=12, x=1.0, xanchor="left", xpad=6,
                   y=1.0, yanchor="top", title=dict(side="right", font=dict(size=11)))
if colorbar:  # the log scale's ticks in the values themselves: 1e-4 x max ... max
    hm.colorbar.update(tickvals=[0, 1, 2, 3, 4], ticktext=[f"{floor * 10 ** k:.1g}" for k in range(5)])
fig = ui.big(fig)
fig.layout.yaxis.automargin = False  # the header row below is laid out on these exact margins


def header_row(fig, C: int, n: int, g: int, names: list) -> str:
    """HTML: the column names over the grid's columns (the figure's margins, n cells a map, g between),
    sticky at the top of the window while the page scrolls."""
    import html

    m = fig.layout.margin
    tracks = " ".join([f"{n}fr {g}fr"] * (C - 1) + [f"{n}fr"])
    size = figures.PRESENT_FONT if ui.present() else 13
    cells = "".join(f"<div style='grid-column:{2 * c + 1};text-align:center;line-height:1.1;overflow:hidden'>"
                    f"{html.escape(t)}</div>" for c, t in enumerate(names))
    return ("<style>.st-key-heads_grid > div:first-child {position: sticky; top: 3.75rem; z-index: 20; "
            "background: white; border-bottom: 1px solid #eee;}</style>"
            f"<div class='heads-header' style='display:grid;grid-template-columns:{tracks};padding:2px {m.r}px 2px "
            f"{m.l}px;font-size:{size}px;color:#31333f'>{cells}</div>")


meta = fig.data[0].meta
names = [f"head {h + 1}" if H < 10 else f"h{h + 1}" for h in range(H)] + [METHODS[method].layer_map if H < 10 else "layer"]


def _open(layer: int, head: int) -> None:
    st.session_state.layer = layer
    st.session_state.head = "all" if head == 0 else str(head)
    if method not in st.session_state.get("methods", []):
        st.session_state.methods = list(st.session_state.get("methods", [])) + [method]
    st.session_state._goto_explore = True


with st.container(key="heads_grid"):
    st.html(header_row(fig, meta["C"], meta["n"], meta["gap"], names))
    event = st.plotly_chart(fig, theme=None, key="head_grid", on_select="rerun", selection_mode="points",
                            config={"displayModeBar": False})
points = event.selection.points if event and event.get("selection") else []
if points:  # a click on the "open" overlay: one invisible square per map, customdata [layer, head]
    opened = fig.data[1].customdata[points[0]["point_index"]] if "point_index" in points[0] else points[0]["customdata"]
    _open(int(opened[0]), int(opened[1]))

st.caption("Or pick a cell here:")
c1, c2, c3 = st.columns([2, 2, 2])
pick_l = c1.selectbox("Layer", list(range(1, L + 1)), key="heads_pick_layer")
pick_h = c2.selectbox("Head", list(range(H + 1)), key="heads_pick_head",
                      format_func=lambda h: "layer map" if h == 0 else f"head {h}")
c3.button("Open on Explore", on_click=_open, args=(pick_l, pick_h), key="heads_open")

if st.session_state.pop("_goto_explore", False):
    st.switch_page(Path(__file__).with_name("explore.py"))

st.page_link(Path(__file__).with_name("mediation.py"), label="Which heads cause the prediction? Patch them on Mediation",
             icon=":material/call_split:")
