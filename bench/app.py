"""Benchmark the app in a real browser: page load to first heatmap, and a layer-slider move to the
re-rendered heatmaps, against references measured in the same run.

    python bench/app.py [--spec builtin:agreement] [--repeats 7] [--cells]

--cells: with the "Numbers in cells" toggle on (the app's default is off; the numbers are 432
SVG text elements for 3 maps of 12 tokens, and the browser draws the maps about twice as slowly).

References: (1) the same heatmap figure drawn by plotly.js from a static HTML file in the same
browser (the floor for drawing it), (2) one plain forward pass of the model in this process.
Needs /usr/bin/chromium and python playwright. Torch runs on one thread here and in the server.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
TEXT = "the keys to the cabinet [MASK] on the table ."
METHODS = "attention,rollout,attn_res_ln"  # two cheap maps drawn first, ATTNRESLN streamed in after


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int):
    # ATTNVIZ_ASK_SECONDS: the streamed maps start without waiting for the estimate's button
    env = dict(os.environ, ATTNVIZ_TORCH_THREADS="1", HF_HUB_OFFLINE="1", ATTNVIZ_ASK_SECONDS="600")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
                             "--server.address", "127.0.0.1", "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("streamlit did not start")


NOUNS = ["box", "door", "car", "house", "garden", "kitchen", "window", "shelf", "desk", "room", "bag", "drawer"]
# the maps chart shows the new sentence (a token label holds the word) with at least k heatmaps
WAIT_NEW = """([w, k]) => { const g = document.querySelector('.st-key-maps .js-plotly-plot');
    if (!g || !g.data || !g.querySelector('.heatmaplayer')) return false;
    const hm = g.data.filter(t => t.type === 'heatmap');
    return hm.length >= k && hm.some(t => (t.x || []).some(x => String(x).includes(w))); }"""
WAIT_MAPS = """want => { const g = document.querySelector('.st-key-maps .js-plotly-plot');
    return !!(g && g.querySelector('.heatmaplayer') && g.layout.title && g.layout.title.text.toLowerCase().includes(want)); }"""


def open_maps(browser, url):
    """A fresh browser context on url, once the Explore maps of layer 1 are drawn -> (context, page)."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1400})
    page = ctx.new_page()
    page.goto(url)
    page.wait_for_function(WAIT_MAPS, arg="layer 1", timeout=180_000)
    return ctx, page


