"""Screenshots for docs/app.md: Explore (5 maps, a head picked), the minimal pair, the line view and
Adversarial, at 1024×768 and 1920×1080, from a running app (real headless Chromium).

    attnviz app --port 8765 &        # or, in a checkout: streamlit run app.py --server.address 127.0.0.1 --server.port 8765 &
    python docs/images/shoot.py http://127.0.0.1:8765
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
SPEC = "builtin:agreement"
FIVE = "attention,rollout,flow,value_norm,attn_res_ln"
TEXT = "the keys to the cabinet [MASK] on the table ."


def shoot(base: str) -> None:
    views = {
        "explore": (f"/?model={SPEC}&methods={FIVE}&layer=3&head=2&text={quote(TEXT)}", ".st-key-maps .heatmaplayer",
                    ".st-key-maps"),
        "minimal_pair": (f"/minimal_pair?page=minimal_pair&model={SPEC}&methods=attention,rollout&layer=4"
                         f"&pair_a={quote('the key to the cabinet [MASK] on the table .')}"
                         f"&pair_b={quote('the key to the cabinets [MASK] on the table .')}",
                         ".st-key-pair_diff .heatmaplayer", ".st-key-pair_a_maps"),
        "minimal_pair_diff": (f"/minimal_pair?page=minimal_pair&model={SPEC}&methods=attention,rollout&layer=4"
                              f"&pair_a={quote('the key to the cabinet [MASK] on the table .')}"
                              f"&pair_b={quote('the key to the cabinets [MASK] on the table .')}",
                              ".st-key-pair_diff .heatmaplayer", ".st-key-pair_b_maps"),
        "lines": (f"/?model={SPEC}&methods=attention,attn_res_ln&layer=3&head=2&draw=lines&text={quote(TEXT)}",
                  ".st-key-lines_attention iframe", ".st-key-lines_attention"),
        "adversarial": (f"/adversarial?page=adversarial&model={SPEC}&adv_layer=6&adv_head=2", None,
                        ".st-key-adv_frontier_chart"),
    }
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for w, h in ((1024, 768), (1920, 1080)):
            for name, (path, wait, scroll) in views.items():
                page = b.new_page(viewport={"width": w, "height": h})
                page.goto(base + path)
                if name == "adversarial":
                    page.get_by_role("button", name="Compute the frontier").click()
                    wait = ".st-key-adv_frontier_chart .js-plotly-plot"
                page.wait_for_selector(wait, timeout=300_000)
                time.sleep(2)
                page.evaluate("""s => { document.querySelector(s).scrollIntoView({block: 'start'});
                                        const m = document.querySelector('[data-testid=stMain]');
                                        if (m) m.scrollTop -= 70; }""", scroll)  # below the header
                time.sleep(1)
                if name == "minimal_pair_diff":
                    page.evaluate("() => { document.querySelector('[data-testid=stMain]').scrollTop += 380; }")
                    time.sleep(0.5)
                if name == "lines":  # hover the [MASK] on the receiving side: only its lines stay
                    fr = page.frame_locator(".st-key-lines_attention iframe")
                    fr.locator("text.tok.dst[data-pos='6']").hover()
                    time.sleep(0.5)
                page.screenshot(path=str(OUT / f"{name}_{w}x{h}.png"))
                page.close()
        b.close()


if __name__ == "__main__":
    shoot(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8765")
