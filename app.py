"""attnviz app: `streamlit run app.py`.

Page config, shared state from the URL, the sidebar (model picker and sentence box), and the
navigation over the files in pages/. Set ATTNVIZ_TORCH_THREADS (e.g. 1 in tests) to cap torch's
threads in the server.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `from pages import ui` and `import attnviz` from a checkout
    sys.path.insert(0, str(ROOT))

if os.environ.get("ATTNVIZ_TORCH_THREADS"):
    import torch

    torch.set_num_threads(max(1, int(os.environ["ATTNVIZ_TORCH_THREADS"])))

from pages import ui  # noqa: E402

st.set_page_config(page_title="attnviz", page_icon=":material/grid_on:", layout="wide")

ui.init_state()

PAGES = [
    st.Page("pages/explore.py", title="Explore", icon=":material/grid_on:", default=True),
    st.Page("pages/heads.py", title="Heads", icon=":material/apps:"),
    st.Page("pages/flow_graph.py", title="Flow graph", icon=":material/account_tree:"),
]
for file, title, icon in (("pages/faithfulness.py", "Faithfulness", ":material/fact_check:"),
                          ("pages/adversarial.py", "Adversarial", ":material/swap_horiz:"),
                          ("pages/context_mixing.py", "Context mixing", ":material/blender:")):
    if (ROOT / file).exists():
        PAGES.append(st.Page(file, title=title, icon=icon))
PAGES += [
    st.Page("pages/model.py", title="Model", icon=":material/memory:"),
    st.Page("pages/about.py", title="About", icon=":material/help:"),
]

page = st.navigation(PAGES)
ui.sidebar()
ui.sync_url()
page.run()
