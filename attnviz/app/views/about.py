"""About: what each method's map means and its caveats, in plain words (one tab per method)."""
from __future__ import annotations

import streamlit as st

from attnviz import METHODS, __version__

st.title("About")
st.caption(f"attnviz {__version__}: for a transformer and a sentence, where does each token's representation "
           "come from? One tab per method.")

tabs = st.tabs([info.label for info in METHODS.values()])
for tab, (name, info) in zip(tabs, METHODS.items()):
    with tab:
        st.markdown(info.what)
        st.markdown(info.caveats)
        opts = "; ".join(f"`{o.name}` (default {o.default!r}): {o.help}" for o in info.options)
        st.caption(f"Method name in the library and the URL: `{name}`. Unit: {info.unit}. "
                   + ("Rows sum to 1." if info.rows_sum_to_one else "Rows are not normalised.")
                   + (" Has per-head maps." if info.per_head else " Layer maps only.")
                   + (" Reports a completeness error." if info.completeness else "")
                   + (f" Reference: {info.reference}." if info.reference else "")
                   + (f" Options: {opts}." if opts else ""))

st.divider()
st.markdown("**Reading a map.** Row *i* is the token that receives information, column *j* the token it "
            "comes from. Layers count from 1. Token labels start with their position (\"3·the\") because the "
            "same word can occur twice.")
