"""The Heads page's grid on a many-layer model: where the time goes, before and after, in one run.

    python bench/heads_grid.py                                  # pkg:smollm2, the old grid from git d51dcb4
    python bench/heads_grid.py --old-rev d51dcb4 --model pkg:smollm2 --repeats 3
    python bench/heads_grid.py --url http://127.0.0.1:8637      # also: a running app's Heads page, end to end

For the attention maps of one sentence (attnviz.analyze, not timed) it builds the grid both ways:
"old" is attnviz/figures/heads.py of --old-rev (one subplot per map, an invisible click scatter per
map) with the old Heads page's layout changes (a domain per row of axes), "new" is this checkout's
head_grid (one heatmap for every map, one click scatter) with the page's layout. Per way: seconds to
build the figure in Python, seconds and MB to serialise it (plotly's JSON, what Streamlit sends), and
the milliseconds Plotly.newPlot takes in headless Chromium at 1920 px (median of --repeats). With
--url: seconds from opening the running app's Heads page on the model (its analysis cached by a first
visit) to its title shown (the app's own start: session, script, sidebar) and to the grid drawn and the
app idle, medians of --repeats.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHROMIUM = os.environ.get("ATTNVIZ_CHROMIUM", "/usr/bin/chromium")
SENTENCE = "The keys to the cabinet by the old door [MASK]"


def old_module(rev: str):
    """attnviz/figures/heads.py of git revision `rev`, imported as a module of the figures package."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:attnviz/figures/heads.py"], check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType("attnviz.figures._old_heads")
    mod.__package__ = "attnviz.figures"
    exec(compile(src, f"{rev}:heads.py", "exec"), mod.__dict__)
    return mod


def old_grid(mod, heads, layer_maps, labels, value_name):
    """The old page: mod.head_grid, then a domain per row of subplots and horizontal layer names."""
    L, H = heads.shape[:2]
    fig = mod.head_grid(heads, layer_maps, labels, value_name=value_name, layer_label="head mean")
    ROW_PX, GAP_PX = (50, 6) if L > 12 else (90, 10)
    fig.update_layout(height=ROW_PX * L + 130, margin=dict(l=10, r=44, t=120, b=10))
    C = H + 1
    for l in range(L):
        top = 1 - l * ROW_PX / (ROW_PX * L)
        dom = [max(0.0, top - (ROW_PX - GAP_PX) / (ROW_PX * L)), top]
        for c in range(C):
            k = l * C + c + 1
            fig.layout["yaxis" if k == 1 else f"yaxis{k}"].domain = dom
    for ann in fig.layout.annotations:
        if str(ann.text).startswith("layer ") and ann.textangle == 90:
            l = int(ann.text.split()[1]) - 1
            ann.update(text="L" + str(l + 1), textangle=0, xanchor="left", font=dict(size=12),
                       y=1 - (l * ROW_PX + (ROW_PX - GAP_PX) / 2) / (ROW_PX * L))
        else:
            ann.update(font=dict(size=11))
    return fig


def new_grid(heads, layer_maps, labels, value_name):
    """This checkout's page: figures.head_grid as one heatmap, the page's margins and colour bar."""
    from attnviz import figures

    L = heads.shape[0]
    ROW_PX = 50 if L > 12 else 90
    fig = figures.head_grid(heads, layer_maps, labels, value_name=value_name, layer_label="head mean",
                            row_px=ROW_PX, column_titles=False)
    fig.update_layout(height=ROW_PX * L + 16, margin=dict(l=44, r=78, t=8, b=8))
    fig.data[0].colorbar.update(lenmode="pixels", len=min(260, ROW_PX * L), thickness=12, x=1.0, xanchor="left",
                                y=1.0, yanchor="top")
    return fig


def browser_ms(specs: dict, repeats: int) -> dict:
    """{name: median ms of Plotly.newPlot} for {name: figure JSON} in headless Chromium (1920 px)."""
    import plotly
    from playwright.sync_api import sync_playwright

    js = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
    out = {}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        pg = b.new_page(viewport={"width": 1920, "height": 1080})
        pg.set_content("<div id=g style='width:1800px'></div>")
        pg.add_script_tag(path=js)
        for name, spec in specs.items():
            ts = [pg.evaluate("""async (s) => { const f = JSON.parse(s); const g = document.getElementById('g');
                Plotly.purge(g); const t = performance.now(); await Plotly.newPlot(g, f.data, f.layout);
                return performance.now() - t; }""", spec) for _ in range(repeats)]
            out[name] = statistics.median(ts)
        b.close()
    return out


def page_seconds(url: str, spec: str, repeats: int) -> list:
    """[(seconds to the page's title, seconds to its grid drawn and the app idle)] from opening the Heads
    page of a running app on `spec` (after one visit that computes the analysis)."""
    from urllib.parse import quote

    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        for r in range(repeats + 1):
            pg = b.new_page(viewport={"width": 1920, "height": 1080})
            t0 = time.time()
            pg.goto(f"{url}/heads?model={quote(spec)}&page=heads")
            pg.wait_for_selector("h1:has-text('Heads')", timeout=900_000)
            t1 = time.time()
            pg.wait_for_selector(".st-key-head_grid .js-plotly-plot .heatmaplayer image", timeout=900_000)
            pg.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=900_000)
            if r:
                out.append((t1 - t0, time.time() - t0))
            pg.close()
        b.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pkg:smollm2")
    ap.add_argument("--old-rev", default="d51dcb4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--url", default=None)
    args = ap.parse_args()
    import plotly.io as pio

    import attnviz
    from attnviz.text import token_labels

    lm = attnviz.load_model(args.model)
    a = attnviz.analyze(lm, SENTENCE, methods=["attention"])
    mp = a.maps["attention"]
    labels = token_labels(a.tokens)
    L, H, n = mp.heads.shape[:3]
    print(f"{args.model}: {L} layers x {H} heads (+ the layer map) = {L * (H + 1)} maps of {n} x {n} tokens; "
          f"load average {os.getloadavg()[0]:.1f}")
    mod = old_module(args.old_rev)
    specs = {}
    for name, build in (("old", lambda: old_grid(mod, mp.heads, mp.layer, labels, "attention")),
                        ("new", lambda: new_grid(mp.heads, mp.layer, labels, "attention"))):
        tb, ts = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fig = build()
            tb.append(time.perf_counter() - t)
            t = time.perf_counter()
            spec = pio.to_json(fig, validate=False)
            ts.append(time.perf_counter() - t)
        specs[name] = spec
        print(f"{name} ({args.old_rev if name == 'old' else 'this checkout'}): {len(fig.data)} traces; build "
              f"{statistics.median(tb):.2f} s, serialise {statistics.median(ts):.2f} s ({len(spec) / 1e6:.2f} MB)", flush=True)
    ms = browser_ms(specs, args.repeats)
    print(f"Plotly.newPlot in Chromium: old {ms['old']:.0f} ms, new {ms['new']:.0f} ms ({ms['old'] / ms['new']:.0f}x)")
    if args.url:
        secs = page_seconds(args.url, args.model, args.repeats)
        print(f"app at {args.url}, analysis cached: Heads page open -> its title shown: median "
              f"{statistics.median(s[0] for s in secs):.1f} s; -> grid drawn and app idle: median "
              f"{statistics.median(s[1] for s in secs):.1f} s ({', '.join(f'{s[1]:.1f}' for s in secs)})")


if __name__ == "__main__":
    main()
