"""The script Streamlit runs: `attnviz app`, or `streamlit run app.py` in a checkout (which calls run()).

Page config, shared state from the URL, the sidebar (model picker and sentence box), and the
navigation (st.navigation) over the files in views/ beside this file, found by path so that the app
runs the same from a checkout and from an installed wheel. The folder is not called pages/: that name
switches Streamlit into its legacy multipage mode, where a first request for /heads runs that file
alone. Set ATTNVIZ_TORCH_THREADS (e.g. 1 in tests) to cap torch's threads in the server.
"""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent

# (file in views/, title, icon); the optional pages appear only when their files exist
PAGE_FILES = [("explore.py", "Explore", ":material/grid_on:"),
              ("minimal_pair.py", "Minimal pair", ":material/compare:"),
              ("heads.py", "Heads", ":material/apps:"),
              ("flow_graph.py", "Flow graph", ":material/account_tree:"),
              ("faithfulness.py", "Faithfulness", ":material/fact_check:"),
              ("adversarial.py", "Adversarial", ":material/swap_horiz:"),
              ("context_mixing.py", "Context mixing", ":material/blender:"),
              ("model.py", "Model", ":material/memory:"),
              ("about.py", "About", ":material/help:")]


def run() -> None:
    """One run of the app: what Streamlit executes on every rerun."""
    if os.environ.get("ATTNVIZ_TORCH_THREADS"):
        import torch

        torch.set_num_threads(max(1, int(os.environ["ATTNVIZ_TORCH_THREADS"])))

    from attnviz.app import ui

    present = str(st.query_params.get("present", "")).lower() in ("1", "true", "yes")  # presentation mode
    st.set_page_config(page_title="attnviz", page_icon=":material/grid_on:", layout="wide",
                       initial_sidebar_state="collapsed" if present else "auto")

    ui.init_state()

    # the default page (Explore) is served at /; its own pathname is reserved but not served, so it gets
    # one nobody types ("start"), and /explore (the page's name typed as a path) is a hidden page that
    # switches to it, keeping the URL's state
    views = HERE / "views"
    pages = {Path(f).stem: st.Page(views / f, title=t, icon=i, default=(k == 0), url_path="start" if k == 0 else None)
             for k, (f, t, i) in enumerate(PAGE_FILES) if (views / f).exists()}
    alias = st.Page(lambda: None, title="Explore", url_path="explore", visibility="hidden")

    page = st.navigation(list(pages.values()) + [alias])
    if page is alias:
        st.switch_page(next(iter(pages.values())), query_params=st.query_params.to_dict())
    name = next(k for k, p in pages.items() if p is page)
    wanted = st.session_state.pop("_wanted_page", None)  # ?page=... of the URL a session starts from
    if wanted in pages and wanted != name:
        st.switch_page(pages[wanted])
    st.session_state._page = name
    ui.keep_working_model()
    ui.sidebar()
    ui.flash_load_error()
    ui.sync_url()
    page.run()


if __name__ == "__main__":  # Streamlit runs this file as __main__ (`attnviz app`)
    run()
