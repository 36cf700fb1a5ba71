"""attnviz app: `streamlit run app.py`.

Page config, shared state from the URL, the sidebar (model picker and sentence box), and the
navigation (st.navigation) over the files in views/. The folder is not called pages/: that name
switches Streamlit into its legacy multipage mode, where a first request for /heads runs that file
alone. Set ATTNVIZ_TORCH_THREADS (e.g. 1 in tests) to cap torch's threads in the server.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `from views import ui` and `import attnviz` from a checkout
    sys.path.insert(0, str(ROOT))

if os.environ.get("ATTNVIZ_TORCH_THREADS"):
    import torch

    torch.set_num_threads(max(1, int(os.environ["ATTNVIZ_TORCH_THREADS"])))

from views import ui  # noqa: E402

st.set_page_config(page_title="attnviz", page_icon=":material/grid_on:", layout="wide")

ui.init_state()

# (file, title, icon); the optional pages appear only when their files exist
PAGE_FILES = [("views/explore.py", "Explore", ":material/grid_on:"),
              ("views/minimal_pair.py", "Minimal pair", ":material/compare:"),
              ("views/heads.py", "Heads", ":material/apps:"),
              ("views/flow_graph.py", "Flow graph", ":material/account_tree:"),
              ("views/faithfulness.py", "Faithfulness", ":material/fact_check:"),
              ("views/adversarial.py", "Adversarial", ":material/swap_horiz:"),
              ("views/context_mixing.py", "Context mixing", ":material/blender:"),
              ("views/model.py", "Model", ":material/memory:"),
              ("views/about.py", "About", ":material/help:")]
# the default page (Explore) is served at /; its own pathname is reserved but not served, so it gets
# one nobody types ("start"), and /explore (the page's name typed as a path) is a hidden page that
# switches to it, keeping the URL's state
PAGES = {Path(f).stem: st.Page(f, title=t, icon=i, default=(k == 0), url_path="start" if k == 0 else None)
         for k, (f, t, i) in enumerate(PAGE_FILES) if (ROOT / f).exists()}
ALIAS = st.Page(lambda: None, title="Explore", url_path="explore", visibility="hidden")

page = st.navigation(list(PAGES.values()) + [ALIAS])
if page is ALIAS:
    st.switch_page(next(iter(PAGES.values())), query_params=st.query_params.to_dict())
name = next(k for k, p in PAGES.items() if p is page)
wanted = st.session_state.pop("_wanted_page", None)  # ?page=... of the URL a session starts from
if wanted in PAGES and wanted != name:
    st.switch_page(PAGES[wanted])
st.session_state._page = name
ui.keep_working_model()
ui.sidebar()
ui.flash_load_error()
ui.sync_url()
page.run()
