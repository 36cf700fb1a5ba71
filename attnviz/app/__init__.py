"""The Streamlit app: `attnviz app` (or `streamlit run app.py` in a checkout).

main.py is the script Streamlit runs (page config, shared state from the URL, the sidebar, the
navigation); ui.py holds the state and widgets every page shares; views/ holds one file per page.
Importing this package imports no Streamlit.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
MAIN = HERE / "main.py"    # the script Streamlit runs
VIEWS = HERE / "views"     # the page files, run by path (st.Page)
