"""The script Streamlit runs: `attnviz app`, or `streamlit run app.py` in a checkout (which calls run()).

Page config, shared state from the URL, the sidebar (model picker and sentence box), and the
navigation (st.navigation) over the files in views/ beside this file, found by path so that the app
runs the same from a checkout and from an installed wheel. The folder is not called pages/: that name
switches Streamlit into its legacy multipage mode, where a first request for /heads runs that file
alone. Set ATTNVIZ_TORCH_THREADS (e.g. 1 in tests) to cap torch's threads in the server.

A URL's query values longer than QUERY_LIMITS are dropped before anything reads them, with one message.
Served to a class (`attnviz app --serve`, which sets ATTNVIZ_SERVE_MODELS), a ?model= that the server does not
offer is dropped the same way; the loader (attnviz.models.allow) refuses it in any case.
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
              ("mediation.py", "Mediation", ":material/call_split:"),
              ("adversarial.py", "Adversarial", ":material/swap_horiz:"),
              ("context_mixing.py", "Context mixing", ":material/blender:"),
              ("model.py", "Model", ":material/memory:"),
              ("about.py", "About", ":material/help:")]

# the longest value a query parameter may have (characters); longer ones are dropped at once
QUERY_LIMITS = {"model": 1024, "text": 50_000, "pair_a": 50_000, "pair_b": 50_000}
QUERY_LIMIT = 1024  # every other parameter


def screen_query() -> list:
    """Drop the query parameters a URL should not carry (over-long values; with ATTNVIZ_SERVE_MODELS, a model
    this server does not offer) before the app reads them -> one message for each."""
    from attnviz.errors import ModelLoadError, shown
    from attnviz.models import allow

    qp, said = st.query_params, []
    for key in list(qp.keys()):
        longest = max((len(v) for v in qp.get_all(key)), default=0)
        limit = QUERY_LIMITS.get(key, QUERY_LIMIT)
        if longest > limit or len(key) > QUERY_LIMIT:
            del qp[key]
            said.append(f"The link's '{shown(key, 40)}' value is {longest:,} characters long (at most {limit:,}): "
                        "it was ignored.")
    spec = qp.get("model")
    if spec:
        try:
            allow.check(spec)
        except ModelLoadError as e:
            del qp["model"]
            said.append(f"The link's model was not loaded: {e}.")
    return said


_frozen = False


def freeze_imports() -> None:
    """Once per server process, after the imports (torch, transformers, plotly, streamlit: ~400,000 Python
    objects): move every object alive now out of the cyclic garbage collector's reach (gc.freeze).
    Streamlit runs a full collection after every script run (runner.postScriptGC), which walked all of
    them each time: ~0.2 s of CPU for every new session and every slider move. Objects created later
    (models, results, sessions) are collected as before."""
    global _frozen
    if not _frozen:
        import gc

        gc.collect()
        gc.freeze()
        _frozen = True


def run() -> None:
    """One run of the app: what Streamlit executes on every rerun."""
    if os.environ.get("ATTNVIZ_TORCH_THREADS"):
        import torch

        torch.set_num_threads(max(1, int(os.environ["ATTNVIZ_TORCH_THREADS"])))

    from attnviz.app import ui

    freeze_imports()

    present = str(st.query_params.get("present", "")).lower() in ("1", "true", "yes")  # presentation mode
    st.set_page_config(page_title="attnviz", page_icon=":material/grid_on:", layout="wide",
                       initial_sidebar_state="collapsed" if present else "auto")

    if not st.session_state.get("_init"):  # before init_state reads the URL; said on every run of the session
        st.session_state._link_notes = screen_query()
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
    for msg in st.session_state.get("_link_notes", []):
        st.error(ui.plain(msg), icon=":material/link_off:")
    ui.sync_url()
    page.run()


if __name__ == "__main__":  # Streamlit runs this file as __main__ (`attnviz app`)
    run()
