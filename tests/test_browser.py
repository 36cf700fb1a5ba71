"""A real headless Chromium against `streamlit run app.py`: type a sentence, wait for the heatmaps,
check the token labels and the values drawn against attnviz.analyze, and save screenshots (to
$ATTNVIZ_SCREENSHOTS or /tmp/attnviz_screenshots). Needs /usr/bin/chromium (Debian chromium) and
python playwright; never `playwright install`."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from conftest import plotly_array
import attnviz

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = Path(os.environ.get("ATTNVIZ_SCREENSHOTS", "/tmp/attnviz_screenshots"))

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing (apt-get install chromium)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




@pytest.fixture(scope="module")
def spec(app_spec):
    return app_spec


@pytest.fixture(scope="module")
def server():
    """`streamlit run app.py` on a free port of 127.0.0.1 -> base URL; stopped afterwards."""
    port = free_port()
    env = dict(os.environ, ATTNVIZ_TORCH_THREADS="1", HF_HUB_OFFLINE="1")
    log = open(SHOTS.parent / f"attnviz_streamlit_{port}.log", "w") if SHOTS.parent.is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
                             "--server.address", "127.0.0.1", "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"streamlit exited with {proc.returncode}")
                time.sleep(0.3)
        else:
            raise RuntimeError("streamlit did not start within 60 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def arr(x):
    """Plotly data as the browser holds it -> float numpy array."""
    return plotly_array(x).astype(float)


def chart_js(page, key: str, expr: str):
    """Evaluate `expr` (a function of g, the plotly chart drawn with this Streamlit key); typed
    arrays (plotly decodes numpy data into them) come back as plain lists."""
    return page.locator(f".st-key-{key} .js-plotly-plot").first.evaluate(
        """(g, expr) => { const plain = v => (ArrayBuffer.isView(v) || Array.isArray(v)) ? Array.from(v, plain)
                                              : (v && v._inputArray) ? {dtype: v.dtype, bdata: v.bdata, shape: v.shape} : v;
                          return plain(eval(expr)(g)); }""", expr)


def maps_title_has(page, text: str, timeout=60_000):
    """Wait until the first panel's title on the Explore maps contains `text`."""
    page.wait_for_function(
        """want => { const g = document.querySelector('.st-key-maps .js-plotly-plot');
                     return !!(g && g.layout && g.layout.annotations && g.layout.annotations[0].text.includes(want)); }""",
        arg=text, timeout=timeout)


def wait_for_tokens(page, labels, timeout=120_000):
    """Wait until the first heatmap's y axis shows exactly these labels (top to bottom)."""
    page.wait_for_function(
        """want => { const g = document.querySelector('.st-key-maps .js-plotly-plot');
                     if (!g || !g.querySelector('.heatmaplayer')) return false;
                     const t = [...g.querySelectorAll('.yaxislayer-above .ytick text')].map(e => e.textContent);
                     const w = JSON.stringify(want);  // DOM order depends on the tick mode
                     return JSON.stringify(t) === w || JSON.stringify([...t].reverse()) === w; }""",
        arg=labels, timeout=timeout)


def test_type_a_sentence_and_read_the_heatmaps(server, browser, spec):
    SHOTS.mkdir(parents=True, exist_ok=True)
    lm = attnviz.load_model(spec)
    page = browser.new_page(viewport={"width": 1500, "height": 2000})
    page.goto(f"{server}/?model={quote(spec)}&methods=attention,rollout,attn_res_ln&cells=true")
    page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=120_000)
    page.screenshot(path=str(SHOTS / "01_open.png"))

    text = "the key to the cabinets [MASK] on the table ."
    box = page.locator("section[data-testid='stSidebar'] textarea").first
    box.fill(text)
    box.press("Control+Enter")
    ref = attnviz.analyze(lm, text, methods=["attention", "rollout", "attn_res_ln"])
    labels = [f"{i}·{t}" for i, t in enumerate(ref.tokens)]
    wait_for_tokens(page, labels)
    time.sleep(0.5)
    page.screenshot(path=str(SHOTS / "02_typed.png"))

    # what a person reads: the tick labels and the numbers written in the cells (2 decimals)
    xt = chart_js(page, "maps", "g => [...g.querySelectorAll('.xaxislayer-above .xtick text')].map(e => e.textContent)")
    assert xt[:len(labels)] == labels
    cells = chart_js(page, "maps", "g => [...g.querySelector('.heatmaplayer').querySelectorAll('text')].map(e => e.textContent)")
    n = len(labels)
    first = [float(c) for c in cells[: n * n]]
    np.testing.assert_allclose(np.array(first).reshape(n, n), ref.maps["attention"].layer[0], atol=0.0051)
    # the exact values behind the picture, for every panel
    names = ["attention", "rollout", "attn_res_ln"]
    zs = chart_js(page, "maps", "g => g.data.filter(d => d.type === 'heatmap').map(d => d.z)")
    assert len(zs) == 3
    for z, m in zip(zs, names):
        np.testing.assert_allclose(arr(z), ref.maps[m].layer[0], rtol=1e-6, atol=1e-9)
    if ref.prediction:  # the prediction at [MASK]: top-5 labels and probabilities as drawn
        pred = chart_js(page, "prediction", "g => [g.data[0].y, g.data[0].x]")
        assert pred[0] == [f"{k + 1}·{t}" for k, (t, _) in enumerate(ref.prediction)]
        np.testing.assert_allclose(arr(pred[1]), [p for _, p in ref.prediction], rtol=1e-6)

    # move the layer slider with the keyboard: layer 2
    slider = page.get_by_role("slider").first
    slider.focus()
    slider.press("ArrowRight")
    maps_title_has(page, "layer 2")
    z = chart_js(page, "maps", "g => g.data[0].z")
    np.testing.assert_allclose(arr(z), ref.maps["attention"].layer[1], rtol=1e-6, atol=1e-9)
    href = page.evaluate("location.href")
    assert "layer=2" in href and "methods=attention%2Crollout%2Cattn_res_ln" in href
    page.screenshot(path=str(SHOTS / "03_layer2.png"))

    # the URL reproduces the view in a new browser context
    ctx = browser.new_context(viewport={"width": 1500, "height": 1400})
    p2 = ctx.new_page()
    p2.goto(href)
    wait_for_tokens(p2, labels)
    maps_title_has(p2, "layer 2")
    z2 = chart_js(p2, "maps", "g => g.data[0].z")
    np.testing.assert_allclose(arr(z2), ref.maps["attention"].layer[1], rtol=1e-6, atol=1e-9)
    ctx.close()
    page.close()


