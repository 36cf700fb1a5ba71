"""attnviz.figures, attnviz.text and attnviz.export against plain references: loops, brute-force path
enumeration, networkx's max-flow and the flow method's compiled kernel (the flow graph's edge flows
come from igraph, through attnviz.methods.flow.edge_flows)."""
from __future__ import annotations

import itertools
import json

import networkx as nx
import numpy as np
import pytest

from attnviz import export, figures, text


def _stochastic(rng, *shape):
    A = rng.random(shape) + 0.05
    return A / A.sum(-1, keepdims=True)


# ------------------------------------------------------------------------------------ labels


def test_token_labels_carry_position_and_are_escaped():
    toks = ["[CLS]", "the", "<script>", "the", "a&b", "[SEP]"]
    labels = text.token_labels(toks)
    assert labels == ["0·[CLS]", "1·the", "2·&lt;script&gt;", "3·the", "4·a&amp;b", "5·[SEP]"]
    assert len(set(labels)) == len(labels)  # duplicates ("the") stay distinct categories


def _gpt2_byte_chars():
    """GPT-2's bytes_to_unicode table, written out: printable Latin-1 bytes map to themselves, the
    other 68 to chr(256 + k) in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, k = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + k)
            k += 1
    return table


@pytest.mark.parametrize("word", ["é", "ö", "café", " café", " are", "пр", "日本", "’s", " naïve", "\n"])
def test_readable_token_decodes_byte_level_entries(word):
    """A byte-level BPE entry (the word's UTF-8 bytes through GPT-2's table: 'Ã©' for 'é') reads as the
    word, without its leading space; 'Ã©' has no character of the table's upper range, which is what
    the app once missed (SmolLM2's next token after 'caf' was shown as 'Ã©')."""
    table = _gpt2_byte_chars()
    entry = "".join(table[b] for b in word.encode("utf-8"))
    assert text.readable_token(entry) == word.strip(" ").replace("\n", "↵")


@pytest.mark.parametrize("entry", ["café", "naïve", "##é", "[CLS]", "über", "Ã"])
def test_readable_token_keeps_wordpiece_entries(entry):
    """WordPiece / plain entries stay as they are, also those whose Latin-1 letters are no valid UTF-8
    as bytes; a lone lead byte ('Ã') is not decoded to a replacement character."""
    assert text.readable_token(entry) == entry


# ------------------------------------------------------------------------------------ word groups and views


def test_word_groups_wordpiece_and_word_ids():
    toks = ["[CLS]", "the", "xy", "##lo", "##phone", ".", "[SEP]"]
    special = [True, False, False, False, False, False, True]
    assert text.word_groups(toks, special) == [[0], [1], [2, 3, 4], [5], [6]]
    # word_ids decide when given (None = special token)
    wid = [None, 0, 1, 1, 2, 3, None]
    assert text.word_groups(toks, special, wid) == [[0], [1], [2, 3], [4], [5], [6]]
    assert text.group_text(toks, [2, 3, 4]) == "xylophone"
    # byte-level BPE: a token without the word-start mark continues the previous word
    bpe = ["Ġthe", "Ġcab", "inet", "Ġis"]
    assert text.word_groups(bpe, [False] * 4) == [[0], [1, 2], [3]]
    assert text.group_text(bpe, [1, 2]) == "cabinet"
    # a word whose bytes are split over pieces ('Ġna', 'Ã¯', 've' = ' naïve') reads whole once merged
    assert text.token_labels([text.group_text(["Ġna", "Ã¯", "ve"], [0, 1, 2])]) == ["0·naïve"]


def test_view_hide_special_renormalises_rows_like_a_loop():
    rng = np.random.default_rng(0)
    n = 6
    M = _stochastic(rng, n, n)
    toks = ["[CLS]", "a", "b", "[MASK]", "c", "[SEP]"]
    special = [True, False, False, False, False, True]
    v = figures.make_view(toks, special, target=3, hide_special=True)
    keep = [1, 2, 3, 4]
    assert [g[0] for g in v.groups] == keep
    assert v.labels == ["1·a", "2·b", "3·[MASK]", "4·c"]
    assert v.target == 2
    out = v.apply(M, rows_sum_to_one=True)
    for a, i in enumerate(keep):
        s = sum(M[i, j] for j in keep)
        for b, j in enumerate(keep):
            assert out[a, b] == pytest.approx(M[i, j] / s, rel=1e-12)
    np.testing.assert_allclose(out.sum(1), 1.0, rtol=1e-12)
    # not renormalised for norm-based maps
    raw = v.apply(M * 7.0, rows_sum_to_one=False)
    assert raw[0, 1] == pytest.approx(7.0 * M[1, 2])


def test_view_keeps_a_special_target_row():
    toks = ["[CLS]", "a", "b", "[SEP]"]
    v = figures.make_view(toks, [True, False, False, True], target=0, hide_special=True)
    assert [g[0] for g in v.groups] == [0, 1, 2] and v.target == 0


def test_view_merge_words_sums_columns_and_averages_rows():
    rng = np.random.default_rng(1)
    toks = ["[CLS]", "the", "cab", "##inet", "[SEP]"]
    special = [True, False, False, False, True]
    M = _stochastic(rng, 5, 5)
    v = figures.make_view(toks, special, target=2, merge_words=True)
    assert v.groups == [[0], [1], [2, 3], [4]]
    assert v.labels[2] == "2·cabinet" and v.target == 2
    out = v.apply(M, rows_sum_to_one=True)
    assert out[2, 2] == pytest.approx(((M[2, 2] + M[2, 3]) + (M[3, 2] + M[3, 3])) / 2)
    assert out[1, 2] == pytest.approx(M[1, 2] + M[1, 3])
    assert out[2, 0] == pytest.approx((M[2, 0] + M[3, 0]) / 2)
    np.testing.assert_allclose(out.sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(v.apply_row(M, True), out[2])


# ------------------------------------------------------------------------------------ figures


def test_heatmaps_carry_the_matrices_and_labels():
    rng = np.random.default_rng(2)
    mats = [rng.random((4, 4)), 3 * rng.random((4, 4))]
    labels = text.token_labels(["[CLS]", "a", "<b>", "[SEP]"])
    fig = figures.heatmaps(mats, labels, ["m1", "m2"], ["w", "norm"], target=1)
    assert len(fig.data) == 2
    for tr, M in zip(fig.data, mats):
        np.testing.assert_array_equal(np.asarray(tr.z), M)
        assert list(tr.x) == labels and list(tr.y) == labels
        assert tr.zmin == 0 and tr.zmax == pytest.approx(M.max())
    assert "&lt;b&gt;" in fig.data[0].x[2]
    # built unvalidated, so spelled out for plotly.js: white (0) to dark blue (max), as plotly.py's
    # "Blues" (plotly.js's own "Blues" runs the other way); no template name plotly.js cannot read
    import plotly.graph_objects as go

    for tr in fig.data:
        assert [tuple(c) for c in tr.colorscale] == [tuple(c) for c in go.Heatmap(colorscale="Blues").colorscale]
    assert tuple(fig.data[0].colorscale[0]) == (0.0, "rgb(247,251,255)")
    assert not fig.to_dict()["layout"]["template"]
    with pytest.raises(ValueError, match="shape"):
        figures.heatmaps([np.zeros((3, 3))], labels, ["x"])


def test_long_text_maps_stay_a_picture_with_thinned_row_labels():
    """Past LONG_MAP_PX / TICK_PX rows a map is LONG_MAP_PX tall (not TICK_PX a row), its rows labelled
    every k-th and the target's, no two labels closer than TICK_PX on screen; past 64 tokens no 1 px
    gaps between cells; a short text keeps a labelled row each TICK_PX."""
    rng = np.random.default_rng(3)
    for n, target in ((289, 137), (61, 60), (40, 5)):
        labels = text.token_labels([f"w{i}" for i in range(n)])
        fig = figures.heatmaps([rng.random((n, n))], labels, ["m"], ["w"], target=target).to_dict()
        y = fig["layout"]["yaxis"]
        lo, hi = y["domain"]
        paper = fig["layout"]["height"] - fig["layout"]["margin"]["t"] - fig["layout"]["margin"]["b"]
        map_px = (hi - lo) * paper
        if n * figures.TICK_PX <= figures.LONG_MAP_PX:
            assert map_px == pytest.approx(n * figures.TICK_PX, abs=1.5)
            assert y.get("tickvals") in (None, labels) and y.get("tickmode") in ("linear", "array")
            assert fig["data"][0]["ygap"] == (1 if n <= 64 else 0)
            continue
        assert map_px == pytest.approx(figures.LONG_MAP_PX, abs=1.5)
        assert fig["data"][0]["xgap"] == fig["data"][0]["ygap"] == (1 if n <= 64 else 0)
        shown = [labels.index(v) for v in y["tickvals"]]
        assert target in shown and 0 in shown
        px = [i * map_px / n for i in shown]
        assert min(b - a for a, b in zip(px, px[1:])) >= figures.TICK_PX - 1e-9
        every = -(-n * figures.TICK_PX // figures.LONG_MAP_PX)
        assert set(range(0, n, every)) - set(shown) == {i for i in range(0, n, every) if 0 < abs(i - target) < every}
        assert "<b>" in y["ticktext"][shown.index(target)]  # the target's label stays bold red


def test_row_bars_and_prediction_bars():
    rows = [np.array([0.1, 0.6, 0.3]), np.array([2.0, 1.0, 0.5])]
    fig = figures.row_bars(rows, ["0·a", "1·b", "2·c"], ["A", "B"], target=1)
    assert [list(t.y) for t in fig.data] == [list(r) for r in rows]
    pf = figures.prediction_bars([("is", 0.7), ("are", 0.2), ("<x>", 0.1)])
    assert list(pf.data[0].x) == [0.7, 0.2, 0.1]
    assert list(pf.data[0].y) == ["1·is", "2·are", "3·&lt;x&gt;"]


def test_head_grid_layout_and_meta():
    """One heatmap holds every map: map (l, h) sits at rows l·(n+g) .. +n and columns h·(n+g) .. +n
    (g blank cells between maps, NaN), the layer maps in the last column; one invisible square per map
    carries [layer, head] for a click."""
    rng = np.random.default_rng(3)
    L, H, n = 2, 3, 4
    heads = _stochastic(rng, L, H, n, n)
    fig = figures.head_grid(heads, heads.mean(1), text.token_labels(list("abcd")))
    hm = [t for t in fig.data if t.type == "heatmap"]
    assert len(hm) == 1
    z, meta = np.asarray(hm[0].z, dtype=float), hm[0].meta
    g = meta["gap"]
    assert (meta["L"], meta["C"], meta["n"]) == (L, H + 1, n) and g >= 1
    assert z.shape == (L * (n + g) - g, (H + 1) * (n + g) - g)
    for l in range(L):
        for c in range(H + 1):
            ref = heads[l].mean(0) if c == H else heads[l, c]
            np.testing.assert_array_equal(z[l * (n + g):l * (n + g) + n, c * (n + g):c * (n + g) + n], ref)
            np.testing.assert_array_equal(figures.grid_cells(z, meta, l + 1, 0 if c == H else c + 1), ref)
    assert np.isnan(z[n:n + g]).all() and np.isnan(z[:, n:n + g]).all()  # the gaps are blank
    assert len(set(hm[0].x)) == len(hm[0].x) and len(set(hm[0].y)) == len(hm[0].y)  # categories stay apart
    assert hm[0].y[1] == "layer 1, row 1·b" and hm[0].x[(n + g) + 2] == "head 2, column 2·c"
    clicks = [t for t in fig.data if t.type == "scatter"]
    assert len(clicks) == 1 and sorted(map(tuple, clicks[0].customdata)) == sorted(
        (l + 1, h) for l in range(L) for h in range(H + 1))
    # each square sits on its own map: its x and y are categories of that map's columns and rows
    for x, y, (l, h) in zip(clicks[0].x, clicks[0].y, clicks[0].customdata):
        assert y.startswith(f"layer {l}, row") and x.startswith("all heads" if h == 0 else f"head {h},")


# ------------------------------------------------------------------------------------ attention graph


def _ares(A):
    """0.5 ᾱ + 0.5 I written out (rows of A sum to 1)."""
    return 0.5 * A + 0.5 * np.eye(A.shape[-1])


def test_rollout_path_mass_equals_brute_force_path_enumeration():
    rng = np.random.default_rng(4)
    L, n = 2, 3
    A = _stochastic(rng, L, n, n)
    Ah = _ares(A)
    out, src = 1, 2
    G = figures.attention_graph(A, list("abc"), method="rollout", output=out, source=src)
    # every path (top=L, out) -> (1, a) -> (0, src) with the product of its weights
    expect = {}
    for a in range(n):
        w = Ah[1, out, a] * Ah[0, a, src]
        expect[((2, out), (1, a))] = expect.get(((2, out), (1, a)), 0) + w
        expect[((1, a), (0, src))] = expect.get(((1, a), (0, src)), 0) + w
    for u, v, d in G.edges(data=True):
        assert d["weight"] == pytest.approx(Ah[u[0] - 1, u[1], v[1]])
        assert d["through"] == pytest.approx(expect.get((u, v), 0.0), abs=1e-15)
    # total = rollout value: (Â_2 Â_1)[out, src], computed with plain loops
    tot = sum(Ah[1, out, a] * Ah[0, a, src] for a in range(n))
    assert G.graph["total"] == pytest.approx(tot)


def test_rollout_mass_to_all_inputs_sums_to_one_per_level():
    rng = np.random.default_rng(5)
    L, n = 3, 4
    A = _stochastic(rng, L, n, n)
    G = figures.attention_graph(A, list("abcd"), method="rollout", output=2)
    for l in range(1, L + 1):
        s = sum(d["through"] for (u, v, d) in G.edges(data=True) if u[0] == l)
        assert s == pytest.approx(1.0)


def _nx_maxflow(A, top, out, src):
    """The max-flow value from (top, out) to (0, src) (to a super sink fed by every input when src is
    None) by networkx's own solver on the graph written out here: an implementation independent of
    both igraph (the figure's edge flows) and the flow method's compiled kernel."""
    Ah = _ares(A)
    n = A.shape[-1]
    H = nx.DiGraph()
    for l in range(1, top + 1):
        for i in range(n):
            for j in range(n):
                H.add_edge((l, i), (l - 1, j), capacity=float(Ah[l - 1, i, j]))
    sink = (0, src) if src is not None else "sink"
    if src is None:
        for j in range(n):
            H.add_edge((0, j), "sink", capacity=float("inf"))
    return nx.maximum_flow_value(H, (top, out), sink)


def test_flow_edge_flows_are_a_maximum_flow():
    """The flow graph's edge flows (from attnviz.methods.flow.edge_flows) are a feasible flow whose
    value is the maximum: networkx's max-flow value and the flow method's own raw value (compiled
    kernel) for the pair, to every input or to the super sink, from the top layer or a lower one."""
    from attnviz.methods.flow import flow

    rng = np.random.default_rng(6)
    L, n = 3, 4
    A = _stochastic(rng, L, n, n)
    raw = flow(A, normalize=False)  # the flow method's values (compiled Dinic, or igraph without numba)
    for out, src, top in [(0, 3, None), (2, 1, None), (1, 2, 2), (2, None, None), (3, None, 1)]:
        G = figures.attention_graph(A, list("abcd"), method="flow", output=out, source=src, top=top)
        t = L if top is None else top
        assert G.graph["total"] == pytest.approx(_nx_maxflow(A, t, out, src), rel=1e-9)
        if src is not None:
            assert G.graph["total"] == pytest.approx(raw[t - 1, out, src], rel=1e-9)
        else:  # Â's rows sum to 1: all of the output's unit reaches the inputs
            assert G.graph["total"] == pytest.approx(1.0, rel=1e-12)
        for u, v, d in G.edges(data=True):
            assert -1e-12 <= d["through"] <= d["weight"] + 1e-12
        for node in G.nodes:  # conservation at inner nodes
            if node == (t, out) or node[0] == 0 and (src is None or node == (0, src)):
                continue
            inflow = sum(G.edges[p, node]["through"] for p in G.predecessors(node))
            outflow = sum(G.edges[node, s]["through"] for s in G.successors(node))
            assert inflow == pytest.approx(outflow, abs=1e-12)
        for l in range(1, t + 1):  # every level carries the whole flow
            assert sum(d["through"] for u, v, d in G.edges(data=True) if u[0] == l) == pytest.approx(
                G.graph["total"], abs=1e-12)


def test_ratio_heatmap_short_and_long():
    """Context mixing's per-token ratios: a short text names every row (22 px each); 160 tokens make a
    map LONG_MAP_PX tall with every k-th row named and each token on hover, the values unchanged."""
    rng = np.random.default_rng(5)
    for n in (10, 160):
        R = rng.random((6, n))
        labels = text.token_labels([f"w{i}" for i in range(n)])
        fig = figures.ratio_heatmap(R, labels, "AttnResLn-N")
        hm = fig.data[0]
        np.testing.assert_allclose(np.asarray(hm.z, dtype=float), 100 * R.T)
        if n == 10:
            assert list(hm.y) == labels and fig.layout.height == 22 * n + 120
            continue
        assert fig.layout.height == figures.LONG_MAP_PX + 120 < 22 * n
        k = figures.row_label_every(n)
        assert k > 1 and list(fig.layout.yaxis.tickvals) == list(range(0, n, k))
        assert list(fig.layout.yaxis.ticktext) == [labels[i] for i in range(0, n, k)]
        assert [row[0] for row in hm.text] == labels  # every token on hover


def test_graph_figure_hides_light_edges():
    rng = np.random.default_rng(7)
    A = _stochastic(rng, 2, 5, 5)
    G = figures.attention_graph(A, list("abcde"))
    thr = 0.08
    fig = figures.graph_figure(G, threshold=thr)
    mids = next(t for t in fig.data if t.name == "edge values")
    weights = sorted(c[3] for c in mids.customdata)
    expect = sorted(d["weight"] for *_, d in G.edges(data=True) if d["weight"] >= thr)
    np.testing.assert_allclose(weights, expect)
    nodes = next(t for t in fig.data if t.name == "tokens")
    assert len(nodes.x) == 3 * 5


def test_graph_figure_top_labels_are_slanted_and_mark_the_output():
    """The top row's tokens are slanted annotations (upright text labels ran into each other at
    12 tokens on a 1024 px screen), one per token at the top layer, the chosen output in red."""
    rng = np.random.default_rng(3)
    A = _stochastic(rng, 3, 6, 6)
    toks = ["[CLS]", "cabinet", "<b>x", "[MASK]", "on", "[SEP]"]
    G = figures.attention_graph(A, toks, method="rollout", output=3)
    fig = figures.graph_figure(G, threshold=0.05)
    ann = [a for a in fig.layout.annotations if a.y == 3]
    assert [a.x for a in ann] == list(range(6))
    assert [a.text for a in ann] == text.token_labels(toks)  # "2·&lt;b&gt;x": escaped, not markup
    assert all(a.textangle == -60 for a in ann)
    assert [a.font.color for a in ann].count(figures.HIGHLIGHT) == 1 and ann[3].font.color == figures.HIGHLIGHT
    nodes = next(t for t in fig.data if t.name == "tokens")
    assert not nodes.text  # no upright labels on the nodes any more
    assert fig.layout.margin.t >= 5 * len("2·<b>x")


# ------------------------------------------------------------------------------------ export


@pytest.fixture(scope="module")
def small_analysis(make_tiny):
    import attnviz

    lm = make_tiny("bert")
    return attnviz.analyze(lm, "the keys to the cabinet [MASK] on the table .",
                           methods=["attention", "rollout", "attn_res_ln"])


def test_json_export_round_trip(small_analysis):
    import attnviz

    a = small_analysis
    d = json.loads(export.to_json(a))
    assert d["attnviz_version"] == attnviz.__version__ and d["spec"] == a.spec
    assert d["tokens"] == a.tokens and d["target"] == a.target
    assert [tuple(p) for p in d["prediction"]] == [(t, pytest.approx(p)) for t, p in a.prediction]
    for name, m in a.maps.items():
        np.testing.assert_array_equal(np.array(d["maps"][name]["layer"]), m.layer)
        if m.heads is None:
            assert d["maps"][name]["heads"] is None
        else:
            np.testing.assert_array_equal(np.array(d["maps"][name]["heads"]), m.heads)
    for name, v in a.mixing.items():
        np.testing.assert_array_equal(np.array(d["mixing"][name]), v)


def test_npz_export_round_trip(small_analysis):
    a = small_analysis
    d = export.read_npz(export.to_npz(a))
    assert d["tokens"] == a.tokens and d["spec"] == a.spec and d["methods"] == list(a.maps)
    np.testing.assert_array_equal(d["special"], a.special)
    for name, m in a.maps.items():
        np.testing.assert_array_equal(d["maps"][name]["layer"], m.layer)
        if m.heads is not None:
            np.testing.assert_array_equal(d["maps"][name]["heads"], m.heads)


@pytest.mark.slow
def test_figure_bytes_png_and_svg():
    fig = figures.heatmap(np.eye(3), text.token_labels(["a", "<b>", "c"]), "t")
    png = export.figure_bytes(fig, "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    svg = export.figure_bytes(fig, "svg").decode()
    assert svg.lstrip().startswith("<svg")
    # the token "<b>" is drawn as the text "<b>" (escaped in the SVG), not as bold markup
    import html
    import re
    texts = [html.unescape(t) for t in re.findall(r">([^<]+)</text>", svg)]
    assert "1·<b>" in texts and "<b>" not in svg
    with pytest.raises(ValueError):
        export.figure_bytes(fig, "gif")


@pytest.mark.parametrize("L, ticks", [(1, [1]), (6, [1, 2, 3, 4, 5, 6]), (20, list(range(1, 21))),
                                      (30, [1, 5, 10, 15, 20, 25, 30]), (22, [1, 5, 10, 15, 20])])
def test_layer_axis_shows_the_layers_only(L, ticks):
    """A figure over layers 1..L spans exactly them (no layer 0 or L + 1 from autorange's padding); past
    20 layers only 1 and every fifth layer are labelled."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=list(range(1, L + 1)), y=[1.0] * L))
    figures.layer_axis(fig, L)
    ax = fig.to_dict()["layout"]["xaxis"]
    assert ax["range"] == [0.5, L + 0.5] and list(ax["tickvals"]) == ticks and ax["tickmode"] == "array"
