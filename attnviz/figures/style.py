"""The figures' shared look: fonts, colours, the plain-dict figure wrapper, the layer axis."""
from __future__ import annotations

import plotly.graph_objects as go

SEQ_COLORS = "Blues"
HIGHLIGHT = "#d62728"
FONT = "Source Sans Pro, Source Sans 3, sans-serif"


def style(fig: go.Figure) -> go.Figure:
    """A light, self-contained look (the app draws figures with theme=None: faster to re-render):
    white template, axes that make room for their labels."""
    fig.update_layout(template="plotly_white", font=dict(family=FONT, size=12), paper_bgcolor="white",
                      plot_bgcolor="white")
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


# The figures redrawn on every slider move (heatmaps, row bars) are written as plain dicts and
# wrapped without plotly's per-property validation, which costs ~100 ms per figure here (the app's
# layer slider must re-render in <= 0.5 s). They carry their look explicitly (the plotly_white values
# below) instead of naming a template, which plotly.js would not understand unvalidated (and which
# would add ~7 kB to every message).
AXIS = dict(gridcolor="#EBF0F8", linecolor="#EBF0F8", zerolinecolor="#EBF0F8", zerolinewidth=2, ticks="",
            automargin=True, title=dict(standoff=15))
LAYOUT = dict(font=dict(family=FONT, size=12, color="#2a3f5f"), paper_bgcolor="white", plot_bgcolor="white",
              hovermode="closest", hoverlabel=dict(align="left"))


# the colour scale spelled out: plotly.js's own "Blues" runs the other way (dark = low)
SEQ_SCALE = [[k / 8, c] for k, c in enumerate(("rgb(247,251,255)", "rgb(222,235,247)", "rgb(198,219,239)",
                                              "rgb(158,202,225)", "rgb(107,174,214)", "rgb(66,146,198)",
                                              "rgb(33,113,181)", "rgb(8,81,156)", "rgb(8,48,107)"))]


# red (negative) - white (0) - blue (positive), for differences
DIV_SCALE = [[0.0, "rgb(178,24,43)"], [0.25, "rgb(239,138,98)"], [0.5, "rgb(247,247,247)"],
             [0.75, "rgb(103,169,207)"], [1.0, "rgb(33,102,172)"]]


def raw_figure(data: list, layout: dict) -> go.Figure:
    """Trusted dicts -> go.Figure without validation (fields as plotly.js reads them)."""
    # template {}: no template at all (left unset, plotly would fill in its default one, ~7 kB)
    return go.Figure(dict(data=data, layout={**LAYOUT, **layout, "template": {}}), _validate=False)


def domains(k: int, spacing: float) -> list:
    """k side-by-side (or stacked) panels with `spacing` between them -> [(start, end)] in paper units."""
    w = (1.0 - spacing * (k - 1)) / k
    return [(c * (w + spacing), c * (w + spacing) + w) for c in range(k)]


def note(text: str, x: float, y: float, yshift: int = 0, size: int = 13) -> dict:
    """A panel title: centred text above paper point (x, y)."""
    return dict(text=text, x=x, y=y, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
                showarrow=False, yshift=yshift, font=dict(size=size))


def layer_axis(fig, L: int) -> None:
    """The x axis of a figure over layers 1..L: exactly that range (autorange's padding showed a layer 0
    and a layer L + 1), every layer ticked up to 20 layers, beyond that 1 and every fifth (30 rotated
    labels at 1024 px were a blur)."""
    ticks = list(range(1, L + 1)) if L <= 20 else [1] + list(range(5, L + 1, 5))
    fig.update_xaxes(title_text="layer", range=[0.5, L + 0.5], tickmode="array", tickvals=ticks)


FONT_KEYS = ("font", "tickfont", "textfont", "insidetextfont", "outsidetextfont")


def enlarge(fig: go.Figure, font: float) -> go.Figure:
    """A copy of fig with every text at least `font` px (titles, ticks, axis and colour-bar titles and
    numbers, annotations, legends, bar labels; hover labels left as they are): presentation mode for
    the figures that have no size setting of their own."""
    def walk(d):
        if isinstance(d, dict):
            for k, v in d.items():
                if k == "hoverlabel":
                    continue
                if k in FONT_KEYS and isinstance(v, dict):
                    v["size"] = max(float(v.get("size") or 0), float(font))
                walk(v)
        elif isinstance(d, (list, tuple)):
            for v in d:
                walk(v)

    d = fig.to_dict()
    lay = d.setdefault("layout", {})
    lay.setdefault("font", {})
    walk(d)
    # room for the larger tick labels and axis titles (the figures' own margins were made for 12 px text)
    m = dict(lay.get("margin") or {})
    m.update(l=max(m.get("l", 80), 4 * font), b=max(m.get("b", 80), 3 * font), t=max(m.get("t", 100), 3 * font))
    lay["margin"] = m
    if lay.get("height"):
        lay["height"] = lay["height"] + 2 * font
    return go.Figure(d, _validate=False)
