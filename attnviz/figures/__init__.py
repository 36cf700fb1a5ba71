"""Plotly figure builders: arrays and engine results in, figures out, no Streamlit.

    style.py         the shared look (fonts, colours, the plain-dict figure wrapper, the layer axis)
    maps.py          the view transform (hidden special tokens, merged word pieces), map heatmaps, the
                     context-mixing ratio map
    bars.py          target-row bars, the prediction bars
    heads.py         the Heads page's grid of every head
    graph.py         the layered attention graph (rollout path mass, flow's edge flows) and its figure
    lineview.py      the line views (bertviz's head, model and neuron views) as HTML pages
    faithfulness.py  importance bars and the corpus study's figure

The figures sit above the engine: they import attnviz's engine modules, and no engine module imports
them (enforced by import-linter, pyproject.toml). Token text (labels, readable tokens) comes from
attnviz.text. The builders are re-exported here: `from attnviz import figures; figures.heatmaps(...)`.
"""
from .bars import prediction_bars, row_bars
from .faithfulness import importance_figure, study_figure
from .graph import MAX_GRAPH_TOKENS, attention_graph, graph_figure, graph_marks, graph_methods, graph_to_dict
from .heads import GRID_MAX_TOKENS, block_labels, block_pool, grid_cells, grid_gap, head_grid
from .lineview import HEAD_COLOURS, head_colour, line_view_height, line_view_html
from .maps import (LONG_MAP_PX, MAX_CELL_TEXT, MIN_WIDTH, PRESENT_FONT, PRESENT_WIDTH, TICK_PX, Sizes, View,
                   auto_columns, heatmap, heatmaps, make_view, panel_min_px, ratio_heatmap, row_label_every,
                   row_ticks, sizes, y_label_px)
from .style import FONT, HIGHLIGHT, SEQ_COLORS, enlarge, layer_axis

__all__ = ["prediction_bars", "row_bars", "importance_figure", "study_figure", "MAX_GRAPH_TOKENS",
           "attention_graph", "graph_figure", "graph_marks", "graph_methods", "graph_to_dict", "GRID_MAX_TOKENS", "block_labels", "block_pool", "grid_cells", "grid_gap", "head_grid",
           "line_view_html", "line_view_height", "HEAD_COLOURS", "head_colour", "LONG_MAP_PX", "MAX_CELL_TEXT", "MIN_WIDTH", "PRESENT_FONT", "PRESENT_WIDTH", "TICK_PX",
           "Sizes", "sizes", "View", "auto_columns",
           "heatmap", "heatmaps", "make_view", "panel_min_px", "ratio_heatmap", "row_label_every", "row_ticks",
           "y_label_px", "FONT", "HIGHLIGHT", "SEQ_COLORS", "enlarge", "layer_axis"]