def test_heads_click_opens_explore_and_script_text_is_text(server, browser, spec):
    SHOTS.mkdir(parents=True, exist_ok=True)
    lm = attnviz.load_model(spec)
    text = "<script>alert(1)</script> <b>the</b> dog [MASK] ."
    page = browser.new_page(viewport={"width": 1500, "height": 1400})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{server}/heads?model={quote(spec)}&text={quote(text)}")
    page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=120_000)
    time.sleep(0.5)
    page.screenshot(path=str(SHOTS / "04_heads.png"))
    # click the cell of layer 2, head 3 (subplots in row-major order, H + 1 columns)
    H = lm.n_heads
    boxes = page.eval_on_selector_all(".st-key-head_grid .js-plotly-plot .nsewdrag",
                                      "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })")
    boxes = sorted(boxes, key=lambda r: (round(r[1]), r[0]))
    x, y, w, h = boxes[1 * (H + 1) + 2]
    page.mouse.move(x + w * 0.3, y + h * 0.3)
    page.mouse.click(x + w * 0.3, y + h * 0.3)
    maps_title_has(page, "layer 2 · head 3")
    ref = attnviz.analyze(lm, text, methods=["attention"])
    z = chart_js(page, "maps", "g => g.data[0].z")
    np.testing.assert_allclose(arr(z), ref.maps["attention"].heads[1, 2], rtol=1e-6, atol=1e-9)
    ticks = chart_js(page, "maps", "g => [...g.querySelectorAll('.xaxislayer-above .xtick text')].map(e => e.textContent)")
    assert ticks[: len(ref.tokens)] == [f"{i}·{t}" for i, t in enumerate(ref.tokens)]  # every token, as text
    html = page.locator(".st-key-maps").inner_html()
    assert "<script" not in html.lower() and "<b>" not in html
    assert page.evaluate("location.pathname") == "/" and "page=explore" in page.evaluate("location.search")
    assert dialogs == []  # nothing was executed
    page.screenshot(path=str(SHOTS / "05_opened_from_heads.png"))
    page.close()


def test_flow_graph_and_model_pages_render(server, browser, spec):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1500, "height": 1600})
    page.goto(f"{server}/flow_graph?model={quote(spec)}")
    page.wait_for_selector(".js-plotly-plot .scatterlayer", timeout=120_000)
    names = chart_js(page, "graph", "g => g.data.map(d => d.name)")
    assert "tokens" in names and any(n.startswith("paths") for n in names)
    page.screenshot(path=str(SHOTS / "06_flow_graph.png"))
    page.get_by_role("link", name="Model").click()
    page.wait_for_selector("text=Self-check passed", timeout=60_000)
    page.screenshot(path=str(SHOTS / "07_model.png"))
    page.get_by_role("link", name="About").click()
    page.wait_for_selector("text=What it shows", timeout=60_000)
    page.screenshot(path=str(SHOTS / "08_about.png"))
    page.close()


def test_downloads_are_real_files(server, browser, spec):
    import io
    import json

    ctx = browser.new_context(accept_downloads=True, viewport={"width": 1500, "height": 1400})
    page = ctx.new_page()
    page.goto(f"{server}/?model={quote(spec)}&methods=attention,rollout")
    page.wait_for_selector(".st-key-maps .heatmaplayer", timeout=120_000)
    page.get_by_text("Download").first.click()
    got = {}
    for label in ("Analysis as JSON", "Analysis as NPZ", "Maps as SVG", "Maps as PNG"):
        with page.expect_download(timeout=90_000) as d:
            page.get_by_role("button", name=label).click()
        got[label] = Path(d.value.path()).read_bytes()
    ref = attnviz.analyze(attnviz.load_model(spec), "the keys to the cabinet [MASK] on the table .",
                          methods=["attention", "rollout"])
    doc = json.loads(got["Analysis as JSON"])
    assert doc["spec"] == spec and doc["tokens"] == ref.tokens and doc["attnviz_version"] == attnviz.__version__
    np.testing.assert_allclose(np.array(doc["maps"]["rollout"]["layer"]), ref.maps["rollout"].layer, rtol=1e-6)
    with np.load(io.BytesIO(got["Analysis as NPZ"])) as z:
        np.testing.assert_allclose(z["maps/attention/heads"], ref.maps["attention"].heads, rtol=1e-6)
    assert got["Maps as SVG"].lstrip().startswith(b"<svg")
    assert got["Maps as PNG"][:8] == b"\x89PNG\r\n\x1a\n"
    ctx.close()
