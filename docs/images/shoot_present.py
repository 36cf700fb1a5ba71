"""Screenshots of every page in presentation mode (present=1) at 1024×768 and 1920×1080, as the
projector shows them (the first screen, no scrolling), for docs/app.md; and, per shot, the smallest
font in its figures and where the first chart starts.

    attnviz app --port 8765 &        # or, in a checkout: streamlit run app.py --server.address 127.0.0.1 --server.port 8765 &
    python docs/images/shoot_present.py http://127.0.0.1:8765
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import sync_playwright

OUT = Path(__file__).resolve().parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
FONTS_JS = """() => { const out = [];
  for (const g of document.querySelectorAll('.js-plotly-plot')) for (const e of g.querySelectorAll('svg text')) {
    if (!e.textContent.trim() || e.closest('.hoverlayer')) continue;
    const r = e.getBoundingClientRect(); if (r.width <= 0 || r.height <= 0) continue;
    out.push(parseFloat(getComputedStyle(e).fontSize)); }
  const c = document.querySelector('.js-plotly-plot, iframe');
  return [out.length ? Math.min(...out) : null, out.length, c ? Math.round(c.getBoundingClientRect().top) : null]; }"""

# name -> (path and query, what to wait for)
PAGES = {
    "explore": ("/?present=1", ".st-key-maps .heatmaplayer"),
    "lines": ("/?present=1&draw=lines&methods=attention", ".st-key-lines_attention iframe"),
    "minimal_pair": ("/minimal_pair?page=minimal_pair&present=1", ".st-key-pair_present_attention .heatmaplayer"),
    "heads": ("/heads?page=heads&present=1", ".st-key-head_grid .heatmaplayer"),
    "flow_graph": ("/flow_graph?page=flow_graph&present=1", ".js-plotly-plot .scatterlayer"),
    "faithfulness": ("/faithfulness?page=faithfulness&present=1", ".st-key-fa_bars .js-plotly-plot"),
    "adversarial": ("/adversarial?page=adversarial&present=1&adv_steps=60&adv_points=8&adv_restarts=1&adv_jw_steps=0"
                    "&adv_layer=6&adv_head=2", ".st-key-adv_frontier_chart .js-plotly-plot"),
    "context_mixing": ("/context_mixing?page=context_mixing&present=1", ".st-key-cm_maps .js-plotly-plot"),
    "model": ("/model?page=model&present=1", "text=Self-check passed"),
    "about": ("/about?page=about&present=1", "text=What it shows"),
    "smollm2_explore": (f"/?present=1&model={quote('pkg:smollm2')}", ".st-key-maps .heatmaplayer"),
}


def idle(page) -> None:
    page.wait_for_timeout(500)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=600_000)
    page.wait_for_timeout(1500)


def shoot(base: str, only=None, sizes=((1024, 768), (1920, 1080))) -> None:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for w, h in sizes:
            page = b.new_page(viewport={"width": w, "height": h})
            for name, (path, wait) in PAGES.items():
                if only and name not in only:
                    continue
                t0 = time.time()
                page.goto(base + path)
                if name in ("faithfulness", "context_mixing"):  # on a loaded machine the estimate passes 5 s:
                    # the "Compute …" button is pressed
                    page.wait_for_selector(wait + ", button:has-text('Compute')", timeout=600_000)
                    idle(page)
                    ask = page.locator("button:has-text('Compute')")
                    if ask.count() and not page.locator(wait).count():
                        ask.first.click()
                if name == "adversarial":
                    go = page.get_by_role("button", name="Compute the frontier")
                    go.wait_for(timeout=600_000)
                    idle(page)
                    if not page.locator(wait).count():
                        go.click()
                page.wait_for_selector(wait, timeout=600_000)
                idle(page)
                page.evaluate("() => { const m = document.querySelector('[data-testid=stMain]'); if (m) m.scrollTop = 0; }")
                small, n, top = page.evaluate(FONTS_JS)
                page.screenshot(path=str(OUT / f"present_{name}_{w}x{h}.png"))
                print(f"{name:16s} {w}x{h}: {n} figure texts, smallest {small} px, first chart at {top} px "
                      f"({time.time() - t0:.0f} s)", flush=True)
            page.close()
        b.close()


if __name__ == "__main__":
    # python shoot_present.py URL [page,page,...] [WxH,WxH]
    shoot(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8765", sys.argv[2].split(",") if len(sys.argv) > 2 else None,
          [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")] if len(sys.argv) > 3 else ((1024, 768), (1920, 1080)))