def med(xs):
    return statistics.median(xs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=None, help="model spec (default: builtin:agreement, else pkg:minilm)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cells", action="store_true", help="numbers written in the heatmap cells")
    ap.add_argument("--adversarial", action="store_true",
                    help="only the Adversarial page: a JSD-slider step to the redrawn frontier chart")
    args = ap.parse_args(argv)
    if args.adversarial:
        return adversarial(args)

    import torch
    torch.set_num_threads(1)
    import attnviz
    from attnviz import figures
    from attnviz.models.load import builtin_names
    from playwright.sync_api import sync_playwright

    spec = args.spec or ("builtin:agreement" if "agreement" in builtin_names() else "pkg:minilm")
    lm = attnviz.load_model(spec)

    # reference 1: one plain forward pass
    enc = lm.tokenizer(TEXT, return_tensors="pt")
    fwd = []
    with torch.inference_mode():
        lm.model(**enc)
        for _ in range(20):
            t = time.perf_counter()
            lm.model(**enc)
            fwd.append(time.perf_counter() - t)
    t_fwd = med(fwd)

    # the figure the app draws at layer 1, as a static page (reference 2)
    a = attnviz.analyze(lm, TEXT, methods=METHODS.split(","))
    view = figures.make_view(a.tokens, a.special, a.target)
    fig = figures.heatmaps([view.apply(a.maps[m].layer[0], attnviz.METHODS[m].rows_sum_to_one) for m in METHODS.split(",")],
                         view.labels, [f"<b>{m}</b><br>layer map" for m in METHODS.split(",")], cell_text=args.cells,
                         title="Layer 1 · all heads (layer maps)")
    static = Path(tempfile.mkdtemp()) / "static.html"
    fig.write_html(static, include_plotlyjs=True, full_html=True, div_id="fig")

    port = free_port()
    t_start = time.perf_counter()
    server = start_server(port)
    t_server = time.perf_counter() - t_start
    url = (f"http://127.0.0.1:{port}/?model={quote(spec)}&text={quote(TEXT)}&methods={quote(METHODS)}"
           f"&cells={'true' if args.cells else 'false'}")
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)

            def load(u, wait_js, arg=None):
                ctx = b.new_context(viewport={"width": 1500, "height": 1400})
                page = ctx.new_page()
                t = time.perf_counter()
                page.goto(u)
                page.wait_for_function(wait_js, arg=arg, timeout=180_000)
                return time.perf_counter() - t, ctx, page

            cold, ctx, page = load(url, WAIT_MAPS, "layer 1")
            ctx.close()
            static_js = "() => { const g = document.getElementById('fig'); return !!(g && g.querySelector('.heatmaplayer image')); }"
            statics, warms = [], []
            for _ in range(args.repeats):
                t, ctx, _p = load(static.as_uri(), static_js)
                statics.append(t)
                ctx.close()
                t, ctx, page = load(url, WAIT_MAPS, "layer 1")
                warms.append(t)
                ctx.close()
            # a sentence typed (model loaded, the sentence new to the server): time to the first heatmap
            # of the new sentence (the cheap maps) and to all maps (the rest streamed in after them)
            ctx, page = open_maps(b, url)
            box = page.locator("textarea").first
            firsts, alls = [], []
            for w in NOUNS[:args.repeats]:
                box.fill(f"the keys to the {w} [MASK] on the table .")
                t = time.perf_counter()
                box.press("Control+Enter")
                page.wait_for_function(WAIT_NEW, arg=[w, 1], timeout=300_000)
                firsts.append(time.perf_counter() - t)
                page.wait_for_function(WAIT_NEW, arg=[w, len(METHODS.split(","))], timeout=600_000)
                alls.append(time.perf_counter() - t)
                time.sleep(0.5)
            ctx.close()
            # slider moves on one page: layer 1 -> 2 -> 1 -> 2 ...
            ctx, page = open_maps(b, url)
            slider = page.get_by_role("slider").first
            slider.focus()
            moves = []
            layer = 1
            for k in range(2 * args.repeats + 1):
                key, layer = ("ArrowRight", 2) if layer == 1 else ("ArrowLeft", 1)
                t = time.perf_counter()
                slider.press(key)
                page.wait_for_function(WAIT_MAPS, arg=f"layer {layer}", timeout=60_000)
                if k:  # the first move warms the fragment's code path
                    moves.append(time.perf_counter() - t)
                time.sleep(0.3)
            ctx.close()
            b.close()
    finally:
        server.terminate()
        server.wait(10)

    t_static, t_warm, t_move = med(statics), med(warms), med(moves)
    print(f"attnviz app benchmark — model {spec}, {len(a.tokens)} tokens, methods {METHODS}, "
          f"numbers in cells {'on' if args.cells else 'off'}, median of {args.repeats} (slider: {len(moves)} moves)")
    print(f"  reference: plain forward pass             {t_fwd * 1e3:9.1f} ms")
    print(f"  reference: same figure, static plotly page {t_static * 1e3:9.1f} ms")
    print(f"  server start (until the port answers)      {t_server * 1e3:9.1f} ms")
    print(f"  cold page load to first heatmap            {cold * 1e3:9.1f} ms   (imports + model load + analysis)")
    print(f"  warm page load to first heatmap            {t_warm * 1e3:9.1f} ms   = {t_warm / t_static:5.1f} x static page")
    t_first, t_all = med(firsts), med(alls)
    print(f"  sentence typed to its first heatmap        {t_first * 1e3:9.1f} ms   = {t_first / t_static:5.1f} x static page"
          f" = {t_first / t_fwd:6.1f} x forward pass   (budget 3000 ms: {'ok' if t_first <= 3 else 'OVER'})")
    print(f"  sentence typed to all {len(METHODS.split(','))} maps             {t_all * 1e3:9.1f} ms   = {t_all / t_static:5.1f} x static page"
          f" = {t_all / t_fwd:6.1f} x forward pass")
    print(f"  typed (first / all, ms): {' '.join(f'{x * 1e3:.0f}/{y * 1e3:.0f}' for x, y in zip(firsts, alls))}")
    print(f"  slider move to re-rendered heatmaps        {t_move * 1e3:9.1f} ms   = {t_move / t_static:5.2f} x static page"
          f" = {t_move / t_fwd:6.1f} x forward pass   (budget 500 ms: {'ok' if t_move <= 0.5 else 'OVER'})")
    print(f"  slider moves (ms): {' '.join(f'{m * 1e3:.0f}' for m in moves)}")


def adversarial(args) -> None:
    """The Adversarial page (builtin:agreement, layer 6 head 2, default search): press the button,
    then move the app's JSD slider with the keyboard and time each step until the frontier chart
    shows the new guide line and the prediction chart below is mounted again."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_server(port)
    url = f"http://127.0.0.1:{port}/adversarial?page=adversarial&model=builtin%3Aagreement&adv_layer=6&adv_head=2"
    wait = """o => { const g = document.querySelector('.st-key-adv_frontier_chart .js-plotly-plot');
                     return !!(g && g.layout && g.layout.shapes[0].x0 !== o
                               && document.querySelector('.st-key-adv_pred_after .js-plotly-plot')); }"""
    shape = "() => document.querySelector('.st-key-adv_frontier_chart .js-plotly-plot').layout.shapes[0].x0"
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = b.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(url)
            t = time.perf_counter()
            page.get_by_role("button", name="Compute the frontier").click()
            page.wait_for_selector(".st-key-adv_frontier_chart .js-plotly-plot", timeout=600_000)
            t_search = time.perf_counter() - t
            time.sleep(1)
            slider = page.get_by_role("slider").first
            slider.focus()
            moves = []
            for k in range(2 * args.repeats + 1):
                old = page.evaluate(shape)
                t = time.perf_counter()
                slider.press("ArrowRight" if k % 2 == 0 else "ArrowLeft")
                page.wait_for_function(wait, arg=old, timeout=60_000)
                if k:
                    moves.append(time.perf_counter() - t)
                time.sleep(0.4)
            b.close()
    finally:
        server.terminate()
        server.wait(10)
    print(f"attnviz adversarial page — builtin:agreement, layer 6 head 2, default search ({t_search:.1f} s "
          f"with page load)")
    print(f"  JSD slider step to the redrawn charts   {med(moves) * 1e3:9.1f} ms (median of {len(moves)})")
    print(f"  steps (ms): {' '.join(f'{m * 1e3:.0f}' for m in moves)}")


if __name__ == "__main__":
    main()
